package producerstate

import (
	"encoding/binary"
	"errors"
	"slices"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// Plan is what Prepare decided about an append, for Apply to commit after
// the bytes are written. Reuse one Plan per log: after its first appends,
// Prepare and Apply of a single batch allocate nothing.
type Plan struct {
	// Duplicate is set when a batch repeats one of its producer's last
	// five (same epoch, first and last sequence; OriginClient only). The
	// log writes nothing and answers with Original's offsets and
	// timestamp; Apply must not be called.
	Duplicate bool
	// Original is the retained batch the duplicate repeats.
	Original BatchMetadata
	// Completed are the transactions the append's markers close, in
	// offset order. The log appends the Aborted ones (c.AbortedTxn()) to
	// the .txnindex of the segment the append is written to.
	Completed []CompletedTxn

	s       *State
	gen     uint64
	ready   bool
	next    int64 // one past the append's last offset; -1: no batches
	updates []update
	started []txnRef
}

// NextOffset is one past the last offset of the prepared append (-1 for an
// append without batches): the EndOffset Apply sets.
func (p *Plan) NextOffset() int64 { return p.next }

// update is one producer's part of a plan (Kafka's ProducerAppendInfo).
type update struct {
	pid int64
	cur *entry // the producer's entry in the State, nil if new
	upd entry  // the updated entry; batches holds only the new ones
	// verification entry as of the producer's first batch in the append
	hasVerif   bool
	verifLow   int32
	clearVerif bool // a transactional batch was appended: drop the verification
}

func (p *Plan) reset(s *State) {
	p.Duplicate = false
	p.Original = BatchMetadata{}
	p.Completed = p.Completed[:0]
	p.s = s
	p.gen = s.gen
	p.ready = false
	p.next = -1
	p.updates = p.updates[:0]
	p.started = p.started[:0]
}

func (p *Plan) find(pid int64) *update {
	for i := range p.updates {
		if p.updates[i].pid == pid {
			return &p.updates[i]
		}
	}
	return nil
}

// batchInfo holds the header fields the state reads.
type batchInfo struct {
	baseOffset, lastOffset int64
	producerID             int64
	epoch                  int16
	baseSeq, lastSeq       int32
	maxTimestamp           int64
	transactional, control bool
}

func infoOf(b record.Batch) batchInfo {
	return batchInfo{
		baseOffset: b.BaseOffset(), lastOffset: b.LastOffset(),
		producerID: b.ProducerID(), epoch: b.ProducerEpoch(),
		baseSeq: b.BaseSequence(), lastSeq: b.LastSequence(),
		maxTimestamp:  b.MaxTimestamp(),
		transactional: b.IsTransactional(), control: b.IsControl(),
	}
}

// nextEntry splits the first log entry off buf. A v2 batch comes back as
// its Batch; a legacy (magic 0/1) entry as nil with its offset, which is its
// last offset.
func nextEntry(buf []byte) (b record.Batch, legacyLast int64, rest []byte, err error) {
	if len(buf) >= record.HeaderSizeToMagic && int8(buf[16]) < 2 && int8(buf[16]) >= 0 {
		size := int64(int32(binary.BigEndian.Uint32(buf[8:]))) + record.LogOverhead
		if size < record.LogOverhead+record.MinLegacySize || size > int64(len(buf)) {
			return nil, 0, nil, &record.BatchError{Kind: record.ErrBadSize, Position: -1, BaseOffset: -1,
				Detail: "legacy entry size runs past the bytes given"}
		}
		return nil, int64(binary.BigEndian.Uint64(buf)), buf[size:], nil
	}
	b, err = record.Parse(buf)
	if err != nil {
		return nil, 0, nil, err
	}
	if len(b) < record.BatchHeaderSize {
		return nil, 0, nil, &record.BatchError{Kind: record.ErrBadSize, Position: -1, BaseOffset: b.BaseOffset(),
			Detail: "batch shorter than the v2 header"}
	}
	return b, 0, buf[len(b):], nil
}

// Prepare validates an append and fills p with what Apply will commit,
// without changing the State. batches are the append's batches exactly as
// they will be written: whole v2 batches, base offsets already assigned
// (the leader assigns them before calling Prepare, as Kafka analyzes the
// producer state after assigning offsets). Legacy (magic 0/1) entries are
// passed over.
//
// On success either p.Duplicate is set (write nothing, answer with
// p.Original) or the log writes the bytes and then calls Apply(p). An
// error is an *AppendError (see its kinds) and the log writes nothing;
// bytes that do not parse are reported as backend.ErrCorruptRecord.
func (s *State) Prepare(p *Plan, batches []byte, opts Options) error {
	p.reset(s)
	if opts.Origin == OriginClient {
		// Kafka's LogValidator runs before the producer state is looked at.
		for buf := batches; len(buf) > 0; {
			b, _, rest, err := nextEntry(buf)
			if err != nil {
				return parseError(err)
			}
			buf = rest
			if b == nil {
				continue
			}
			if err := checkClientBatch(b); err != nil {
				return err
			}
		}
	}
	for buf := batches; len(buf) > 0; {
		b, legacyLast, rest, err := nextEntry(buf)
		if err != nil {
			return parseError(err)
		}
		buf = rest
		if b == nil {
			p.next = legacyLast + 1
			continue
		}
		if err := s.prepareBatch(p, b, opts); err != nil {
			return err
		}
		if p.Duplicate {
			return nil
		}
	}
	s.finish(p)
	return nil
}

func parseError(err error) error {
	return &AppendError{Kind: backend.ErrCorruptRecord, ProducerID: -1, Offset: -1, Epoch: -1, CurrentEpoch: -1,
		FirstSeq: -1, LastSeq: -1, CurrentLastSeq: -1, CoordinatorEpoch: -1, CurrentCoordinatorEpoch: -1,
		Detail: "batches do not parse", Cause: err}
}

// checkClientBatch applies the checks of Kafka's LogValidator.validateBatch
// that concern producer state, for OriginClient.
func checkClientBatch(b record.Batch) error {
	if b.IsControl() {
		bi := infoOf(b)
		return newAppendError(backend.ErrInvalidRecord, &bi, "clients are not allowed to write control records")
	}
	if b.ProducerID() != record.NoProducerID && b.BaseSequence() < 0 {
		bi := infoOf(b)
		e := newAppendError(backend.ErrInvalidRecord, &bi, "a batch with a producer id must have a sequence")
		e.FirstSeq = bi.baseSeq
		return e
	}
	return nil
}

func (s *State) prepareBatch(p *Plan, b record.Batch, opts Options) error {
	bi := infoOf(b)
	p.next = bi.lastOffset + 1
	if bi.producerID == record.NoProducerID {
		return nil
	}
	cur := s.producers[bi.producerID]
	if opts.Origin == OriginClient && cur != nil && cur.epoch == bi.epoch {
		if m, ok := cur.findBatch(bi.baseSeq, bi.lastSeq); ok {
			p.Duplicate = true
			p.Original = m
			return nil
		}
	}
	u := p.find(bi.producerID)
	if opts.Origin != OriginReplication && bi.transactional && !bi.control && s.cfg.TransactionVerification &&
		(cur == nil || cur.txnFirst < 0) {
		guard := NoGuard
		if v := s.verifications[bi.producerID]; v != nil && (u == nil || !u.clearVerif) {
			guard = v.guard
		}
		if guard == NoGuard || guard != opts.VerificationGuard {
			return newAppendError(backend.ErrInvalidTxnState, &bi, "transactional batch outside a transaction the coordinator verified")
		}
	}
	if u == nil {
		p.updates = append(p.updates, update{pid: bi.producerID, cur: cur})
		u = &p.updates[len(p.updates)-1]
		// Kafka's updated entry starts from the current one without its
		// batches (withProducerIdAndBatchMetadata).
		c := cur
		if c == nil {
			c = &emptyEntry
		}
		u.upd.epoch, u.upd.coordEpoch, u.upd.lastTimestamp, u.upd.txnFirst = c.epoch, c.coordEpoch, c.lastTimestamp, c.txnFirst
		if v := s.verifications[bi.producerID]; v != nil {
			u.hasVerif, u.verifLow = true, v.lowestSeq
		}
	}
	if bi.control {
		m, ok, err := readMarker(&s.it, b)
		if err != nil {
			kind := backend.ErrCorruptRecord
			if errors.Is(err, backend.ErrInvalidRecord) {
				kind = backend.ErrInvalidRecord
			}
			e := newAppendError(kind, &bi, "")
			e.Cause = err
			return e
		}
		// An emptied control batch (the cleaner removed its transaction)
		// changes nothing, but its producer is still looked up, as in Kafka.
		if ok {
			if err := s.appendMarker(p, u, &bi, m, opts.Origin); err != nil {
				return err
			}
		}
	} else if err := s.appendData(p, u, &bi, opts.Origin); err != nil {
		return err
	}
	// Kafka drops the verification once a transactional batch or marker of
	// the producer is in: its transaction is then open, or over.
	if bi.transactional {
		u.clearVerif = true
	}
	return nil
}

// appendData is Kafka's ProducerAppendInfo.appendDataBatch.
func (s *State) appendData(p *Plan, u *update, bi *batchInfo, origin Origin) error {
	if origin != OriginReplication && bi.epoch < u.upd.epoch {
		e := newAppendError(backend.ErrInvalidProducerEpoch, bi, "epoch is older than the last seen")
		e.CurrentEpoch = u.upd.epoch
		return e
	}
	if origin == OriginClient {
		if err := u.checkSequence(bi); err != nil {
			return err
		}
	}
	u.upd.setEpoch(bi.epoch)
	u.upd.pushBatch(BatchMetadata{
		LastSeq: bi.lastSeq, OffsetDelta: int32(bi.lastOffset - bi.baseOffset),
		LastOffset: bi.lastOffset, Timestamp: bi.maxTimestamp,
	})
	u.upd.lastTimestamp = bi.maxTimestamp
	switch {
	case u.upd.txnFirst >= 0 && !bi.transactional:
		e := newAppendError(backend.ErrInvalidTxnState, bi, "non-transactional batch while the producer's transaction is open")
		return e
	case u.upd.txnFirst < 0 && bi.transactional:
		u.upd.txnFirst = bi.baseOffset
		p.started = append(p.started, txnRef{first: bi.baseOffset, pid: bi.producerID})
	}
	return nil
}

// checkSequence is Kafka's ProducerAppendInfo.checkSequence.
func (u *update) checkSequence(bi *batchInfo) error {
	cur := u.cur
	if cur == nil {
		cur = &emptyEntry
	}
	fail := func(current int32, detail string) error {
		e := newAppendError(backend.ErrOutOfOrderSequence, bi, detail)
		e.FirstSeq, e.LastSeq, e.CurrentLastSeq, e.CurrentEpoch = bi.baseSeq, bi.lastSeq, current, u.upd.epoch
		return e
	}
	if u.hasVerif && bi.baseSeq > u.verifLow {
		return fail(u.verifLow, "sequence above the lowest one seen while verifying the transaction")
	}
	if bi.epoch != u.upd.epoch {
		if bi.baseSeq != 0 && u.upd.epoch != record.NoProducerEpoch {
			return fail(u.upd.lastSeq(), "a new epoch must start at sequence 0")
		}
		return nil
	}
	var last int32
	switch {
	case u.upd.nb > 0:
		last = u.upd.lastSeq()
	case bi.epoch == cur.epoch:
		last = cur.lastSeq()
	default:
		last = record.NoSequence
	}
	// A producer the partition holds no epoch for (all its records deleted
	// by retention, or never seen) may start at any sequence.
	if cur.epoch != record.NoProducerEpoch && !inSequence(last, bi.baseSeq) {
		return fail(last, "sequence does not follow the last one")
	}
	return nil
}

// appendMarker is Kafka's ProducerAppendInfo.appendEndTxnMarker.
func (s *State) appendMarker(p *Plan, u *update, bi *batchInfo, m Marker, origin Origin) error {
	if origin != OriginReplication {
		if bi.epoch < u.upd.epoch {
			e := newAppendError(backend.ErrInvalidProducerEpoch, bi, "marker epoch is older than the last seen")
			e.CurrentEpoch = u.upd.epoch
			return e
		}
		if u.upd.coordEpoch > m.CoordinatorEpoch {
			e := newAppendError(backend.ErrTransactionCoordinatorFenced, bi, "marker from a zombie coordinator")
			e.CoordinatorEpoch, e.CurrentCoordinatorEpoch = m.CoordinatorEpoch, u.upd.coordEpoch
			return e
		}
	}
	if u.upd.txnFirst >= 0 {
		p.Completed = append(p.Completed, CompletedTxn{
			ProducerID: bi.producerID, FirstOffset: u.upd.txnFirst, LastOffset: bi.baseOffset,
			Aborted: m.Type == record.ControlAbort,
		})
	}
	u.upd.setEpoch(bi.epoch)
	u.upd.coordEpoch = m.CoordinatorEpoch
	u.upd.txnFirst = -1
	u.upd.lastTimestamp = m.Timestamp
	return nil
}

// finish computes the last stable offset of each completed transaction as
// Kafka does after updating the producers and before completing each one:
// the first open transaction (those of the State and those this append
// starts, minus those completed before it) of another producer.
func (s *State) finish(p *Plan) {
	for i := range p.Completed {
		c := &p.Completed[i]
		c.LastStableOffset = c.LastOffset + 1
		a, b := s.ongoing, p.started
		for len(a) > 0 || len(b) > 0 {
			var t txnRef
			if len(b) == 0 || (len(a) > 0 && a[0].first <= b[0].first) {
				t, a = a[0], a[1:]
			} else {
				t, b = b[0], b[1:]
			}
			if t.pid == c.ProducerID || completedBefore(p.Completed[:i], t.first) {
				continue
			}
			c.LastStableOffset = t.first
			break
		}
	}
	p.ready = true
}

func completedBefore(done []CompletedTxn, first int64) bool {
	for i := range done {
		if done[i].FirstOffset == first {
			return true
		}
	}
	return false
}

// Apply commits a plan after the log wrote its bytes: the producers'
// updated entries, the transactions it starts and completes (completed
// ones wait for the high watermark before the first unstable offset moves
// past them), and EndOffset = p.NextOffset(). It fails with ErrStalePlan,
// changing nothing, unless p was filled by Prepare on this State, is not a
// duplicate, and none of Apply, Replay, Load, Reset, SetConfig,
// StartVerification or RemoveExpiredProducers ran since. (The calls a log
// makes around a write, such as SetEndOffset and Snapshot at a roll,
// SetHighWatermark and OnLogStartIncremented, keep a plan valid.)
func (s *State) Apply(p *Plan) error {
	if !p.ready || p.s != s || p.gen != s.gen || p.Duplicate {
		return ErrStalePlan
	}
	for i := range p.updates {
		u := &p.updates[i]
		if e := u.cur; e != nil {
			e.merge(&u.upd)
		} else {
			e := new(entry)
			*e = u.upd
			s.producers[u.pid] = e
		}
		if u.clearVerif {
			delete(s.verifications, u.pid)
		}
	}
	for _, t := range p.started {
		s.addOngoing(t)
	}
	for _, c := range p.Completed {
		s.removeOngoing(c.FirstOffset)
		s.addUnreplicated(doneTxn{first: c.FirstOffset, last: c.LastOffset, pid: c.ProducerID})
	}
	if p.next >= 0 {
		s.endOffset = p.next
	}
	p.ready = false
	s.gen++
	return nil
}

// Replay applies one batch read back from the log, unvalidated, as a
// follower's append or a recovery does (Kafka's LogSegment
// updateProducerState). b needs only the 61-byte header, except that a
// control batch must be whole (its marker record is read). It returns the
// transaction a marker completed, with the last stable offset its
// .txnindex entry takes, and ok. EndOffset moves past the batch.
func (s *State) Replay(b record.Batch) (c CompletedTxn, ok bool, err error) {
	p := &s.replay
	p.reset(s)
	if len(b) < record.HeaderSizeToMagic {
		return c, false, parseError(&record.BatchError{Kind: record.ErrTornTail, Position: -1, BaseOffset: -1, Detail: "short batch"})
	}
	if m := int8(b[16]); m < 2 && m >= 0 {
		p.next = int64(binary.BigEndian.Uint64(b)) + 1
	} else {
		if len(b) < record.BatchHeaderSize || b.Magic() != 2 {
			return c, false, parseError(&record.BatchError{Kind: record.ErrBadMagic, Position: -1, BaseOffset: -1, Detail: "not a v2 batch header"})
		}
		if err := s.prepareBatch(p, b, Options{Origin: OriginReplication}); err != nil {
			return c, false, err
		}
	}
	s.finish(p)
	if err := s.Apply(p); err != nil {
		return c, false, err
	}
	if len(p.Completed) > 0 {
		return p.Completed[0], true, nil
	}
	return c, false, nil
}

func (s *State) addOngoing(t txnRef) {
	n := len(s.ongoing)
	if n == 0 || s.ongoing[n-1].first < t.first {
		s.ongoing = append(s.ongoing, t)
		return
	}
	i, found := slices.BinarySearchFunc(s.ongoing, t.first, func(r txnRef, first int64) int { return cmp64(r.first, first) })
	if found {
		s.ongoing[i] = t
		return
	}
	s.ongoing = slices.Insert(s.ongoing, i, t)
}

func (s *State) removeOngoing(first int64) {
	i, found := slices.BinarySearchFunc(s.ongoing, first, func(r txnRef, first int64) int { return cmp64(r.first, first) })
	if found {
		s.ongoing = slices.Delete(s.ongoing, i, i+1)
	}
}

func (s *State) addUnreplicated(d doneTxn) {
	i, found := slices.BinarySearchFunc(s.unreplicated, d.first, func(r doneTxn, first int64) int { return cmp64(r.first, first) })
	if found {
		s.unreplicated[i] = d
		return
	}
	s.unreplicated = slices.Insert(s.unreplicated, i, d)
}

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
