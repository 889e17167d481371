package backend

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Cleanup policies.
const (
	CleanupDelete  = "delete"
	CleanupCompact = "compact"
)

// Timestamp types (message.timestamp.type).
const (
	CreateTime    = "CreateTime"
	LogAppendTime = "LogAppendTime"
)

// Compression types (compression.type): producer keeps the codec each
// batch was produced with; the others name the codec the topic stores, and
// a leader recompresses batches produced with another one, as Kafka does.
const (
	CompressionProducer     = "producer"
	CompressionUncompressed = "uncompressed"
	CompressionGzip         = "gzip"
	CompressionSnappy       = "snappy"
	CompressionLZ4          = "lz4"
	CompressionZstd         = "zstd"
)

// Special values of local.retention.*: use retention.* instead.
const LocalRetentionUseTotal = -2

// Config is a partition's topic configuration, with Kafka's key names and
// defaults. Parse one from the map a broker already has with ParseConfig;
// DefaultConfig returns Kafka's defaults.
type Config struct {
	SegmentBytes           int64    // segment.bytes: roll when a segment would exceed it
	SegmentMs              int64    // segment.ms: roll when the first batch is this old
	SegmentJitterMs        int64    // segment.jitter.ms: random reduction of segment.ms per segment
	SegmentIndexBytes      int64    // segment.index.bytes: max size of each index file
	IndexIntervalBytes     int64    // index.interval.bytes: bytes between offset index entries
	RetentionMs            int64    // retention.ms: -1 = keep forever
	RetentionBytes         int64    // retention.bytes: -1 = no size limit
	CleanupPolicy          []string // cleanup.policy: delete, compact, or both
	MinCleanableDirtyRatio float64  // min.cleanable.dirty.ratio
	MinCompactionLagMs     int64    // min.compaction.lag.ms
	MaxCompactionLagMs     int64    // max.compaction.lag.ms
	DeleteRetentionMs      int64    // delete.retention.ms: how long tombstones stay
	FlushMessages          int64    // flush.messages: fsync after this many messages
	FlushMs                int64    // flush.ms: fsync when the last flush is this old
	MaxMessageBytes        int64    // max.message.bytes: largest batch accepted
	MessageTimestampType   string   // message.timestamp.type: CreateTime or LogAppendTime
	FileDeleteDelayMs      int64    // file.delete.delay.ms: delay between .deleted rename and removal
	RemoteStorageEnable    bool     // remote.storage.enable
	DisklessEnable         bool     // diskless.enable: appends durable in the bucket's WAL objects, the disk a cache
	SealEnable             bool     // remote.storage.seal.enable: the topic's objects sealed (client-side encrypted) in the bucket
	LocalRetentionMs       int64    // local.retention.ms: -2 = retention.ms
	LocalRetentionBytes    int64    // local.retention.bytes: -2 = retention.bytes

	// The settings a leader append is validated against (Kafka's
	// LogValidator; see backend.Partition's Append).
	CompressionType             string // compression.type: producer, uncompressed, gzip, snappy, lz4 or zstd
	MessageTimestampBeforeMaxMs int64  // message.timestamp.before.max.ms: how far before now a CreateTime timestamp may be
	MessageTimestampAfterMaxMs  int64  // message.timestamp.after.max.ms: how far after now (Kafka 4.0's default: 1 h)

	// BrokerOwned holds Kafka topic configs that are the broker's business
	// (min.insync.replicas, compression.gzip.level, …): accepted and kept,
	// never used by the storage layer.
	BrokerOwned map[string]string
}

// DefaultConfig returns Kafka's topic defaults.
func DefaultConfig() Config {
	c, err := ParseConfig(nil)
	if err != nil {
		panic(err) // the defaults are constants; a failure is a bug in this file
	}
	return c
}

type configKey struct {
	name string
	def  string
	set  func(c *Config, v string) error
}

// boolKey is a true/false key, false by default.
func boolKey(name string, field func(*Config) *bool) configKey {
	return configKey{name: name, def: "false", set: func(c *Config, v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("want true or false")
		}
		*field(c) = b
		return nil
	}}
}

func longKey(name string, def int64, min, max int64, field func(*Config) *int64) configKey {
	return configKey{name: name, def: strconv.FormatInt(def, 10), set: func(c *Config, v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		if n < min || n > max {
			return fmt.Errorf("must be in [%d, %d]", min, max)
		}
		*field(c) = n
		return nil
	}}
}

const maxLong = math.MaxInt64

var configKeys = []configKey{
	longKey("segment.bytes", 1<<30, 14, math.MaxInt32, func(c *Config) *int64 { return &c.SegmentBytes }),
	longKey("segment.ms", 7*24*3600*1000, 1, maxLong, func(c *Config) *int64 { return &c.SegmentMs }),
	longKey("segment.jitter.ms", 0, 0, maxLong, func(c *Config) *int64 { return &c.SegmentJitterMs }),
	longKey("segment.index.bytes", 10<<20, 4, math.MaxInt32, func(c *Config) *int64 { return &c.SegmentIndexBytes }),
	longKey("index.interval.bytes", 4096, 0, math.MaxInt32, func(c *Config) *int64 { return &c.IndexIntervalBytes }),
	longKey("retention.ms", 7*24*3600*1000, -1, maxLong, func(c *Config) *int64 { return &c.RetentionMs }),
	longKey("retention.bytes", -1, -1, maxLong, func(c *Config) *int64 { return &c.RetentionBytes }),
	{name: "cleanup.policy", def: CleanupDelete, set: func(c *Config, v string) error {
		c.CleanupPolicy = c.CleanupPolicy[:0]
		seen := map[string]bool{}
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			if p != CleanupDelete && p != CleanupCompact {
				return fmt.Errorf("unknown policy %q (want delete, compact or both)", p)
			}
			if !seen[p] {
				seen[p] = true
				c.CleanupPolicy = append(c.CleanupPolicy, p)
			}
		}
		return nil
	}},
	{name: "min.cleanable.dirty.ratio", def: "0.5", set: func(c *Config, v string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f < 0 || f > 1 || math.IsNaN(f) {
			return fmt.Errorf("must be a number in [0, 1]")
		}
		c.MinCleanableDirtyRatio = f
		return nil
	}},
	longKey("min.compaction.lag.ms", 0, 0, maxLong, func(c *Config) *int64 { return &c.MinCompactionLagMs }),
	longKey("max.compaction.lag.ms", maxLong, 1, maxLong, func(c *Config) *int64 { return &c.MaxCompactionLagMs }),
	longKey("delete.retention.ms", 24*3600*1000, 0, maxLong, func(c *Config) *int64 { return &c.DeleteRetentionMs }),
	longKey("flush.messages", maxLong, 1, maxLong, func(c *Config) *int64 { return &c.FlushMessages }),
	longKey("flush.ms", maxLong, 0, maxLong, func(c *Config) *int64 { return &c.FlushMs }),
	longKey("max.message.bytes", 1048588, 0, math.MaxInt32, func(c *Config) *int64 { return &c.MaxMessageBytes }),
	{name: "message.timestamp.type", def: CreateTime, set: func(c *Config, v string) error {
		v = strings.TrimSpace(v)
		if v != CreateTime && v != LogAppendTime {
			return fmt.Errorf("want CreateTime or LogAppendTime")
		}
		c.MessageTimestampType = v
		return nil
	}},
	longKey("file.delete.delay.ms", 60000, 0, maxLong, func(c *Config) *int64 { return &c.FileDeleteDelayMs }),
	boolKey("remote.storage.enable", func(c *Config) *bool { return &c.RemoteStorageEnable }),
	boolKey("diskless.enable", func(c *Config) *bool { return &c.DisklessEnable }),
	boolKey("remote.storage.seal.enable", func(c *Config) *bool { return &c.SealEnable }),
	longKey("local.retention.ms", LocalRetentionUseTotal, -2, maxLong, func(c *Config) *int64 { return &c.LocalRetentionMs }),
	longKey("local.retention.bytes", LocalRetentionUseTotal, -2, maxLong, func(c *Config) *int64 { return &c.LocalRetentionBytes }),
	{name: "compression.type", def: CompressionProducer, set: func(c *Config, v string) error {
		v = strings.TrimSpace(v)
		if !validCompressionType(v) {
			return errCompressionType
		}
		c.CompressionType = v
		return nil
	}},
	// Kafka 3.6 (KIP-937) split message.timestamp.difference.max.ms in two;
	// Kafka 4.0 removed it and made after.max.ms default to one hour.
	longKey("message.timestamp.before.max.ms", maxLong, 0, maxLong, func(c *Config) *int64 { return &c.MessageTimestampBeforeMaxMs }),
	longKey("message.timestamp.after.max.ms", 3600000, 0, maxLong, func(c *Config) *int64 { return &c.MessageTimestampAfterMaxMs }),
}

var errCompressionType = errors.New("want producer, uncompressed, gzip, snappy, lz4 or zstd")

func validCompressionType(v string) bool {
	switch v {
	case CompressionProducer, CompressionUncompressed, CompressionGzip, CompressionSnappy, CompressionLZ4, CompressionZstd:
		return true
	}
	return false
}

// ParseConfig returns Kafka's defaults overridden by m. Unknown keys and bad
// values are *ConfigError values naming the key.
func ParseConfig(m map[string]string) (Config, error) {
	var c Config
	known := map[string]bool{}
	for _, k := range configKeys {
		known[k.name] = true
		if err := k.set(&c, k.def); err != nil {
			return c, &ConfigError{Key: k.name, Value: k.def, Reason: "bad default: " + err.Error()}
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same first error every time
	for _, name := range keys {
		v := m[name]
		if brokerOwnedKeys[name] {
			if c.BrokerOwned == nil {
				c.BrokerOwned = map[string]string{}
			}
			c.BrokerOwned[name] = v
			continue
		}
		if !known[name] {
			return c, &ConfigError{Key: name, Value: v, Reason: "unknown config key"}
		}
		for _, k := range configKeys {
			if k.name == name {
				if err := k.set(&c, v); err != nil {
					return c, &ConfigError{Key: name, Value: v, Reason: err.Error()}
				}
			}
		}
	}
	return c, c.Validate()
}

// Validate checks the rules that span keys.
func (c Config) Validate() error {
	if c.SegmentBytes < 14 {
		return &ConfigError{Key: "segment.bytes", Value: strconv.FormatInt(c.SegmentBytes, 10), Reason: "must be at least 14"}
	}
	if c.SegmentIndexBytes < 12 {
		return &ConfigError{Key: "segment.index.bytes", Value: strconv.FormatInt(c.SegmentIndexBytes, 10), Reason: "must hold at least one time index entry (12 bytes)"}
	}
	if c.SegmentMs < 1 {
		return &ConfigError{Key: "segment.ms", Value: strconv.FormatInt(c.SegmentMs, 10), Reason: "must be at least 1"}
	}
	if len(c.CleanupPolicy) == 0 {
		return &ConfigError{Key: "cleanup.policy", Reason: "must name delete, compact or both"}
	}
	if !validCompressionType(c.CompressionType) {
		return &ConfigError{Key: "compression.type", Value: c.CompressionType, Reason: errCompressionType.Error()}
	}
	if c.MessageTimestampBeforeMaxMs < 0 {
		return &ConfigError{Key: "message.timestamp.before.max.ms", Value: strconv.FormatInt(c.MessageTimestampBeforeMaxMs, 10), Reason: "must be at least 0"}
	}
	if c.MessageTimestampAfterMaxMs < 0 {
		return &ConfigError{Key: "message.timestamp.after.max.ms", Value: strconv.FormatInt(c.MessageTimestampAfterMaxMs, 10), Reason: "must be at least 0"}
	}
	if c.LocalRetentionMs != LocalRetentionUseTotal && c.RetentionMs != -1 &&
		(c.LocalRetentionMs == -1 || c.LocalRetentionMs > c.RetentionMs) {
		return &ConfigError{Key: "local.retention.ms", Value: strconv.FormatInt(c.LocalRetentionMs, 10),
			Reason: fmt.Sprintf("must not exceed retention.ms (%d)", c.RetentionMs)}
	}
	if c.LocalRetentionBytes != LocalRetentionUseTotal && c.RetentionBytes != -1 &&
		(c.LocalRetentionBytes == -1 || c.LocalRetentionBytes > c.RetentionBytes) {
		return &ConfigError{Key: "local.retention.bytes", Value: strconv.FormatInt(c.LocalRetentionBytes, 10),
			Reason: fmt.Sprintf("must not exceed retention.bytes (%d)", c.RetentionBytes)}
	}
	return nil
}

// Compact reports whether cleanup.policy includes compact.
func (c Config) Compact() bool { return c.hasPolicy(CleanupCompact) }

// Delete reports whether cleanup.policy includes delete.
func (c Config) Delete() bool { return c.hasPolicy(CleanupDelete) }

func (c Config) hasPolicy(p string) bool {
	for _, q := range c.CleanupPolicy {
		if q == p {
			return true
		}
	}
	return false
}

// EffectiveLocalRetentionMs resolves local.retention.ms = -2 to retention.ms.
func (c Config) EffectiveLocalRetentionMs() int64 {
	if c.LocalRetentionMs == LocalRetentionUseTotal {
		return c.RetentionMs
	}
	return c.LocalRetentionMs
}

// EffectiveLocalRetentionBytes resolves local.retention.bytes = -2.
func (c Config) EffectiveLocalRetentionBytes() int64 {
	if c.LocalRetentionBytes == LocalRetentionUseTotal {
		return c.RetentionBytes
	}
	return c.LocalRetentionBytes
}

// FileDeleteDelay returns file.delete.delay.ms as a duration.
func (c Config) FileDeleteDelay() time.Duration {
	return time.Duration(c.FileDeleteDelayMs) * time.Millisecond
}

// Keys returns every storage config key tierlog understands, sorted.
func Keys() []string {
	out := make([]string, len(configKeys))
	for i, k := range configKeys {
		out[i] = k.name
	}
	sort.Strings(out)
	return out
}

// ConfigKey describes one topic config key the storage layer acts on.
type ConfigKey struct {
	Name    string
	Default string
}

// ConfigKeys returns the topic config keys the storage layer acts on, in a
// fixed order, with Kafka's defaults.
func ConfigKeys() []ConfigKey {
	out := make([]ConfigKey, len(configKeys))
	for i, k := range configKeys {
		out[i] = ConfigKey{Name: k.name, Default: k.def}
	}
	return out
}

// IsConfigKey reports whether ParseConfig accepts name: a key the storage
// layer acts on, or a broker-owned one it accepts and ignores.
func IsConfigKey(name string) bool {
	if brokerOwnedKeys[name] {
		return true
	}
	for _, k := range configKeys {
		if k.name == name {
			return true
		}
	}
	return false
}
