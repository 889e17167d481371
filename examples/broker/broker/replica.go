package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/seal"
)

// A read replica broker (Options.ReadReplicaOf) serves the topics another
// cluster keeps in a bucket: each partition with a manifest under
// ReadReplicaPrefix is opened as a read replica (tiered's replica.go),
// which follows the origin's commits and serves its records from the
// bucket. The topics are found by listing the bucket, at Start and every
// ReplicaDiscoveryInterval; a topic or partition found later is served
// from then on.

// replicaOverrides is a replica topic's config: tiered, as its origin's.
var replicaOverrides = map[string]string{"remote.storage.enable": "true"}

// errReplicaWrite refuses a write to a replica topic.
func errReplicaWrite(topic string) error {
	return fmt.Errorf("%w: %s is served by a read replica of its origin's bucket; write to the origin's cluster", kerr.PolicyViolation, topic)
}

// isReplicaTopic says whether name is a topic this replica serves from
// the bucket.
func (b *Broker) isReplicaTopic(name string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	t := b.topics[name]
	return t != nil && t.replica
}

// bucketTopics lists the bucket's partitions under the replica prefix:
// topic -> partitions (one past the largest with a manifest).
func (b *Broker) bucketTopics(ctx context.Context) (map[string]int32, error) {
	topics, err := bucketPartitions(ctx, b.opts.ReadReplicaOf, b.opts.ReadReplicaPrefix)
	if err != nil {
		return nil, fmt.Errorf("broker: list the read replica's bucket: %w", err)
	}
	return topics, nil
}

// pastDir sorts after every key under a partition's directory (no key
// holds a character above U+10FFFF) and before the next directory's.
const pastDir = "\U0010FFFF"

// bucketPartitions lists the partitions with a manifest under root in
// store: topic -> partitions (one past the largest). A folder's objects
// (a partition's, or the WAL's) are listed while they are few; past a
// page of them (1,000 keys: a long remote log), the listing skips to the
// next folder, and a HEAD asks for a partition's manifest if the listing
// had not reached it yet. So a bucket of a few partitions with 100,000
// segments each costs a few requests a partition, not one for every
// 1,000 objects.
func bucketPartitions(ctx context.Context, store *objstore.Store, root string) (map[string]int32, error) {
	root = strings.Trim(root, "/")
	prefix := ""
	if root != "" {
		prefix = root + "/"
	}
	topics := map[string]int32{}
	found := func(k manifest.Key) { topics[k.Topic] = max(topics[k.Topic], k.Partition+1) }
	after := ""
	for {
		var dir string // the folder under prefix being listed ("" for none)
		n, seen, skip := 0, false, false
		err := store.ListAfter(ctx, prefix, after, func(o objstore.ObjectInfo) bool {
			d := ""
			if i := strings.IndexByte(o.Key[len(prefix):], '/'); i >= 0 {
				d = o.Key[:len(prefix)+i+1]
			}
			if d != dir {
				dir, n, seen = d, 0, false
			}
			if k, err := manifest.ParseKey(o.Key); err == nil && k.Root == root && k.Kind == manifest.KindManifest {
				found(k)
				seen = true
			}
			if n++; n > 1000 && dir != "" {
				skip = true // past a page of one folder: skip the rest of it
				return false
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		if !skip {
			return topics, nil // the listing ran to its end
		}
		if k, err := manifest.ParseKey(dir + manifest.ManifestName); !seen && err == nil && k.Root == root {
			if _, err := store.Head(ctx, dir+manifest.ManifestName); err == nil {
				found(k)
			} else if !errors.Is(err, objstore.ErrNotFound) {
				return nil, err
			}
		}
		after = dir + pastDir
	}
}

// openReplicaTopics opens and serves the bucket's topics not served yet,
// within MaxPartitions (a topic that would pass it is refused, as a
// creation is). A name this broker has a topic of its own by
// (__consumer_offsets) is skipped, and so is a topic its origin deleted
// (every partition's manifest says so). A topic that cannot be opened is
// skipped until the next discovery.
func (b *Broker) openReplicaTopics(ctx context.Context) error {
	found, err := b.bucketTopics(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(found)) {
		b.mu.RLock()
		t, served := b.topics[name]
		b.mu.RUnlock()
		if internalTopic(name) || served && !t.replica {
			continue
		}
		if served {
			if int(found[name]) > len(t.parts) {
				errs = append(errs, b.growReplicaTopic(t, found[name]))
			}
			continue
		}
		if gone, err := b.deletedInBucket(ctx, name, found[name]); err != nil || gone {
			errs = append(errs, err)
			continue
		}
		if err := b.openReplicaTopic(name, found[name]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// openReplicaTopic opens and serves one topic of the bucket.
func (b *Broker) openReplicaTopic(name string, n int32) error {
	ok, err := b.reserve(name, n)
	if !ok || err != nil {
		return err
	}
	defer b.release(name)
	t, _, err := b.openTopic(name, n, replicaOverrides, false)
	if err != nil {
		return err
	}
	t.replica = true
	b.mu.Lock()
	b.serveLocked(t)
	b.mu.Unlock()
	b.logger.Info("read replica: serving a topic of the bucket", "topic", name, "partitions", n)
	return nil
}

// growReplicaTopic serves the partitions the bucket has of a replica
// topic past those served (the origin's partitions make their manifests
// one by one, and a topic may gain partitions): they are opened, then a
// new topic value holding them all replaces the served one (a request
// that took the old one goes on with it).
func (b *Broker) growReplicaTopic(t *topic, n int32) error {
	from := int32(len(t.parts))
	b.mu.RLock()
	err := b.roomLocked(t.name, n-from)
	b.mu.RUnlock()
	if err != nil {
		return err
	}
	cfg, err := b.topicConfig(replicaOverrides)
	if err != nil {
		return err
	}
	var added []*partition
	for i := from; i < n; i++ {
		p, err := b.be.Open(b.life, t.name, i, cfg)
		if err != nil {
			for _, a := range added {
				a.p.Close()
			}
			return fmt.Errorf("broker: open %s-%d: %w", t.name, i, err)
		}
		added = append(added, &partition{tp: backend.TopicPartition{Topic: t.name, Partition: i}, p: p})
	}
	grown := &topic{name: t.name, overrides: t.overrides, replica: true, parts: append(slices.Clip(t.parts), added...)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.topics[t.name] != t {
		for _, a := range added {
			a.p.Close()
		}
		return nil
	}
	b.topics[t.name] = grown
	b.partitionCount += len(added)
	for _, p := range added {
		b.watchWG.Add(1)
		go b.watch(p)
	}
	b.logger.Info("read replica: serving more partitions of a topic of the bucket", "topic", t.name, "partitions", n)
	return nil
}

// deletedInBucket says whether every one of the topic's n partitions in
// the bucket has a deleted manifest (its origin deleted the topic): one
// GET of each manifest's head.
func (b *Broker) deletedInBucket(ctx context.Context, name string, n int32) (bool, error) {
	root := strings.Trim(b.opts.ReadReplicaPrefix, "/")
	for i := range n {
		key := manifest.PartitionLayout(root, name, i).Manifest()
		data, err := b.opts.ReadReplicaOf.ReadAll(ctx, key, 0, -1)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // a gap: an empty partition
		}
		if err != nil {
			return false, fmt.Errorf("broker: read replica: %s: %w", key, err)
		}
		if seal.LooksSealed(data) {
			return false, fmt.Errorf("broker: read replica: %s: %w", key, seal.ErrSealedObject)
		}
		h, err := manifest.DecodeHead(data)
		if err != nil {
			return false, fmt.Errorf("broker: read replica: %s: %w", key, err)
		}
		if !h.Deleted() {
			return false, nil
		}
	}
	return true, nil
}

// discoverReplicaTopics looks for new topics in the bucket every
// ReplicaDiscoveryInterval until the broker stops (which cancels a
// listing in flight).
func (b *Broker) discoverReplicaTopics() {
	defer b.watchWG.Done()
	tick := time.NewTicker(b.opts.ReplicaDiscoveryInterval)
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(b.opts.ReplicaDiscoveryInterval*10, time.Minute))
		go func() {
			select {
			case <-b.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := b.openReplicaTopics(ctx); err != nil && ctx.Err() == nil {
			b.logger.Warn("read replica: could not open every topic of the bucket; the next interval tries again", "err", err)
		}
		cancel()
	}
}
