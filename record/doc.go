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
// # Leader appends (Kafka's LogValidator)
//
// Before a leader writes a batch a client produced, it calls
// [Validator.ValidateForLeader], which checks what Kafka's leader checks
// (ProduceRequest.validateRecords, UnifiedLog.analyzeAndValidateRecords,
// then LogValidator), in that order, decoding every record. Each refusal
// is a *ValidationError whose class is the Kafka error code to answer
// with:
//
//	check                                          kind                 Kafka error code
//	length field is not the bytes given, length    ErrBadSize           CORRUPT_MESSAGE (2)
//	  below 14, batch below 61 bytes
//	magic not 0, 1 or 2                            ErrBadMagic          CORRUPT_MESSAGE (2)
//	magic 0 or 1 (produce v3+ is v2 only)          ErrLegacyMagic       INVALID_RECORD (87)
//	base offset not 0                              ErrBadOffsets        INVALID_RECORD (87)
//	batch larger than max.message.bytes            ErrMessageTooLarge   MESSAGE_TOO_LARGE (10)
//	CRC-32C mismatch                               ErrCRCMismatch       CORRUPT_MESSAGE (2)
//	codec id 5-7                                   ErrUnknownCodec      INVALID_RECORD (87) [1]
//	lastOffsetDelta+1 <= 0, count <= 0,            ErrBadOffsets        INVALID_RECORD (87)
//	  count != lastOffsetDelta+1
//	control batch                                  ErrControlBatch      INVALID_RECORD (87)
//	producer id >= 0 with base sequence < 0        ErrNoSequence        INVALID_RECORD (87)
//	records do not decompress                      ErrBadRecord         INVALID_RECORD (87) [1]
//	records decompress past the cap                ErrTooLarge          MESSAGE_TOO_LARGE (10) [2]
//	a record does not parse (a varint too long     ErrBadRecord         INVALID_RECORD (87)
//	  or past int32, a length or header count
//	  running past the record, a null header key,
//	  bytes left in a record), fewer records than
//	  the count, bytes after the last record
//	record offset deltas not 0, 1, … count-1       ErrBadOffsets        INVALID_RECORD (87) [3]
//	per record: a null key on a compacted topic    ErrMissingKey        INVALID_RECORD (87)
//	per record (CreateTime topic): a timestamp     ErrInvalidTimestamp  INVALID_TIMESTAMP (32)
//	  other than -1 outside [now - before.max.ms,
//	  now + after.max.ms]; a LogAppendTime batch
//	  whose maxTimestamp is -1
//	per record (LogAppendTime topic): a batch      ErrInvalidTimestamp  INVALID_TIMESTAMP (32)
//	  the producer flagged LogAppendTime
//	recompressed batch larger than                 ErrMessageTooLarge   MESSAGE_TOO_LARGE (10)
//	  max.message.bytes
//
// Per-record refusals are collected over the whole batch, as Kafka does
// (ValidationError.Records, Kafka's record_errors); the batch fails with
// INVALID_TIMESTAMP if any of them is a timestamp, else INVALID_RECORD. A
// record that does not parse stops the validation at once.
//
// Where tierlog differs from Kafka, on purpose:
//
//   - [1] Kafka answers UNKNOWN_SERVER_ERROR (an unchecked exception) for
//     an unknown codec id and for records that do not decompress; both are
//     the producer's deterministic fault, so INVALID_RECORD (not retriable).
//   - [2] Kafka streams decompression and has no cap.
//   - [3] Kafka does not look at an uncompressed batch's record offset
//     deltas (it writes them as they are) and rebuilds a compressed batch
//     whose deltas are not 0..count-1 (a path kept for old v1 clients);
//     tierlog refuses both, so every written batch's records sit at
//     exactly its offsets.
//   - A varint whose fifth byte has bits past 32 is refused; Kafka drops
//     those bits (and would then read another value than a Go reader).
//     So is a key, value or header value length below -1, which Kafka
//     reads as null and the Iterator refuses.
//   - A LogAppendTime batch on a CreateTime topic whose maxTimestamp is in
//     range is accepted, as in Kafka, but keeps its flag (every record
//     still reads maxTimestamp, the timestamp that was checked); Kafka
//     flips it to CreateTime in place, changing what its records read.
//   - Recompression (compression.type names a codec other than the
//     batch's) compresses the records' bytes as they are: the same
//     offsets deltas, timestamps, keys, values and headers, the batch's
//     producer fields and attributes but the codec, a new length and CRC.
//     Kafka re-encodes each record, with baseTimestamp the first record's.
//
// Not checked here, because they concern a whole append or the partition:
// a produce request holding more than one batch for a partition (Kafka:
// INVALID_RECORD), an append larger than segment.bytes (Kafka:
// RECORD_LIST_TOO_LARGE, 18), the producer state (package producerstate).
// UNSUPPORTED_FOR_MESSAGE_FORMAT (43) never arises: Kafka raises it only
// when it converts transactional or idempotent batches below magic 2, and
// tierlog writes magic 2 only.
//
// How a log uses it (the integration contract):
//
//  1. Keep one Validator per log, used under the writer lock. For each
//     batch of a leader append from a client (not a follower's, not the
//     coordinator's transaction markers), before assigning offsets, call
//     ValidateForLeader(b, now, opts) with now in ms and opts from the
//     topic's config. On an error write nothing and answer with the
//     class's code (errors.Is on ErrCorrupt, ErrMessageTooLarge,
//     ErrInvalidTimestamp, ErrInvalidRecord).
//  2. Write res.Batch: b itself, or when res.Rewritten a new batch of
//     another size in the Validator's buffer, which must be copied into
//     the append before the next call.
//  3. Stamp it as today: SetBaseOffset, SetPartitionLeaderEpoch, then on a
//     LogAppendTime topic SetLogAppendTime(now), else
//     SetMaxTimestamp(res.MaxTimestamp) (a no-op unless the producer's
//     maxTimestamp was wrong).
//  4. Then check the producer state and write.
//
// # Scanning files
//
// [Scanner] walks the entries of a log file through an [io.ReaderAt] and tells
// a torn tail (fewer than 17 bytes left, or an entry that runs past the end of
// the file: what an interrupted append leaves) apart from corruption (a size
// below the minimum, an unknown magic, a CRC mismatch). Decoders never read
// past their input and cap every length before it sizes an allocation.
package record
