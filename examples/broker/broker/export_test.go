package broker

import "net"

// HoldHighWatermark stops the high watermark of topic-i from following
// its log end (hold), or lets it follow again: as if an in-sync replica
// stopped fetching, and came back. For tests of acks=-1 produces parked
// in the purgatory.
func HoldHighWatermark(b *Broker, topic string, i int32, hold bool) {
	p := b.partition(topic, i)
	p.holdHW.Store(hold)
	if !hold {
		// The replica's fetch that would move it.
		if err := b.advanceHighWatermark(p); err != nil {
			panic(err)
		}
	}
}

// WrapListener makes Start serve on wrap(the listener) instead of the
// listener itself: for tests that inject accept errors.
func WrapListener(o *Options, wrap func(net.Listener) net.Listener) { o.wrapListener = wrap }

// SetOpenHook makes the broker call hook before it opens each partition
// of a topic (at Start, creation, auto-creation); an error from hook
// fails that open. For tests that block a creation in its file I/O or
// fail it halfway.
func SetOpenHook(o *Options, hook func(topic string, partition int32) error) { o.openHook = hook }

// BucketPartitions is the read replica's discovery of a bucket's
// partitions.
var BucketPartitions = bucketPartitions
