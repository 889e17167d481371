// Package wal is the write-ahead tier of diskless partitions: the record
// batches of many partitions, appended by one writer (one per Backend),
// go into shared objects in the bucket, each put create-only at the
// writer's next sequence number. An append is durable when its object is
// in the bucket; there is no other coordinator than the bucket's
// conditional writes.
//
// # Keys (frozen)
//
//	[<root>/]_wal/<writer 16 hex>/<sequence 20d>
//
// A writer's id is random, new each time a Writer starts; its sequence
// numbers start at 1 and rise by one for each object it puts (data, or a
// void of its own). No two objects ever share a key: every put is
// create-only (If-None-Match: *).
//
// # Object format, versions 1 and 2 (frozen; integers big-endian)
//
// Version 2 is version 1 with marks after the extents; an object with no
// mark is version 1. Builds before version 2 refuse it (ErrCorrupt).
//
//	data       the extents' bytes, one after another: each partition's
//	           record batches (Kafka v2, as appended) in offset order;
//	           partitions in (topic, partition) order
//	footer:
//	  version        uint8 (1; 2 with marks)
//	  flags          uint8 (bit 0: a fence; other bits must be 0)
//	  writer         8 bytes
//	  sequence       uint64
//	  createdMs      int64   the writer's clock when sealed
//	  fenceEpoch     int32   a fence's claimer's leader epoch (0 otherwise)
//	  count          uint32  extents, at most 2^20
//	  count extents, sorted by (topic, partition), each:
//	    topicLen     uint16, topic bytes (1..249)
//	    partition    int32
//	    firstOffset  int64   the first batch's base offset
//	    lastOffset   int64   the last batch's last offset
//	    position     int64   where its bytes start in the object
//	    size         int32
//	    crc          uint32  CRC-32C of its bytes
//	  version 2 only (an object that carries marks):
//	    markCount    uint32  at least 1, at most 2^20
//	    markCount marks, sorted by (topic, partition), one each:
//	      topicLen   uint16, topic bytes (1..249)
//	      partition  int32
//	      epoch      int32   the leader epoch of the manifest commit that
//	                         named the writer
//	      end        int64   acknowledged below it
//	  footerCRC      uint32  CRC-32C of the footer's bytes before it
//	trailer:
//	  footerLen      uint32  the footer's bytes, footerCRC included
//	  magic          "TLWAL\x00\x00\x01"
//
// The extents of a data object tile its data exactly, in order. A fence
// has no data; its extents name the partitions it claims, with zero
// offsets, position, size and CRC; a fence with no extents only voids its
// number. A reader needs two ranged GETs at most for a footer (one of the
// last 64 KiB usually holds it whole) and one for an extent.
//
// # The protocol
//
// Writing. Appends fill the open object; it is sealed and put when it
// holds BufferMaxBytes or CommitInterval has passed since its first
// append (Inkless's produce.buffer.max.bytes and
// produce.commit.interval.ms), on Flush, or as soon as the PUT budget
// holds a whole PUT: the budget refills at one PUT a CommitInterval and
// one a BufferMaxBytes appended, holds at most one, and every upload
// spends one. The PUT rate stays within 1 / CommitInterval + bytes /
// BufferMaxBytes, as with the interval alone, and an append after a quiet
// spell is put at once instead of waiting out the interval.
//
// An object takes the writer's next number when it is sealed; up to
// InFlight objects (at most MaxInFlight, 4: part of the protocol) are put
// at once and may land in any order, but they settle in number order: an
// object's appends settle only after every lower number has settled. A
// partition's appends carry its generation, moved on by each of its
// failures (and Reset, Forget): appends in an object above a failed one
// of their partition fail with it even when their object landed, so an
// append is never acknowledged after an earlier one of its partition
// failed. The put's answer settles its appends:
//
//   - success: durable; each Ack carries the object's key and the
//     partition's extent.
//   - precondition failed: the number is taken. The writer reads what
//     holds it: its own bytes (an earlier attempt of this put landed and
//     its answer was lost) is success; a fence fails the appends of the
//     partitions it names with ErrFenced (and, in every object above,
//     their appends made at the fence's epoch or below), refuses their
//     later appends, and puts the rest at the next number when no object
//     above is in flight; otherwise the rest fail (ErrUploadFailed), as
//     at a higher number they would land after later appends of theirs.
//   - any other error: the put may have landed, or may still land from an
//     attempt on the wire. The writer voids the number with a fence of its
//     own (no extents), create-only, until the bucket answers; if the void
//     lands, nothing of the object ever will and its appends fail with
//     ErrUploadFailed; if the number is taken, it is read as above. The
//     partitions of a failed object refuse appends (ErrPartitionFailed)
//     until the caller, having truncated them back to their durable end,
//     calls Reset: a later append never becomes durable past an earlier
//     one that failed.
//   - the number is taken and what holds it cannot be read as the
//     writer's own or as a fence, for a reason a retry does not mend
//     (it is damaged, or sealed by a store this one cannot open: a
//     broker whose store seals fenced it), or Close's deadline passes
//     first: the outcome is unknown, and the number may hold a fence
//     that claims any partition. The writer halts (ErrHalted; ErrClosed
//     at Close): that object's appends fail, and so do those of every
//     object above it, landed or not; it takes no more appends and puts
//     no more marks. Its partitions need a new writer, which claims them
//     as any new leader does.
//
// Fencing. A new leader of a partition (on another Backend, or this one
// after a restart with a new writer) calls Fence on the old writer: it
// lists the old writer's objects and puts fences naming the partitions,
// create-only: at every number missing among the MaxInFlight up to the
// highest (numbers the writer may still be putting; whichever lands first
// holds it), and at the number after the highest; if the writer took that
// number first, it lists again and goes on. Once the fence is in the
// bucket at number F:
//
//   - every append of those partitions that the old writer acknowledged
//     is in one of its objects below F, and no number below F that holds
//     a fence naming them comes before one of them: the writer
//     acknowledges only after its put succeeded and every lower number
//     settled, and each number below F that was free when Fence looked
//     now holds an object or a fence;
//   - the old writer acknowledges nothing more of them: the first of its
//     puts to meet one of those fences fails on it, and from then on it
//     fails their appends made at the fence's epoch or below, in that
//     object and every one above, and refuses their appends (ErrFenced)
//     until it is told it leads them again.
//
// WAL gc keeps each writer's newest MaxInFlight numbers whatever they
// hold, and every fence above the writer's last object of its own, so a
// fence never lands behind a writer still alive, nor in a gap gc made.
//
// A fence carries the claimer's leader epoch. It claims the appends the
// writer made while it led a partition at that epoch or below; a writer
// that leads the partition again (Lead, at a higher epoch, after a claim
// of its own) puts its new appends past such a fence, and Tail, given the
// epoch of the leadership it reads, reads past it too. So a fence left by
// a claim that was superseded, or that lost, stops nothing it should not.
//
// Reading the tail. Tail lists a writer's objects from a number the
// caller knows (the manifest's record of where a partition's data beyond
// its segments begins), reads each footer once for all the partitions
// asked for, and stops each partition at the first fence that names it.
// The new leader reads the old writer's objects below F so, and takes the
// partition's log from them with Chain: a later extent wins over an
// earlier one it overlaps (a writer appends an offset again only after
// cutting its log back below it, so the earlier one landed but was
// failed), and one that starts past the log's end lies above a voided
// number and was failed. The partition continues from the chain's end.
//
// Marks. A writer's caller marks what it acknowledged (Writer.Mark: a
// partition's end, at the epoch of the manifest commit that named the
// writer); the next object carries the marks, or an object of marks
// alone once the PUT budget allows. A read replica serves a partition's
// tail below its highest mark of the writer and epoch its manifest
// names: acknowledged records are never replaced, while an object that
// landed may hold appends the writer failed. A claim needs no mark.
//
// # Failures
//
// A footer or extent that does not check (magic, version, lengths, order,
// CRC-32C) is ErrCorrupt naming the key, never a wrong answer. Decoded
// counts and lengths are capped (MaxFooterSize, MaxExtents) before they
// size an allocation. The writer's memory is bounded by MaxBufferedBytes:
// Append waits past it.
package wal
