// Package index implements Kafka's sparse offset index (.index) and time
// index (.timeindex).
//
// # Formats (frozen: Kafka's on-disk layout, big-endian)
//
//	.index      8-byte entries:  int32 relativeOffset | int32 position
//	.timeindex 12-byte entries:  int64 timestamp      | int32 relativeOffset
//
// relativeOffset = offset - the segment's base offset. Entries are sorted:
// offsets strictly increase in both files, positions strictly increase in
// .index and timestamps strictly increase in .timeindex.
//
// # Backings
//
// An index is either a writable file, preallocated to segment.index.bytes
// (rounded down to the entry size) and memory-mapped, then trimmed to its
// valid entries on Close; or a read-only view over bytes, for index copies
// fetched from a bucket. Both use the same lookup code.
//
// # Valid entries on load
//
// A preallocated index that was not trimmed (an unclean shutdown) ends in
// zeros. On load the valid entries are the longest prefix that keeps the
// order above; a zero entry at slot 0 counts as empty. (Kafka itself trusts
// every slot and relies on recovery to rebuild; tierlog does both.)
//
// # Lookup
//
// Lookup returns the largest entry whose key is <= the target, comparing
// offsets in .index and timestamps in .timeindex. On a miss, OffsetIndex
// returns (baseOffset, 0) and TimeIndex returns (-1, baseOffset), as Kafka's
// do.
//
// # Concurrency
//
// One writer (Append, TruncateTo, Resize, Close) and any number of readers
// (Lookup, Entry, Entries) may run at once; a read lock guards the mapping.
package index
