// Package local keeps partitions on local disk in Apache Kafka's log
// directory layout, byte for byte: a broker's log directory holds one
// directory per partition plus Kafka's checkpoint files, and tierlog and
// Kafka can each open what the other wrote.
//
// # Files
//
//	<logdir>/
//	  .lock                                  held while a Backend has the directory
//	  .kafka_cleanshutdown                   written by a clean Close, removed at open
//	  recovery-point-offset-checkpoint       "topic partition offset" lines (Kafka's format)
//	  log-start-offset-checkpoint
//	  replication-offset-checkpoint          high watermarks
//	  cleaner-offset-checkpoint              the log cleaner's first dirty offsets
//	  <topic>-<partition>/
//	    00000000000000000000.log             batches (record batch v2, or legacy v0/v1)
//	    00000000000000000000.index           sparse offset index (package index)
//	    00000000000000000000.timeindex       sparse time index
//	    00000000000000000000.txnindex        aborted transactions (only when one exists)
//	    leader-epoch-checkpoint              epoch -> first offset (epochs.go)
//	    partition.metadata                   the topic id
//
// A segment is named by its base offset in 20 digits. Temporary suffixes
// follow the segment suffix: .deleted (removed after file.delete.delay.ms,
// and at open), .cleaned (a cleaner's or a truncation's file being
// written; removed at open), .swap (a finished replacement not yet in
// place; completed at open). Checkpoints are replaced durably: write
// name.tmp, fsync, rename, fsync the directory.
//
// # The files of the package
//
//	log.go       Log: options, offsets, close
//	retire.go    retiring segments: .deleted, then unlinked
//	flush.go     Flush: what it syncs, and the directory only when it changed
//	loader.go    opening: leftover files, segment list, recovery, the log end
//	recover.go   rebuilding one segment's indexes from its .log (LogSegment.recover)
//	segfile.go   segFile: one segment as readers see it (refcounted files)
//	active.go    activeSegment: the last segment as its writer sees it
//	lookup.go    step 2 of a lookup inside a segment; checks of a segment's tail
//	append.go    Append: offsets, epochs, rolls, the write
//	validate.go  a leader's checks of a client's batches (Kafka's LogValidator)
//	producers.go the producer state's snapshots and replay
//	leadership.go BecomeLeader, BecomeFollower, StartAt
//	read.go      Read, Lookup, OffsetForTimestamp
//	timestamps.go the segment a timestamp lookup starts at, by binary search
//	records.go   the Records a Read returns (sendfile to sockets)
//	retention.go retention, DeleteRecordsBefore, TruncateTo
//	epochs.go    the leader epoch cache
//	segments.go  Segments: the Log's face for tiered and compaction
//	clean.go     SegmentHandle and Replacement, through that face
//	segorder.go  SegmentOrder: the order rule every reader of a segment checks
//	budget.go    the bound on closed segments' open files
//	deadlines.go a log's timed work: flush.ms, retention, segment.ms, .deleted files
//	scheduler.go the timing wheel and worker pool that run it
//	backend.go   Backend: many partitions in one log directory, checkpoints
//	checkpoint.go Kafka's checkpoint files; names.go its file names
//	tierstate.go the tier-state-checkpoint: what a tiered partition last knew of its bucket
//	metrics.go   a log's counters
//
// All file access goes through a vfs.FS (Options.FS), so tests inject disk
// faults with testing/faultfs.
//
// # The life of a segment
//
// A segment is created empty as the log's last segment (createActive) and
// takes appends: its writer (activeSegment, owned by whoever holds Log.mu)
// writes through a read-write descriptor of its own and moves the
// segment's size only after the bytes are written, so readers never see a
// partial batch. Its indexes are preallocated to segment.index.bytes and
// memory-mapped. At roll the writer seals it: the final time index entry,
// both indexes trimmed to their entries, and the .log fsynced in the
// background before the recovery point moves past it. A sealed segment's
// files never change again: a truncation into it writes its surviving
// prefix to a new file (crash-safe, through .cleaned and .swap) and a
// cleaner replaces whole runs of sealed segments the same way.
//
// Readers see a segment as a segFile: an immutable name and base, the
// size readers may read, a read-only descriptor opened on first use (and,
// once sealed, a read-only mapping), and the indexes. Each reader holds a
// reference for as long as it reads (a Records holds one until Close); the
// log holds one while the segment is part of it. Retention, truncation and
// the cleaner take a segment out of the list, rename its files to .deleted
// and drop the log's reference; the last reference closes the descriptor
// and unmaps. So a reader's bytes stay readable whatever happens to the
// log meanwhile. The last segment is truncated in place (as Kafka does)
// only when no reader holds it; otherwise it too is rewritten.
//
// After a clean shutdown the last segment is not made writable until the
// first append (most of a broker's partitions are idle at start). After
// an unclean one, every segment from the one holding the recovery point on
// is validated batch by batch and its indexes rebuilt; a torn or corrupt
// tail is cut, and the segments after a damaged one are deleted, as Kafka
// does.
//
// Closed segments' descriptors and mappings are bounded across a Backend
// by a clock (second chance) file budget; one a reader holds is never
// closed. An evicted segment keeps its read-only indexes (in memory, or
// mapped when large) under bounds of their own (64 MiB, 8,192 mappings),
// so a read of it reopens only its .log.
//
// # Background work
//
// A Backend owns one timing wheel (package timingwheel;
// BackendOptions.Timer, or one it makes with Now as its clock) and a pool
// of at most two goroutines that exist only while there is work. Each open
// log keeps at most one task on the wheel per deadline, and each task,
// when due, only queues the log's work (a log is queued at most once, and
// runs on one goroutine at a time); the pool does the I/O. Nothing is
// swept: an idle Backend costs nothing per partition. The deadlines:
//
//   - flush.ms: the last flush plus flush.ms, armed only while something
//     is unflushed (an append arms it; a flush, by flush.messages, a roll
//     or the task, moves or cancels it). Kafka's flush scheduler, per log.
//   - retention: the moment the oldest segment's largest timestamp (else
//     its mtime) is more than retention.ms old. The check is
//     DeleteOldSegments, which then arms the next oldest's deadline. Size
//     retention needs no deadline: a roll queues a check. A segment
//     overdue above the high watermark is checked again when the high
//     watermark reaches it; an empty log arms nothing until data arrives.
//     Opening a log queues one check (segments below the log start, or
//     already past retention).
//   - file.delete.delay.ms: the first retired segment's retirement plus
//     the delay; the task removes every .deleted file due and arms the
//     next. A delay of 0 removes them at once, on the caller's goroutine.
//   - segment.ms: the moment the active segment has held data for
//     segment.ms less its jitter (see below); the task rolls it.
//   - producer expiry: every producer.id.expiration.check.interval.ms
//     (10 minutes; Options.ProducerState) the log removes the producers
//     without an open transaction idle for producer.id.expiration.ms
//     (Kafka's LogManager does it on that period), so the producer state
//     of a partition that sees many short-lived idempotent producers
//     stays bounded.
//   - checkpoints: one task for the whole directory, every
//     BackgroundInterval (Kafka's log.flush.offset.checkpoint.interval.ms).
//
// flush.ms, retention, segment.ms, producer expiry and checkpoints run
// only with a BackgroundInterval (> 0); without one the caller calls
// Flush, DeleteOldSegments, Roll, RemoveExpiredProducers and Checkpoint. The removal of .deleted files always runs (a log opened
// without a Backend makes a wheel of its own for it on first need).
// SetConfig moves every deadline to the new config at once. Close (and a
// Backend's Delete) cancels the log's tasks and waits for its work in
// progress; no work of a closed log runs. A deadline is a wall-clock time
// turned into a delay on the wheel when armed, and checked again when the
// work runs: a task that fires early (the wall clock stepped back) finds
// nothing due and arms again.
//
// Idle, 10,000 partitions cost 0.2 ms of CPU a minute on the wheel, plus
// about 18 ms a checkpoint write; the sweep of every partition each
// BackgroundInterval that this replaced cost 8 to 14 ms a pass
// (TestIdleBackendCPU, run by hand; 2 shared cores).
//
// segment.ms is checked twice. An append rolls by it as Kafka's does
// (UnifiedLog.maybeRoll: the new batch's largest timestamp against the
// segment's first). And a task rolls a segment segment.ms (less its
// jitter) after it took its first record, by the wall clock, if no append
// rolled it first: Kafka leaves an idle partition's last segment open
// forever, out of reach of retention, compaction and tiering. An empty
// segment never rolls. max.compaction.lag.ms has no task: its deadline
// depends on the cleaner's first dirty offset, which package compaction
// owns; its Cleaner checks the lag on every pass, and a cleaner thread
// with nothing to do sleeps only until the next breach it foresees.
//
// # What reads check
//
// Readers check what they can for free: offsets strictly increase from
// batch to batch and across segment borders, no batch is cut short inside
// a segment, the batch an index entry points at agrees with it, and a
// sealed segment's tail ends where the next segment begins (for a topic
// that is not compacted and never was cleaned, exactly there: a cleaned
// segment may end earlier, and Options.Cleaned carries that across a
// change of cleanup.policy and a restart). A time index that fails its
// sanity check is rebuilt (read-only: bypassed, and the segment scanned).
// Damage is backend.ErrCorruptRecord naming the file and position.
//
// # Locks
//
// In the order they may be taken:
//
//	Backend.mu     the backend's map of open logs and its checkpoints
//	Log.mu         the writer lock: Append, TruncateTo, retention, Flush,
//	               Close, SetConfig and a cleaner's commit; also guards the
//	               activeSegment, the epoch cache, the pending deletions
//	               and the log's deadlines
//	Log.tsMu       the timestamp lookups' directory (timestamps.go);
//	               readers take it, never under Log.mu
//	segFile.mu     one segment's descriptor, mapping and index pointers;
//	               never held during I/O of the .log
//	index locks    inside package index
//
// and, for the deadlines, Log.mu before scheduler.mu (the work queue)
// before the timing wheel's locks. A wheel callback takes only
// scheduler.mu; a log's work takes Log.mu with no other lock held; Close
// waits for the log's work in progress before it takes Log.mu.
//
// Three of Log's locks are leaves, each guarding one thing and held for
// no call out: Log.rpMu (the recovery point against a roll's background
// flush: taken under Log.mu by a roll and a truncation, and alone by the
// flush), Log.changeMu (the Changed channel: taken under Log.mu or alone)
// and Log.flushErrMu (a background flush's first error). fileBudget.mu is
// taken alone or under segFile.mu (a victim a reader holds is counted
// again, the kept indexes' clock), never the other way: the budget
// releases it before it closes an evicted segment's files (which takes
// segFile.mu). Readers take no lock
// of the log: they load the segment list and the offsets atomically and
// take a segment reference (segFile.acquire). A method named …Locked
// requires the lock its comment names.
//
// # Failures
//
// A write that fails is undone (an append is cut back, index slots are
// reserved before a byte is written) and returns backend.ErrStorage. When
// it cannot be undone, or an fsync fails (the kernel may have dropped the
// pages), the log fails: every write returns backend.ErrStorage until the
// log is reopened and recovered.
package local
