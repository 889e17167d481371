package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/tiered"
)

func newVerifyCmd() *cobra.Command {
	var asJSON, deep bool
	var storeURL string
	var partitions []string
	cmd := &cobra.Command{
		Use:   "verify PATH...",
		Short: "Check segments, indexes and producer state: CRCs, offsets, and index entries against the log",
		Long: `verify checks a segment file, a partition directory (<topic>-<partition>)
or a log directory holding partition directories:

  .log        every batch's CRC (CRC-32C for v2, CRC-32 for magic 0/1), its
              records, offsets strictly increasing, no torn tail
  .index      entries in order, and each entry's offset equal to the last
              offset of the batch that starts at its position
  .timeindex  entries in order, and each entry naming the last offset of a
              batch whose max timestamp is the entry's timestamp
  .snapshot   its CRC-32C and layout; each producer once, its last batch and
              open transaction below the snapshot's offset; that offset
              within the log's (first segment's base to log end)
  .txnindex   Kafka's sanity check (version 0, no entry below the segment's
              base offset, whole entries); markers in increasing order and
              within the segment's offsets, first offsets and last stable
              offsets consistent with them
  directory   all of the above per segment, segments not overlapping, no
              index without its log

With --store it also checks the partitions' objects in the bucket against
their manifests: the partitions given with --partition (one without a
manifest is a problem), else those of the partition directories given,
else every partition with a manifest in the bucket (finding none is an
error, exit 2: the URL is likely wrong). A local partition given (or in a
log directory given) whose log-start-offset-checkpoint says it was
offloaded, but that has no manifest in the bucket, is an error (exit 2)
naming it: the --store URL or its prefix is likely wrong. By default each object must exist with the size the manifest
recorded (one HEAD each); --deep downloads every object, one segment at a
time into a temporary directory, and checks its CRC-32C against the
manifest, every batch CRC, that offsets stay in the manifest's range, the
record count, and every index entry against the log.

It prints one line per file or object and exits 1 when it found any problem.`,
		Example: `  tierctl verify /var/kafka/orders-0
  tierctl verify 00000000000000000000.log
  tierctl verify --json /var/kafka | jq 'select(.problems)'
  tierctl verify --store s3://bucket/tierlog?region=eu-west-1 --partition orders-0 --deep
  tierctl verify /var/lib/tierlog/logs/orders-0 --store file:///var/lib/tierlog/bucket`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && storeURL == "" {
				return usagef("verify needs a PATH, or --store; see 'tierctl verify --help'")
			}
			if deep && storeURL == "" {
				return usagef("--deep checks objects in a bucket: it needs --store")
			}
			if len(partitions) > 0 && storeURL == "" {
				return usagef("--partition %s names a partition in a bucket: it needs --store", partitions[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			var reports []fileReport
			bar := newProgress(cmd, logBytes(args), "verify", true)
			for _, p := range args {
				rs, err := verifyPath(p, bar)
				if err != nil {
					return err
				}
				reports = append(reports, rs...)
			}
			bar.Finish()
			if storeURL != "" {
				rs, err := verifyBucket(cmd, storeURL, partitions, args, deep)
				if err != nil {
					return err
				}
				reports = append(reports, rs...)
			}
			bad := 0
			for _, r := range reports {
				if len(r.Problems) > 0 {
					bad++
				}
				if asJSON {
					writeJSON(w, r)
					continue
				}
				r.print(w)
			}
			if !asJSON {
				fmt.Fprintf(w, "verified %d file(s): %d with problems\n", len(reports), bad)
			}
			if bad > 0 {
				return errProblems
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per file")
	cmd.Flags().StringVar(&storeURL, "store", "", "bucket URL: check the partitions' objects there too")
	cmd.Flags().StringArrayVar(&partitions, "partition", nil, "with --store: a partition (TOPIC-PARTITION) to check in the bucket (repeatable)")
	cmd.Flags().BoolVar(&deep, "deep", false, "with --store: download every object and check its CRC-32C, batches and indexes")
	return cmd
}

// verifyBucket runs the remote checks of verify --store. It checks the
// partitions given with --partition (a missing manifest is a problem),
// else the partition directories among paths, else every partition with a
// manifest in the bucket (none at all is an error: the URL is likely
// wrong). A local partition among paths, or in a log directory among
// them, whose checkpoint says it was offloaded while the bucket has no
// manifest for it is an error wrapping tiered.ErrNoManifest.
func verifyBucket(cmd *cobra.Command, storeURL string, partitions, paths []string, deep bool) ([]fileReport, error) {
	ctx := cmd.Context()
	for _, p := range partitions {
		if _, err := local.ParsePartitionDirName(p); err != nil {
			return nil, usagef("--partition: %v", err)
		}
	}
	store, err := openStore(ctx, storeURL)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	explicit := len(partitions) > 0
	prefixes := partitions
	localDirs := map[string]string{} // partition name -> directory among paths
	for _, p := range paths {
		for _, d := range localPartitionDirs(p) {
			name := filepath.Base(filepath.Clean(d))
			if _, dup := localDirs[name]; !dup && !explicit && filepath.Clean(d) == filepath.Clean(p) {
				prefixes = append(prefixes, name)
			}
			localDirs[name] = d
		}
	}
	listed := len(prefixes) == 0
	if listed {
		if prefixes, err = bucketPartitions(ctx, store); err != nil {
			return nil, err
		}
	}
	parts, total := loadManifests(ctx, store, prefixes, deep)
	have := map[string]bool{}
	for _, rp := range parts {
		have[rp.prefix] = rp.err != nil || manifestExists(rp.m)
	}
	var out []fileReport
	names := make([]string, 0, len(localDirs))
	for name := range localDirs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		// An offloaded local partition without a manifest: the bucket
		// is not the one it went to. One with a manifest it refuses
		// (the bucket went back in time): what the partition would say
		// at its next open. A partition that does not open otherwise is
		// reported by the local checks.
		dir := localDirs[name]
		if explicit && !have[name] {
			continue
		}
		p, _, err := openTieredIn(ctx, dir, store, storeURL)
		var rb *tiered.RollbackError
		switch {
		case errors.Is(err, tiered.ErrNoManifest) && !explicit && !have[name]:
			return nil, err
		case errors.As(err, &rb):
			r := fileReport{Path: dir, Kind: "partition"}
			r.problemf("%v", err)
			out = append(out, r)
		case err == nil:
			p.Close()
		}
	}
	if listed && len(parts) == 0 {
		return nil, errNoPartitions(storeURL)
	}
	for i := range parts {
		parts[i].mustExist = explicit
	}
	tmp, err := os.MkdirTemp("", "tierctl-verify-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	checked := make([]string, 0, len(parts))
	for _, rp := range parts {
		checked = append(checked, rp.prefix)
	}
	sc, err := newSealCheck(ctx, store, checked)
	if err != nil {
		return nil, err
	}
	bar := newProgress(cmd, total, "verify "+storeurl.Redact(storeURL), deep)
	for _, rp := range parts {
		rs, err := verifyRemote(ctx, store, rp, deep, tmp, bar)
		if err != nil {
			return nil, err
		}
		sc.note(ctx, rp.prefix, rs)
		out = append(out, rs...)
	}
	bar.Finish()
	return append(out, sc.keyReports()...), nil
}

// localPartitionDirs returns path when it is a partition directory (a
// directory named <topic>-<partition>), else the partition directories in
// it when it is a directory, else nothing.
func localPartitionDirs(path string) []string {
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		return nil
	}
	if _, err := local.ParsePartitionDirName(filepath.Base(filepath.Clean(path))); err == nil {
		return []string{path}
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if _, err := local.ParsePartitionDirName(e.Name()); err == nil && e.IsDir() {
			out = append(out, filepath.Join(path, e.Name()))
		}
	}
	return out
}
