package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/timingwheel"
	"github.com/tierlog/tierlog/timingwheel/purgatory"
)

// NodeID is the broker's node id in every Metadata answer.
const NodeID = 0

// Options configure a Broker. Dir is required; the rest have defaults.
type Options struct {
	// Listen is the TCP address to listen on (default 127.0.0.1:9092;
	// port 0 picks a free port, see Broker.Addr).
	Listen string
	// Advertise is the host:port clients are told to connect to (default:
	// the listener's address, with an unspecified host as 127.0.0.1).
	Advertise string
	// Dir holds the log directory and the broker's own files.
	Dir string
	// TopicConfig is the default topic config (Kafka's names), under
	// every topic's own overrides.
	TopicConfig map[string]string
	// Partitions is the partition count of auto-created topics and of
	// CreateTopics asking for the default (num.partitions, default 1).
	Partitions int32
	// NoAutoCreate turns auto.create.topics.enable off.
	NoAutoCreate bool
	// InitialRebalanceDelay is group.initial.rebalance.delay.ms (default
	// 300ms here; Kafka's is 3s).
	InitialRebalanceDelay time.Duration
	// CleanerBackoff is log.cleaner.backoff.ms (default 15s).
	CleanerBackoff time.Duration
	// CleanerMemoryBytes is log.cleaner.dedupe.buffer.size (default 16
	// MiB here: 24 bytes a key; Kafka's is 128 MiB).
	CleanerMemoryBytes int
	// OffsetsSegmentBytes is offsets.topic.segment.bytes (default 100 MiB).
	OffsetsSegmentBytes int64
	// Store, when set, is the bucket of the topics with
	// remote.storage.enable=true: the broker opens its log directory with
	// tiered.OpenBackend. Without it such a topic is refused
	// (INVALID_CONFIG). The caller closes Store after Close.
	Store *objstore.Store
	// StorePrefix is the key prefix of this broker's partitions in Store
	// (each under <StorePrefix>/<topic>-<partition>/; default none).
	StorePrefix string
	// RemoteLogManager holds Kafka's remote.log.manager.* and
	// remote.log.reader.* broker properties (tiered.ParseManagerConfig);
	// missing keys take Kafka's defaults. Only with Store.
	RemoteLogManager map[string]string
	// RemoteReadAheadBytes is how much a remote read of a partition
	// fetches ahead for the next one at least
	// (tiered.BackendOptions.PrefetchBytes; default the library's, 1 MiB;
	// -1: none). A read whose fetch asks for more of the partition (its
	// PartitionMaxBytes) fetches twice as much ahead as it asked for, within
	// the chunk cache's read-ahead budget (tiered.Options.PrefetchBytes).
	RemoteReadAheadBytes int64
	// MaxPartitions caps the partitions the broker holds, every topic's
	// together (__consumer_offsets' too; default 20,000): a creation
	// past it is refused with POLICY_VIOLATION. Each partition holds a
	// descriptor and two mappings while open.
	MaxPartitions int
	// MaxPartitionsPerRequest caps the partitions one CreateTopics asks
	// for, its topics together (default 10,000, Kafka's
	// MAX_RECORDS_PER_USER_OP): a request past it is refused whole with
	// POLICY_VIOLATION, as Kafka's controller refuses an excessively
	// large batch.
	MaxPartitionsPerRequest int
	// QueuedMaxRequestBytes bounds the bytes of the requests read and
	// not yet answered, across connections (Kafka's
	// queued.max.request.bytes; default 256 MiB here, Kafka's -1 is no
	// bound; negative: none): a connection whose next request does not
	// fit waits before it reads the body.
	QueuedMaxRequestBytes int64
	// ConnectionsMaxIdle closes a connection that sends no request, or
	// whose answer's write makes no progress, for this long (Kafka's
	// connections.max.idle.ms, default 10 minutes; negative: never).
	ConnectionsMaxIdle time.Duration
	// Logger receives the broker's events (default: discard).
	Logger *slog.Logger

	// wrapListener, set by tests only (export_test.go), wraps the
	// listener Start serves on.
	wrapListener func(net.Listener) net.Listener
	// ReadReplicaOf, when set, makes the broker a read replica of the
	// topics another cluster keeps in this bucket (under
	// ReadReplicaPrefix): it serves them to consumers from the bucket
	// alone (tiered.BackendOptions.ReadReplica), finds them by listing
	// the bucket at Start and every ReplicaDiscoveryInterval (default
	// 30s; each lists every object under the prefix), and writes nothing
	// there. Producing to them, creating and
	// deleting topics are refused (POLICY_VIOLATION); consumer groups
	// work (their offsets are this broker's own). Not with Store. The
	// caller closes it after Close.
	ReadReplicaOf            *objstore.Store
	ReadReplicaPrefix        string
	ReplicaDiscoveryInterval time.Duration
	// openHook, set by tests only (export_test.go), runs before each
	// partition a topic opens; an error fails the open.
	openHook func(topic string, partition int32) error
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.Dir == "" {
		return errors.New("broker: Options.Dir is required")
	}
	if o.Partitions < 0 {
		return fmt.Errorf("broker: Options.Partitions %d < 0", o.Partitions)
	}
	if o.MaxPartitions < 0 || o.MaxPartitionsPerRequest < 0 {
		return fmt.Errorf("broker: Options.MaxPartitions %d, MaxPartitionsPerRequest %d: want >= 0 (0: the default)",
			o.MaxPartitions, o.MaxPartitionsPerRequest)
	}
	if _, err := backend.ParseConfig(o.TopicConfig); err != nil {
		return fmt.Errorf("broker: default topic config: %w", err)
	}
	if len(o.RemoteLogManager) > 0 && o.Store == nil && o.ReadReplicaOf == nil {
		return errors.New("broker: Options.RemoteLogManager without a Store")
	}
	if o.Store != nil && o.ReadReplicaOf != nil {
		return errors.New("broker: Options.Store and ReadReplicaOf: a read replica serves another cluster's bucket and tiers nothing of its own")
	}
	if _, err := tiered.ParseManagerConfig(o.RemoteLogManager); err != nil {
		return fmt.Errorf("broker: remote log manager config: %w", err)
	}
	return nil
}

func (o *Options) setDefaults() {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:9092"
	}
	if o.Partitions == 0 {
		o.Partitions = 1
	}
	if o.InitialRebalanceDelay == 0 {
		o.InitialRebalanceDelay = 300 * time.Millisecond
	}
	if o.CleanerBackoff == 0 {
		o.CleanerBackoff = 15 * time.Second
	}
	if o.CleanerMemoryBytes == 0 {
		o.CleanerMemoryBytes = 16 << 20
	}
	if o.OffsetsSegmentBytes == 0 {
		o.OffsetsSegmentBytes = 100 << 20
	}
	if o.MaxPartitions == 0 {
		o.MaxPartitions = 20000
	}
	if o.ReadReplicaOf != nil {
		o.NoAutoCreate = true // a read replica's topics are the bucket's
		if o.ReplicaDiscoveryInterval <= 0 {
			o.ReplicaDiscoveryInterval = 30 * time.Second
		}
	}
	if o.MaxPartitionsPerRequest == 0 {
		o.MaxPartitionsPerRequest = 10000
	}
	if o.QueuedMaxRequestBytes == 0 {
		o.QueuedMaxRequestBytes = 256 << 20
	}
	if o.ConnectionsMaxIdle == 0 {
		o.ConnectionsMaxIdle = 10 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Broker serves Kafka's protocol over a backend.Backend.
type Broker struct {
	opts    Options
	logger  *slog.Logger
	logs    *local.Backend
	be      backend.Backend // logs, or a tiered backend over it
	cleaner *compaction.Cleaner
	timer   *timingwheel.Timer
	// fetches holds long-poll Fetches; produces acks=-1 Produces (and the
	// coordinators' writes) waiting for the high watermark. The partition
	// watchers complete both.
	fetches  *purgatory.Purgatory[backend.TopicPartition]
	produces *purgatory.Purgatory[backend.TopicPartition]
	state    *stateFile
	ln       net.Listener
	mem      *requestMemory // the bytes of requests in flight
	bodies   bodyPool       // request buffers over keepBufferBytes, between requests
	requests atomic.Int64   // requests read since Start (Stats)
	// bufferBytes is the connections' buffers between requests (Stats).
	bufferBytes atomic.Int64
	groups      *groupCoordinator
	txns        *txnCoordinator
	offsets     *offsetLog

	// configMu serializes topic config changes (their partitions'
	// SetConfig, then topics.json). Lock order: configMu, then mu.
	configMu sync.Mutex

	// mu guards the fields below.
	mu     sync.RWMutex
	topics map[string]*topic
	// creating holds the names of topics being created (their partition
	// counts) or deleted (0), with the files' I/O under way outside mu.
	creating map[string]int32
	// partitionCount is the partitions of topics, together.
	partitionCount int
	conns          map[net.Conn]struct{}
	closed         bool

	connWG  sync.WaitGroup // connection goroutines
	watchWG sync.WaitGroup // partition watchers
	stop    chan struct{}  // closed by Close once connections are done: watchers return
	closing chan struct{}  // closed when Close begins
	// life is the context of every request and of replica discovery's
	// opens, cancelled when Close begins: a request waiting on the
	// bucket (a diskless append waiting for WAL buffer space, a remote
	// read) gives up then, instead of holding Close up.
	life       context.Context
	cancelLife context.CancelFunc
}

// topic is one topic's partitions and its own config overrides.
type topic struct {
	name      string
	overrides map[string]string
	parts     []*partition
	// replica: a read replica's topic (Options.ReadReplicaOf), the
	// bucket's, not in topics.json.
	replica bool
}

// partition is an open partition, led by this broker.
type partition struct {
	tp backend.TopicPartition
	p  backend.Partition
	// epoch is the leader epoch this broker leads the partition at (see
	// the package doc); fixed while the partition is open.
	epoch int32
	// mu serializes appends, DeleteRecords and the high watermark's moves
	// (advanceHighWatermark), so the high watermark never moves back.
	mu sync.Mutex
	// holdHW, set by tests only (export_test.go), stops the high
	// watermark from following the log end: a replica that stopped
	// fetching.
	holdHW atomic.Bool
}

// Start opens Dir, loads the topics, the committed offsets and the
// transactions, and serves on Options.Listen until Close.
func Start(opts Options) (_ *Broker, err error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	b := &Broker{opts: opts, logger: opts.Logger, topics: map[string]*topic{}, creating: map[string]int32{},
		conns: map[net.Conn]struct{}{}, stop: make(chan struct{}), closing: make(chan struct{}),
		mem: newRequestMemory(opts.QueuedMaxRequestBytes)}
	b.life, b.cancelLife = context.WithCancel(context.Background())
	cleanup := []func(){b.cancelLife}
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	if err := b.openBackend(); err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { b.be.Close() })
	b.timer, err = timingwheel.New(context.Background(), timingwheel.Options{})
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, b.timer.Close)
	if b.fetches, err = purgatory.New[backend.TopicPartition](b.timer, purgatory.Options{}); err != nil {
		return nil, err
	}
	cleanup = append(cleanup, b.fetches.Close)
	if b.produces, err = purgatory.New[backend.TopicPartition](b.timer, purgatory.Options{}); err != nil {
		return nil, err
	}
	cleanup = append(cleanup, b.produces.Close)
	cleanup = append(cleanup, func() { close(b.stop); b.watchWG.Wait() })
	if b.state, err = openState(opts.Dir); err != nil {
		return nil, err
	}
	if err := b.openTopics(); err != nil {
		return nil, err
	}
	if b.offsets, err = openOffsetLog(b); err != nil {
		return nil, err
	}
	if b.opts.ReadReplicaOf != nil {
		// The bucket may be down: the broker starts all the same, and
		// the discovery tries again every interval.
		if err := b.openReplicaTopics(context.Background()); err != nil {
			b.logger.Warn("read replica: could not open every topic of the bucket; the next discovery tries again", "err", err)
		}
		b.watchWG.Add(1)
		go b.discoverReplicaTopics()
	}
	b.groups = newGroupCoordinator(b)
	cleanup = append(cleanup, b.groups.close)
	if b.txns, err = newTxnCoordinator(b); err != nil {
		return nil, err
	}
	b.cleaner, err = compaction.NewCleaner(b.logs, compaction.CleanerOptions{Backoff: opts.CleanerBackoff,
		MemoryBytes: opts.CleanerMemoryBytes, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	b.cleaner.Start()
	cleanup = append(cleanup, b.cleaner.Stop)
	b.ln, err = net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, err
	}
	if opts.wrapListener != nil {
		b.ln = opts.wrapListener(b.ln)
	}
	b.connWG.Add(1)
	go b.accept()
	b.logger.Info("broker started", "addr", b.ln.Addr().String(), "dir", opts.Dir)
	return b, nil
}

// openBackend opens the log directory: a tiered.Backend over it when
// Options.Store is set, else a local.Backend.
func (b *Broker) openBackend() error {
	dir := filepath.Join(b.opts.Dir, "logs")
	lopts := local.BackendOptions{Logger: b.opts.Logger, BackgroundInterval: 10 * time.Second}
	if b.opts.ReadReplicaOf != nil {
		mc, err := tiered.ParseManagerConfig(b.opts.RemoteLogManager)
		if err != nil {
			return err
		}
		if _, set := b.opts.RemoteLogManager["remote.log.manager.task.interval.ms"]; !set {
			// A replica follows its origin's commits each task interval:
			// Kafka's 30 s would keep it half a minute behind.
			mc.TaskInterval = time.Second
		}
		t, err := tiered.OpenBackend(dir, tiered.BackendOptions{Store: b.opts.ReadReplicaOf, Prefix: b.opts.ReadReplicaPrefix, Local: lopts,
			Manager: mc, Logger: b.opts.Logger, PrefetchBytes: b.opts.RemoteReadAheadBytes, ReadReplica: true})
		if err != nil {
			return err
		}
		b.logs, b.be = t.Local(), t
		return nil
	}
	if b.opts.Store == nil {
		l, err := local.OpenBackend(dir, lopts)
		if err != nil {
			return err
		}
		b.logs, b.be = l, l
		return nil
	}
	mc, err := tiered.ParseManagerConfig(b.opts.RemoteLogManager)
	if err != nil {
		return err
	}
	t, err := tiered.OpenBackend(dir, tiered.BackendOptions{Store: b.opts.Store, Prefix: b.opts.StorePrefix, Local: lopts,
		Manager: mc, Logger: b.opts.Logger, PrefetchBytes: b.opts.RemoteReadAheadBytes})
	if err != nil {
		return err
	}
	// The cleaner works on the local log directory underneath.
	b.logs, b.be = t.Local(), t
	return nil
}

// openTopics opens the topics of topics.json at Start, each at a leader
// epoch one above the last start's (see the package doc), saved before
// any partition leads at it.
func (b *Broker) openTopics() error {
	type opened struct {
		t     *topic
		epoch int32
	}
	var all []opened
	epochs := map[string]int32{}
	for name, ts := range b.state.topics() {
		t, latest, err := b.openTopic(name, ts.Partitions, ts.Config, false)
		if err != nil {
			return err
		}
		epoch := max(ts.LeaderEpoch+1, latest+1)
		all = append(all, opened{t, epoch})
		epochs[name] = epoch
	}
	if err := b.state.setEpochs(epochs); err != nil {
		return err
	}
	b.mu.Lock() // the watchers lead starts read b.topics
	defer b.mu.Unlock()
	for _, o := range all {
		if err := b.becomeLeader(o.t, o.epoch); err != nil {
			return err
		}
		b.serveLocked(o.t)
	}
	return nil
}

// Addr is the address the broker listens on.
func (b *Broker) Addr() string { return b.ln.Addr().String() }

// Partition returns the open partition topic-i (a *tiered.Partition for a
// tiered topic), or nil: for tests and tools beside the broker. The
// broker leads it; callers MUST NOT append to it or move its high
// watermark.
func (b *Broker) Partition(topic string, i int32) backend.Partition {
	if p := b.partition(topic, i); p != nil {
		return p.p
	}
	return nil
}

// Cleaner is the log cleaner of the broker's compacted topics.
func (b *Broker) Cleaner() *compaction.Cleaner { return b.cleaner }

// Close stops serving, answers parked requests, and closes the log
// directory cleanly (checkpoints and the clean-shutdown marker).
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.closing)
	b.cancelLife()
	b.mu.Unlock()
	b.ln.Close()
	b.fetches.Close()  // parked fetches answer now
	b.produces.Close() // parked produces answer REQUEST_TIMED_OUT
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.mem.close() // connections waiting for memory give up
	b.connWG.Wait()
	b.groups.close()
	close(b.stop)
	b.watchWG.Wait()
	b.cleaner.Stop()
	err := b.be.Close()
	b.timer.Close()
	b.logger.Info("broker stopped", "err", err)
	return err
}

// Accept backoff: after a failed accept the loop waits acceptBackoffMin,
// doubling to acceptBackoffMax while accepts keep failing, as Go's
// http.Server does.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// accept serves each connection in a goroutine of its own until the
// listener is closed. A failed accept is retried after a backoff, never
// the end of the loop: EMFILE or ENFILE (out of descriptors: the
// connections that hold them close in time), ECONNABORTED (a client gone
// before its accept), and any other error but the listener's close, as
// Kafka's Acceptor logs an accept's IOException and goes on. A listener
// whose port still listens while nothing answers is the one outcome
// that must not happen.
func (b *Broker) accept() {
	defer b.connWG.Done()
	var backoff time.Duration
	for {
		c, err := b.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
			b.logger.Warn("accept failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-b.closing:
				return
			}
		}
		backoff = 0
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			c.Close()
			return
		}
		b.conns[c] = struct{}{}
		b.connWG.Add(1)
		b.mu.Unlock()
		go func() {
			defer b.connWG.Done()
			b.serveConn(c)
			b.mu.Lock()
			delete(b.conns, c)
			b.mu.Unlock()
		}()
	}
}

// watch is a partition's replication loop on a single node: each time
// the partition's offsets move (Changed) it advances the high watermark
// to the log end, then completes the parked requests that can complete:
// acks=-1 produces whose batches are now below the high watermark, and
// long-poll fetches with something new to read.
func (b *Broker) watch(p *partition) {
	defer b.watchWG.Done()
	for {
		// Ask for the next change before reading the offsets, so a move
		// during this pass wakes the next one.
		changed := p.p.Changed()
		if err := b.advanceHighWatermark(p); err != nil && !errors.Is(err, backend.ErrClosed) {
			b.logger.Warn("high watermark", "partition", p.tp.String(), "err", err)
		}
		b.produces.CheckAndComplete(p.tp)
		b.fetches.CheckAndComplete(p.tp)
		// A closed partition's channel stays closed: stop watching it.
		if b.partition(p.tp.Topic, p.tp.Partition) != p {
			return
		}
		select {
		case <-changed:
		case <-b.stop:
			return
		}
	}
}

// advanceHighWatermark moves the high watermark to the log end: the
// leader's log end is the smallest of the in-sync replicas' when the
// leader is the only one (Kafka's maybeIncrementLeaderHW). It is the one
// place the broker moves a high watermark.
func (b *Broker) advanceHighWatermark(p *partition) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holdHW.Load() {
		return nil
	}
	if r, ok := p.p.(interface{ ReadReplica() bool }); ok && r.ReadReplica() {
		return nil // the bucket's end is a read replica's high watermark; it moves it itself
	}
	// Only a move: SetHighWatermark wakes Changed even when the value
	// stays.
	if o := p.p.Offsets(); o.HighWatermark < o.LogEnd {
		return p.p.SetHighWatermark(o.LogEnd)
	}
	return nil
}

// append appends batches as the leader, stamped with its epoch. The high
// watermark follows (watch), so the batches are readable by consumers
// and acknowledged to acks=-1 producers once it passes them.
func (p *partition) append(ctx context.Context, batches []byte, coordinator bool) (backend.AppendInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.p.Append(ctx, batches, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: p.epoch, Coordinator: coordinator})
}
