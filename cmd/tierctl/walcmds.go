package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/wal"
)

// The WAL objects of diskless topics (docs/diskless.md): shared by many
// partitions, under <store>/_wal/<writer>/<sequence>.

func newWALCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wal (ls|verify|gc) --store URL",
		Short: "List, verify or collect the WAL objects of diskless topics",
		Long: `The WAL objects of diskless topics (diskless.enable=true) hold the
record batches of many partitions each, under _wal/<writer>/<sequence>
in the bucket. wal ls lists them with their footers; wal verify checks
every footer (and, with --deep, every extent's CRC-32C) and that every
extent a partition's manifest names is there; wal gc removes the objects
no partition needs any more (a dry run unless --apply).`,
	}
	cmd.AddCommand(newWALLsCmd(), newWALVerifyCmd(), newWALGCCmd())
	return cmd
}

// walLine is one object as ls, verify and gc print it.
type walLine struct {
	Key      string `json:"key"`
	Writer   string `json:"writer,omitempty"`
	Sequence uint64 `json:"sequence,omitempty"`
	Size     int64  `json:"size"`
	Kind     string `json:"kind"` // data, marks, fence, void, or unread
	Extents  int    `json:"extents,omitempty"`
	Marks    int    `json:"marks,omitempty"`
	Epoch    int32  `json:"fenceEpoch,omitempty"`
	Problem  string `json:"problem,omitempty"`
	Verdict  string `json:"verdict,omitempty"` // gc: removed, would remove, kept
	Why      string `json:"why,omitempty"`
}

func walLineOf(o tiered.WALObject) walLine {
	l := walLine{Key: o.Key, Size: o.Size, Kind: "unread", Why: o.Why}
	if o.Sequence > 0 {
		l.Writer, l.Sequence = o.Writer.String(), o.Sequence
	}
	if f := o.Footer; f != nil {
		l.Kind, l.Extents, l.Marks, l.Epoch = "data", len(f.Extents), len(f.Marks), f.FenceEpoch
		switch {
		case !f.Fence && len(f.Extents) == 0:
			l.Kind = "marks" // a writer's acknowledged ends alone, for read replicas
		case f.Fence && len(f.Extents) == 0:
			l.Kind = "void"
		case f.Fence:
			l.Kind = "fence"
		}
	}
	if o.Damaged != nil {
		l.Problem = o.Damaged.Error()
	}
	return l
}

func (l walLine) text() string {
	s := fmt.Sprintf("%s  %d bytes  %s", l.Key, l.Size, l.Kind)
	switch l.Kind {
	case "data":
		s += fmt.Sprintf(" (%d partitions)", l.Extents)
		if l.Marks > 0 {
			s += fmt.Sprintf(" (%d marks)", l.Marks)
		}
	case "marks":
		s += fmt.Sprintf(" (%d partitions' acknowledged ends)", l.Marks)
	case "fence":
		s += fmt.Sprintf(" (%d partitions, claimed at epoch %d)", l.Extents, l.Epoch)
	}
	if l.Problem != "" {
		s += "  problem: " + l.Problem
	}
	return s
}

// openWAL opens the store at storeURL, lists the WAL objects under its
// root and reads every footer (one ranged GET each). The caller closes
// the store.
func openWAL(ctx context.Context, storeURL string) (*objstore.Store, []tiered.WALObject, error) {
	store, err := openStore(ctx, storeURL)
	if err != nil {
		return nil, nil, err
	}
	objs, err := readWAL(ctx, store)
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return store, objs, nil
}

func readWAL(ctx context.Context, store *objstore.Store) ([]tiered.WALObject, error) {
	objs, err := tiered.ListWAL(ctx, store, "")
	if err != nil {
		return nil, err
	}
	for i := range objs {
		o := &objs[i]
		if o.Damaged != nil {
			continue
		}
		f, err := wal.ReadFooter(ctx, store, o.Key, o.Size)
		switch {
		case errors.Is(err, wal.ErrCorrupt):
			o.Damaged = err
		case err != nil:
			return nil, err
		case f.Writer != o.Writer || f.Sequence != o.Sequence:
			o.Damaged = fmt.Errorf("%w: the footer is writer %s sequence %d's", wal.ErrCorrupt, f.Writer, f.Sequence)
		default:
			o.Footer = &f
		}
	}
	return objs, nil
}

func newWALLsCmd() *cobra.Command {
	var storeURL string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls --store URL",
		Short:   "List the WAL objects: writer, sequence, size, and what each holds (data, a fence, a void)",
		Example: `  tierctl wal ls --store s3://my-bucket/tierlog?region=eu-west-1`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, objs, err := openWAL(ctx, storeURL)
			if err != nil {
				return err
			}
			defer store.Close()
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			writers := map[wal.WriterID]bool{}
			var bytes int64
			problems := 0
			for _, o := range objs {
				l := walLineOf(o)
				if asJSON {
					writeJSON(w, l)
				} else {
					fmt.Fprintln(w, l.text())
				}
				writers[o.Writer] = true
				bytes += o.Size
				if o.Damaged != nil {
					problems++
				}
			}
			if !asJSON {
				fmt.Fprintf(w, "%d WAL objects, %d bytes, %d writers\n", len(objs), bytes, len(writers))
			}
			if problems > 0 {
				return errProblems
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "bucket URL")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, one object per line")
	return cmd
}

func newWALVerifyCmd() *cobra.Command {
	var storeURL string
	var asJSON, deep bool
	cmd := &cobra.Command{
		Use:   "verify --store URL [--deep]",
		Short: "Check every WAL footer (--deep: every extent's CRC-32C) and every extent a manifest names",
		Long: `wal verify reads the footer of every WAL object (magic, version, CRC-32C,
extents that tile the object) and, with --deep, reads every extent and
checks its CRC-32C. Then, for every partition under --store whose
manifest has a WAL record, it checks that each extent the record names is
in its object, at the position, size and CRC-32C the record says. Any
problem is exit 1.`,
		Example: `  tierctl wal verify --store file:///var/lib/tierlog/bucket --deep`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, objs, err := openWAL(ctx, storeURL)
			if err != nil {
				return err
			}
			defer store.Close()
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			problems, extents := 0, 0
			report := func(key, problem string) {
				problems++
				if asJSON {
					writeJSON(w, walLine{Key: key, Problem: problem})
				} else {
					fmt.Fprintf(w, "problem: %s: %s\n", key, problem)
				}
			}
			byKey := map[string]*wal.Footer{}
			for _, o := range objs {
				if o.Damaged != nil {
					report(o.Key, o.Damaged.Error())
					continue
				}
				byKey[o.Key] = o.Footer
				if !deep || o.Footer.Fence {
					continue
				}
				for _, e := range o.Footer.Extents {
					extents++
					if _, err := wal.ReadExtent(ctx, store, o.Key, e); errors.Is(err, wal.ErrCorrupt) {
						report(o.Key, err.Error())
					} else if err != nil {
						return err
					}
				}
			}
			named, err := checkNamedExtents(ctx, store, byKey, report)
			if err != nil {
				return err
			}
			if !asJSON {
				fmt.Fprintf(w, "%d WAL objects, %d extents read, %d extents named by manifests checked, %d problems\n", len(objs), extents, named, problems)
			}
			if problems > 0 {
				return errProblems
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "bucket URL")
	cmd.Flags().BoolVar(&deep, "deep", false, "read every extent and check its CRC-32C")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, one problem per line")
	return cmd
}

// checkNamedExtents checks every extent a partition's manifest WAL record
// names against the footer of its object (byKey: the footers read).
func checkNamedExtents(ctx context.Context, store *objstore.Store, byKey map[string]*wal.Footer, report func(key, problem string)) (int, error) {
	parts, err := bucketPartitions(ctx, store)
	if err != nil {
		return 0, err
	}
	l := wal.NewLayout("")
	checked := 0
	for _, prefix := range parts {
		m, err := tiered.ReadManifest(ctx, store, prefix)
		if err != nil {
			return checked, err
		}
		if m.WAL == nil {
			continue
		}
		tp, err := walPartition(prefix)
		if err != nil {
			return checked, err
		}
		for _, e := range m.WAL.Extents {
			checked++
			key := l.Key(wal.WriterID(e.Writer), e.Sequence)
			f, ok := byKey[key]
			if !ok {
				report(key, fmt.Sprintf("%s's manifest (generation %d) names offsets %d..%d in it, and it is missing", prefix, m.Generation, e.FirstOffset, e.LastOffset))
				continue
			}
			got, found := f.Find(tp)
			if !found || got.FirstOffset != e.FirstOffset || got.LastOffset != e.LastOffset || got.Position != e.Position || int64(got.Size) != e.Size || got.CRC != e.CRC {
				report(key, fmt.Sprintf("%s's manifest (generation %d) names offsets %d..%d at %d (%d bytes, CRC-32C %08x); the footer has %+v",
					prefix, m.Generation, e.FirstOffset, e.LastOffset, e.Position, e.Size, e.CRC, got))
			}
		}
	}
	return checked, nil
}

// walPartition is the WAL name of a partition prefix ("orders-0").
func walPartition(prefix string) (wal.TopicPartition, error) {
	k, err := manifest.ParseKey(prefix + "/" + manifest.ManifestName)
	if err != nil {
		return wal.TopicPartition{}, err
	}
	return wal.TopicPartition{Topic: k.Topic, Partition: k.Partition}, nil
}

func newWALGCCmd() *cobra.Command {
	var storeURL string
	var grace time.Duration
	var apply, force, asJSON, verbose bool
	cmd := &cobra.Command{
		Use:   "gc --store URL [--grace 1h] [--apply]",
		Short: "Remove WAL objects no partition needs (a dry run unless --apply)",
		Long: `wal gc removes a WAL data object once every partition its footer names
has consolidated past its extent (the partition's segments in the bucket
reach past it) or was deleted, and a fence once its writer has put an
object at a higher number. Objects younger than --grace are kept unread;
a partition whose manifest is missing keeps its objects; an object whose
footer does not check is kept and reported (exit 1).

Without --apply it only says what it would remove. --grace may not be
below 1h without --force.`,
		Example: `  tierctl wal gc --store file:///var/lib/tierlog/bucket
  tierctl wal gc --store file:///var/lib/tierlog/bucket --apply`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if grace < 0 {
				return usagef("--grace %v is negative", grace)
			}
			if grace < tiered.MinGCGrace && !force {
				return usagef("--grace %v is below the safe floor of %v (puts and claims in flight); pass --force to override", grace, tiered.MinGCGrace)
			}
			store, err := openStore(ctx, storeURL)
			if err != nil {
				return err
			}
			defer store.Close()
			if grace == 0 {
				grace = time.Nanosecond // none, as asked: GCWAL takes a zero Grace for its default
			}
			objs, err := tiered.GCWAL(ctx, store, "", tiered.WALGCOptions{Grace: grace, Force: force, DryRun: !apply})
			damaged := errors.Is(err, tiered.ErrWALDamaged)
			if err != nil && !damaged {
				return err
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			removed, kept := printWALGC(w, objs, apply, asJSON, verbose)
			if !asJSON {
				verb := "would remove"
				if apply {
					verb = "removed"
				}
				fmt.Fprintf(w, "%s %d WAL object(s), kept %d\n", verb, removed, kept)
			}
			if damaged {
				w.Flush()
				fmt.Fprintln(cmd.ErrOrStderr(), "tierctl:", err)
				return errProblems
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "bucket URL")
	cmd.Flags().DurationVar(&grace, "grace", tiered.MinGCGrace, "keep objects younger than this unread (at least 1h without --force)")
	cmd.Flags().BoolVar(&force, "force", false, "allow a --grace below the safe floor")
	cmd.Flags().BoolVar(&apply, "apply", false, "remove the objects (without it, only say what would go)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also print each object kept, and why")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, one object per line")
	return cmd
}

// printWALGC prints gc's verdicts and counts them.
func printWALGC(w io.Writer, objs []tiered.WALObject, apply, asJSON, verbose bool) (removed, kept int) {
	for _, o := range objs {
		l := walLineOf(o)
		switch {
		case o.Remove && apply:
			l.Verdict, removed = "removed", removed+1
		case o.Remove:
			l.Verdict, removed = "would remove", removed+1
		default:
			l.Verdict, kept = "kept", kept+1
		}
		switch {
		case asJSON:
			writeJSON(w, l)
		case o.Remove || verbose || o.Damaged != nil:
			fmt.Fprintf(w, "%s %s: %s\n", l.Verdict, o.Key, strings.TrimSpace(o.Why))
		}
	}
	return removed, kept
}
