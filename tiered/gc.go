package tiered

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
)

// Upload intents and garbage collection.
//
// Objects a writer uploads are named by no manifest until its commit, and
// gc must never remove an object a commit in flight may still name. So a
// writer first puts an upload intent, <prefix>/<id>.intent, naming the
// objects of the group it uploads and the manifest generation its commit
// builds on; it removes the intent once the commit names them. A commit is
// a conditional put on that generation's manifest, so it can no longer
// land once the manifest has moved past that generation; and a writer
// gives up a commit whose intent is older than the commit window. gc thus
// removes an object no manifest names only when
//
//   - an intent names it and the manifest's generation has moved past the
//     intent's, or the intent is older than the commit window plus a margin
//     for clock skew; or
//   - no intent names it (a segment retention dropped from the manifest
//     whose delete failed, or an upload of an older tierlog) and it is
//     older than the grace period, which may not be below the commit window
//     without Force; and it holds no offset at or past the manifest's end.
//
// An object no manifest and no intent names that holds offsets past the
// manifest's end is not garbage gc can prove: a commit named it and the
// bucket's manifest went back in time since (a restored backup, a
// versioning rollback, a lagging replica), and it may be the only copy of
// those records. gc keeps every such object and fails with a
// *PastEndError naming them (after removing the rest), unless
// RemovePastEnd says the older manifest was accepted (tierctl manifest
// accept) and they may go. A partition created anew over a deleted one
// whose Delete was cut short can leave such objects too: the same flag
// removes them once an operator has looked.
//
// A manifest's parts (parts.go) are named by its head; gc also keeps
// the parts and segments a kept backup's head names, which a restore
// needs (segments the bucket's cleaner replaced, compact.go, among them). A part no
// head names is judged as a segment object no intent names (the grace
// period; the offsets past the manifest's end).
//
// A manifest backup (backup.go) older than the last keptBackups
// generations is garbage too, whatever its age: no commit names a
// backup, and a restore takes only the newest; so is one above the
// manifest's generation under RemovePastEnd. gc refuses a prefix whose
// manifest is missing while a backup of it is there, even with
// NoManifestOK: a restore would bring back what the backup names.
//
// gc reads the manifest again after listing the prefix, so a commit that
// lands during the listing protects what it names. Keys it does not
// recognize (neither segment objects, intents, backups nor the manifest)
// are left alone.

// DefaultCommitWindow is how long after its intent a writer may still
// commit an upload (Options.CommitWindow).
const DefaultCommitWindow = time.Hour

// clockSkew is the margin gc adds to the commit window for the clocks of
// the writer, gc and the object store disagreeing.
const clockSkew = 5 * time.Minute

// IntentSuffix ends the key of an upload intent (manifest.IntentSuffix;
// manifest.Layout formats every key).
const IntentSuffix = manifest.IntentSuffix

// ErrNoManifest means a partition has no manifest in the bucket where one
// must exist (gc without NoManifestOK; a partition whose local log says it
// was offloaded). A wrong --store URL or prefix is the usual cause.
var ErrNoManifest = errors.New("tiered: no manifest")

// ErrCommitWindow means an upload took longer than the commit window: its
// objects are left for gc, and the next offload uploads the segments again.
var ErrCommitWindow = errors.New("tiered: upload outlasted the commit window")

// intent is an upload intent as stored (JSON).
type intent struct {
	key         string
	Version     int      `json:"version"`
	Generation  uint64   `json:"generation"` // the manifest generation the commit builds on
	WriterEpoch int32    `json:"writerEpoch"`
	CreatedMs   int64    `json:"createdMs"`
	Window      int64    `json:"commitWindowMs"`
	Objects     []string `json:"objects"` // names under the partition prefix
}

// writeIntent puts the intent for a group about to be uploaded.
func (p *Partition) writeIntent(ctx context.Context, gen uint64, segs []manifest.Segment) (*intent, error) {
	var names []string
	for _, s := range segs {
		for _, suf := range manifest.AllSuffixes { // those it will have are among them
			names = append(names, s.Name(suf))
		}
	}
	return p.putIntent(ctx, gen, names)
}

// putIntent puts an intent naming the objects (names under the
// partition's prefix) a commit building on generation gen will name.
func (p *Partition) putIntent(ctx context.Context, gen uint64, names []string) (*intent, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	in := &intent{key: p.layout().Intent(id), Version: 1, Generation: gen,
		WriterEpoch: p.epoch.Load(), CreatedMs: p.opts.Now().UnixMilli(), Window: p.opts.CommitWindow.Milliseconds(), Objects: names}
	data, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	if _, err := p.store.Put(ctx, in.key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		return nil, fmt.Errorf("tiered: write upload intent %s: %w", in.key, err)
	}
	return in, nil
}

// checkWindow refuses a commit whose intent is older than its window: gc
// may already have judged its objects garbage.
func (in *intent) checkWindow(now time.Time) error {
	if age := now.UnixMilli() - in.CreatedMs; age > in.Window {
		return fmt.Errorf("%w: %s is %v old, the window is %v; the segments will be uploaded again", ErrCommitWindow, in.key,
			time.Duration(age)*time.Millisecond, time.Duration(in.Window)*time.Millisecond)
	}
	return nil
}

// commitInWindowLocked runs commit (commitLocked's or
// commitAppendLocked's) only within the
// intent's commit window by this writer's clock: the manifest PUT, its
// retries included, is abandoned when the window ends. gc judges the
// intent dead only clockSkew after the window, so no commit it cannot
// see coming lands after it removed the objects: the skew covers the
// clocks' disagreement and a request the server takes late. A commit cut
// short is reconciled by the next change, as any lost answer.
// REQUIRES: p.mu held.
func (p *Partition) commitInWindowLocked(ctx context.Context, in *intent, commit func(ctx context.Context) error) error {
	now := p.opts.Now()
	if err := in.checkWindow(now); err != nil {
		return err
	}
	end := time.UnixMilli(in.CreatedMs + in.Window)
	wctx, cancel := context.WithTimeout(ctx, end.Sub(now))
	defer cancel()
	err := commit(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: the manifest commit did not end within the window: %w", ErrCommitWindow, in.key, err)
	}
	return err
}

// removeIntent deletes an intent whose objects a commit names (best
// effort: gc removes one left behind).
func (p *Partition) removeIntent(ctx context.Context, in *intent) {
	if err := p.store.Delete(ctx, in.key); err != nil {
		p.opts.Logger.Warn("could not remove an upload intent; gc will", "key", in.key, "err", err)
	}
}

// GCOptions tune GC.
type GCOptions struct {
	// Grace: objects no manifest and no intent name are removed once
	// older than this (default and floor: DefaultCommitWindow). Multipart
	// uploads older than it are aborted.
	Grace time.Duration
	// Force allows a Grace below the floor (an operator who knows no
	// writer of an older tierlog is uploading).
	Force bool
	// DryRun lists what would be removed, removing nothing.
	DryRun bool
	// NoManifestOK lets gc run on a prefix with no manifest (every
	// segment object there is then unnamed). Without it that is
	// ErrNoManifest: a wrong prefix would otherwise lose a partition.
	NoManifestOK bool
	// CommitWindow is the writers' (default DefaultCommitWindow).
	CommitWindow time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// RemovePastEnd lets gc remove objects no manifest and no intent
	// names that hold offsets past the manifest's end (see the rules
	// above); without it they are kept and reported (PastEndError).
	RemovePastEnd bool
}

// ErrPastEnd is matched by a *PastEndError.
var ErrPastEnd = errors.New("tiered: unnamed objects past the manifest's end")

// PastEndError is gc's refusal to remove objects that hold offsets past
// the manifest's end and that nothing names: a newer manifest named them,
// if the bucket went back in time.
type PastEndError struct {
	Prefix     string
	Generation uint64 // the manifest's
	End        int64  // the offset after the manifest's last
	Keys       []string
}

func (e *PastEndError) Error() string {
	shown := e.Keys
	if len(shown) > 3 {
		shown = shown[:3]
	}
	return fmt.Sprintf("%v under %q: %d object(s) hold offsets at or past %d, the end of manifest generation %d, and no manifest or upload intent names them (%s): "+
		"the manifest may have gone back in time, and they may be the only copy of those records; kept. Check with tierctl verify LOGDIR --store URL; "+
		"remove them only once the older manifest is accepted (gc --remove-past-end)",
		ErrPastEnd, e.Prefix, len(e.Keys), e.End, e.Generation, strings.Join(shown, ", "))
}

func (e *PastEndError) Unwrap() error { return ErrPastEnd }

// MinGCGrace is the smallest Grace GC accepts without Force.
const MinGCGrace = DefaultCommitWindow

// GC removes the objects under prefix that no manifest can name (see the
// rules above) unless opts.DryRun, and aborts stale multipart uploads. It
// returns the keys it removed (or would remove).
func GC(ctx context.Context, store *objstore.Store, prefix string, opts GCOptions) ([]string, error) {
	if opts.Grace == 0 {
		opts.Grace = MinGCGrace
	}
	if opts.Grace < 0 || (opts.Grace < MinGCGrace && !opts.Force) {
		return nil, fmt.Errorf("tiered: gc grace %v is below the safe floor of %v (uploads of older writers may still commit); pass Force to override", opts.Grace, MinGCGrace)
	}
	if opts.CommitWindow <= 0 {
		opts.CommitWindow = DefaultCommitWindow
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Partition{store: store, prefix: prefix}
	first, err := p.readManifest(ctx)
	if err != nil {
		return nil, err
	}
	if first.etag == "" && !opts.NoManifestOK {
		return nil, fmt.Errorf("%w under %q: refusing to collect garbage there (is the store URL or the partition right?)", ErrNoManifest, prefix)
	}
	listPrefix := p.layout().ListPrefix()
	var objects []objstore.ObjectInfo
	if err := store.List(ctx, listPrefix, func(o objstore.ObjectInfo) bool {
		objects = append(objects, o)
		return true
	}); err != nil {
		return nil, err
	}
	if first.etag == "" {
		for _, o := range objects {
			if b, err := p.layout().Parse(o.Key); err == nil && b.Kind == manifest.KindManifestBackup {
				// The bucket lost the manifest: its backups name what a
				// restore brings back (backup.go).
				return nil, fmt.Errorf("%w under %q, but its backup %s is there: a leader opening the partition restores it; refusing to collect garbage meanwhile",
					ErrNoManifest, prefix, o.Key)
			}
		}
	}
	// After the listing: whatever a commit named before the listing ended
	// is named here (the parts both reads name are read once).
	p.man.Store(first)
	st, err := p.readManifest(ctx)
	if err != nil {
		return nil, err
	}
	named := map[string]bool{p.layout().Manifest(): true}
	nameSegments := func(segs []manifest.Segment) {
		for _, s := range segs {
			for _, suf := range s.Objects() {
				named[p.layout().Segment(s, suf)] = true
			}
		}
	}
	for _, part := range st.head.Parts {
		named[p.layout().Part(part)] = true
		segs, err := p.partSegments(ctx, part) // one part at a time
		if err != nil {
			return nil, err
		}
		nameSegments(segs)
	}
	nameSegments(st.head.Own)
	if err := p.namedByBackups(ctx, objects, st, opts, named); err != nil {
		return nil, err
	}
	protected, byIntent, deadIntents := judgeIntents(ctx, p, objects, st, opts)
	now := opts.Now()
	end := remoteEnd(st.head)
	var garbage []string
	pastEnd := &PastEndError{Prefix: prefix, Generation: st.head.Generation(), End: end}
	for _, o := range objects {
		k := o.Key
		obj, err := p.layout().Parse(k)
		if err == nil && obj.Kind == manifest.KindManifestBackup {
			// A manifest backup older than the ones a partition keeps
			// (its delete failed): no restore takes it (backup.go).
			// Above the manifest's generation with RemovePastEnd: a
			// newer bucket given up for an accepted older one, whose
			// objects go too.
			if st.etag != "" && (obj.Generation+keptBackups <= st.head.Generation() || opts.RemovePastEnd && obj.Generation > st.head.Generation()) {
				garbage = append(garbage, k)
			}
			continue
		}
		if named[k] || protected[k] || err != nil || !(obj.Kind.Segment() || obj.Kind == manifest.KindPart) {
			continue // named, protected, an intent, or a key the layout does not know
		}
		switch {
		case byIntent[k]:
		case now.Sub(o.LastModified) <= opts.Grace:
			continue
		case st.etag != "" && !st.head.Deleted() && !opts.RemovePastEnd && obj.LastOffset >= end:
			pastEnd.Keys = append(pastEnd.Keys, k)
			continue
		}
		garbage = append(garbage, k)
	}
	garbage = append(garbage, deadIntents...) // intents last: their objects go first
	var kept error
	if len(pastEnd.Keys) > 0 {
		kept = pastEnd
	}
	if opts.DryRun {
		return garbage, kept
	}
	if err := store.Delete(ctx, garbage...); err != nil {
		return nil, err
	}
	if _, err := store.AbortStaleUploads(ctx, listPrefix, opts.Grace); err != nil {
		return garbage, err
	}
	return garbage, kept
}

// namedByBackups adds to named the parts and segments the kept manifest
// backups among objects name: a restore commits a backup's head again,
// and it needs them (the segments a round of the bucket's cleaner
// replaced stay while a kept backup names them). A backup gc removes
// (older than the ones kept) protects nothing.
func (p *Partition) namedByBackups(ctx context.Context, objects []objstore.ObjectInfo, st *manifestState, opts GCOptions, named map[string]bool) error {
	nameSegment := func(seg manifest.Segment) {
		for _, suf := range seg.Objects() {
			named[p.layout().Segment(seg, suf)] = true
		}
	}
	end := remoteEnd(st.head)
	current := map[[8]byte]bool{} // the manifest's own parts: named whole already
	for _, part := range st.head.Parts {
		current[part.ID] = true
	}
	read := map[[8]byte][]manifest.Segment{} // the backups' other parts, read once (nil: no restore takes them)
	for _, o := range objects {
		obj, err := p.layout().Parse(o.Key)
		if err != nil || obj.Kind != manifest.KindManifestBackup ||
			st.etag != "" && (obj.Generation+keptBackups <= st.head.Generation() || opts.RemovePastEnd && obj.Generation > st.head.Generation()) {
			continue
		}
		data, _, err := p.readHeadBytes(ctx, o.Key)
		if errors.Is(err, objstore.ErrNotFound) || errors.Is(err, manifest.ErrCorrupt) {
			continue // removed since the listing, or no restore takes it
		}
		if err != nil {
			return fmt.Errorf("tiered: gc: read the manifest backup %s: %w", o.Key, err)
		}
		h, err := manifest.DecodeHead(data)
		if err != nil {
			// Unreadable: no restore takes it (restoreManifest skips
			// it), so it names nothing that must stay.
			continue
		}
		// A backup above the manifest's generation is of a bucket gone
		// back in time: its segments past the manifest's end are judged
		// below (kept, and reported); those before it (a cleaner's
		// replacements among them) are named here.
		keep := func(seg manifest.Segment) bool {
			return st.etag == "" || h.Generation() <= st.head.Generation() || seg.LastOffset < end
		}
		for _, seg := range h.Own {
			if keep(seg) {
				nameSegment(seg)
			}
		}
		for _, part := range h.Parts {
			named[p.layout().Part(part)] = true
			if current[part.ID] {
				continue
			}
			segs, ok := read[part.ID]
			if !ok {
				segs, err = p.partSegments(ctx, part)
				if errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrBucketNotFound) || errors.Is(err, manifest.ErrCorrupt) {
					segs, err = nil, nil // no restore of this backup works: it names nothing that must stay
				}
				if err != nil {
					return fmt.Errorf("tiered: gc: read a part the manifest backup %s names: %w", o.Key, err)
				}
				read[part.ID] = segs
			}
			for _, seg := range segs {
				if keep(seg) {
					nameSegment(seg)
				}
			}
		}
	}
	return nil
}

// judgeIntents reads the upload intents among objects and sorts what they
// name: protected (a live intent: its commit may still land), byIntent
// (named by any intent), and the intents that are dead (their commits can
// no longer land), judged against st, the manifest read after the listing.
func judgeIntents(ctx context.Context, p *Partition, objects []objstore.ObjectInfo, st *manifestState, opts GCOptions) (protected, byIntent map[string]bool, dead []string) {
	protected, byIntent = map[string]bool{}, map[string]bool{}
	now := opts.Now()
	for _, o := range objects {
		if obj, err := p.layout().Parse(o.Key); err != nil || obj.Kind != manifest.KindIntent {
			continue
		}
		in, err := readIntent(ctx, p.store, o.Key)
		live := true
		switch {
		case err != nil:
			// Unreadable: judged by its age alone.
			live = now.Sub(o.LastModified) <= opts.CommitWindow+clockSkew
		case in.Generation < st.head.Generation() && st.etag != "":
			live = false // its commit's condition can no longer hold
		default:
			created := time.UnixMilli(in.CreatedMs)
			if o.LastModified.After(created) {
				created = o.LastModified
			}
			live = now.Sub(created) <= time.Duration(in.Window)*time.Millisecond+clockSkew
		}
		if live {
			protected[o.Key] = true
		} else {
			dead = append(dead, o.Key)
		}
		if in != nil {
			for _, name := range in.Objects {
				if live {
					protected[p.layout().Join(name)] = true
				}
				byIntent[p.layout().Join(name)] = true
			}
		}
	}
	return protected, byIntent, dead
}

// readIntent GETs and decodes an upload intent.
func readIntent(ctx context.Context, store *objstore.Store, key string) (*intent, error) {
	rc, _, err := store.Get(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return nil, err
	}
	var in intent
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("tiered: upload intent %s: %w", key, err)
	}
	in.key = key
	return &in, nil
}
