package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/tiered"
)

// compactTieredWhy says why compact without --store refuses a tiered
// partition.
const compactTieredWhy = "its closed segments are copies of the bucket's, which are cleaned in the bucket: " +
	"give --store to clean them there"

type compactOptions struct {
	store   string
	dryRun  bool
	memory  int
	configs []string
	json    bool
}

func newCompactCmd() *cobra.Command {
	var o compactOptions
	cmd := &cobra.Command{
		Use:   "compact PARTITION_DIR [--store URL] [--dry-run]",
		Short: "Clean a partition now: keep the latest record per key",
		Long: `compact runs the log cleaner over one partition directory on demand, as
a broker's cleaner would for cleanup.policy=compact: from the log dir's
cleaner-offset-checkpoint (or the log start) up to the high watermark
(from replication-offset-checkpoint) and the active segment, it keeps the
latest record of every key, drops keyless records, gives tombstones their
delete horizon (delete.retention.ms) and removes those past it. Aborted
transactions' records go; transaction markers go once their data has and
their horizon has passed; nothing at or after an open transaction is
cleaned. Offsets do not change. Closed segments are replaced crash-safely, the checkpoint is
updated, and rounds repeat until the dirty section is clean (a map that
cannot hold every key takes several).

--dry-run opens the directory read-only and reports what the first round
would remove, changing nothing. Without it, compact needs --config
cleanup.policy=compact (or compact,delete): tierctl cannot read the
topic's config, and on a topic that is not compacted the cleaner would
remove every keyless record and all but the last of each key. The
directory is locked while compact writes; stop the broker that owns it
first.

A tiered partition is cleaned in the bucket: give --store. Its local
copies of bucket segments are left as they are (local retention deletes
them only once shown to be the bucket's bytes); a round reads the
bucket's own segments (those below the local log start) and the dirty
section, and replaces the groups that change with cleaned segments,
merging small ones up to segment.bytes, by a conditional commit of the
manifest, which keeps the cleaner checkpoint (see operators.md,
"Compacted topics in the bucket"). It runs whatever the dirty ratio, and
again while the map's end moves the checkpoint on. With --dry-run it
opens the directory read-only, reads what a round would (a GET for each
bucket segment it cleans and for each dirty one it maps) and reports what
the first round would write and the requests it would make, writing
nothing anywhere. Without --dry-run it needs --config
cleanup.policy=compact (or compact,delete): tierctl cannot read the
topic's config, and the bucket's copy is the only one once local
retention took the disk's. A partition the bucket has no manifest of is refused,
and so is a diskless one but for --dry-run (its latest records may be in
WAL objects only; its leader's tiering service cleans it). compact
--store writes as the partition's writer, at the leader epoch of
its last commit: stop its broker first. Pass the topic's config again
(--config segment.bytes, delete.retention.ms, min.compaction.lag.ms):
compact knows only what it is given.

Without --store, compact refuses a tiered partition: one that has a
tier-state-checkpoint, was offloaded (its log-start-offset-checkpoint is
below its first local segment), or is given --config
remote.storage.enable=true. A --config cleanup.policy that is not
compacted is refused too: the cleaner keeps one record a key.`,
		Example: `  tierctl compact /var/lib/tierlog/logs/users-0 --dry-run
  tierctl compact logs/users-0 --config cleanup.policy=compact --config delete.retention.ms=0 --json
  tierctl compact logs/users-0 --store file:///var/lib/tierlog/bucket --dry-run`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCompact(cmd, args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.store, "store", "", "bucket URL: clean a tiered partition's segments in the bucket")
	f.BoolVar(&o.dryRun, "dry-run", false, "report what would be removed; change nothing")
	f.IntVar(&o.memory, "memory", 128<<20, "offset map memory in bytes, at most 2 GiB (log.cleaner.dedupe.buffer.size)")
	f.StringArrayVar(&o.configs, "config", nil, "topic config key=value (repeatable), e.g. delete.retention.ms=0")
	f.BoolVar(&o.json, "json", false, "print the result as JSON")
	return cmd
}

func runCompact(cmd *cobra.Command, dir string, o compactOptions) error {
	ctx := cmd.Context()
	tp, err := partitionOf(dir)
	if err != nil {
		return err
	}
	cfg, err := parseConfigFlags(o.configs)
	if err != nil {
		return err
	}
	if o.memory > math.MaxInt32 {
		// Kafka's cap per cleaner thread; more would only allocate.
		return usagef("--memory %d: want at most %d bytes (2 GiB)", o.memory, math.MaxInt32)
	}
	if _, err := compaction.NewOffsetMap(o.memory); err != nil {
		return usagef("--memory %d: %w", o.memory, err)
	}
	for _, kv := range o.configs {
		// The cleaner keeps one record a key and drops keyless ones: on a
		// topic said not to be compacted it would remove nearly all.
		if k, _, _ := strings.Cut(kv, "="); strings.TrimSpace(k) == "cleanup.policy" && !cfg.Compact() {
			return usagef("--config %s: compact cleans a compacted topic (cleanup.policy=compact), keeping one record a key; this one is not", kv)
		}
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return usagef("%s: not found: no partition directory there", dir)
	}
	if o.store != "" {
		return runCompactTiered(cmd, dir, tp, cfg, o)
	}
	if cfg.RemoteStorageEnable {
		return usagef("--config remote.storage.enable=true: %s is a tiered partition: %s", dir, compactTieredWhy)
	}
	if _, err := os.Stat(filepath.Join(dir, local.TierStateCheckpoint)); err == nil {
		return usagef("%s is a tiered partition (it has a %s): %s", dir, local.TierStateCheckpoint, compactTieredWhy)
	}
	if err := o.needsCompacted(dir + "'s segments, for good"); err != nil {
		return err
	}
	logDir := filepath.Dir(filepath.Clean(dir))
	cps, err := local.ReadOffsetCheckpoint(filepath.Join(logDir, local.CleanerCheckpoint))
	if err != nil {
		return err
	}
	first, ok := cps[tp]
	if !ok {
		first = -1
	}

	var l *local.Log
	if o.dryRun {
		if l, err = openPartitionReadOnly(ctx, dir, cfg); err != nil {
			return err
		}
		defer l.Close()
	} else {
		b, err := local.OpenBackend(logDir, local.BackendOptions{Logger: loggerFrom(ctx)})
		if err != nil {
			return err
		}
		defer b.Close()
		if l, err = b.OpenLog(ctx, tp.Topic, tp.Partition, cfg); err != nil {
			return err
		}
	}
	if rs, ok := l.Segments().RemoteLogStart(); ok {
		return usagef("%s was offloaded to a bucket (its log starts at %d, per %s, below its first local segment at %d): %s",
			dir, rs, local.LogStartCheckpoint, l.Offsets().LogStart, compactTieredWhy)
	}

	// The cleaner's I/O (its map pass, then the recopy) drives a bar of
	// bytes processed; how many rounds it takes is not known up front.
	bar := newProgress(cmd, -1, "compact", true)
	opts := compaction.Options{MemoryBytes: o.memory, DryRun: o.dryRun,
		Throttle: func(_ context.Context, n int) error { bar.Add(int64(n)); return nil }}
	var total compaction.Stats
	rounds := 0
	for {
		st, err := compaction.Clean(ctx, l, first, opts)
		if err != nil {
			return memoryHint(err, o.memory)
		}
		if rounds == 0 {
			total.FirstDirty = st.FirstDirty
		}
		if st.End == st.FirstDirty {
			break
		}
		rounds++
		total.Add(st)
		first = st.End
		if o.dryRun {
			break
		}
		cps[tp] = st.End
		if err := local.WriteOffsetCheckpoint(logDir, local.CleanerCheckpoint, cps); err != nil {
			return err
		}
	}
	bar.Finish()
	if rounds == 0 {
		total.End = total.FirstDirty
	}
	hw := l.Offsets().HighWatermark
	if err := l.Close(); err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if o.json {
		writeJSON(w, map[string]any{"dryRun": o.dryRun, "rounds": rounds, "firstDirty": total.FirstDirty, "end": total.End,
			"highWatermark": hw, "segmentsRead": total.SegmentsRead, "segmentsWritten": total.SegmentsWritten,
			"bytesRead": total.BytesRead, "bytesWritten": total.BytesWritten, "records": total.RecordsRead,
			"recordsRemoved": total.RecordsRemoved, "tombstonesKept": total.TombstonesKept, "keys": total.Keys,
			"abortedRecordsRemoved": total.AbortedRemoved, "markersRemoved": total.MarkersRemoved,
			"seconds": total.Duration.Seconds()})
		return nil
	}
	if rounds == 0 {
		fmt.Fprintf(w, "nothing to clean: no closed segment holds dirty offsets from %d below the high watermark %d\n",
			total.FirstDirty, hw)
		return nil
	}
	verb := "removed"
	if o.dryRun {
		verb = "would remove"
	}
	fmt.Fprintf(w, "%s %d of %d records (%d keys, %d tombstones kept): %d segment(s) of %d bytes -> %d segment(s) of %d bytes\n",
		verb, total.RecordsRemoved, total.RecordsRead, total.Keys, total.TombstonesKept,
		total.SegmentsRead, total.BytesRead, total.SegmentsWritten, total.BytesWritten)
	fmt.Fprintf(w, "dirty section %d..%d in %d round(s), %.2fs\n", total.FirstDirty, total.End, rounds, total.Duration.Seconds())
	return nil
}

// runCompactTiered cleans a tiered partition's segments in the bucket:
// rounds of tiered.Partition.CompactRemote, forced, until the checkpoint
// stops moving (one round with --dry-run, which opens the directory
// read-only and writes nothing anywhere).
func runCompactTiered(cmd *cobra.Command, dir string, tp local.TopicPartition, cfg backend.Config, o compactOptions) error {
	ctx := cmd.Context()
	store, err := openPartitionStore(ctx, o.store, tp, cfg.SealEnable)
	if err != nil {
		return err
	}
	defer store.Close()
	cfg.RemoteStorageEnable = true
	if !cfg.Compact() {
		cfg.CleanupPolicy = []string{backend.CleanupCompact}
	}
	// As the partition's writer (its broker stopped): at the leader epoch
	// of the last commit, or the local log's if later, so that the
	// manifest a broker committed does not fence it. A partition the
	// bucket has no manifest of was never offloaded there.
	epoch, diskless, found, err := writerEpoch(ctx, store, tp.String())
	if err != nil {
		return err
	}
	if !found {
		return usageError{fmt.Errorf("--store %s has no manifest for partition %s (%s): %w; compact --store cleans a partition offloaded there",
			storeurl.Redact(o.store), tp, dir, tiered.ErrNoManifest)}
	}
	if diskless && !o.dryRun {
		// Its latest records may be in WAL objects only, which this
		// tool neither reads nor may carry: its leader's service cleans
		// it (the same rounds), and a dry run reads its segments.
		return usageError{fmt.Errorf("partition %s is diskless (its manifest in --store %s names WAL objects): its leader's tiering service cleans it in the bucket; compact --store --dry-run reports what a round would do",
			tp, storeurl.Redact(o.store))}
	}
	if err := o.needsCompacted("the bucket's segments, the only copy once local retention took the disk's"); err != nil {
		return err
	}
	var l *local.Log
	if o.dryRun {
		if l, err = openPartitionReadOnly(ctx, dir, cfg); err != nil {
			return err
		}
	} else {
		b, err := local.OpenBackend(filepath.Dir(filepath.Clean(dir)), local.BackendOptions{Logger: loggerFrom(ctx), RemoteStorage: true})
		if err != nil {
			return err
		}
		defer b.Close()
		if l, err = b.OpenLog(ctx, tp.Topic, tp.Partition, cfg); err != nil {
			return err
		}
	}
	if es := l.LeaderEpochs(); len(es) > 0 {
		epoch = max(epoch, es[len(es)-1].Epoch)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: tp.String(), Logger: loggerFrom(ctx), LeaderEpoch: epoch})
	if err != nil {
		l.Close()
		return err
	}
	segsBefore, bytesBefore := p.RemoteSize()
	bar := newProgress(cmd, -1, "compact", true)
	co := tiered.CompactOptions{Force: true, MemoryBytes: o.memory, DryRun: o.dryRun,
		Throttle: func(_ context.Context, n int) error { bar.Add(int64(n)); return nil }}
	var total tiered.CompactStats
	rounds := 0
	for {
		st, err := p.CompactRemote(ctx, co)
		if err != nil {
			p.Close()
			return memoryHint(err, o.memory)
		}
		if rounds == 0 {
			total.FirstDirty, total.Checkpoint = st.FirstDirty, st.Checkpoint
		}
		if !st.Ran {
			break
		}
		rounds++
		total.Add(st)
		if o.dryRun || st.Checkpoint <= st.FirstDirty {
			break
		}
	}
	bar.Finish()
	segsAfter, bytesAfter := p.RemoteSize()
	if o.dryRun {
		// What the first round would leave: its cleaned segments in place
		// of those it replaces.
		segsAfter += total.SegmentsWritten - total.SegmentsReplaced
		bytesAfter += total.BytesWritten - total.BytesRead
	}
	if err := p.Close(); err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if o.json {
		writeJSON(w, map[string]any{"dryRun": o.dryRun, "tiered": true, "rounds": rounds, "firstDirty": total.FirstDirty,
			"end": total.End, "checkpoint": total.Checkpoint, "segmentsRead": total.SegmentsRead,
			"segmentsWritten": total.SegmentsWritten, "segmentsReplaced": total.SegmentsReplaced, "merged": total.Merged,
			"bytesRead": total.BytesRead, "bytesWritten": total.BytesWritten, "mapBytesRead": total.MapBytesRead,
			"records": total.RecordsRead, "recordsRemoved": total.RecordsRemoved, "tombstonesKept": total.TombstonesKept,
			"keys": total.Keys, "abortedRecordsRemoved": total.AbortedRemoved, "gets": total.Gets, "puts": total.Puts,
			"commits": total.Commits, "seconds": total.Duration.Seconds(),
			"bucketSegmentsBefore": segsBefore, "bucketBytesBefore": bytesBefore, "bucketSegmentsAfter": segsAfter, "bucketBytesAfter": bytesAfter})
		return nil
	}
	if rounds == 0 {
		fmt.Fprintf(w, "nothing to clean in the bucket: no segment of its own (below the local log start) holds dirty offsets from %d\n", total.FirstDirty)
		return nil
	}
	if o.dryRun {
		fmt.Fprintf(w, "would remove %d records (%d of aborted transactions) in the first round; it would write %d segment(s) of %d bytes replacing %d (%d merged)\n",
			total.RecordsRemoved, total.AbortedRemoved, total.SegmentsWritten, total.BytesWritten, total.SegmentsReplaced, total.Merged)
		fmt.Fprintf(w, "requests: %d GETs (%d bytes to map, %d to clean); it would make %d PUTs and %d manifest commit(s)\n",
			total.Gets, total.MapBytesRead, total.BytesRead, total.Puts, total.Commits)
		fmt.Fprintf(w, "dirty section %d..%d; the checkpoint would be %d (a map that filled leaves the rest to more rounds)\n",
			total.FirstDirty, total.End, total.Checkpoint)
		return nil
	}
	fmt.Fprintf(w, "removed %d records (%d of aborted transactions) in %d round(s): the bucket's %d segment(s) of %d bytes are now %d of %d bytes (%d replaced, %d merged)\n",
		total.RecordsRemoved, total.AbortedRemoved, rounds, segsBefore, bytesBefore, segsAfter, bytesAfter, total.SegmentsReplaced, total.Merged)
	fmt.Fprintf(w, "requests: %d GETs (%d bytes to map, %d to clean), %d PUTs and %d manifest commit(s)\n",
		total.Gets, total.MapBytesRead, total.BytesRead, total.Puts, total.Commits)
	fmt.Fprintf(w, "dirty section %d..%d, %.2fs; checkpoint %d\n", total.FirstDirty, total.End, total.Duration.Seconds(), total.Checkpoint)
	return nil
}

// memoryHint adds to an offset map that cannot hold one batch's keys
// which flag gives it more.
func memoryHint(err error, memory int) error {
	if errors.Is(err, compaction.ErrMapFull) {
		return usagef("%w (--memory %d: give it more)", err, memory)
	}
	return err
}

// needsCompacted refuses a compact that would rewrite what (a dry run
// rewrites nothing) unless the --config flags say the topic's
// cleanup.policy, compacted: tierctl cannot read a topic's config, and on
// a topic that is not compacted the cleaner would remove every keyless
// record and all but the last of each key.
func (o compactOptions) needsCompacted(what string) error {
	if o.dryRun {
		return nil
	}
	for _, kv := range o.configs {
		k, v, _ := strings.Cut(kv, "=")
		if strings.TrimSpace(k) == "cleanup.policy" && slices.Contains(strings.Split(strings.TrimSpace(v), ","), backend.CleanupCompact) {
			return nil
		}
	}
	return usagef("compact rewrites %s: say the topic is compacted with --config cleanup.policy=compact (or compact,delete); "+
		"--dry-run needs no such word", what)
}

// writerEpoch is the leader epoch of the commit of the partition's
// manifest under prefix, and whether the partition is diskless (the
// manifest names WAL objects); found is false when it has none.
func writerEpoch(ctx context.Context, store *objstore.Store, prefix string) (epoch int32, diskless, found bool, err error) {
	key := manifest.NewLayout(prefix).Manifest()
	data, err := store.ReadAll(ctx, key, 0, -1)
	if errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrBucketNotFound) {
		return 0, false, false, nil
	}
	if err != nil {
		return 0, false, false, err
	}
	h, err := manifest.DecodeHead(data)
	if err != nil {
		return 0, false, false, fmt.Errorf("%s: %w", key, err)
	}
	return h.WriterEpoch(), h.WAL() != nil && !h.Deleted(), true, nil
}
