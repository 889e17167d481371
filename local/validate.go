package local

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// Leader-side validation: a leader append of a client's batches (not a
// follower's, not the transaction coordinator's markers) goes through
// record.Validator.ValidateForLeader, Kafka's LogValidator, batch by
// batch, before offsets are assigned (record's package doc, "Leader
// appends", has the rules and the integration contract followed here).
// Refusals are *backend.RejectedBatchError, the validator's four classes
// mapped one to one:
//
//	record class             backend sentinel          backend.KafkaCode
//	ErrCorrupt               ErrCorruptRecord          CORRUPT_MESSAGE (2)
//	ErrMessageTooLarge       ErrRecordTooLarge         MESSAGE_TOO_LARGE (10)
//	ErrInvalidTimestamp      ErrInvalidTimestamp       INVALID_TIMESTAMP (32)
//	ErrInvalidRecord         ErrInvalidRecord          INVALID_RECORD (87)
//
// A batch the validator rewrites (recompressed to the topic's
// compression.type) is written as rewritten: the append is then written
// from a copy (leaderValidation.out), and its sizes, index entries and
// AppendInfo.Bytes are the copy's. An append that needs no rewrite is
// written from the caller's bytes, stamped in place, without a copy.

// validators holds the Validators leader appends use. A Validator is
// taken for one append under the log's writer lock and given back after
// its bytes are written. They are pooled across logs rather than kept one
// per log: a warm Validator holds a decompression buffer up to the largest
// batch it saw and a decoder and encoder per codec (zstd's alone are
// hundreds of KiB), which a broker's thousands of mostly idle partitions
// must not each keep.
var validators = sync.Pool{New: func() any { return new(leaderValidation) }}

// maxPooledOut is the largest rewrite buffer a pooled validation keeps.
const maxPooledOut = 4 << 20

// leaderValidation is what one leader append validates with.
type leaderValidation struct {
	v record.Validator
	// out is the append as written when a batch was rewritten: every
	// batch, the rewritten ones as the validator returned them.
	out []byte
	// metas are the append's batchMeta (an allocation an append saved).
	metas []batchMeta
}

// maxPooledMetas is the most batchMeta a pooled validation keeps.
const maxPooledMetas = 1024

func getLeaderValidation() *leaderValidation { return validators.Get().(*leaderValidation) }

// release gives lv back once nothing refers to lv.out.
func (lv *leaderValidation) release() {
	if cap(lv.out) > maxPooledOut {
		lv.out = nil
	}
	if cap(lv.metas) > maxPooledMetas {
		lv.metas = nil
	}
	validators.Put(lv)
}

// leaderOptions are the validator's options for the topic config c.
func leaderOptions(c *backend.Config) (record.LeaderOptions, error) {
	tc, err := record.ParseTopicCompression(c.CompressionType)
	if err != nil {
		return record.LeaderOptions{}, &backend.ConfigError{Key: "compression.type", Value: c.CompressionType, Reason: err.Error()}
	}
	tt := record.CreateTime
	if c.MessageTimestampType == backend.LogAppendTime {
		tt = record.LogAppendTime
	}
	return record.LeaderOptions{
		Compacted:            c.Compact(),
		TimestampType:        tt,
		TimestampBeforeMaxMs: c.MessageTimestampBeforeMaxMs,
		TimestampAfterMaxMs:  c.MessageTimestampAfterMaxMs,
		Compression:          tc,
		MaxMessageBytes:      c.MaxMessageBytes,
	}, nil
}

// validateLeaderLocked validates a client's leader append, batch by
// batch, at time now (ms). It returns the bytes to write (data itself, or
// lv.out when a batch was rewritten) and the facts the append needs; the
// offsets and leader epoch are assigned later (assignOffsets), the
// timestamps each batch must carry are in its batchMeta.maxTs. On an
// error nothing has changed in data. REQUIRES: l.mu held.
func (l *Log) validateLeaderLocked(lv *leaderValidation, data []byte, now int64) ([]byte, []batchMeta, backend.AppendInfo, error) {
	var info backend.AppendInfo
	if len(data) == 0 {
		return nil, nil, info, fmt.Errorf("%w: empty append", backend.ErrInvalidRecord)
	}
	cfg := l.cfg.Load()
	opts, err := leaderOptions(cfg)
	if err != nil {
		return nil, nil, info, err
	}
	out, rewritten := data, false
	metas := lv.metas[:0]
	defer func() { lv.metas = metas }()
	for i, pos := 0, 0; pos < len(data); i++ {
		b, err := frameBatch(data, pos)
		if err == nil && cfg.MaxMessageBytes == 0 {
			// The validator reads 0 as "no limit"; max.message.bytes=0
			// refuses every batch, as it does in Kafka.
			err = &record.ValidationError{Kind: record.ErrMessageTooLarge, BaseOffset: b.BaseOffset(), Index: -1,
				Detail: fmt.Sprintf("batch of %d bytes; max.message.bytes is 0", len(b))}
		}
		var res record.LeaderResult
		if err == nil {
			res, err = lv.v.ValidateForLeader(b, now, opts)
		}
		if err != nil {
			return nil, nil, info, rejectedBatch(err, i, pos)
		}
		at := pos
		if res.Rewritten || rewritten {
			if !rewritten {
				lv.out = append(lv.out[:0], data[:pos]...)
				rewritten = true
			}
			at = len(lv.out)
			lv.out = append(lv.out, res.Batch...) // res.Batch lives until the next call
			out = lv.out
		}
		metas = append(metas, batchMeta{position: int64(at), size: int64(len(res.Batch)), maxTs: res.MaxTimestamp})
		info.Records += int(res.Records)
		pos += len(b)
	}
	info.Batches, info.Bytes = len(metas), len(out)
	if sb := cfg.SegmentBytes; int64(len(out)) > sb {
		return nil, nil, info, fmt.Errorf("%w: an append of %d bytes is larger than segment.bytes (%d)", backend.ErrRecordListTooLarge, len(out), sb)
	}
	return out, metas, info, nil
}

// frameBatch returns the batch at data[pos:] by its length field, or a
// corruption error when there is not one whole batch header up to the
// magic, or the length runs past the append or below that header.
func frameBatch(data []byte, pos int) (record.Batch, error) {
	rest := data[pos:]
	if len(rest) < record.HeaderSizeToMagic {
		return nil, &record.ValidationError{Kind: record.ErrBadSize, BaseOffset: -1, Index: -1,
			Detail: fmt.Sprintf("%d bytes left, fewer than the %d of a batch header up to its magic", len(rest), record.HeaderSizeToMagic)}
	}
	base := int64(binary.BigEndian.Uint64(rest))
	size := int64(int32(binary.BigEndian.Uint32(rest[8:]))) + record.LogOverhead
	if size < record.HeaderSizeToMagic || size > int64(len(rest)) {
		return nil, &record.ValidationError{Kind: record.ErrBadSize, BaseOffset: base, Index: -1,
			Detail: fmt.Sprintf("length field says %d bytes, %d are left in the append", size, len(rest))}
	}
	return record.Batch(rest[:size]), nil
}

// rejectedBatch maps the validator's refusal of batch i, at byte pos of
// the append, to a *backend.RejectedBatchError of the matching class.
func rejectedBatch(err error, i, pos int) error {
	var ve *record.ValidationError
	if !errors.As(err, &ve) {
		// Options the validator refused: not a fault of the batch.
		return fmt.Errorf("%w: leader validation of batch %d at byte %d of the append: %w", backend.ErrInvalidConfig, i, pos, err)
	}
	class := backend.ErrInvalidRecord
	switch {
	case errors.Is(ve, record.ErrCorrupt):
		class = backend.ErrCorruptRecord
	case errors.Is(ve, record.ErrMessageTooLarge):
		class = backend.ErrRecordTooLarge
	case errors.Is(ve, record.ErrInvalidTimestamp):
		class = backend.ErrInvalidTimestamp
	}
	rb := &backend.RejectedBatchError{Class: class, Batch: i, Position: pos, BaseOffset: ve.BaseOffset,
		Index: ve.Index, RecordErrors: ve.RecordErrors, Cause: ve}
	if len(ve.Records) > 0 {
		rb.Records = make([]backend.RecordError, len(ve.Records))
		for j, r := range ve.Records {
			rb.Records[j] = backend.RecordError{Index: r.Index, Message: r.Detail}
		}
	}
	return rb
}
