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
// # Object format, version 1 (frozen; integers big-endian)
//
//	data       the extents' bytes, one after another: each partition's
//	           record batches (Kafka v2, as appended) in offset order;
//	           partitions in (topic, partition) order
//	footer:
//	  version        uint8 (1)
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
// spell is put at once instead of waiting out the interval. One object is in flight at a
// time, so the numbers are used in order and an append settles only after
// every earlier one of its partition has. The put's answer settles its
// appends:
//
//   - success: durable; each Ack carries the object's key and the
//     partition's extent.
//   - precondition failed: the number is taken. The writer reads what
//     holds it: its own bytes (an earlier attempt of this put landed and
//     its answer was lost) is success; a fence fails the appends of the
//     partitions it names with ErrFenced, refuses their later appends,
//     and puts the rest at the next number.
//   - any other error: the put may have landed, or may still land from an
//     attempt on the wire. The writer voids the number with a fence of its
//     own (no extents), create-only, until the bucket answers; if the void
//     lands, nothing of the object ever will and its appends fail with
//     ErrUploadFailed; if the number is taken, it is read as above. The
//     partitions of a failed object refuse appends (ErrPartitionFailed)
//     until the caller, having truncated them back to their durable end,
//     calls Reset: a later append never becomes durable past an earlier
//     one that failed.
//
// Fencing. A new leader of a partition (on another Backend, or this one
// after a restart with a new writer) calls Fence on the old writer: it
// lists the old writer's objects and puts a fence naming the partitions,
// create-only, at the number after the highest; if the writer took that
// number first, it lists again and aims at the next. Once the fence is in
// the bucket at number F:
//
//   - every append of those partitions that the old writer acknowledged is
//     in one of its objects below F: it acknowledges only after its put
//     succeeded, its puts go in number order one at a time, and F was free
//     when the fence landed;
//   - the old writer acknowledges nothing more of them: its put at F fails
//     on the fence, which names them, and it refuses their appends from
//     then on (ErrFenced) until it is told it leads them again.
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
// The new leader reads the old writer's objects below F so, and the
// partition continues from their last offset.
//
// # Failures
//
// A footer or extent that does not check (magic, version, lengths, order,
// CRC-32C) is ErrCorrupt naming the key, never a wrong answer. Decoded
// counts and lengths are capped (MaxFooterSize, MaxExtents) before they
// size an allocation. The writer's memory is bounded by MaxBufferedBytes:
// Append waits past it.
package wal
