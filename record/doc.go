// Package record reads, validates and writes Apache Kafka record batches.
//
// Magic 2 (record batch v2) is read and written; magic 0 and 1 ("message
// sets") are read only, so old Kafka logs can be dumped and verified.
//
// # Record batch v2 (frozen: this is Kafka's wire and disk format)
//
// All integers are big-endian. A batch is 12 + length bytes.
//
//	off size field
//	  0    8 baseOffset            int64  (rewritten by the leader; not in the CRC)
//	  8    4 length                int32  (bytes after this field)
//	 12    4 partitionLeaderEpoch  int32  (stamped by the leader; not in the CRC)
//	 16    1 magic                 int8   (2)
//	 17    4 crc                   uint32 (CRC-32C of bytes 21..end)
//	 21    2 attributes            int16  (bits 0-2 codec, 3 timestamp type,
//	                                       4 transactional, 5 control,
//	                                       6 delete horizon present)
//	 23    4 lastOffsetDelta       int32
//	 27    8 baseTimestamp         int64  (deleteHorizonMs when bit 6 is set)
//	 35    8 maxTimestamp          int64
//	 43    8 producerId            int64
//	 51    2 producerEpoch         int16
//	 53    4 baseSequence          int32
//	 57    4 recordsCount          int32
//	 61    … records (one compressed stream when the codec is not none)
//
// A record inside the batch:
//
//	length          varint   (zigzag; bytes after this field)
//	attributes      int8
//	timestampDelta  varlong  (against baseTimestamp)
//	offsetDelta     varint   (against baseOffset)
//	keyLength       varint   (-1 = null) ; key
//	valueLength     varint   (-1 = null, a tombstone) ; value
//	headersCount    varint
//	  headerKeyLength   varint ; key (UTF-8)
//	  headerValueLength varint (-1 = null) ; value
//
// # Legacy message sets (magic 0 and 1, read only)
//
//	offset int64 | size int32 | crc uint32 (CRC-32 IEEE of magic..end) |
//	magic int8 | attributes int8 | [timestamp int64, magic 1 only] |
//	keyLength int32 | key | valueLength int32 | value
//
// A compressed legacy entry wraps a whole inner message set in its value; its
// offset is the offset of its LAST inner message.
//
// # Scanning files
//
// [Scanner] walks the entries of a log file through an [io.ReaderAt] and tells
// a torn tail (fewer than 17 bytes left, or an entry that runs past the end of
// the file: what an interrupted append leaves) apart from corruption (a size
// below the minimum, an unknown magic, a CRC mismatch). Decoders never read
// past their input and cap every length before it sizes an allocation.
package record
