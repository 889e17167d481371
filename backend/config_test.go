package backend_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
)

func TestDefaultsAreKafkas(t *testing.T) {
	c := backend.DefaultConfig()
	if c.SegmentBytes != 1<<30 || c.SegmentMs != 604800000 || c.SegmentIndexBytes != 10485760 ||
		c.IndexIntervalBytes != 4096 || c.RetentionMs != 604800000 || c.RetentionBytes != -1 ||
		!c.Delete() || c.Compact() || c.MinCleanableDirtyRatio != 0.5 || c.DeleteRetentionMs != 86400000 ||
		c.MaxMessageBytes != 1048588 || c.MessageTimestampType != backend.CreateTime || c.FileDeleteDelayMs != 60000 ||
		c.LocalRetentionMs != -2 || c.LocalRetentionBytes != -2 || c.RemoteStorageEnable ||
		c.CompressionType != backend.CompressionProducer || c.MessageTimestampBeforeMaxMs != math.MaxInt64 ||
		c.MessageTimestampAfterMaxMs != 3600000 {
		t.Fatalf("defaults differ from Kafka's: %+v", c)
	}
	if c.EffectiveLocalRetentionMs() != c.RetentionMs {
		t.Fatal("local.retention.ms -2 must mean retention.ms")
	}
}

func TestParseConfig(t *testing.T) {
	c, err := backend.ParseConfig(map[string]string{
		"segment.bytes": "1048576", "cleanup.policy": "compact,delete", "min.insync.replicas": "2",
		"message.timestamp.type": "LogAppendTime", "local.retention.ms": "1000",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.SegmentBytes != 1048576 || !c.Compact() || !c.Delete() || c.BrokerOwned["min.insync.replicas"] != "2" ||
		c.MessageTimestampType != backend.LogAppendTime || c.EffectiveLocalRetentionMs() != 1000 {
		t.Fatalf("parsed %+v", c)
	}
	bad := map[string]map[string]string{
		"segment.bytez":                   {"segment.bytez": "1"},
		"segment.bytes":                   {"segment.bytes": "ten"},
		"retention.ms":                    {"retention.ms": "-5"},
		"cleanup.policy":                  {"cleanup.policy": "delete,shred"},
		"min.cleanable.dirty.ratio":       {"min.cleanable.dirty.ratio": "1.5"},
		"local.retention.ms":              {"local.retention.ms": "999999999999", "retention.ms": "1000"},
		"remote.storage.enable":           {"remote.storage.enable": "yes please"},
		"compression.type":                {"compression.type": "brotli"},
		"message.timestamp.before.max.ms": {"message.timestamp.before.max.ms": "-1"},
		"message.timestamp.after.max.ms":  {"message.timestamp.after.max.ms": "soon"},
	}
	for key, m := range bad {
		_, err := backend.ParseConfig(m)
		var ce *backend.ConfigError
		if !errors.Is(err, backend.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Key != key || !strings.Contains(err.Error(), key) {
			t.Errorf("%v: err %v, want a ConfigError naming %q", m, err, key)
		}
	}
}

func TestOffsetOutOfRangeError(t *testing.T) {
	err := error(&backend.OffsetOutOfRangeError{Offset: 5, LogStart: 10, LogEnd: 20})
	if !errors.Is(err, backend.ErrOffsetOutOfRange) || !strings.Contains(err.Error(), "[10, 20]") {
		t.Fatal(err)
	}
}

func TestConfigKeys(t *testing.T) {
	keys := backend.ConfigKeys()
	m := map[string]string{}
	for _, k := range keys {
		if !backend.IsConfigKey(k.Name) {
			t.Errorf("backend.IsConfigKey(%q) = false", k.Name)
		}
		m[k.Name] = k.Default
	}
	// Setting every key to its listed default parses to the defaults.
	c, err := backend.ParseConfig(m)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, backend.DefaultConfig()) {
		t.Fatalf("defaults listed by ConfigKeys differ from DefaultConfig:\n%+v\n%+v", c, backend.DefaultConfig())
	}
	if len(keys) < 20 || backend.IsConfigKey("segment.byte") || !backend.IsConfigKey("compression.type") {
		t.Fatalf("%d keys; IsConfigKey wrong on a typo or a broker-owned key", len(keys))
	}
}

// TestLeaderValidationKeys: compression.type and the timestamp limits are
// fields the storage layer acts on, no longer broker-owned; Kafka 4.0
// removed message.timestamp.difference.max.ms, which is still accepted
// (a config carried over from 3.x) and ignored.
func TestLeaderValidationKeys(t *testing.T) {
	for _, v := range []string{"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"} {
		c, err := backend.ParseConfig(map[string]string{"compression.type": v})
		if err != nil || c.CompressionType != v || c.BrokerOwned["compression.type"] != "" {
			t.Errorf("compression.type=%s: %+v, %v", v, c, err)
		}
	}
	c, err := backend.ParseConfig(map[string]string{
		"message.timestamp.before.max.ms": "1000", "message.timestamp.after.max.ms": "0",
		"message.timestamp.difference.max.ms": "5",
	})
	if err != nil || c.MessageTimestampBeforeMaxMs != 1000 || c.MessageTimestampAfterMaxMs != 0 {
		t.Fatalf("parsed %+v, %v", c, err)
	}
	if c.BrokerOwned["message.timestamp.difference.max.ms"] != "5" {
		t.Errorf("message.timestamp.difference.max.ms not kept as broker-owned: %v", c.BrokerOwned)
	}
	for _, k := range []string{"compression.type", "message.timestamp.before.max.ms", "message.timestamp.after.max.ms"} {
		found := false
		for _, ck := range backend.ConfigKeys() {
			found = found || ck.Name == k
		}
		if !found {
			t.Errorf("ConfigKeys lacks %s", k)
		}
	}
	for _, bad := range []backend.Config{
		func() backend.Config { c := backend.DefaultConfig(); c.CompressionType = "LZ4"; return c }(),
		func() backend.Config { c := backend.DefaultConfig(); c.MessageTimestampAfterMaxMs = -1; return c }(),
		func() backend.Config { c := backend.DefaultConfig(); c.MessageTimestampBeforeMaxMs = -1; return c }(),
	} {
		var ce *backend.ConfigError
		if err := bad.Validate(); !errors.As(err, &ce) {
			t.Errorf("Validate accepted %q %d %d: %v", bad.CompressionType, bad.MessageTimestampBeforeMaxMs, bad.MessageTimestampAfterMaxMs, err)
		}
	}
}
