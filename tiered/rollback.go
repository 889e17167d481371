package tiered

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
)

// A bucket that went back in time.
//
// A restored bucket backup, a versioning rollback or a failover to a
// lagging replica puts an older manifest under the partition's key.
// Adopted, it would move the log start (the older bucket does not reach
// the local log) and remote retention would then delete the older
// manifest's objects: acknowledged records gone with no error. So a
// partition remembers, in its directory's tier-state-checkpoint
// (local.TierState), the last manifest generation it committed or
// adopted, where the bucket's segments ended and the partition's log
// start. Every manifest read from the bucket is judged against that
// record (judgeManifest) before it is adopted; one that contradicts it is
// refused, and the partition goes offline (ErrManifestRolledBack with
// ErrStorage, a RollbackError): it deletes nothing, locally or in the
// bucket, its log start stays (Offsets), and every other call but Close,
// BecomeLeader and BecomeFollower (which take the role and leave the
// partition offline) fails with the error until it is reopened. An
// operator who means the older bucket accepts it (PlanAcceptance, tierctl
// manifest accept), never by a restart.
//
// The record is written (durably: tmp, fsync, rename, directory fsync)
// whenever the generation moves, by adopt before it publishes the new
// manifest (a commit's, or one read from the bucket), so before local
// retention deletes anything on the strength of it; between moves it is
// kept in memory. That is one small file write per commit, beside the
// segment upload the commit names. A generation that moves alone (a
// claim at a new epoch: the same segments, log start and incarnation,
// Head.SameLog) is recorded in memory only: a bucket gone back across it
// lost nothing, and the file then says what a crash between the claim's
// PUT and its record would leave. (A broker made leader of 10,000
// partitions paid 10,000 fsyncs for it.) A DeleteRecordsBefore past the
// bucket's end records its new log start before the local log moves
// (noteLogStart): no manifest can. A crash between a manifest's PUT and its record
// leaves the record behind the bucket, which is fine: only lower
// generations, holes and log starts that move with nothing to explain
// them are refused. A partition with no record (one that never read a
// manifest, or written before the record existed) is judged by its
// log-start-offset-checkpoint alone: the bucket must reach the local log
// when the checkpoint says the partition begins below it.

// RollbackError says why a tiered partition refused the bucket's
// manifest. It matches backend.ErrManifestRolledBack and
// backend.ErrStorage.
type RollbackError struct {
	Key string // the manifest's key
	Dir string // the partition directory
	// Generation is the bucket's manifest generation (0: no manifest);
	// Recorded what the partition last knew (HaveRecord false: no
	// tier-state-checkpoint, judged by the log start checkpoint).
	Generation uint64
	Recorded   local.TierState
	HaveRecord bool
	Reason     string
	// Foreign says the manifest is another partition's (its lineage is
	// not the one the partition recorded): a wrong store URL or prefix
	// rather than a bucket gone back in time.
	Foreign bool
}

func (e *RollbackError) Error() string {
	if e.Foreign {
		return fmt.Sprintf("the bucket holds another partition's manifest (%v): %s: %s; the partition at %s is offline and deletes nothing; "+
			"fix the store URL or prefix and reopen it (if the partition was deleted and created anew since, delete it there)",
			backend.ErrStorage, e.Key, e.Reason, e.Dir)
	}
	return fmt.Sprintf("%v (%v): %s: %s; the partition at %s is offline and deletes nothing; "+
		"if the older bucket is the right one, accept it with 'tierctl manifest accept %s --store URL' and reopen it",
		backend.ErrManifestRolledBack, backend.ErrStorage, e.Key, e.Reason, e.Dir, e.Dir)
}

// Unwrap lets errors.Is match ErrManifestRolledBack (a refused manifest,
// foreign or not) and ErrStorage.
func (e *RollbackError) Unwrap() []error {
	return []error{backend.ErrManifestRolledBack, backend.ErrStorage}
}

// bucketRecord is the partition's local.TierState in memory, and whether
// the partition went offline for refusing a manifest.
type bucketRecord struct {
	mu sync.Mutex // guards st and have; held across the file's write
	st local.TierState
	// have: st is the tier-state-checkpoint's (read at Open or written).
	have    bool
	offline atomic.Pointer[RollbackError]
	// missing: a missing manifest was refused (and logged) since the
	// last one judged fine.
	missing atomic.Bool
}

// remoteEnd is the offset after the bucket's part of the log: after its
// last segment, or its log start when it names none.
func remoteEnd(h *manifest.Head) int64 {
	return max(h.LastOffset()+1, h.LogStartOffset())
}

// partitionStart is the partition's log start under m with the local log
// starting at localStart (as Offsets says once m is adopted).
func partitionStart(h *manifest.Head, localStart int64) int64 {
	if h.Deleted() {
		return localStart
	}
	if last := h.LastOffset(); last >= 0 && last+1 >= localStart {
		return h.LogStartOffset()
	}
	return max(localStart, h.LogStartOffset())
}

// judgeManifest says why the manifest m (exists: the bucket has one) must
// not be adopted by a partition whose record is rec (have: there is one)
// and whose local log starts at localStart; known is the partition's log
// start as far as it knows (the record's, else its log start
// checkpoint's). "" means m may be adopted.
func judgeManifest(rec local.TierState, have bool, m *manifest.Head, exists bool, localStart, known int64) (reason string, foreign bool) {
	if have && exists && rec.Lineage != ([8]byte{}) && m.Lineage() != rec.Lineage {
		// Generations say nothing across partitions: a bucket (or
		// prefix) holding another partition of the same name may be at
		// any generation, deleted or created anew. (A directory that
		// knew this partition's deletion recorded the deleted
		// manifest, which keeps the lineage, or no record at all.)
		switch {
		case m.Lineage() == ([8]byte{}) && m.Generation() < rec.Generation:
			// A manifest from before lineages, older than the one
			// recorded: this partition's, gone back in time, or
			// another's; the generations speak.
		case m.Lineage() == ([8]byte{}):
			// At or past the recorded generation every manifest of
			// this partition carries the lineage recorded.
			return fmt.Sprintf("the bucket's manifest (generation %d) carries no lineage, but this partition's is %s since generation %d or before: it is another partition's (is the store URL or prefix right?)",
				m.Generation(), lineageString(rec.Lineage), rec.Generation), true
		default:
			return fmt.Sprintf("the bucket's manifest (generation %d) is another partition's: its lineage is %s, this partition's %s "+
				"(is the store URL or prefix right? or was the partition deleted and created anew since this directory knew it?)",
				m.Generation(), lineageString(m.Lineage()), lineageString(rec.Lineage)), true
		}
	}
	return judgeGenerations(rec, have, m, exists, localStart, known), false
}

// judgeGenerations is judgeManifest for a manifest of this partition's
// lineage (or of one none recorded).
func judgeGenerations(rec local.TierState, have bool, m *manifest.Head, exists bool, localStart, known int64) string {
	if have {
		switch {
		case !exists && rec.Generation > 0:
			return fmt.Sprintf("the bucket has no manifest, but this partition last committed or adopted generation %d", rec.Generation)
		case !exists:
			return ""
		case m.Generation() < rec.Generation:
			return fmt.Sprintf("the bucket's manifest is generation %d, older than generation %d this partition last committed or adopted",
				m.Generation(), rec.Generation)
		case m.Born() < rec.Born:
			return fmt.Sprintf("the bucket's manifest (generation %d) belongs to an incarnation born at generation %d, older than this partition's (born at %d)",
				m.Generation(), m.Born(), rec.Born)
		case m.Deleted() || m.Born() > rec.Generation:
			// Deleted or created anew since: the deletion's own rules
			// apply (see claimOver).
			return ""
		case remoteEnd(m) < rec.RemoteEnd:
			return fmt.Sprintf("the bucket's manifest (generation %d) ends at offset %d, but the bucket held offsets up to %d at generation %d",
				m.Generation(), remoteEnd(m), rec.RemoteEnd, rec.Generation)
		case m.Generation() > rec.Generation && m.LogStartOffset() < min(rec.LogStart, rec.RemoteEnd):
			// (The recorded generation itself may be one an operator
			// accepted with its hole: AcceptManifest.)
			return fmt.Sprintf("the bucket's manifest (generation %d) moves the log start back from %d to %d",
				m.Generation(), min(rec.LogStart, rec.RemoteEnd), m.LogStartOffset())
		}
	} else if !exists || m.Deleted() {
		return "" // attach's own checks (ErrNoManifest) and the deletion's apply
	}
	need := max(known, m.LogStartOffset())
	if need >= localStart {
		return "" // the local log holds the partition from its log start
	}
	switch {
	case m.LastOffset() < 0 || m.LastOffset()+1 < localStart:
		return fmt.Sprintf("the bucket's manifest (generation %d) ends at offset %d, but the partition's log starts at %d and its local log at %d: "+
			"offsets %d..%d would be in neither (the log start would jump to %d)",
			m.Generation(), remoteEnd(m), need, localStart, max(need, remoteEnd(m)), localStart-1, localStart)
	case m.FirstOffset() > need:
		return fmt.Sprintf("the bucket's manifest (generation %d) begins at offset %d, above the partition's log start %d",
			m.Generation(), m.FirstOffset(), need)
	}
	return ""
}

// lineageString is a lineage as operators see it (none: "none").
func lineageString(l [8]byte) string {
	if l == ([8]byte{}) {
		return "none"
	}
	return hex.EncodeToString(l[:])
}

// recordedGeneration is the manifest generation the partition last
// committed or adopted (0: none recorded).
func (p *Partition) recordedGeneration() uint64 {
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	return p.rec.st.Generation
}

// loadRecord reads the partition's tier-state-checkpoint. Called by Open,
// before p is shared.
func (p *Partition) loadRecord() error {
	st, ok, err := p.segs.TierState()
	if err != nil {
		return fmt.Errorf("%w: tiered: %s: %w", backend.ErrStorage, p.prefix, err)
	}
	p.rec.st, p.rec.have = st, ok
	return nil
}

// judged reads the bucket's manifest and judges it (judgeManifest): a
// manifest the partition must refuse takes it offline, and the error is
// the RollbackError. Every read of the manifest to adopt goes through it.
// A manifest missing where the record says one must be is restored from
// its backup first, when one is new enough (restoreManifest).
func (p *Partition) judged(ctx context.Context) (*manifestState, error) {
	st, err := p.readManifest(ctx)
	if err == nil && st.etag == "" && p.manifestExpected() {
		st, err = p.restoreManifest(ctx) // the bucket lost it: from its backup (backup.go)
	}
	if err != nil {
		return nil, err
	}
	if err := p.judge(st); err != nil {
		return nil, err
	}
	return st, nil
}

// judge refuses st when it contradicts the partition's record, taking the
// partition offline.
func (p *Partition) judge(st *manifestState) error {
	if err := p.Offline(); err != nil {
		return err
	}
	p.rec.mu.Lock()
	rec, have := p.rec.st, p.rec.have
	p.rec.mu.Unlock()
	o := p.local.Offsets()
	known := o.LogStart
	if have {
		known = rec.LogStart
	} else if rs, ok := p.segs.RemoteLogStart(); ok {
		known = rs
	}
	exists := st.etag != ""
	reason, foreign := judgeManifest(rec, have, st.head, exists, o.LogStart, known)
	if reason == "" {
		p.rec.missing.Store(false)
		return nil
	}
	e := &RollbackError{Key: p.layout().Manifest(), Dir: p.local.Dir(), Recorded: rec, HaveRecord: have, Reason: reason, Foreign: foreign}
	if !exists {
		// A bucket rolled back to before the partition, or a store that
		// answers not-found for an object it holds (a MinIO node not yet
		// caught up, seen in the soak): refused, deleting nothing, but
		// retryably, without going offline, since the answer may change.
		if !p.rec.missing.Swap(true) {
			p.metrics.ManifestsRefused.Add(1)
			p.opts.Logger.Error("refused the bucket's answer that the manifest is gone: the partition changes nothing until it is back", "prefix", p.prefix,
				"recorded_generation", rec.Generation, "local_log_start", o.LogStart, "err", e)
		}
		return fmt.Errorf("%w: %w", objstore.ErrRetryable, e)
	}
	e.Generation = st.head.Generation()
	if p.rec.offline.CompareAndSwap(nil, e) {
		p.metrics.ManifestsRefused.Add(1)
		p.opts.Logger.Error("refused the bucket's manifest: the partition is offline", "prefix", p.prefix,
			"generation", e.Generation, "recorded_generation", rec.Generation, "local_log_start", o.LogStart, "err", e)
	}
	return p.Offline()
}

// Offline returns the RollbackError that took the partition offline, or
// nil.
func (p *Partition) Offline() error {
	if e := p.rec.offline.Load(); e != nil {
		return e
	}
	return nil
}

// record writes the partition's record of st when its generation moved
// (see the top of this file). A read-only log records nothing; a failed
// write fails the local log, which then deletes nothing until it is
// reopened. Called by adopt, before st is published.
func (p *Partition) record(st *manifestState) {
	if st.etag == "" {
		return
	}
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	if p.rec.have && st.head.Generation() <= p.rec.st.Generation {
		return
	}
	next := local.TierState{Generation: st.head.Generation(), Born: st.head.Born(), RemoteEnd: remoteEnd(st.head),
		LogStart: partitionStart(st.head, p.local.Offsets().LogStart), Lineage: st.head.Lineage()}
	if prev := p.man.Load(); p.rec.have && prev.etag != "" && p.rec.st.Generation == prev.head.Generation() &&
		next.LogStart == p.rec.st.LogStart && next.RemoteEnd == p.rec.st.RemoteEnd && next.Born == p.rec.st.Born &&
		next.Lineage == p.rec.st.Lineage &&
		st.head.SameLog(prev.head) {
		// The generation moved alone from the one recorded: what the
		// file records (this log, at that or an older generation) still
		// holds.
		p.rec.st = next
		return
	}
	p.writeRecordLocked(next)
}

// noteLogStart records the partition's log start offset before a
// DeleteRecordsBefore moves the local log's start there: past the
// bucket's end, the local log's start becomes the partition's, which
// no manifest records.
func (p *Partition) noteLogStart(offset int64) error {
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	if p.rec.have && offset <= p.rec.st.LogStart {
		return nil
	}
	next := p.rec.st
	if !p.rec.have {
		if st := p.man.Load(); st.etag != "" {
			next = local.TierState{Generation: st.head.Generation(), Born: st.head.Born(), RemoteEnd: remoteEnd(st.head), Lineage: st.head.Lineage()}
		}
	}
	next.LogStart = offset
	return p.writeRecordLocked(next)
}

// writeRecordLocked writes next as the partition's record. REQUIRES:
// p.rec.mu held.
func (p *Partition) writeRecordLocked(next local.TierState) error {
	err := p.segs.WriteTierState(next)
	switch {
	case err == nil:
		p.rec.st, p.rec.have = next, true
	case errors.Is(err, local.ErrReadOnly):
		return nil // a tool's read-only view records nothing
	default:
		p.opts.Logger.Error("could not record the bucket's manifest generation; the local log deletes nothing until reopened",
			"prefix", p.prefix, "generation", next.Generation, "err", err)
	}
	return err
}

// Acceptance is what accepting the bucket's manifest over a partition's
// record means (PlanAcceptance): the record an operator's accept writes,
// and the offsets the partition gives up.
type Acceptance struct {
	// Refusal is why the partition refuses the manifest now ("": it
	// does not, and there is nothing to accept).
	Refusal string
	// Head is the bucket's manifest's head; Recorded (when HaveRecord)
	// the partition's record, Accepted the record that accepts it.
	Head       *manifest.Head
	Recorded   local.TierState
	HaveRecord bool
	Accepted   local.TierState
	// LogStart is the partition's log start as it knows it, NewLogStart
	// its log start under the accepted manifest; offsets between them are
	// lost (LostOffsets of them), and so are the objects newer manifests
	// named past RemoteEnd, which gc then removes.
	LogStart, NewLogStart, LocalLogStart int64
	LostOffsets                          int64
}

// PlanAcceptance reads the bucket's manifest for the partition under
// prefix and judges it as the partition l would at its next open
// (judgeManifest), and says what accepting it would lose; another
// partition's manifest (another lineage) is never accepted
// (backend.ErrInvalidConfig). Nothing is
// written; the accept writes Accepted as the partition's
// tier-state-checkpoint (local.WriteTierState) while no broker holds the
// log directory.
func PlanAcceptance(ctx context.Context, store *objstore.Store, prefix string, l *local.Log) (*Acceptance, error) {
	p := &Partition{store: store, prefix: prefix}
	st, err := p.readManifest(ctx)
	if err != nil {
		return nil, err
	}
	if st.etag == "" {
		return nil, fmt.Errorf("%w under %q: nothing to accept (is the store URL or the partition right?)", ErrNoManifest, prefix)
	}
	rec, have, err := l.Segments().TierState()
	if err != nil {
		return nil, err
	}
	o := l.Offsets()
	known := o.LogStart
	if have {
		known = rec.LogStart
	} else if rs, ok := l.Segments().RemoteLogStart(); ok {
		known = rs
	}
	next := partitionStart(st.head, o.LogStart)
	refusal, foreign := judgeManifest(rec, have, st.head, true, o.LogStart, known)
	if foreign {
		// Accepting takes back a bucket that went back in time. Taking
		// another partition's as this one's would make its records below
		// the new log start this partition's to delete, in its bucket.
		return nil, fmt.Errorf("%w: %s: %s: an accept takes back this partition's bucket gone back in time, never another partition's "+
			"(its records below the log start would be deleted from its bucket): fix the store URL or prefix; "+
			"if this partition was deleted and created anew since %s knew it, delete the partition there instead",
			backend.ErrInvalidConfig, p.layout().Manifest(), refusal, l.Dir())
	}
	a := &Acceptance{Refusal: refusal, Head: st.head, Recorded: rec, HaveRecord: have,
		Accepted: local.TierState{Generation: st.head.Generation(), Born: st.head.Born(), RemoteEnd: remoteEnd(st.head), LogStart: next, Lineage: st.head.Lineage()},
		LogStart: known, NewLogStart: next, LocalLogStart: o.LogStart, LostOffsets: max(next-known, 0)}
	return a, nil
}
