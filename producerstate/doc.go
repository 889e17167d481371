// Package producerstate keeps a partition's idempotent and transactional
// producer state as Kafka's log layer does (ProducerStateManager,
// ProducerAppendInfo, ProducerStateEntry, TransactionIndex), and owns the
// two files Kafka keeps it in: the producer snapshot (.snapshot) and the
// transaction index (.txnindex). It does no I/O: the log reads and writes
// the files through its own file seam and hands this package the bytes.
//
// # .snapshot (frozen: Kafka's ProducerSnapshot v1)
//
// Big-endian. Named SnapshotFileName(offset): 20 digits, ".snapshot",
// where offset is the log end offset the snapshot describes.
//
//	off  size  field
//	  0     2  version           int16  (1)
//	  2     4  crc               uint32 (CRC-32C of bytes 6..end)
//	  6     4  count             int32
//	 10  46×n  entries:
//	              +0  8  producerId            int64
//	              +8  2  epoch                 int16
//	             +10  4  lastSequence          int32  (-1: no batch)
//	             +14  8  lastOffset            int64  (-1: no batch)
//	             +22  4  offsetDelta           int32  (lastOffset - first offset of that batch)
//	             +26  8  timestamp             int64  (the producer's last timestamp)
//	             +34  4  coordinatorEpoch      int32
//	             +38  8  currentTxnFirstOffset int64  (-1: no open transaction)
//
// An empty snapshot is 10 bytes: 0001 48674bc7 00000000. Only each
// producer's LAST batch is in the file, so after a load only a retry of
// that batch is found as a duplicate; a retry of an older one of the last
// five is refused as out of order. This is Kafka's behavior, mirrored.
//
// # .txnindex (frozen: Kafka's AbortedTxn)
//
// One file per segment, created when its first entry is appended; entries
// are the aborted transactions whose ABORT markers are in the segment, in
// marker order. Big-endian, 34 bytes each:
//
//	off size field
//	  0    2 version          int16 (0)
//	  2    8 producerId       int64
//	 10    8 firstOffset      int64 (the transaction's first offset)
//	 18    8 lastOffset       int64 (the ABORT marker's offset)
//	 26    8 lastStableOffset int64 (the partition's LSO once the marker was in)
//
// # The state machine
//
// Per producer id: its epoch, the metadata of its last five batches (last
// sequence, last offset, offset delta, max timestamp), the coordinator
// epoch of its last marker, the first offset of its open transaction, its
// last timestamp. An append is checked batch by batch as Kafka's leader
// checks a produce request (OriginClient):
//
//   - a batch whose epoch, first and last sequence repeat one of the last
//     five is a duplicate: the append writes nothing and answers with the
//     original batch's offsets;
//   - an older epoch is backend.ErrInvalidProducerEpoch;
//   - with the same epoch, the first sequence must follow the last one
//     (MaxInt32 wraps to 0), else backend.ErrOutOfOrderSequence; a newer
//     epoch must start at 0; a producer without an epoch here (new, or
//     only its state was lost) may start anywhere;
//   - a transactional batch opens a transaction; a non-transactional one
//     while it is open is backend.ErrInvalidTxnState, and so (with
//     transaction verification on, Kafka's default) is a transactional
//     batch opening one without the broker's VerificationGuard;
//   - control batches are refused from clients (backend.ErrInvalidRecord);
//     from the coordinator a COMMIT or ABORT marker must not carry an older
//     producer epoch nor an older coordinator epoch
//     (backend.ErrTransactionCoordinatorFenced), and it closes the open
//     transaction into a CompletedTxn.
//
// Follower appends (OriginReplication) update the state unvalidated.
//
// # How a log uses it (the integration contract)
//
// One State per partition, called under the log's writer lock only.
//
// Append (leader and follower alike):
//
//  1. Validate the batches and, as leader, assign offsets, stamp the
//     leader epoch and LogAppendTime, exactly as they will be written.
//  2. s.Prepare(&plan, batches, Options{Origin, VerificationGuard}). On an
//     error write nothing and return it. If plan.Duplicate, write
//     nothing, do not advance the log end, and answer with
//     plan.Original.FirstOffset(), plan.Original.LastOffset and
//     plan.Original.Timestamp (the LogAppendTime of a LogAppendTime
//     topic).
//  3. Roll if needed, write the bytes; on failure do not call Apply.
//  4. s.Apply(&plan). Then, for each c in plan.Completed with c.Aborted,
//     append c.AbortedTxn() to the .txnindex of the segment the bytes went
//     to (TxnIndex.Append gives the 34 bytes). If writing the .txnindex
//     fails the log must stop and recover the segment, as Kafka does.
//  5. Publish the new LastStableOffset(highWatermark, logStart).
//
// Between Prepare and Apply the log may roll (SetEndOffset, Snapshot) and
// move its offsets (SetHighWatermark, OnLogStartIncremented); anything that
// changes producers (another Apply, Replay, Load, Reset, SetConfig,
// StartVerification, RemoveExpiredProducers) makes Apply return
// ErrStalePlan, changing nothing.
//
// Offsets: call SetHighWatermark whenever the high watermark moves,
// OnLogStartIncremented whenever the log start offset rises, and read
// LastStableOffset(hw, logStart) for read_committed fetches, which stop
// there and carry the aborted transactions CollectAbortedTxns (or
// TxnIndex.Collect) finds in the .txnindex of each segment from the one
// holding the fetch offset, with upperBoundOffset the first offset after
// the fetched bytes, until one reports complete.
//
// Snapshots: at a roll, SetEndOffset(newSegmentBase) then write
// Snapshot(nil) to SnapshotFileName(offset) (Kafka fsyncs it
// asynchronously after the roll); at Close, Snapshot at the log end. Skip a
// snapshot whose offset already has one. Delete a segment's snapshot with
// the segment (retention), and snapshots above a truncation point.
//
// Recovery and truncation (Kafka's truncateAndReload + rebuildProducerState):
// delete snapshots above the new log end and at or below the partition's
// log start (a tiered partition's lies below its local log: a log that
// knows only its local log start deletes those below it and keeps the
// one at it, the only record of transactions open across it); unless
// EndOffset() already equals the new log end, Load the newest remaining
// snapshot at or below it (on ErrCorruptSnapshot delete it and
// try the next older; with none, Reset(logStart)), then Replay every batch
// from EndOffset() to the log end (a header-only scan; control batches
// read whole; a segment being recovered past the recovery point gets its
// .txnindex rebuilt from the aborted transactions Replay returns, as
// Kafka's LogSegment.recover does), and finally SetEndOffset(logEnd),
// take a snapshot and SetHighWatermark with the recovered high watermark
// (completed transactions replayed wait for it). A full truncation is
// Reset(newOffset).
//
// Expiry: call RemoveExpiredProducers(now) periodically (Kafka: every
// producer.id.expiration.check.interval.ms, 10 minutes). Open
// transactions are never aborted here; HungTransactions and
// HasLateTransaction report them.
//
// Verification (KIP-890): for a transactional produce request whose
// producer has no open transaction, the broker calls StartVerification,
// asks the coordinator, and passes the guard in Options; a broker that
// does not verify sets Config.TransactionVerification false.
package producerstate
