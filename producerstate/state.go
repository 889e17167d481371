package producerstate

import (
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
