package broker

import (
	"errors"
	"fmt"
	"maps"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tierlog/tierlog/backend"
)

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

// openTopic opens a topic's partitions, not yet led. latest is the
// largest leader epoch any of its partitions' local logs holds records of
// (-1 when none: an empty or new log). It does file I/O: the caller
// MUST NOT hold b.mu, except at Start (the broker not yet serving). On
// an error nothing stays open: the partitions it opened are closed, and
// with remove (a topic being created) their directories removed too.
func (b *Broker) openTopic(name string, n int32, overrides map[string]string, remove bool) (_ *topic, latest int32, err error) {
	cfg, err := b.topicConfig(overrides)
	if err != nil {
		return nil, -1, err
	}
	latest = -1
	t := &topic{name: name, overrides: overrides}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.closeTopic(t, n, remove))
		}
	}()
	for i := range n {
		if b.opts.openHook != nil {
			if err := b.opts.openHook(name, i); err != nil {
				return nil, -1, err
			}
		}
		p, err := b.be.Open(b.life, name, i, cfg)
		if err != nil {
			return nil, -1, fmt.Errorf("broker: open %s-%d: %w", name, i, err)
		}
		t.parts = append(t.parts, &partition{tp: backend.TopicPartition{Topic: name, Partition: i}, p: p})
		latest = max(latest, latestLocalEpoch(p))
	}
	return t, latest, nil
}

// closeTopic undoes openTopic for a topic that never served: it closes
// the partitions opened, or with remove deletes partitions 0..n-1 (an
// open that failed may have left a directory behind).
func (b *Broker) closeTopic(t *topic, n int32, remove bool) error {
	var errs []error
	if !remove {
		for _, p := range t.parts {
			errs = append(errs, p.p.Close())
		}
		return errors.Join(errs...)
	}
	for i := range n {
		if err := b.be.Delete(b.life, t.name, i); err != nil && !errors.Is(err, backend.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// latestLocalEpoch is the largest leader epoch p holds records of, or -1.
// It reads no bucket: EndOffsetForEpoch would do, but on a tiered
// partition it may read the bucket, and opening must not need the bucket
// (a tiered partition's LatestLeaderEpoch is its local log's or its
// committed manifest's head's, in memory). The library has no accessor
// for it on backend.Partition (see docs/embedding.md).
func latestLocalEpoch(p backend.Partition) int32 {
	l, ok := p.(interface{ LatestLeaderEpoch() int32 })
	if !ok {
		return -1
	}
	return l.LatestLeaderEpoch()
}

// becomeLeader makes the broker the leader of t's partitions at epoch,
// before their first append: BecomeLeader (the local log records where
// the epoch starts; a tiered partition starts uploading) and the high
// watermark to the log end (one node is the whole ISR). It does file
// I/O: the caller MUST NOT hold b.mu, except at Start.
func (b *Broker) becomeLeader(t *topic, epoch int32) error {
	for _, p := range t.parts {
		if err := p.p.BecomeLeader(b.life, epoch); err != nil {
			return fmt.Errorf("broker: %s: become leader at epoch %d: %w", p.tp, epoch, err)
		}
		p.epoch = epoch
		if err := b.advanceHighWatermark(p); err != nil {
			return err
		}
	}
	return nil
}

// serveLocked publishes a led topic: it serves from then on, with a
// watcher a partition. REQUIRES: b.mu held.
func (b *Broker) serveLocked(t *topic) {
	// Serving first: a watcher stops when its partition is not served.
	b.topics[t.name] = t
	b.partitionCount += len(t.parts)
	for _, p := range t.parts {
		b.watchWG.Add(1)
		go b.watch(p)
	}
}

// createTopic creates and opens a topic of n partitions (n <= 0: the
// default); it reports false when the topic exists or is being created.
// Broker.mu is held only to check and reserve the name and the
// partitions (Options.MaxPartitions), and to publish the topic: the
// file I/O between (each partition's directory and files, topics.json,
// the leader epochs) runs without it, so other clients are answered
// meanwhile. A creation that fails leaves nothing: what it opened is
// closed and removed, and topics.json forgets it.
func (b *Broker) createTopic(name string, n int32, overrides map[string]string) (_ bool, err error) {
	if n <= 0 {
		n = b.opts.Partitions
	}
	if _, err := b.topicConfig(overrides); err != nil {
		return false, err
	}
	if ok, err := b.reserve(name, n); !ok || err != nil {
		return false, err
	}
	defer b.release(name)
	t, latest, err := b.openTopic(name, n, overrides, true)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.state.deleteTopic(name), b.closeTopic(t, n, true))
		}
	}()
	// A new topic leads at epoch 0, unless the log directory holds its
	// partitions already (a restored directory): then above their epochs.
	epoch := latest + 1
	if err := b.state.putTopic(name, topicState{Partitions: n, Config: overrides, LeaderEpoch: epoch}); err != nil {
		return false, err
	}
	if err := b.becomeLeader(t, epoch); err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false, backend.ErrClosed
	}
	b.serveLocked(t)
	b.logger.Info("topic created", "topic", name, "partitions", n, "config", overrides, "leader_epoch", epoch)
	return true, nil
}

// reserve claims name and n partitions for a creation under way; false
// when the topic exists or another creation holds the name. Past
// Options.MaxPartitions it is POLICY_VIOLATION.
func (b *Broker) reserve(name string, n int32) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false, backend.ErrClosed
	}
	if _, ok := b.topics[name]; ok {
		return false, nil
	}
	if _, ok := b.creating[name]; ok {
		return false, nil
	}
	if err := b.roomLocked(name, n); err != nil {
		return false, err
	}
	b.creating[name] = n
	return true, nil
}

// roomLocked refuses n partitions more of topic name past MaxPartitions,
// counting those served and those being created. REQUIRES: b.mu held.
func (b *Broker) roomLocked(name string, n int32) error {
	held := b.partitionCount
	for _, c := range b.creating {
		held += int(c)
	}
	if held+int(n) > b.opts.MaxPartitions {
		return fmt.Errorf("%w: %s: %d partitions more would make %d, past the broker's %d (MaxPartitions)",
			kerr.PolicyViolation, name, n, held+int(n), b.opts.MaxPartitions)
	}
	return nil
}

// release ends a creation's reservation (the topic serves, or failed).
func (b *Broker) release(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.creating, name)
}

// deleteTopic removes a topic and its data; Broker.mu is held only to
// take it out of service.
func (b *Broker) deleteTopic(name string) error {
	b.mu.Lock()
	t, ok := b.topics[name]
	if ok {
		// The name stays held (a reservation of no partitions) until
		// the files are gone: a creation of the same name meanwhile
		// would open the directories this removes.
		delete(b.topics, name)
		b.partitionCount -= len(t.parts)
		b.creating[name] = 0
	}
	b.mu.Unlock()
	if !ok {
		return backend.ErrNotFound
	}
	defer b.release(name)
	if err := b.state.deleteTopic(name); err != nil {
		return err
	}
	var errs []error
	for _, p := range t.parts {
		errs = append(errs, b.be.Delete(b.life, name, p.tp.Partition))
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
	if t := b.topics[name]; t != nil {
		return t, nil
	}
	if _, ok := b.creating[name]; ok {
		// Another request's creation (or deletion) of it is under
		// way: Kafka's answer for a topic not yet led.
		return nil, fmt.Errorf("%w: topic %s is being created or deleted", kerr.LeaderNotAvailable, name)
	}
	return nil, nil
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

// overrides returns a copy of t's config overrides.
func (b *Broker) overrides(t *topic) map[string]string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return maps.Clone(t.overrides)
}
