package main

import (
	"bufio"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/tiered"
)

func newGCCmd() *cobra.Command {
	var storeURL, partition string
	var grace time.Duration
	var dryRun, asJSON, force, noManifestOK, removePastEnd bool
	cmd := &cobra.Command{
		Use:   "gc --store URL --partition TOPIC-PARTITION [--grace 1h] [--dry-run]",
		Short: "Delete objects no manifest can name (crashed uploads) and stale multipart uploads",
		Long: `gc lists the partition's prefix and removes the objects no manifest can
name: those of an upload whose intent shows its commit can no longer
happen (the manifest moved past the generation it built on, or the
upload outlasted the commit window), and objects no manifest and no
intent name that are older than --grace. It reads the manifest again
after listing, so a commit landing meanwhile protects what it names.
Then it aborts multipart uploads older than --grace. --dry-run only lists.

--grace may not be below 1h (the commit window) without --force, and gc
refuses a prefix that has no manifest (a wrong --store or --partition
would otherwise lose a partition) unless --no-manifest-ok.

Objects nothing names that hold offsets past the manifest's end are kept
and reported (exit 1): a newer manifest named them if the bucket went back
in time (a restored backup, a versioning rollback), and they may be the
only copy of those records. --remove-past-end removes them too, once the
older manifest is accepted (tierctl manifest accept) or they are known to
be a deleted partition's leftovers.`,
		Example: `  tierctl gc --store file:///var/lib/tierlog/bucket --partition orders-0 --dry-run`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			tp, store, err := partitionStore(ctx, partition, storeURL)
			if err != nil {
				return err
			}
			defer store.Close()
			if grace < 0 {
				return usagef("--grace %v is negative", grace)
			}
			if grace < tiered.MinGCGrace && !force {
				return usagef("--grace %v is below the safe floor of %v (uploads in flight may still commit); pass --force to override", grace, tiered.MinGCGrace)
			}
			if grace == 0 {
				grace = time.Nanosecond // none, as asked: GC takes a zero Grace for its default
			}
			keys, err := tiered.GC(ctx, store, tp.String(), tiered.GCOptions{Grace: grace, Force: force, DryRun: dryRun, NoManifestOK: noManifestOK,
				RemovePastEnd: removePastEnd})
			if errors.Is(err, tiered.ErrNoManifest) {
				return fmt.Errorf("%w; pass --no-manifest-ok to collect anyway", err)
			}
			var kept error
			if errors.Is(err, tiered.ErrPastEnd) {
				kept, err = err, nil // reported after what was removed
			}
			if err != nil {
				return err
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			verb := "deleted"
			if dryRun {
				verb = "would delete"
			}
			var keptKeys []string
			if pe := (*tiered.PastEndError)(nil); errors.As(kept, &pe) {
				keptKeys = pe.Keys
			}
			if asJSON {
				writeJSON(w, map[string]any{"dryRun": dryRun, "keys": keys, "keptPastEnd": keptKeys})
			} else {
				for _, k := range keys {
					fmt.Fprintf(w, "%s %s\n", verb, k)
				}
				for _, k := range keptKeys {
					fmt.Fprintf(w, "kept %s (past the manifest's end)\n", k)
				}
				fmt.Fprintf(w, "%s %d object(s)\n", verb, len(keys))
			}
			if kept != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "tierctl:", kept)
				return errProblems
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "bucket URL")
	cmd.Flags().StringVar(&partition, "partition", "", "the partition, as TOPIC-PARTITION")
	cmd.Flags().DurationVar(&grace, "grace", tiered.MinGCGrace, "leave objects no intent names younger than this (at least 1h without --force)")
	cmd.Flags().BoolVar(&force, "force", false, "allow a --grace below the safe floor")
	cmd.Flags().BoolVar(&noManifestOK, "no-manifest-ok", false, "collect garbage under a prefix that has no manifest")
	cmd.Flags().BoolVar(&removePastEnd, "remove-past-end", false, "also remove unnamed objects past the manifest's end (a rolled-back bucket's newer objects)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be deleted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
