package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/timingwheel"
	"github.com/tierlog/tierlog/timingwheel/purgatory"
)

// NodeID is the broker's node id in every Metadata answer.
const NodeID = 0

// leaderEpoch is the partitions' leader epoch: one node never elects
// another leader, so it never changes.
const leaderEpoch = 0

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
	// Logger receives the broker's events (default: discard).
	Logger *slog.Logger
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.Dir == "" {
		return errors.New("broker: Options.Dir is required")
	}
	if o.Partitions < 0 {
		return fmt.Errorf("broker: Options.Partitions %d < 0", o.Partitions)
	}
	if _, err := backend.ParseConfig(o.TopicConfig); err != nil {
		return fmt.Errorf("broker: default topic config: %w", err)
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
	fetches *purgatory.Purgatory[backend.TopicPartition]
	state   *stateFile
	ln      net.Listener
	groups  *groupCoordinator
	txns    *txnCoordinator
	offsets *offsetLog

	// mu guards the fields below.
	mu     sync.RWMutex
	topics map[string]*topic
	conns  map[net.Conn]struct{}
	closed bool

	connWG  sync.WaitGroup // connection goroutines
	watchWG sync.WaitGroup // partition watchers
	stop    chan struct{}  // closed by Close once connections are done: watchers return
	closing chan struct{}  // closed when Close begins
}

// topic is one topic's partitions and its own config overrides.
type topic struct {
	name      string
	overrides map[string]string
	parts     []*partition
}

// partition is an open partition.
type partition struct {
	tp backend.TopicPartition
	p  backend.Partition
	// mu serializes an append and the high watermark move after it, so
	// the high watermark never moves back.
	mu sync.Mutex
}

// Start opens Dir, loads the topics, the committed offsets and the
// transactions, and serves on Options.Listen until Close.
func Start(opts Options) (_ *Broker, err error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	b := &Broker{opts: opts, logger: opts.Logger, topics: map[string]*topic{}, conns: map[net.Conn]struct{}{},
		stop: make(chan struct{}), closing: make(chan struct{})}
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	b.logs, err = local.OpenBackend(filepath.Join(opts.Dir, "logs"), local.BackendOptions{Logger: opts.Logger,
		BackgroundInterval: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { b.logs.Close() })
	b.be = b.logs
	b.timer, err = timingwheel.New(context.Background(), timingwheel.Options{})
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, b.timer.Close)
	b.fetches, err = purgatory.New[backend.TopicPartition](b.timer, purgatory.Options{})
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, b.fetches.Close)
	cleanup = append(cleanup, func() { close(b.stop); b.watchWG.Wait() })
	if b.state, err = openState(opts.Dir); err != nil {
		return nil, err
	}
	for name, t := range b.state.topics() {
		if err := b.openTopic(name, t.Partitions, t.Config); err != nil {
			return nil, err
		}
	}
	if b.offsets, err = openOffsetLog(b); err != nil {
		return nil, err
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
	b.connWG.Add(1)
	go b.accept()
	b.logger.Info("broker started", "addr", b.ln.Addr().String(), "dir", opts.Dir)
	return b, nil
}

// Addr is the address the broker listens on.
func (b *Broker) Addr() string { return b.ln.Addr().String() }

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
	b.mu.Unlock()
	b.ln.Close()
	b.fetches.Close() // parked fetches answer now
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
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

func (b *Broker) accept() {
	defer b.connWG.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
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

// topicConfig merges the broker's defaults and a topic's overrides.
func (b *Broker) topicConfig(overrides map[string]string) (backend.Config, error) {
	m := make(map[string]string, len(b.opts.TopicConfig)+len(overrides))
	for k, v := range b.opts.TopicConfig {
		m[k] = v
	}
	for k, v := range overrides {
		m[k] = v
	}
	return backend.ParseConfig(m)
}

// openTopic opens a known topic's partitions. REQUIRES: b.mu held, or
// the broker not yet serving.
func (b *Broker) openTopic(name string, n int32, overrides map[string]string) error {
	cfg, err := b.topicConfig(overrides)
	if err != nil {
		return err
	}
	t := &topic{name: name, overrides: overrides}
	for i := range n {
		p, err := b.be.Open(context.Background(), name, i, cfg)
		if err != nil {
			return err
		}
		// One node is the whole ISR: everything appended is replicated.
		if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
			return err
		}
		part := &partition{tp: backend.TopicPartition{Topic: name, Partition: i}, p: p}
		t.parts = append(t.parts, part)
		b.watchWG.Add(1)
		go b.watch(part)
	}
	b.topics[name] = t
	return nil
}

// createTopic creates and opens a topic; it reports false when the topic
// exists already.
func (b *Broker) createTopic(name string, n int32, overrides map[string]string) (bool, error) {
	if n <= 0 {
		n = b.opts.Partitions
	}
	if _, err := b.topicConfig(overrides); err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false, backend.ErrClosed
	}
	if _, ok := b.topics[name]; ok {
		return false, nil
	}
	if err := b.state.putTopic(name, n, overrides); err != nil {
		return false, err
	}
	if err := b.openTopic(name, n, overrides); err != nil {
		return false, err
	}
	b.logger.Info("topic created", "topic", name, "partitions", n, "config", overrides)
	return true, nil
}

// deleteTopic removes a topic and its data.
func (b *Broker) deleteTopic(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[name]
	if !ok {
		return backend.ErrNotFound
	}
	delete(b.topics, name)
	if err := b.state.deleteTopic(name); err != nil {
		return err
	}
	var errs []error
	for _, p := range t.parts {
		errs = append(errs, b.be.Delete(context.Background(), name, p.tp.Partition))
	}
	return errors.Join(errs...)
}

// partition returns an open partition, or nil.
func (b *Broker) partition(name string, i int32) *partition {
	b.mu.RLock()
	defer b.mu.RUnlock()
	t := b.topics[name]
	if t == nil || i < 0 || int(i) >= len(t.parts) {
		return nil
	}
	return t.parts[i]
}

// topic returns a topic, creating it with the defaults when auto-creation
// is on and create is set.
func (b *Broker) topic(name string, create bool) (*topic, error) {
	b.mu.RLock()
	t := b.topics[name]
	b.mu.RUnlock()
	if t != nil || !create || b.opts.NoAutoCreate {
		return t, nil
	}
	if _, err := b.createTopic(name, 0, nil); err != nil {
		return nil, err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.topics[name], nil
}

// topicNames lists the topics, sorted.
func (b *Broker) topicNames() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	names := make([]string, 0, len(b.topics))
	for n := range b.topics {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// watch wakes the parked fetches of a partition whenever its offsets move.
func (b *Broker) watch(p *partition) {
	defer b.watchWG.Done()
	for {
		select {
		case <-p.p.Changed():
		case <-b.stop:
			return
		}
		b.fetches.CheckAndComplete(p.tp)
		// A closed partition's channel stays closed: stop watching it.
		if b.partition(p.tp.Topic, p.tp.Partition) != p {
			return
		}
	}
}

// append appends batches as the leader and moves the high watermark to
// the log end.
func (p *partition) append(ctx context.Context, batches []byte, coordinator bool) (backend.AppendInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	info, err := p.p.Append(ctx, batches, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: leaderEpoch, Coordinator: coordinator})
	if err != nil {
		return info, err
	}
	if err := p.p.SetHighWatermark(p.p.Offsets().LogEnd); err != nil {
		return info, err
	}
	return info, nil
}
