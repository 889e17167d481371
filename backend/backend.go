// Package backend is the contract between a Kafka-style broker and tierlog.
//
// A broker owns replication, leadership and the high watermark; a backend
// owns the bytes of each partition, on disk and (for tiered backends) in a
// bucket. Everything a broker calls is on Partition and Backend; Config
// parses Kafka's topic configuration; errors are the sentinels in errors.go.
//
// Offsets, as Kafka names them:
//
//	LogStart       first offset a consumer may read (DeleteRecordsBefore and
//	               retention raise it)
//	LocalLogStart  first offset held on local disk (above LogStart when old
//	               segments live only in a bucket)
//	LastStableOffset  first offset of the oldest transaction still open
//	               (read_committed reads stop there); the high watermark
//	               when none is
//	HighWatermark  first offset not yet replicated to every in-sync replica;
//	               set by the broker, never above LogEnd
//	LogEnd         offset the next appended record gets
//	TieredEnd      offset after the last one the bucket holds under its
//	               committed manifest: every offset from LogStart up to it
//	               is readable from the bucket (-1 for a partition without
//	               a bucket; see Offsets.TieredEnd)
//
// A broker (or an embedder) waiting for data to reach the bucket selects
// on Changed and reads Offsets().TieredEnd, as WaitTieredEnd does. Only
// closed segments upload, wholly below the last stable offset. A segment
// closes at an append that would take it past segment.bytes, or whose
// records are segment.ms (less segment.jitter.ms) newer than its first
// (Kafka's time roll), when its indexes fill, or by the idle roll: a
// Backend's background work closes a segment that has held data for
// segment.ms without an append closing it (Kafka rolls by time only at an
// append). Until then its records are on local disk only.
package backend

import (
	"context"
	"fmt"
	"io"
)

// Partition is one partition's log.
//
// Concurrency: every method MAY be called from any goroutine. The writers
// (Append, TruncateTo, SetHighWatermark, DeleteRecordsBefore, Flush,
// SetConfig) are serialized by the partition; a broker calls them from one
// goroutine per partition (its request handling) while the partition's own
// background work (a tiered partition's uploads and retention, the log
// cleaner, time-based rolls and flushes) runs beside them. The readers
// (Read, OffsetForTimestamp, EndOffsetForEpoch, Offsets, Changed) never
// wait for a writer's I/O. A Partition MUST keep every Records a reader
// holds readable until that Records is closed, whatever retention,
// truncation or compaction does meanwhile.
type Partition interface {
	// Append validates batches (one or more record batch v2, back to back)
	// and appends them. Every batch MUST be validated (size, magic, CRC-32C,
	// offsets) before any byte is written; on any error nothing is appended
	// and the log is exactly as it was.
	//
	// With AssignOffsets (leader), base offsets are rewritten from LogEnd
	// and the leader epoch is stamped; otherwise (follower) the batches
	// keep their offsets, which MUST NOT start below LogEnd and MUST
	// increase from batch to batch; they MAY start above LogEnd or leave
	// gaps between batches (a leader's log has gaps after compaction, and
	// Kafka's followers accept them). Append returns when the bytes are in
	// the operating system; they are durable after Flush (or per the
	// flush.messages / flush.ms policy).
	Append(ctx context.Context, batches []byte, opts AppendOptions) (AppendInfo, error)

	// Read returns whole batches starting with the batch that contains
	// offset, up to opts.MaxBytes (and at least one batch when
	// opts.MinOneBatch). An offset below LogStart or above LogEnd is an
	// *OffsetOutOfRangeError; offset == LogEnd returns empty Records. The
	// caller MUST Close the Records.
	Read(ctx context.Context, offset int64, opts ReadOptions) (Records, error)

	// OffsetForTimestamp answers ListOffsets: the first offset whose record
	// timestamp is >= ts and that record's timestamp; found is false when
	// no record has such a timestamp. The special times are Kafka's:
	// LatestTimestamp (-1: the high watermark; read_committed brokers use
	// Offsets().LastStableOffset), EarliestTimestamp (-2: LogStart),
	// MaxTimestamp (-3: the record with the largest timestamp, the first
	// such), EarliestLocalTimestamp (-4: LocalLogStart) and
	// LatestTieredTimestamp (-5: the last offset in the bucket; found is
	// false when nothing is). For the times other than -3 the timestamp
	// returned is -1.
	OffsetForTimestamp(ctx context.Context, ts int64) (offset, timestamp int64, found bool, err error)

	// EndOffsetForEpoch answers OffsetsForLeaderEpoch over every offset the
	// partition holds (a tiered partition's bucket included): the largest
	// epoch <= epoch that has records, and the first offset of the epoch
	// after it (LogEnd for the latest). found is false when epoch is below
	// every epoch known (Kafka answers UNDEFINED_EPOCH_OFFSET).
	EndOffsetForEpoch(ctx context.Context, epoch int32) (foundEpoch int32, endOffset int64, found bool, err error)

	// Changed returns a channel that is closed the next time LogEnd,
	// HighWatermark, LastStableOffset or TieredEnd moves, or the partition
	// closes. A broker's long-poll Fetch selects on it, then reads Offsets
	// (and asks Changed again). It MUST NOT block and MAY be called from
	// any goroutine.
	Changed() <-chan struct{}

	// SetConfig applies a topic config change to the open partition (Kafka
	// applies a topic's new config to its open log): retention and flush
	// settings from the next pass, segment sizes from the next segment.
	SetConfig(cfg Config) error

	// BecomeLeader tells the partition this broker leads it from epoch on
	// (Kafka's LeaderAndIsr, or a KRaft partition change), before the
	// first append of the epoch. The epoch's start is recorded at LogEnd,
	// so EndOffsetForEpoch answers for it at once; a tiered partition
	// takes over the bucket: it fences the previous leader's writes and
	// starts uploading and applying remote retention. An epoch older than
	// one already seen is an error matching ErrFenced.
	BecomeLeader(ctx context.Context, epoch int32) error

	// BecomeFollower tells the partition this broker follows it from
	// epoch on: a tiered partition stops uploading and applying remote
	// retention (the leader's work) and follows the bucket's manifest for
	// its log start and local retention.
	BecomeFollower(ctx context.Context, epoch int32) error

	// Offsets returns the partition's offsets; see the package doc.
	Offsets() Offsets

	// SetHighWatermark records the broker's high watermark; values above
	// LogEnd are clamped to LogEnd. Retention never deletes at or above it.
	SetHighWatermark(hw int64) error

	// TruncateTo removes every record at or above offset (a follower whose
	// log diverged from the leader's). Offsets above LogEnd are a no-op.
	TruncateTo(offset int64) error

	// DeleteRecordsBefore raises LogStart to offset (Kafka's DeleteRecords)
	// and lets retention remove the segments wholly below it. offset MUST
	// be <= HighWatermark.
	DeleteRecordsBefore(ctx context.Context, offset int64) error

	// Flush makes every appended byte durable and advances the recovery
	// point to LogEnd.
	Flush() error

	// Close flushes, writes what a clean reopen needs and releases files.
	// Calls after Close return ErrClosed.
	Close() error
}

// Tiered is implemented by partitions that keep old segments in a bucket
// (KIP-405).
type Tiered interface {
	Partition
	// BuildFromBucket is a follower's answer to an
	// *OffsetMovedToTieredStorageError from its leader (Kafka's
	// buildRemoteLogAuxState): its log end is below leaderLocalLogStart,
	// the first offset the leader holds locally, so it cannot fetch from
	// there. It empties its log and starts it where the bucket's segment
	// holding leaderLocalLogStart-1 ends, with the producer state and
	// leader epochs the bucket keeps for that point, and returns that
	// offset: the follower fetches from the leader from there.
	BuildFromBucket(ctx context.Context, leaderLocalLogStart int64) (next int64, err error)
	// ReadWaits reports whether a Read of offset now would be served by a
	// tier that waits on the network (the bucket), so that a broker can
	// run such reads of one Fetch side by side (Kafka's RemoteLogReader
	// pool) without knowing the tiers. It is a hint from the partition's
	// current offsets: the Read itself decides again, from its own view.
	ReadWaits(offset int64) bool
}

// The special times of OffsetForTimestamp (Kafka's ListOffsets).
const (
	LatestTimestamp        int64 = -1
	EarliestTimestamp      int64 = -2
	MaxTimestamp           int64 = -3
	EarliestLocalTimestamp int64 = -4
	LatestTieredTimestamp  int64 = -5
)

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

// Backend holds many partitions (a broker's log directory).
type Backend interface {
	// Partitions lists the partitions present (opened or not), in topic
	// then partition order: what a broker opens at startup.
	Partitions(ctx context.Context) ([]TopicPartition, error)
	// Open returns the partition, creating it when absent. Opening an open
	// partition returns the same Partition, with cfg applied to it (a
	// topic config change applies to the open log, as in Kafka). Names
	// MUST be Kafka-legal topics and partitions >= 0, else ErrInvalidName.
	Open(ctx context.Context, topic string, partition int32, cfg Config) (Partition, error)
	// Delete closes the partition and removes its data.
	Delete(ctx context.Context, topic string, partition int32) error
	// Close closes every partition and writes the log directory's
	// checkpoints and clean-shutdown marker.
	Close() error
}

// AppendOptions say how Append treats the batches.
type AppendOptions struct {
	// AssignOffsets is the leader's append: base offsets are rewritten
	// from LogEnd, the leader epoch is stamped, and LogAppendTime topics get
	// their timestamps set. The batches' producer state is checked as
	// Kafka's leader checks a produce request (duplicates, sequences,
	// epochs, transactions).
	AssignOffsets bool
	// LeaderEpoch is stamped into each batch when AssignOffsets is set.
	// It MUST be the epoch the partition leads at (its latest
	// BecomeLeader), or 0 for that epoch; any other epoch, or a leader
	// append to a partition told it follows, is ErrWrongLeaderEpoch and
	// nothing is appended (see EpochAt).
	LeaderEpoch int32
	// Coordinator says the batches come from the broker itself, not a
	// client: transaction markers (COMMIT or ABORT control batches, Kafka's
	// WriteTxnMarkers) and a coordinator's own records (offsets committed
	// in a transaction, say). Only such an append may hold control
	// batches (a client's is ErrInvalidRecord); its batches get the header
	// and CRC checks and the producer-state checks, not the client's
	// record validation.
	Coordinator bool
}

// EpochAt is the leader epoch a leader append stamps when the partition
// leads at leading: LeaderEpoch when it is leading, leading when it is 0.
// Any other LeaderEpoch is ErrWrongLeaderEpoch. Every backend applies this
// one rule.
func (o AppendOptions) EpochAt(leading int32) (int32, error) {
	if o.LeaderEpoch == leading || o.LeaderEpoch == 0 {
		return leading, nil
	}
	return -1, fmt.Errorf("%w: an append at leader epoch %d to a partition that leads at %d", ErrWrongLeaderEpoch, o.LeaderEpoch, leading)
}

// AppendInfo describes what Append wrote.
type AppendInfo struct {
	FirstOffset  int64
	LastOffset   int64
	MaxTimestamp int64
	// LogAppendTime is the broker time written into LogAppendTime batches,
	// or -1.
	LogAppendTime int64
	Batches       int
	Records       int
	Bytes         int
	// Duplicate says the batch repeated one of its idempotent producer's
	// last five batches (a retry): nothing was written, and FirstOffset,
	// LastOffset and LogAppendTime are the original batch's, the answer
	// Kafka gives the producer.
	Duplicate bool
}

// Isolation says how far a Read may go (Kafka's FetchIsolation).
type Isolation int8

const (
	// ReadLogEnd reads to the log end: a follower replicating.
	ReadLogEnd Isolation = iota
	// ReadHighWatermark reads to the high watermark: a consumer with
	// isolation.level=read_uncommitted.
	ReadHighWatermark
	// ReadCommitted reads to the last stable offset, and the Records
	// report the aborted transactions they overlap (AbortedTransactions):
	// a consumer with isolation.level=read_committed.
	ReadCommitted
)

// ReadOptions bound a Read.
type ReadOptions struct {
	// MaxBytes caps the bytes returned; 0 means 1 MiB. The cap counts whole
	// batches: a batch that does not fit ends the read.
	MaxBytes int
	// MinOneBatch returns the first batch even when it is larger than
	// MaxBytes (Kafka's fetch semantics when it is the first partition).
	MinOneBatch bool
	// Replica says a follower is fetching: an offset the partition holds
	// only in its bucket is an *OffsetMovedToTieredStorageError (Kafka's
	// OFFSET_MOVED_TO_TIERED_STORAGE), and the follower builds that part
	// of its state from the bucket instead.
	Replica bool
	// Isolation bounds the read (the zero value: the log end). A read
	// stops before the batch that holds the bound, as Kafka's does; an
	// offset at or past the bound (and at or below LogEnd) returns empty
	// Records.
	Isolation Isolation
}

// Records are batches returned by Read. WriteTo writes them (local backends
// use sendfile to sockets and files: zero copy); Len is their size in
// bytes. A Records MUST be closed; until then the bytes stay readable.
type Records interface {
	io.WriterTo
	Len() int64
	Close() error
}

// Viewer is implemented by Records that can lend their bytes in place, for
// a process that reads the records itself rather than sending them: a
// local sealed segment's bytes come straight from its read-only mapping,
// without the copy WriteTo into a buffer makes.
type Viewer interface {
	// View calls fn with the Records' bytes: whole batches, the bytes
	// WriteTo writes. p is valid only until fn returns and MUST NOT be
	// modified or kept (it may be a read-only mapping of the file, unmapped
	// after Close). View returns fn's error, or the error reading the bytes
	// (a file cut short under a mapping is an ErrCorruptRecord, never a
	// crash).
	View(fn func(p []byte) error) error
}

// OffsetRange is implemented by Records that know which offsets they hold,
// so a broker can advance a fetch position without parsing the bytes.
type OffsetRange interface {
	// NextOffset is one past the last offset of the last batch returned;
	// for empty Records it is the offset that was asked for.
	NextOffset() int64
}

// AbortedTxn is an aborted transaction: its producer and first offset, as
// a Fetch response's AbortedTransaction carries it.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
}

// Aborted is implemented by the Records of every ReadCommitted Read.
type Aborted interface {
	// AbortedTransactions lists the aborted transactions whose records
	// the Records may hold (those that began before the Records' end and
	// were aborted at or after the offset read), by first offset: what a
	// read_committed consumer skips. Empty when there are none.
	AbortedTransactions() []AbortedTxn
}

// Offsets are a partition's offsets; see the package doc.
type Offsets struct {
	LogStart      int64
	LocalLogStart int64
	HighWatermark int64
	// LastStableOffset is the first offset of the oldest transaction not
	// yet decided (or decided with its marker not yet below the high
	// watermark), else the high watermark: where read_committed stops.
	LastStableOffset int64
	LogEnd           int64
	// TieredEnd is the offset after the last one held in the bucket under
	// the committed manifest: the segments below it are uploaded and
	// their commit landed, so local retention may delete them and a
	// broker restarted on an empty disk finds them. With no segment in
	// the bucket (nothing uploaded yet, or remote retention removed them
	// all) it is LogStart. It never moves backwards: uploads raise it,
	// TruncateTo cannot cut below it, DeleteRecordsBefore and retention
	// leave it or raise it to LogStart; it lies below LogStart while a
	// DeleteRecordsBefore past it awaits remote retention. (A partition
	// deleted and created anew under its name is a new partition: its
	// tiered end starts at its own log start.) A partition
	// opened without its bucket (OpenWithoutBucket) knows it once it has
	// read the manifest. Changed fires when it moves. A partition without
	// a bucket (a local log; a topic without remote.storage.enable)
	// reports -1: nothing it holds ever reaches a bucket.
	TieredEnd int64
}
