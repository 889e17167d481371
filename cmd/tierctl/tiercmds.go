package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/tiered"
)

// openStore opens --store, mapping a bad URL to a usage error. It refuses
// mem:// (see refuseMemStore).
func openStore(ctx context.Context, raw string) (*objstore.Store, error) {
	if raw == "" {
		return nil, usagef("--store is required (file:///dir, s3://bucket/prefix?…, minio://bucket/prefix?endpoint=…)")
	}
	if err := refuseMemStore(raw, ""); err != nil {
		return nil, err
	}
	raw, err := withKeyFile(raw, keyFileFrom(ctx))
	if err != nil {
		return nil, err
	}
	s, err := storeurl.Open(ctx, raw, storeOptionsFrom(ctx))
	if errors.Is(err, objstore.ErrInvalidURL) {
		return nil, usageError{err}
	}
	return s, err
}

// withKeyFile adds --key-file to the URL as its key-file= option; a URL
// naming another key file is a usage error.
func withKeyFile(raw, path string) (string, error) {
	if path == "" {
		return raw, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw, nil // storeurl.Open says what is wrong with it
	}
	q := u.Query()
	if have := q.Get("key-file"); have != "" && !samePath(have, path) {
		return "", usagef("--key-file (or TIERCTL_KEY_FILE) %s and the URL's key-file=%s differ: give one", path, have)
	}
	q.Set("key-file", path)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// samePath reports whether a and b name the same file path.
func samePath(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return a == b || err1 == nil && err2 == nil && aa == bb
}

// refuseMemStore returns a usage error when raw is a mem:// URL. An
// in-memory bucket lives only inside one tierctl process: it starts empty
// and is gone when the command exits, with whatever was written to it. An
// offload would delete local copies of segments only that bucket held; a
// restore, gc or read would find nothing and say so misleadingly. Only
// demo, whose data lives and dies with the process, may use one (why
// says what demo would lose otherwise).
func refuseMemStore(raw, why string) error {
	u, err := url.Parse(raw)
	if err != nil || !strings.EqualFold(u.Scheme, "mem") {
		return nil
	}
	if why == "" {
		why = "it starts empty and vanishes when this command exits, with everything written to it " +
			"(an offload would have deleted local segments only that bucket held)"
	}
	return usagef("--store %s: a mem:// bucket lives only inside one tierctl process: %s; use a file://, s3:// or minio:// URL",
		storeurl.Redact(raw), why)
}

// partitionStore parses --partition and opens --store for it
// (openPartitionStore).
func partitionStore(ctx context.Context, partition, storeURL string) (local.TopicPartition, *objstore.Store, error) {
	tp, err := local.ParsePartitionDirName(partition)
	if err != nil {
		return tp, nil, usagef("--partition: %v", err)
	}
	store, err := openPartitionStore(ctx, storeURL, tp, false)
	return tp, store, err
}

// openPartitionStore opens --store for tp's objects: with a URL that
// seals only the topics that ask (seal=topics), the store of the kind
// the partition is in the bucket, sealed or not (tiered.PartitionStore),
// so that what tierctl writes there is of that kind too; sealed says its
// topic config asks for sealing (--config remote.storage.seal.enable=true).
func openPartitionStore(ctx context.Context, raw string, tp local.TopicPartition, sealed bool) (*objstore.Store, error) {
	store, err := openStore(ctx, raw)
	if err != nil {
		return nil, err
	}
	ps, err := tiered.PartitionStore(ctx, store, tp.String(), sealed)
	if err != nil {
		store.Close()
		return nil, err
	}
	return ps, nil
}

// partitionOf parses a partition directory's name.
func partitionOf(dir string) (local.TopicPartition, error) {
	tp, err := local.ParsePartitionDirName(filepath.Base(filepath.Clean(dir)))
	if err != nil {
		return tp, usageError{err}
	}
	return tp, nil
}

func newOffloadCmd() *cobra.Command {
	var storeURL string
	var configs []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "offload PARTITION_DIR --store URL",
		Short: "Upload closed segments to a bucket, commit the manifest, apply local retention",
		Long: `offload uploads every closed segment of the partition that lies below its
last stable offset and that the bucket does not hold yet (.log, trimmed
.index and .timeindex, and the .txnindex, producer snapshot and leader-epoch
checkpoint it has, each with its CRC-32C), commits the manifest with a
conditional put (and its backup), then deletes local copies the manifest names as
local.retention.ms/bytes say (--config local.retention.ms=0 keeps only what
must stay local), and applies total retention (retention.ms/bytes) to the
bucket: segments leave the manifest first, then their objects are deleted.
Retention follows the topic config given with --config (Kafka's defaults
otherwise: retention.ms is 7 days; pass --config retention.ms=-1 to keep
older data). It opens the partition through its log directory (whose
checkpoints hold the high watermark) and locks that directory meanwhile.

Objects go to <store prefix>/<topic>-<partition>/.`,
		Example: `  tierctl offload /var/lib/tierlog/logs/orders-0 --store file:///var/lib/tierlog/bucket?create=true
  tierctl offload logs/orders-0 --store 's3://my-bucket/tierlog?region=eu-west-1' --config local.retention.ms=0`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			tp, err := partitionOf(args[0])
			if err != nil {
				return err
			}
			cfg, err := parseConfigFlags(configs)
			if err != nil {
				return err
			}
			store, err := openPartitionStore(ctx, storeURL, tp, cfg.SealEnable)
			if err != nil {
				return err
			}
			defer store.Close()
			b, err := local.OpenBackend(filepath.Dir(filepath.Clean(args[0])), local.BackendOptions{Logger: loggerFrom(ctx), RemoteStorage: true})
			if err != nil {
				return err
			}
			defer b.Close()
			l, err := b.OpenLog(ctx, tp.Topic, tp.Partition, cfg)
			if err != nil {
				return err
			}
			before := len(l.SegmentInfos())
			var bar *progress // set before Offload starts its uploads
			p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: tp.String(), Logger: loggerFrom(ctx),
				OnUploadProgress: func(n int64) { bar.Add(n) }})
			if errors.Is(err, tiered.ErrNoManifest) {
				return fmt.Errorf("--store %s has no manifest for partition %s (%s): %w", storeurl.Redact(storeURL), tp, args[0], err)
			}
			if err != nil {
				return err
			}
			if _, lag := p.CopyLag(); lag > 0 {
				bar = newProgress(cmd, lag, "offload", true)
			}
			n, err := p.Offload(ctx)
			if err != nil {
				return err
			}
			bar.Finish()
			retired, err := p.ApplyRetention(ctx)
			if err != nil {
				return err
			}
			m, err := p.Manifest(ctx)
			if err != nil {
				return err
			}
			o := p.Offsets()
			if err := b.Close(); err != nil {
				return err
			}
			if asJSON {
				writeJSON(cmd.OutOrStdout(), map[string]any{"uploaded": n, "retired": retired, "remoteSegments": len(m.Segments), "remoteBytes": m.Size(),
					"generation": m.Generation, "localSegmentsDeleted": before - len(l.SegmentInfos()), "logStart": o.LogStart, "localLogStart": o.LocalLogStart})
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "uploaded %d segment(s), retired %d by retention; the bucket holds %d (%d bytes), manifest generation %d\n",
				n, retired, len(m.Segments), m.Size(), m.Generation)
			fmt.Fprintf(cmd.OutOrStdout(), "local retention deleted %d local segment(s); log start %d, local log start %d\n",
				before-len(l.SegmentInfos()), o.LogStart, o.LocalLogStart)
			return nil
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "bucket URL")
	cmd.Flags().StringArrayVar(&configs, "config", nil, "topic config key=value (repeatable), e.g. local.retention.ms=0")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// notAPartitionDir refuses a LOGDIR argument that holds segment files: a
// partition directory given where its log directory is meant.
func notAPartitionDir(logDir string) error {
	ents, err := os.ReadDir(logDir)
	if err != nil {
		return nil // missing: created; unreadable: the open says why
	}
	for _, e := range ents {
		if _, suffix, err := local.ParseFileName(e.Name()); err == nil && suffix == local.LogSuffix {
			return usagef("LOGDIR %s holds segment files (%s): it is a partition directory; give the log directory that holds it", logDir, e.Name())
		}
	}
	return nil
}

// openTiered opens a partition directory read-only and its manifest.
func openTiered(ctx context.Context, dir, storeURL string) (*tiered.Partition, *local.Log, *objstore.Store, error) {
	tp, err := partitionOf(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	store, err := openPartitionStore(ctx, storeURL, tp, false)
	if err != nil {
		return nil, nil, nil, err
	}
	p, l, err := openTieredIn(ctx, dir, store, storeURL)
	if err != nil {
		store.Close()
		return nil, nil, nil, err
	}
	return p, l, store, nil
}

// openTieredIn opens a partition directory read-only (with its log dir's
// checkpoints) over store, and returns the tiered partition and the
// read-only local log under it (for the local tier's own reports; Close
// the partition, which closes it). A partition whose checkpoint says it
// was offloaded while store has no manifest for it is an error wrapping
// tiered.ErrNoManifest that names the URL and the partition: the usual
// cause is a wrong --store.
func openTieredIn(ctx context.Context, dir string, store *objstore.Store, storeURL string) (*tiered.Partition, *local.Log, error) {
	tp, err := partitionOf(dir)
	if err != nil {
		return nil, nil, err
	}
	l, err := openPartitionReadOnly(ctx, dir, backend.Config{})
	if err != nil {
		return nil, nil, err
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: tp.String(), Logger: loggerFrom(ctx)})
	if err != nil {
		l.Close()
		if errors.Is(err, tiered.ErrNoManifest) {
			return nil, nil, fmt.Errorf("--store %s has no manifest for partition %s (%s): %w", storeurl.Redact(storeURL), tp, dir, err)
		}
		return nil, nil, err
	}
	return p, l, nil
}

// errNoManifestAt is the error for a partition named by --partition whose
// manifest the bucket does not have.
func errNoManifestAt(storeURL, partition string) error {
	return fmt.Errorf("%w for partition %s under --store %s (no object %s): is the --store URL (bucket and prefix) or --partition right?",
		tiered.ErrNoManifest, partition, storeurl.Redact(storeURL), manifest.NewLayout(partition).Manifest())
}

// errNoPartitions wraps errEmptyBucket with the URL.
func errNoPartitions(storeURL string) error {
	return fmt.Errorf("%w under --store %s: is the URL (bucket and prefix) right?", errEmptyBucket, storeurl.Redact(storeURL))
}

func newLsCmd() *cobra.Command {
	var storeURL string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls PARTITION_DIR [--store URL]",
		Short: "List a partition's segments and the tier each lives in: local, remote or both",
		Long: `ls lists a partition's segments, oldest first, and the tier each lives in:
local, remote (only in the bucket) or both. The directory is opened
read-only, with its log directory's checkpoints. With --store, a partition
whose log-start checkpoint says it was offloaded but that has no manifest
in the bucket is an error (exit 2): the URL or its prefix is likely wrong.`,
		Example: `  tierctl ls logs/orders-0 --store file:///var/lib/tierlog/bucket
  tierctl ls logs/orders-0 --json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			var m *manifest.Manifest
			var l *local.Log
			if storeURL != "" {
				p, ll, store, err := openTiered(ctx, args[0], storeURL)
				if err != nil {
					return err
				}
				defer store.Close()
				defer p.Close()
				if m, err = p.Manifest(ctx); err != nil {
					return err
				}
				l = ll
			} else {
				var err error
				if l, err = openPartitionReadOnly(ctx, args[0], backend.Config{}); err != nil {
					return err
				}
				defer l.Close()
				m = &manifest.Manifest{}
			}
			// Tier is local, remote or both; Active marks the segment
			// being written to (a local one).
			type row struct {
				Base   int64  `json:"baseOffset"`
				Last   int64  `json:"lastOffset"`
				Size   int64  `json:"size"`
				Tier   string `json:"tier"`
				Active bool   `json:"active"`
				Local  string `json:"localFile,omitempty"`
				Key    string `json:"object,omitempty"`
			}
			rows := map[int64]*row{}
			var order []int64
			for _, s := range m.Segments {
				rows[s.BaseOffset] = &row{Base: s.BaseOffset, Last: s.LastOffset, Size: s.Size, Tier: "remote", Key: s.Name(manifest.LogSuffix)}
				order = append(order, s.BaseOffset)
			}
			for _, si := range l.SegmentInfos() {
				if r, ok := rows[si.BaseOffset]; ok {
					r.Tier, r.Local = "both", filepath.Base(si.Path)
					continue
				}
				rows[si.BaseOffset] = &row{Base: si.BaseOffset, Last: si.NextOffset - 1, Size: si.Size, Tier: "local", Active: si.Active, Local: filepath.Base(si.Path)}
				order = append(order, si.BaseOffset)
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			for _, b := range order {
				r := rows[b]
				if asJSON {
					writeJSON(w, r)
					continue
				}
				tier := r.Tier
				if r.Active {
					tier += " (active)"
				}
				fmt.Fprintf(w, "%-15s %20d..%-20d %12d B  %s\n", tier, r.Base, r.Last, r.Size, firstNonEmpty(r.Key, r.Local))
			}
			if storeURL == "" {
				noteInBucket(cmd, args[0], l, "lists their segments")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "bucket URL (without it, only local segments are listed)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per segment")
	return cmd
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func newManifestCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "manifest (show|verify|accept) --store URL --partition TOPIC-PARTITION",
		Short: "Show, verify or accept a partition's manifest in a bucket",
		Long: `manifest show prints a partition's committed manifest; manifest verify
checks the objects it names; manifest accept makes a partition take a
bucket that went back in time. A partition with no manifest under --store
is an error (exit 2).`,
	}
	var storeURL, partition string
	var asJSON, deep bool
	load := func(ctx context.Context) (*objstore.Store, *manifest.Manifest, string, error) {
		tp, store, err := partitionStore(ctx, partition, storeURL)
		if err != nil {
			return nil, nil, "", err
		}
		m, err := tiered.ReadManifest(ctx, store, tp.String())
		if err == nil && !manifestExists(m) {
			err = errNoManifestAt(storeURL, tp.String())
		}
		if err != nil {
			store.Close()
			return nil, nil, "", err
		}
		return store, m, tp.String(), nil
	}
	show := &cobra.Command{
		Use:     "show --store URL --partition TOPIC-PARTITION",
		Short:   "Print the manifest: generation, writer epoch, log start and every segment",
		Example: `  tierctl manifest show --store file:///var/lib/tierlog/bucket --partition orders-0`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, m, _, err := load(cmd.Context())
			if err != nil {
				return err
			}
			defer store.Close()
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			if asJSON {
				writeJSON(w, m)
				return nil
			}
			fmt.Fprintf(w, "generation %d, writer epoch %d, log start %d, %d segments, %d bytes\n", m.Generation, m.WriterEpoch, m.LogStartOffset, len(m.Segments), m.Size())
			if len(m.Parts) > 0 {
				fmt.Fprintf(w, "%d parts hold the first %d segments; the head the last %d\n", len(m.Parts), len(m.Segments)-m.HeadSegments(), m.HeadSegments())
				for _, p := range m.Parts {
					fmt.Fprintf(w, "part %s  tier %d  segments %d (of %d)  offsets %d..%d  %d bytes\n", p.Name(), p.Tier, p.Segments, p.ObjectSegments, p.BaseOffset, p.LastOffset, p.Bytes)
				}
			}
			for _, s := range m.Segments {
				fmt.Fprintf(w, "%s  records %d  max timestamp %d  epoch %d  crc %08x\n", s.Name(manifest.LogSuffix), s.Records, s.MaxTimestamp, s.LeaderEpoch, s.LogCRC)
			}
			return nil
		},
	}
	verify := &cobra.Command{
		Use:     "verify --store URL --partition TOPIC-PARTITION [--deep]",
		Short:   "Check that every object the manifest names exists with its size (and, with --deep, its CRC-32C)",
		Example: `  tierctl manifest verify --store file:///var/lib/tierlog/bucket --partition orders-0 --deep`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, m, prefix, err := load(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			problems, checked := 0, 0
			err = tiered.CheckBucket(ctx, store, prefix, m, tiered.CheckOptions{Deep: deep}, func(_ manifest.Segment, objects []tiered.ObjectCheck) error {
				for _, o := range objects {
					checked++
					if o.Err != nil {
						problems++
						fmt.Fprintf(w, "problem: %s (%s): %v\n", o.Key, o.Kind, o.Err)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "manifest generation %d: %d segments, %d objects checked, %d problems", m.Generation, len(m.Segments), checked, problems)
			if len(m.Parts) > 0 {
				fmt.Fprintf(w, " (and the %d manifest parts, read and checked)", len(m.Parts))
			}
			fmt.Fprintln(w)
			if problems > 0 {
				w.Flush()
				return errProblems
			}
			return nil
		},
	}
	for _, c := range []*cobra.Command{show, verify} {
		c.Flags().StringVar(&storeURL, "store", "", "bucket URL")
		c.Flags().StringVar(&partition, "partition", "", "the partition, as TOPIC-PARTITION (its directory name)")
		c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	}
	verify.Flags().BoolVar(&deep, "deep", false, "re-read every object and check its CRC-32C")
	cmd.AddCommand(show, verify, newManifestAcceptCmd())
	return cmd
}

func newRestoreCmd() *cobra.Command {
	var storeURL, partition string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "restore LOGDIR --store URL --partition TOPIC-PARTITION",
		Short: "Rebuild a partition's local directory from the bucket alone",
		Long: `restore downloads every segment the committed manifest names into
<LOGDIR>/<topic>-<partition> (which must not exist or be empty), checking
each object's CRC-32C, then opens it through the log directory so its
checkpoints (log start, high watermark) are written, and closes it cleanly.
Use it for a lost disk or a new broker.

It locks the log directory before it writes anything (stop the broker that
owns it first) and builds the partition in a temporary directory,
<topic>-<partition>.restoring-<id>-delete, renamed into place only once
every object is downloaded and checked: a restore that fails (a full disk,
a damaged object, a lost connection) leaves no partition directory, and
can simply be run again. It removes what a killed restore left. LOGDIR is
the log directory: one that holds segment files (a partition directory)
is refused.`,
		Example: `  tierctl restore /var/lib/tierlog/logs --store file:///var/lib/tierlog/bucket --partition orders-0`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			tp, store, err := partitionStore(ctx, partition, storeURL)
			if err != nil {
				return err
			}
			defer store.Close()
			if err := notAPartitionDir(args[0]); err != nil {
				return err
			}
			dir := filepath.Join(args[0], tp.String())
			// The log dir's lock, from before anything is written until
			// the checkpoints are.
			b, err := local.OpenBackend(args[0], local.BackendOptions{Logger: loggerFrom(ctx)})
			if err != nil {
				return err
			}
			defer b.Close()
			var bar *progress // sized once Restore has read the manifest
			m, err := tiered.Restore(ctx, store, tp.String(), dir, tiered.RestoreOptions{
				Backend:    b,
				OnStart:    func(total int64) { bar = newProgress(cmd, total, "restore", true) },
				OnProgress: func(n int64) { bar.Add(n) },
			})
			if errors.Is(err, tiered.ErrNoManifest) {
				return errNoManifestAt(storeURL, tp.String())
			}
			if err != nil {
				return err
			}
			bar.Finish()
			// Open through the log dir: the restored records were committed
			// (below the high watermark when uploaded).
			l, err := b.OpenLog(ctx, tp.Topic, tp.Partition, backend.DefaultConfig())
			if err != nil {
				return err
			}
			if err := l.SetHighWatermark(l.Offsets().LogEnd); err != nil {
				return err
			}
			if m.LogStartOffset > l.Offsets().LogStart {
				if err := l.DeleteRecordsBefore(ctx, m.LogStartOffset); err != nil {
					return err
				}
			}
			o := l.Offsets()
			if err := b.Close(); err != nil {
				return err
			}
			if asJSON {
				writeJSON(cmd.OutOrStdout(), map[string]any{"partitionDir": dir, "segments": len(m.Segments), "bytes": m.Size(),
					"logStart": o.LogStart, "logEnd": o.LogEnd, "generation": m.Generation})
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %d segment(s) (%d bytes) into %s: offsets %d..%d\n", len(m.Segments), m.Size(), dir, o.LogStart, o.LogEnd-1)
			return nil
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "bucket URL")
	cmd.Flags().StringVar(&partition, "partition", "", "the partition, as TOPIC-PARTITION")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
