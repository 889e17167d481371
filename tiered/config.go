package tiered

import (
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/wal"
)

// ManagerConfig is the broker-wide configuration of a Backend's tiering
// service, with the names, defaults and meaning of Kafka's
// RemoteLogManagerConfig. The zero value of each field takes Kafka's
// default; ParseManagerConfig reads them from the broker's properties.
type ManagerConfig struct {
	// TaskInterval is how often each partition's copy, expiration and
	// follower work is looked at (remote.log.manager.task.interval.ms,
	// 30000). A led partition whose high watermark passes a closed segment
	// is queued at once, not at the next interval.
	TaskInterval time.Duration
	// CopierThreads upload segments, one partition's turn at a time
	// (remote.log.manager.copier.thread.pool.size, 10).
	CopierThreads int
	// ExpirationThreads apply remote retention and followers' work
	// (remote.log.manager.expiration.thread.pool.size, 10).
	ExpirationThreads int
	// CopyBytesPerSecond caps the broker's uploads, all partitions
	// together (remote.log.manager.copy.max.bytes.per.second; Kafka's
	// default, Long.MAX_VALUE, is no cap: 0 here).
	CopyBytesPerSecond int64
	// ReaderThreads and ReaderMaxPendingTasks bound remote reads
	// (remote.log.reader.threads, 10; remote.log.reader.max.pending.tasks,
	// 100): past both, a fetch fails at once with ErrRemoteReadsBusy.
	ReaderThreads         int
	ReaderMaxPendingTasks int
	// IndexFileCacheBytes bounds the remote indexes kept on disk under
	// <log dir>/remote-log-index-cache
	// (remote.log.index.file.cache.total.size.bytes, 1 GiB).
	IndexFileCacheBytes int64
	// RetryBackoff and RetryBackoffMax space the retries of a partition
	// whose task failed, doubling from the first to the second, with
	// RetryJitter (remote.log.manager.task.retry.backoff.ms, 500;
	// .backoff.max.ms, 30000; .jitter, 0.2).
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	RetryJitter     float64
	// DisklessCommitInterval and DisklessBufferMaxBytes shape the WAL
	// objects of diskless topics: one is uploaded at most this long after
	// its first append, or once it holds this many bytes
	// (diskless.produce.commit.interval.ms, 250;
	// diskless.produce.buffer.max.bytes, 8 MiB: Inkless's
	// produce.commit.interval.ms and produce.buffer.max.bytes).
	DisklessCommitInterval time.Duration
	DisklessBufferMaxBytes int
	// DisklessUploadsInFlight is how many WAL objects a Backend uploads
	// at once (diskless.produce.max.in.flight.uploads, 4; 1 to
	// wal.MaxInFlight). Appends still settle in object order.
	DisklessUploadsInFlight int
	// CompactMemoryBytes is the offset map of the bucket's cleaner, one
	// round at a time for the whole Backend, allocated at its first
	// round (remote.log.compaction.dedupe.buffer.size, 32 MiB); a dirty
	// section with more keys than fit is cleaned over several rounds.
	// CompactBytesPerSecond caps the bytes its rounds read and write
	// (remote.log.compaction.max.bytes.per.second; 0, the default, is no
	// cap): its own budget, apart from uploads'.
	CompactMemoryBytes    int
	CompactBytesPerSecond int64
}

// managerKeys are the keys ParseManagerConfig reads, with their defaults.
var managerKeys = map[string]string{
	"remote.log.manager.task.interval.ms":            "30000",
	"remote.log.manager.copier.thread.pool.size":     "10",
	"remote.log.manager.expiration.thread.pool.size": "10",
	"remote.log.manager.copy.max.bytes.per.second":   strconv.FormatInt(math.MaxInt64, 10),
	"remote.log.reader.threads":                      "10",
	"remote.log.reader.max.pending.tasks":            "100",
	"remote.log.index.file.cache.total.size.bytes":   strconv.FormatInt(1<<30, 10),
	"remote.log.manager.task.retry.backoff.ms":       "500",
	"remote.log.manager.task.retry.backoff.max.ms":   "30000",
	"remote.log.manager.task.retry.jitter":           "0.2",
	"diskless.produce.commit.interval.ms":            "250",
	"diskless.produce.buffer.max.bytes":              strconv.Itoa(8 << 20),
	"diskless.produce.max.in.flight.uploads":         "4",
	"remote.log.compaction.dedupe.buffer.size":       strconv.Itoa(32 << 20),
	"remote.log.compaction.max.bytes.per.second":     strconv.FormatInt(math.MaxInt64, 10),
}

// ManagerConfigKeys lists the keys ParseManagerConfig accepts, sorted.
func ManagerConfigKeys() []string {
	keys := make([]string, 0, len(managerKeys))
	for k := range managerKeys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ParseManagerConfig reads Kafka's remote log manager properties from a
// broker's properties (its whole server.properties): the keys of
// ManagerConfigKeys are applied, those missing take Kafka's defaults, and
// every other key of Kafka's broker is accepted and ignored
// (backend.CheckBrokerProperties). A key Kafka does not have, or a bad
// value, is a *backend.ConfigError naming it.
func ParseManagerConfig(props map[string]string) (ManagerConfig, error) {
	if err := backend.CheckBrokerProperties(props, func(k string) bool { _, ok := managerKeys[k]; return ok }); err != nil {
		return ManagerConfig{}, err
	}
	get := func(k string) string {
		if v, ok := props[k]; ok {
			return v
		}
		return managerKeys[k]
	}
	var c ManagerConfig
	var err error
	long := func(k string, min int64) int64 {
		if err != nil {
			return 0
		}
		v, perr := strconv.ParseInt(get(k), 10, 64)
		if perr != nil || v < min {
			err = &backend.ConfigError{Key: k, Value: get(k), Reason: "want an integer >= " + strconv.FormatInt(min, 10)}
		}
		return v
	}
	ms := func(k string) time.Duration { return time.Duration(long(k, 1)) * time.Millisecond }
	c.TaskInterval = ms("remote.log.manager.task.interval.ms")
	c.CopierThreads = int(long("remote.log.manager.copier.thread.pool.size", 1))
	c.ExpirationThreads = int(long("remote.log.manager.expiration.thread.pool.size", 1))
	if c.CopyBytesPerSecond = long("remote.log.manager.copy.max.bytes.per.second", 1); c.CopyBytesPerSecond == math.MaxInt64 {
		c.CopyBytesPerSecond = 0
	}
	c.ReaderThreads = int(long("remote.log.reader.threads", 1))
	c.ReaderMaxPendingTasks = int(long("remote.log.reader.max.pending.tasks", 1))
	c.IndexFileCacheBytes = long("remote.log.index.file.cache.total.size.bytes", 1)
	c.RetryBackoff = ms("remote.log.manager.task.retry.backoff.ms")
	c.RetryBackoffMax = ms("remote.log.manager.task.retry.backoff.max.ms")
	c.DisklessCommitInterval = ms("diskless.produce.commit.interval.ms")
	c.DisklessBufferMaxBytes = int(long("diskless.produce.buffer.max.bytes", 1))
	c.DisklessUploadsInFlight = int(long("diskless.produce.max.in.flight.uploads", 1))
	if mem := long("remote.log.compaction.dedupe.buffer.size", 1<<20); mem > math.MaxInt32 && err == nil {
		err = &backend.ConfigError{Key: "remote.log.compaction.dedupe.buffer.size", Value: get("remote.log.compaction.dedupe.buffer.size"), Reason: "want an integer from 1048576 to 2147483647"}
	} else {
		c.CompactMemoryBytes = int(mem)
	}
	if c.CompactBytesPerSecond = long("remote.log.compaction.max.bytes.per.second", 1); c.CompactBytesPerSecond == math.MaxInt64 {
		c.CompactBytesPerSecond = 0
	}
	if k := "diskless.produce.max.in.flight.uploads"; err == nil && c.DisklessUploadsInFlight > wal.MaxInFlight {
		err = &backend.ConfigError{Key: k, Value: get(k), Reason: "want an integer from 1 to " + strconv.Itoa(wal.MaxInFlight)}
	}
	if err != nil {
		return ManagerConfig{}, err
	}
	j := get("remote.log.manager.task.retry.jitter")
	c.RetryJitter, err = strconv.ParseFloat(j, 64)
	if err != nil || c.RetryJitter < 0 || c.RetryJitter > 0.5 {
		return ManagerConfig{}, &backend.ConfigError{Key: "remote.log.manager.task.retry.jitter", Value: j, Reason: "want a number in [0, 0.5]"}
	}
	return c, nil
}

// withDefaults fills the zero fields with Kafka's defaults.
func (c ManagerConfig) withDefaults() ManagerConfig {
	if c.TaskInterval <= 0 {
		c.TaskInterval = 30 * time.Second
	}
	if c.CopierThreads <= 0 {
		c.CopierThreads = 10
	}
	if c.ExpirationThreads <= 0 {
		c.ExpirationThreads = 10
	}
	if c.ReaderThreads <= 0 {
		c.ReaderThreads = 10
	}
	if c.ReaderMaxPendingTasks <= 0 {
		c.ReaderMaxPendingTasks = 100
	}
	if c.IndexFileCacheBytes <= 0 {
		c.IndexFileCacheBytes = 1 << 30
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 500 * time.Millisecond
	}
	if c.RetryBackoffMax <= 0 {
		c.RetryBackoffMax = 30 * time.Second
	}
	if c.RetryJitter <= 0 || c.RetryJitter > 0.5 {
		c.RetryJitter = 0.2
	}
	if c.DisklessCommitInterval <= 0 {
		c.DisklessCommitInterval = wal.DefaultCommitInterval
	}
	if c.DisklessBufferMaxBytes <= 0 {
		c.DisklessBufferMaxBytes = wal.DefaultBufferMaxBytes
	}
	if c.CompactMemoryBytes <= 0 {
		c.CompactMemoryBytes = 32 << 20
	}
	if c.DisklessUploadsInFlight <= 0 {
		c.DisklessUploadsInFlight = wal.MaxInFlight
	}
	return c
}
