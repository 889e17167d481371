package main

import (
	"bufio"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/vfs"
)

// newManifestAcceptCmd is manifest accept: the one way to make a
// partition take a bucket that went back in time (see tiered's
// rollback.go); a restart never does.
func newManifestAcceptCmd() *cobra.Command {
	var storeURL string
	var asJSON, dryRun bool
	cmd := &cobra.Command{
		Use:   "accept PARTITION_DIR --store URL [--dry-run]",
		Short: "Accept a bucket that went back in time: record its manifest generation as the partition's",
		Long: `A partition refuses a manifest older than the one it last committed or
adopted, or one that leaves a hole between the bucket and its local log (a
restored bucket backup, a versioning rollback, a failover to a lagging
replica): it goes offline with KAFKA_STORAGE_ERROR and deletes nothing.

If that older bucket is the one to keep, accept records the bucket's
manifest generation in the partition's tier-state-checkpoint, so the
partition takes it at its next open. It prints what the partition then
loses: the offsets between its log start and where the accepted bucket and
its local log hold records, and the objects later manifests named, which gc
removes. --dry-run prints the same and writes nothing.

Stop the broker first: accept locks the log directory. Exit 0 when accepted
(or nothing to accept), 2 on errors.`,
		Example: `  tierctl manifest accept /var/lib/tierlog/logs/orders-0 --store s3://my-bucket/tierlog?region=eu-west-1 --dry-run`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			dir := filepath.Clean(args[0])
			tp, err := partitionOf(dir)
			if err != nil {
				return err
			}
			store, err := openPartitionStore(ctx, storeURL, tp, false)
			if err != nil {
				return err
			}
			defer store.Close()
			if !dryRun {
				lock, err := vfs.Default.Lock(filepath.Join(filepath.Dir(dir), local.LockFile))
				if errors.Is(err, vfs.ErrLocked) {
					return fmt.Errorf("log dir %s is in use by another process (a broker?): stop it first: %w", filepath.Dir(dir), err)
				}
				if err != nil {
					return err
				}
				defer lock.Close()
			}
			l, err := openPartitionReadOnly(ctx, dir, backend.Config{})
			if err != nil {
				return err
			}
			a, err := tiered.PlanAcceptance(ctx, store, tp.String(), l)
			l.Close()
			if errors.Is(err, tiered.ErrNoManifest) {
				return errNoManifestAt(storeURL, tp.String())
			}
			if err != nil {
				return err
			}
			written := false
			if a.Refusal != "" && !dryRun {
				if err := local.WriteTierState(dir, a.Accepted); err != nil {
					return err
				}
				written = true
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			if asJSON {
				writeJSON(w, map[string]any{"partitionDir": dir, "store": storeurl.Redact(storeURL), "refusal": a.Refusal,
					"generation": a.Head.Generation(), "recordedGeneration": a.Recorded.Generation, "hadRecord": a.HaveRecord,
					"logStart": a.LogStart, "newLogStart": a.NewLogStart, "localLogStart": a.LocalLogStart,
					"lostOffsets": a.LostOffsets, "accepted": written, "dryRun": dryRun})
				return nil
			}
			printAcceptance(w, dir, a, dryRun, written)
			return nil
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "bucket URL")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what accepting would lose; write nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printAcceptance(w *bufio.Writer, dir string, a *tiered.Acceptance, dryRun, written bool) {
	if a.Refusal == "" {
		fmt.Fprintf(w, "%s takes the bucket's manifest (generation %d) as it is: nothing to accept\n", dir, a.Head.Generation())
		return
	}
	recorded := "no tier-state-checkpoint"
	if a.HaveRecord {
		recorded = fmt.Sprintf("recorded generation %d", a.Recorded.Generation)
	}
	fmt.Fprintf(w, "the partition refuses the bucket's manifest: %s\n", a.Refusal)
	fmt.Fprintf(w, "accepting generation %d (%s): the log start moves from %d to %d (the local log starts at %d)\n",
		a.Head.Generation(), recorded, a.LogStart, a.NewLogStart, a.LocalLogStart)
	if a.LostOffsets > 0 {
		fmt.Fprintf(w, "lost: offsets %d..%d (%d offsets)\n", a.LogStart, a.NewLogStart-1, a.LostOffsets)
	}
	fmt.Fprintln(w, "objects that later manifests named and this one does not are garbage: gc removes them")
	switch {
	case dryRun:
		fmt.Fprintln(w, "dry run: nothing written")
	case written:
		fmt.Fprintf(w, "accepted: %s records generation %d; the partition takes it when it is next opened\n",
			filepath.Join(dir, local.TierStateCheckpoint), a.Accepted.Generation)
	}
}
