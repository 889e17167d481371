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

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
)

// A read replica broker (Options.ReadReplicaOf) serves the topics another
// cluster keeps in a bucket: each partition with a manifest under
// ReadReplicaPrefix is opened as a read replica (tiered's replica.go),
// which follows the origin's commits and serves its records from the
// bucket. The topics are found by listing the bucket, at Start and every
// ReplicaDiscoveryInterval; a topic found later is served from then on
// (a partition added to a topic already served is not yet).

// replicaOverrides is a replica topic's config: tiered, as its origin's.
var replicaOverrides = map[string]string{"remote.storage.enable": "true"}

// errReplicaWrite refuses a write to a replica topic.
func errReplicaWrite(topic string) error {
	return fmt.Errorf("%w: %s is served by a read replica of its origin's bucket; write to the origin's cluster", kerr.PolicyViolation, topic)
}

// isReplicaTopic says whether name is a topic this replica serves from
// the bucket.
func (b *Broker) isReplicaTopic(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[name]
	return t != nil && t.replica
}

// bucketTopics lists the bucket's partitions under the replica prefix:
// topic -> partitions (one past the largest with a manifest).
func (b *Broker) bucketTopics(ctx context.Context) (map[string]int32, error) {
	root := strings.Trim(b.opts.ReadReplicaPrefix, "/")
	prefix := ""
	if root != "" {
		prefix = root + "/"
	}
	topics := map[string]int32{}
	err := b.opts.ReadReplicaOf.List(ctx, prefix, func(o objstore.ObjectInfo) bool {
		if !strings.HasSuffix(o.Key, "/"+manifest.ManifestName) {
			return true
		}
		k, err := manifest.ParseKey(o.Key)
		if err != nil || k.Kind != manifest.KindManifest || k.Root != root {
			return true
		}
		topics[k.Topic] = max(topics[k.Topic], k.Partition+1)
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("broker: list the read replica's bucket: %w", err)
	}
	return topics, nil
}

// openReplicaTopics opens and serves the bucket's topics not served yet.
// A name this broker has a topic of its own by (__consumer_offsets) is
// skipped.
func (b *Broker) openReplicaTopics(ctx context.Context) error {
	found, err := b.bucketTopics(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(found)) {
		b.mu.Lock()
		_, served := b.topics[name]
		b.mu.Unlock()
		if served || internalTopic(name) {
			continue
		}
		t, _, err := b.openTopic(name, found[name], replicaOverrides, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		t.replica = true
		b.mu.Lock()
		b.serveLocked(t)
		b.mu.Unlock()
		b.logger.Info("read replica: serving a topic of the bucket", "topic", name, "partitions", found[name])
	}
	return errors.Join(errs...)
}

// discoverReplicaTopics looks for new topics in the bucket every
// ReplicaDiscoveryInterval until the broker stops.
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
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.ReplicaDiscoveryInterval*10)
		if err := b.openReplicaTopics(ctx); err != nil {
			b.logger.Warn("read replica: could not look for new topics in the bucket; the next interval tries again", "err", err)
		}
		cancel()
	}
}
