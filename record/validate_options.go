package record

import (
	"fmt"
	"math"
)

// Kafka's defaults for the topic settings LeaderOptions carries.
const (
	// DefaultTimestampBeforeMaxMs is message.timestamp.before.max.ms's
	// default: no limit on how old a CreateTime timestamp may be
	// (Long.MAX_VALUE since KIP-937, Kafka 3.6).
	DefaultTimestampBeforeMaxMs int64 = math.MaxInt64
	// DefaultTimestampAfterMaxMs is message.timestamp.after.max.ms's
	// default since Kafka 4.0 (KIP-1030, KAFKA-16368): one hour. Kafka 3.6
	// to 3.9 defaulted to Long.MAX_VALUE.
	DefaultTimestampAfterMaxMs int64 = 3600000
	// DefaultMaxMessageBytes is max.message.bytes's default (1 MiB plus
	// the 12-byte log overhead).
	DefaultMaxMessageBytes int64 = 1048588
)

// TopicCompression is a topic's compression.type. The zero value is
// "producer": batches keep the codec their producer chose. Any other value
// names the codec the topic stores; a batch with another codec is
// recompressed, as Kafka's leader does.
type TopicCompression struct {
	codec Codec
	fixed bool
}

// CompressionProducer is compression.type=producer, the zero value.
var CompressionProducer = TopicCompression{}

// CompressWith returns the compression.type that stores every batch with c.
func CompressWith(c Codec) TopicCompression { return TopicCompression{codec: c, fixed: true} }

// ParseTopicCompression maps a compression.type value (producer,
// uncompressed, gzip, snappy, lz4, zstd) to a TopicCompression.
func ParseTopicCompression(name string) (TopicCompression, error) {
	switch name {
	case "producer":
		return CompressionProducer, nil
	case "uncompressed":
		return CompressWith(None), nil
	case "none":
		// ParseCodec's name for it; Kafka's compression.type says
		// "uncompressed".
	default:
		if c, err := ParseCodec(name); err == nil {
			return CompressWith(c), nil
		}
	}
	return TopicCompression{}, fmt.Errorf("%w: compression.type %q (want producer, uncompressed, gzip, snappy, lz4 or zstd)", ErrInvalid, name)
}

// Target returns the codec a batch compressed with c is stored with.
func (t TopicCompression) Target(c Codec) Codec {
	if t.fixed {
		return t.codec
	}
	return c
}

// String returns the compression.type value.
func (t TopicCompression) String() string {
	switch {
	case !t.fixed:
		return "producer"
	case t.codec == None:
		return "uncompressed"
	}
	return t.codec.String()
}

// LeaderOptions are the topic settings a leader append is validated
// against. Start from DefaultLeaderOptions: the zero value's timestamp
// limits are 0 ms, which accepts only timestamps equal to now.
type LeaderOptions struct {
	// Compacted says cleanup.policy includes compact: every record needs
	// a key.
	Compacted bool
	// TimestampType is message.timestamp.type. CreateTime checks each
	// record's timestamp against the two limits below; LogAppendTime does
	// not (the log stamps its own time), and refuses batches whose
	// producer set LogAppendTime.
	TimestampType TimestampType
	// TimestampBeforeMaxMs (message.timestamp.before.max.ms) is how far
	// before now a CreateTime timestamp may be; TimestampAfterMaxMs
	// (message.timestamp.after.max.ms) how far after. Both >= 0.
	TimestampBeforeMaxMs int64
	TimestampAfterMaxMs  int64
	// Compression is compression.type.
	Compression TopicCompression
	// MaxMessageBytes is max.message.bytes: the largest batch accepted,
	// checked on the batch as produced and again on a recompressed one.
	// 0 means no limit.
	MaxMessageBytes int64
	// MaxDecompressedBytes caps the records of one compressed batch once
	// decompressed (a batch past it is refused as too large); 0 means
	// DefaultMaxDecompressed. Kafka has no such cap: it streams.
	MaxDecompressedBytes int
}

// DefaultLeaderOptions returns Kafka 4.0's topic defaults: delete policy,
// CreateTime, no limit before now, one hour after now, compression.type
// producer, max.message.bytes 1048588.
func DefaultLeaderOptions() LeaderOptions {
	return LeaderOptions{
		TimestampType:        CreateTime,
		TimestampBeforeMaxMs: DefaultTimestampBeforeMaxMs,
		TimestampAfterMaxMs:  DefaultTimestampAfterMaxMs,
		MaxMessageBytes:      DefaultMaxMessageBytes,
	}
}

// Validate reports options Kafka would not accept, as an ErrInvalid error.
func (o LeaderOptions) Validate() error {
	switch {
	case o.TimestampType != CreateTime && o.TimestampType != LogAppendTime:
		return fmt.Errorf("%w: timestamp type %d", ErrInvalid, o.TimestampType)
	case o.TimestampBeforeMaxMs < 0:
		return fmt.Errorf("%w: message.timestamp.before.max.ms %d is negative", ErrInvalid, o.TimestampBeforeMaxMs)
	case o.TimestampAfterMaxMs < 0:
		return fmt.Errorf("%w: message.timestamp.after.max.ms %d is negative", ErrInvalid, o.TimestampAfterMaxMs)
	case o.Compression.fixed && (o.Compression.codec < None || o.Compression.codec > ZSTD):
		return fmt.Errorf("%w: compression codec id %d", ErrInvalid, int(o.Compression.codec))
	case o.MaxMessageBytes < 0:
		return fmt.Errorf("%w: max.message.bytes %d is negative", ErrInvalid, o.MaxMessageBytes)
	case o.MaxDecompressedBytes < 0:
		return fmt.Errorf("%w: max decompressed bytes %d is negative", ErrInvalid, o.MaxDecompressedBytes)
	}
	return nil
}
