package producerstate

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// NumBatchesToRetain is how many of a producer's last batches are kept for
// duplicate detection (Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN).
const NumBatchesToRetain = 5

// LateTransactionBufferMs is what Kafka adds to transaction.max.timeout.ms
// before it calls an open transaction late
// (ProducerStateManager.LATE_TRANSACTION_BUFFER_MS, 5 minutes).
const LateTransactionBufferMs = 5 * 60 * 1000

// Config holds the broker settings the producer state follows, under
// Kafka's names, with Kafka's defaults from DefaultConfig.
type Config struct {
	// ProducerIDExpirationMs is producer.id.expiration.ms: a producer
	// without an open transaction whose last timestamp is this old is
	// removed by RemoveExpiredProducers and dropped by Load. Default
	// 86400000 (1 day); at least 1.
	ProducerIDExpirationMs int64
	// ProducerIDExpirationCheckIntervalMs is
	// producer.id.expiration.check.interval.ms: how often a log with
	// background work removes its expired producers. 0 is Kafka's
	// default, 600000 (10 minutes); otherwise at least 1.
	ProducerIDExpirationCheckIntervalMs int64
	// TransactionMaxTimeoutMs is transaction.max.timeout.ms, the longest
	// transaction a coordinator allows: HasLateTransaction reports an open
	// transaction idle for longer than this plus LateTransactionBufferMs.
	// Default 900000 (15 minutes); at least 1.
	TransactionMaxTimeoutMs int64
	// TransactionVerification is transaction.partition.verification.enable
	// (KIP-890): a transactional batch that would open a transaction must
	// carry the VerificationGuard of a verification the broker started with
	// StartVerification and completed with the coordinator. Default true,
	// as in Kafka; a broker that does not verify sets it false.
	TransactionVerification bool
}

// DefaultExpirationCheckIntervalMs is Kafka's default
// producer.id.expiration.check.interval.ms.
const DefaultExpirationCheckIntervalMs = 600000

// ExpirationCheckIntervalMs is ProducerIDExpirationCheckIntervalMs, or
// its default when 0.
func (c Config) ExpirationCheckIntervalMs() int64 {
	if c.ProducerIDExpirationCheckIntervalMs == 0 {
		return DefaultExpirationCheckIntervalMs
	}
	return c.ProducerIDExpirationCheckIntervalMs
}

// DefaultConfig returns Kafka's defaults.
func DefaultConfig() Config {
	return Config{
		ProducerIDExpirationMs:  86400000,
		TransactionMaxTimeoutMs: 900000,
		TransactionVerification: true,
	}
}

// Validate returns a *backend.ConfigError naming the first bad setting.
func (c Config) Validate() error {
	if c.ProducerIDExpirationMs < 1 || c.ProducerIDExpirationMs > math.MaxInt32 {
		return &backend.ConfigError{Key: "producer.id.expiration.ms", Value: strconv.FormatInt(c.ProducerIDExpirationMs, 10), Reason: "must be in [1, 2147483647]"}
	}
	if c.ProducerIDExpirationCheckIntervalMs < 0 || c.ProducerIDExpirationCheckIntervalMs > math.MaxInt32 {
		return &backend.ConfigError{Key: "producer.id.expiration.check.interval.ms", Value: strconv.FormatInt(c.ProducerIDExpirationCheckIntervalMs, 10), Reason: "must be in [1, 2147483647], or 0 for the default"}
	}
	if c.TransactionMaxTimeoutMs < 1 || c.TransactionMaxTimeoutMs > math.MaxInt32 {
		return &backend.ConfigError{Key: "transaction.max.timeout.ms", Value: strconv.FormatInt(c.TransactionMaxTimeoutMs, 10), Reason: "must be in [1, 2147483647]"}
	}
	return nil
}

// Origin says who is appending, which decides what Prepare checks
// (Kafka's AppendOrigin). The zero value is OriginClient, the strictest.
type Origin uint8

const (
	// OriginClient: a produce request on the leader. Duplicates are
	// detected; sequences, epochs and transaction state are validated;
	// control batches are refused.
	OriginClient Origin = iota
	// OriginCoordinator: the transaction or group coordinator writing
	// through the leader (transaction markers, transactional offset
	// commits). Epochs and coordinator epochs are validated, sequences
	// are not. The only origin whose control batches a leader accepts.
	OriginCoordinator
	// OriginReplication: a follower appending the leader's batches, or the
	// log replaying its own on recovery. Nothing is validated except that
	// a producer with an open transaction writes transactional data
	// (Kafka checks that for every origin).
	OriginReplication
)

func (o Origin) String() string {
	switch o {
	case OriginClient:
		return "client"
	case OriginCoordinator:
		return "coordinator"
	case OriginReplication:
		return "replication"
	}
	return "unknown"
}

// VerificationGuard identifies one transaction verification (Kafka's
// VerificationGuard). NoGuard, the zero value, verifies nothing.
type VerificationGuard uint64

// NoGuard is Kafka's VerificationGuard.SENTINEL.
const NoGuard VerificationGuard = 0

// Options say how Prepare treats an append.
type Options struct {
	Origin Origin
	// VerificationGuard is the guard StartVerification returned for the
	// producer of a transactional produce request, after the coordinator
	// confirmed the partition is in the transaction; NoGuard otherwise.
	VerificationGuard VerificationGuard
}

// BatchMetadata describes one of a producer's retained batches (Kafka's
// BatchMetadata).
type BatchMetadata struct {
	LastSeq     int32
	OffsetDelta int32 // LastOffset - first offset; also last - first sequence
	LastOffset  int64
	Timestamp   int64 // the batch's max timestamp
}

// FirstSeq is the batch's first sequence, with Kafka's wraparound.
func (m BatchMetadata) FirstSeq() int32 { return decrementSequence(m.LastSeq, m.OffsetDelta) }

// FirstOffset is the batch's base offset.
func (m BatchMetadata) FirstOffset() int64 { return m.LastOffset - int64(m.OffsetDelta) }

// CompletedTxn is a transaction a marker closed (Kafka's CompletedTxn),
// with the last stable offset Kafka writes into the .txnindex entry of an
// aborted one: the first offset of the oldest transaction of another
// producer still open once this one completes, else LastOffset+1.
type CompletedTxn struct {
	ProducerID       int64
	FirstOffset      int64
	LastOffset       int64 // the marker's offset
	Aborted          bool
	LastStableOffset int64
}

// AbortedTxn returns the .txnindex entry of c (meaningful when Aborted).
func (c CompletedTxn) AbortedTxn() AbortedTxn {
	return AbortedTxn{ProducerID: c.ProducerID, FirstOffset: c.FirstOffset, LastOffset: c.LastOffset, LastStableOffset: c.LastStableOffset}
}

// OpenTxn is an open transaction: its producer and first offset, and the
// producer's epoch and last timestamp.
type OpenTxn struct {
	ProducerID    int64
	Epoch         int16
	FirstOffset   int64
	LastTimestamp int64
}

// ProducerInfo is a copy of one producer's state (what Kafka's
// DescribeProducers reports, plus the retained batches).
type ProducerInfo struct {
	ProducerID       int64
	Epoch            int16
	CoordinatorEpoch int32
	LastTimestamp    int64
	// CurrentTxnFirstOffset is the first offset of the open transaction,
	// -1 when none.
	CurrentTxnFirstOffset int64
	// Batches are the retained batches, oldest first (at most
	// NumBatchesToRetain; one after a Load).
	Batches []BatchMetadata
}

// LastSequence is the last batch's last sequence, -1 when none.
func (p ProducerInfo) LastSequence() int32 {
	if len(p.Batches) == 0 {
		return record.NoSequence
	}
	return p.Batches[len(p.Batches)-1].LastSeq
}

// LastOffset is the last batch's last offset, -1 when none.
func (p ProducerInfo) LastOffset() int64 {
	if len(p.Batches) == 0 {
		return -1
	}
	return p.Batches[len(p.Batches)-1].LastOffset
}

// entry is one producer's state (Kafka's ProducerStateEntry).
type entry struct {
	epoch         int16
	nb            uint8 // batches in use, oldest first
	coordEpoch    int32
	lastTimestamp int64
	txnFirst      int64 // first offset of the open transaction, -1 none
	batches       [NumBatchesToRetain]BatchMetadata
}

// emptyEntry is Kafka's ProducerStateEntry.empty: what a producer the
// partition has not seen is compared against. Read only.
var emptyEntry = entry{epoch: record.NoProducerEpoch, coordEpoch: -1, lastTimestamp: record.NoTimestamp, txnFirst: -1}

func (e *entry) lastSeq() int32 {
	if e.nb == 0 {
		return record.NoSequence
	}
	return e.batches[e.nb-1].LastSeq
}

// setEpoch is Kafka's maybeUpdateProducerEpoch: a new epoch forgets the
// retained batches.
func (e *entry) setEpoch(epoch int16) {
	if e.epoch != epoch {
		e.nb = 0
		e.epoch = epoch
	}
}

func (e *entry) pushBatch(m BatchMetadata) {
	if int(e.nb) == NumBatchesToRetain {
		copy(e.batches[:], e.batches[1:])
		e.batches[NumBatchesToRetain-1] = m
		return
	}
	e.batches[e.nb] = m
	e.nb++
}

// merge applies an updated entry built by Prepare (Kafka's
// ProducerStateEntry.update(nextEntry)).
func (e *entry) merge(u *entry) {
	e.setEpoch(u.epoch)
	for i := uint8(0); i < u.nb; i++ {
		e.pushBatch(u.batches[i])
	}
	e.coordEpoch = u.coordEpoch
	e.txnFirst = u.txnFirst
	e.lastTimestamp = u.lastTimestamp
}

// findBatch returns the retained batch with exactly this sequence range.
func (e *entry) findBatch(firstSeq, lastSeq int32) (BatchMetadata, bool) {
	for i := uint8(0); i < e.nb; i++ {
		m := &e.batches[i]
		if m.LastSeq == lastSeq && m.FirstSeq() == firstSeq {
			return *m, true
		}
	}
	return BatchMetadata{}, false
}

func (e *entry) info(pid int64) ProducerInfo {
	return ProducerInfo{
		ProducerID: pid, Epoch: e.epoch, CoordinatorEpoch: e.coordEpoch,
		LastTimestamp: e.lastTimestamp, CurrentTxnFirstOffset: e.txnFirst,
		Batches: slices.Clone(e.batches[:e.nb]),
	}
}

// txnRef is an open transaction: its first offset and producer.
type txnRef struct {
	first int64
	pid   int64
}

// doneTxn is a completed transaction whose marker is not yet below the
// high watermark.
type doneTxn struct {
	first, last int64
	pid         int64
}

// verification is Kafka's VerificationStateEntry.
type verification struct {
	timestamp int64
	guard     VerificationGuard
	lowestSeq int32
	epoch     int16
}

// State is the producer state of one partition (Kafka's
// ProducerStateManager without the files): per producer its epoch, last
// five batches, coordinator epoch and open transaction; the open
// transactions by first offset; completed transactions awaiting the high
// watermark; and the offset up to which it describes the log.
//
// A State is not safe for concurrent use, read-only methods included: the
// log calls it under its writer lock and publishes what readers need (the
// last stable offset) itself.
type State struct {
	cfg       Config
	producers map[int64]*entry
	// ongoing are the open transactions sorted by first offset (Kafka's
	// ongoingTxns).
	ongoing []txnRef
	// unreplicated are completed transactions whose markers are at or
	// above the high watermark, sorted by first offset (Kafka's
	// unreplicatedTxns).
	unreplicated  []doneTxn
	verifications map[int64]*verification
	lastGuard     VerificationGuard
	endOffset     int64
	// gen counts changes; a Plan applies only to the generation it was
	// prepared on.
	gen uint64

	it     record.Iterator // scratch for reading markers
	replay Plan            // scratch for Replay
	pids   []int64         // scratch for Snapshot
}

// New returns an empty State that describes the log up to offset 0 (call
// Reset or Load to start elsewhere).
func New(cfg Config) (*State, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &State{
		cfg:           cfg,
		producers:     make(map[int64]*entry),
		verifications: make(map[int64]*verification),
	}, nil
}

// Config returns the current settings.
func (s *State) Config() Config { return s.cfg }

// SetConfig changes the settings (Kafka's are dynamic broker configs).
func (s *State) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s.cfg = cfg
	s.gen++
	return nil
}

// EndOffset is the offset up to which the state describes the log
// (Kafka's mapEndOffset): the snapshot offset.
func (s *State) EndOffset() int64 { return s.endOffset }

// SetEndOffset moves EndOffset without other change (Kafka's
// updateMapEndOffset): at a roll, to the new segment's base offset before a
// snapshot; at the end of a recovery, to the recovered log end.
func (s *State) SetEndOffset(offset int64) { s.endOffset = offset }

// Len is the number of producers.
func (s *State) Len() int { return len(s.producers) }

// Producer returns a copy of one producer's state.
func (s *State) Producer(pid int64) (ProducerInfo, bool) {
	e, ok := s.producers[pid]
	if !ok {
		return ProducerInfo{}, false
	}
	return e.info(pid), true
}

// Producers returns a copy of every producer's state, by producer id.
func (s *State) Producers() []ProducerInfo {
	out := make([]ProducerInfo, 0, len(s.producers))
	for pid, e := range s.producers {
		out = append(out, e.info(pid))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ProducerID < out[j].ProducerID })
	return out
}

// HasOngoingTransaction reports whether pid has an open transaction.
func (s *State) HasOngoingTransaction(pid int64) bool {
	e, ok := s.producers[pid]
	return ok && e.txnFirst >= 0
}

// Reset forgets every producer and transaction and describes the log up
// to offset (Kafka's truncateFullyAndStartAt, without the files).
// Verifications in flight are kept, as Kafka keeps them.
func (s *State) Reset(offset int64) {
	clear(s.producers)
	s.ongoing = s.ongoing[:0]
	s.unreplicated = s.unreplicated[:0]
	s.endOffset = offset
	s.gen++
}

// ---- appends ----

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

// ---- transaction verification (KIP-890) ----

// StartVerification is Kafka's UnifiedLog.maybeStartTransactionVerification:
// before a transactional produce request whose producer has no open
// transaction here, the broker gets a guard, asks the coordinator whether
// the partition is in the producer's transaction, and on a yes passes the
// guard in Options.VerificationGuard. It returns NoGuard when the producer
// already has an open transaction (no verification needed). Calling it
// again for the producer returns the same guard, lowering the recorded
// lowest sequence (or taking a higher epoch's); Prepare refuses sequences
// above it. A transactional batch or marker of the producer drops the
// guard; RemoveExpiredProducers drops guards older than
// producer.id.expiration.ms.
func (s *State) StartVerification(pid int64, seq int32, epoch int16, now int64) VerificationGuard {
	if s.HasOngoingTransaction(pid) {
		return NoGuard
	}
	s.gen++
	v := s.verifications[pid]
	if v == nil {
		s.lastGuard++
		v = &verification{timestamp: now, guard: s.lastGuard, lowestSeq: seq, epoch: epoch}
		s.verifications[pid] = v
		return v.guard
	}
	if epoch == v.epoch && seq < v.lowestSeq {
		v.lowestSeq = seq
	}
	if epoch > v.epoch {
		v.epoch, v.lowestSeq = epoch, seq
	}
	return v.guard
}

// VerificationGuard returns the producer's current guard, NoGuard if none.
func (s *State) VerificationGuard(pid int64) VerificationGuard {
	if v := s.verifications[pid]; v != nil {
		return v.guard
	}
	return NoGuard
}

// ---- the last stable offset ----

// SetHighWatermark tells the state the partition's high watermark moved
// (Kafka's onHighWatermarkUpdated): completed transactions whose markers
// are now below it stop holding the first unstable offset back.
func (s *State) SetHighWatermark(hw int64) {
	s.unreplicated = slices.DeleteFunc(s.unreplicated, func(d doneTxn) bool { return d.last < hw })
}

// FirstUndecidedOffset is the first offset of the oldest open transaction.
func (s *State) FirstUndecidedOffset() (int64, bool) {
	if len(s.ongoing) == 0 {
		return 0, false
	}
	return s.ongoing[0].first, true
}

// FirstUnstableOffset is Kafka's: the first offset of the oldest
// transaction that is open, or completed with its marker not yet below
// the high watermark; false when there is none.
func (s *State) FirstUnstableOffset() (int64, bool) {
	first, ok := s.FirstUndecidedOffset()
	if len(s.unreplicated) > 0 && (!ok || s.unreplicated[0].first < first) {
		return s.unreplicated[0].first, true
	}
	return first, ok
}

// LastStableOffset is the partition's last stable offset as Kafka's
// UnifiedLog computes it: the first unstable offset (raised to the log
// start offset) when it is below the high watermark, else the high
// watermark. read_committed fetches stop there.
func (s *State) LastStableOffset(highWatermark, logStartOffset int64) int64 {
	if fuo, ok := s.FirstUnstableOffset(); ok {
		fuo = max(fuo, logStartOffset)
		if fuo < highWatermark {
			return fuo
		}
	}
	return highWatermark
}

// OpenTransactions returns the open transactions by first offset.
func (s *State) OpenTransactions() []OpenTxn {
	out := make([]OpenTxn, 0, len(s.ongoing))
	for _, t := range s.ongoing {
		out = append(out, s.openTxn(t))
	}
	return out
}

func (s *State) openTxn(t txnRef) OpenTxn {
	o := OpenTxn{ProducerID: t.pid, FirstOffset: t.first, Epoch: record.NoProducerEpoch, LastTimestamp: record.NoTimestamp}
	if e := s.producers[t.pid]; e != nil {
		o.Epoch, o.LastTimestamp = e.epoch, e.lastTimestamp
	}
	return o
}

// HungTransactions lists the open transactions whose producer has written
// nothing for longer than timeoutMs at time now (ms), by first offset:
// what Kafka's tooling calls hanging transactions, judged as Kafka does by
// the producer's last timestamp. The state never aborts them; an operator
// or the coordinator does. Kafka's own threshold is
// TransactionMaxTimeoutMs + LateTransactionBufferMs.
func (s *State) HungTransactions(now, timeoutMs int64) []OpenTxn {
	var out []OpenTxn
	for _, t := range s.ongoing {
		if o := s.openTxn(t); now-o.LastTimestamp > timeoutMs {
			out = append(out, o)
		}
	}
	return out
}

// HasLateTransaction is Kafka's ProducerStateManager.hasLateTransaction:
// the oldest open transaction's producer last wrote more than
// TransactionMaxTimeoutMs + LateTransactionBufferMs before now.
func (s *State) HasLateTransaction(now int64) bool {
	if len(s.ongoing) == 0 {
		return false
	}
	ts := s.openTxn(s.ongoing[0]).LastTimestamp
	return ts > 0 && now-ts > s.cfg.TransactionMaxTimeoutMs+LateTransactionBufferMs
}

// ---- retention and expiry ----

// OnLogStartIncremented is Kafka's onLogStartOffsetIncremented: completed
// transactions whose markers fall below the new log start offset are
// forgotten, and EndOffset is raised to it if below. Producers are kept
// (since KIP-360 Kafka retains a producer's state after its records are
// deleted, until it expires) and so are open transactions (the log raises
// the first unstable offset to the log start; see LastStableOffset).
func (s *State) OnLogStartIncremented(logStartOffset int64) {
	s.unreplicated = slices.DeleteFunc(s.unreplicated, func(d doneTxn) bool { return d.last < logStartOffset })
	if s.endOffset < logStartOffset {
		s.endOffset = logStartOffset
	}
}

func (s *State) expired(e *entry, now int64) bool {
	return e.txnFirst < 0 && now-e.lastTimestamp >= s.cfg.ProducerIDExpirationMs
}

// RemoveExpiredProducers is Kafka's removeExpiredProducers: it removes the
// producers without an open transaction whose last timestamp is at least
// producer.id.expiration.ms before now (ms), and verification guards that
// old, and returns how many producers it removed.
func (s *State) RemoveExpiredProducers(now int64) int {
	n := 0
	for pid, e := range s.producers {
		if s.expired(e, now) {
			delete(s.producers, pid)
			n++
		}
	}
	for pid, v := range s.verifications {
		if now-v.timestamp >= s.cfg.ProducerIDExpirationMs {
			delete(s.verifications, pid)
		}
	}
	s.gen++
	return n
}

// ---- snapshots ----

// Snapshot appends the .snapshot encoding of the state to dst, producers
// by id, and returns it with the offset it describes (EndOffset), which
// names the file. As in Kafka, each producer's entry keeps only its last
// batch, with the producer's last timestamp as that batch's timestamp.
func (s *State) Snapshot(dst []byte) (data []byte, offset int64) {
	s.pids = s.pids[:0]
	for pid := range s.producers {
		s.pids = append(s.pids, pid)
	}
	slices.Sort(s.pids)
	start := len(dst)
	dst = slices.Grow(dst, SnapshotHeaderSize+len(s.pids)*SnapshotEntrySize)
	dst = appendSnapshotHeader(dst, len(s.pids))
	for _, pid := range s.pids {
		e := s.producers[pid]
		se := SnapshotEntry{
			ProducerID: pid, Epoch: e.epoch,
			LastSequence: record.NoSequence, LastOffset: -1, OffsetDelta: 0,
			Timestamp: e.lastTimestamp, CoordinatorEpoch: e.coordEpoch,
			CurrentTxnFirstOffset: e.txnFirst,
		}
		if e.nb > 0 {
			last := &e.batches[e.nb-1]
			se.LastSequence, se.LastOffset, se.OffsetDelta = last.LastSeq, last.LastOffset, last.OffsetDelta
		}
		dst = appendSnapshotEntry(dst, &se)
	}
	finishSnapshot(dst[start:])
	return dst, s.endOffset
}

// Load replaces the state with the snapshot data describing the log up to
// offset, as Kafka loads one: producers expired at now (ms) are dropped;
// each kept producer's last batch (when LastOffset >= 0) is the only one
// retained, so only a retry of that batch is found as a duplicate until
// more are appended; open transactions are rebuilt from
// CurrentTxnFirstOffset (>= 0); completed transactions awaiting the high
// watermark are forgotten (Kafka assumes offset <= the high watermark).
// On error (ErrCorruptSnapshot) the state is unchanged.
func (s *State) Load(data []byte, offset, now int64) error {
	n, err := checkSnapshot(data)
	if err != nil {
		return err
	}
	slab := make([]entry, n)
	producers := make(map[int64]*entry, n)
	s.ongoing = s.ongoing[:0]
	for i := 0; i < n; i++ {
		se := snapshotEntryAt(data, i)
		e := &slab[i]
		*e = entry{
			epoch: se.Epoch, coordEpoch: se.CoordinatorEpoch,
			lastTimestamp: se.Timestamp, txnFirst: -1,
		}
		if se.CurrentTxnFirstOffset >= 0 {
			e.txnFirst = se.CurrentTxnFirstOffset
		}
		if s.expired(e, now) {
			continue
		}
		if se.LastOffset >= 0 {
			e.batches[0] = BatchMetadata{LastSeq: se.LastSequence, OffsetDelta: se.OffsetDelta, LastOffset: se.LastOffset, Timestamp: se.Timestamp}
			e.nb = 1
		}
		producers[se.ProducerID] = e
	}
	for pid, e := range producers {
		if e.txnFirst >= 0 {
			s.ongoing = append(s.ongoing, txnRef{first: e.txnFirst, pid: pid})
		}
	}
	slices.SortFunc(s.ongoing, func(a, b txnRef) int { return cmp64(a.first, b.first) })
	s.producers = producers
	s.unreplicated = s.unreplicated[:0]
	s.endOffset = offset
	s.gen++
	return nil
}

// ---- sequences ----

// inSequence is Kafka's ProducerAppendInfo.inSequence: next follows last,
// wrapping from MaxInt32 to 0.
func inSequence(last, next int32) bool {
	return int64(next) == int64(last)+1 || (next == 0 && last == math.MaxInt32)
}

// decrementSequence is Kafka's DefaultRecordBatch.decrementSequence.
func decrementSequence(seq, dec int32) int32 {
	if seq < dec {
		return math.MaxInt32 - (dec - seq) + 1
	}
	return seq - dec
}
