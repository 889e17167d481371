package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// offsetsTopic holds the committed offsets, compacted by the cleaner.
const offsetsTopic = "__consumer_offsets"

// internalTopic reports whether name is a topic the broker owns
// (Kafka's Topic.isInternal; the transaction coordinator here keeps its
// state in transactions.json, not __transaction_state). Clients cannot
// produce to it, delete it or its records, or change its config in ways
// that break it: INVALID_TOPIC_EXCEPTION, as Kafka's ReplicaManager
// refuses appends and DeleteRecords of an internal topic.
func internalTopic(name string) bool { return name == offsetsTopic }

// errInternalTopic refuses a client's change to an internal topic.
func errInternalTopic(name string) error {
	return fmt.Errorf("%w: %s is an internal topic", kerr.InvalidTopicException, name)
}

// Kafka's offset commit record (frozen: Kafka's format, so Kafka's tools
// read the topic):
//
//	key   version int16 (1) | group string | topic string | partition int32
//	value version int16 (3) | offset int64 | leader epoch int32 |
//	      metadata string | commit timestamp int64
//
// Strings are an int16 length then the bytes. A null value (a tombstone)
// deletes the commit; the cleaner keeps only the latest record per key.
const (
	offsetKeyVersion   = 1
	offsetValueVersion = 3
	// maxCommitMetadata caps commit metadata (Kafka's
	// offset.metadata.max.bytes).
	maxCommitMetadata = 4096
)

// committed is one committed offset.
type committed struct {
	Offset      int64
	LeaderEpoch int32
	Metadata    string
}

// offsetLog keeps the committed offsets in memory and in __consumer_offsets.
type offsetLog struct {
	b *Broker
	p *partition

	mu sync.Mutex
	// guarded by mu
	groups  map[string]map[backend.TopicPartition]committed
	builder record.Builder
}

// openOffsetLog creates __consumer_offsets when absent (one partition,
// compacted) and loads every commit from it.
func openOffsetLog(b *Broker) (*offsetLog, error) {
	overrides := map[string]string{"cleanup.policy": "compact", "segment.bytes": fmt.Sprint(b.opts.OffsetsSegmentBytes),
		"min.cleanable.dirty.ratio": "0.1",
		// Compacted topics are neither tiered nor diskless, whatever the
		// default config says.
		"remote.storage.enable": "false", "diskless.enable": "false"}
	if _, err := b.createTopic(offsetsTopic, 1, overrides); err != nil {
		return nil, err
	}
	o := &offsetLog{b: b, p: b.partition(offsetsTopic, 0), groups: map[string]map[backend.TopicPartition]committed{}}
	if err := o.load(context.Background()); err != nil {
		return nil, fmt.Errorf("broker: load %s: %w", offsetsTopic, err)
	}
	return o, nil
}

// load replays the partition from its start: the last record of each key
// wins.
func (o *offsetLog) load(ctx context.Context) error {
	var it record.Iterator
	var buf bytes.Buffer
	n := 0
	for next := o.p.p.Offsets().LogStart; next < o.p.p.Offsets().LogEnd; {
		recs, err := o.p.p.Read(ctx, next, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
		if err != nil {
			return err
		}
		buf.Reset()
		size, err := recs.WriteTo(&buf)
		recs.Close()
		if err != nil {
			return err
		}
		if size == 0 {
			break
		}
		sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, size, record.ScanOptions{Validate: true})
		for sc.Next() {
			e := sc.Entry()
			next = e.LastOffset + 1
			if e.Batch().IsControl() {
				continue
			}
			if err := it.Reset(e.Data); err != nil {
				return err
			}
			for it.Next() {
				r := it.Record()
				group, tp, err := parseOffsetKey(r.Key)
				if err != nil {
					continue // another kind of record (Kafka's group metadata): not ours
				}
				if r.Value == nil {
					o.forget(group, tp)
					continue
				}
				c, err := parseOffsetValue(r.Value)
				if err != nil {
					return fmt.Errorf("offset %d: %w", r.Offset, err)
				}
				o.set(group, tp, c)
				n++
			}
			if err := it.Err(); err != nil {
				return err
			}
		}
		if err := sc.Err(); err != nil {
			return err
		}
	}
	o.b.logger.Info("committed offsets loaded", "records", n, "groups", len(o.groups))
	return nil
}

func (o *offsetLog) set(group string, tp backend.TopicPartition, c committed) {
	m := o.groups[group]
	if m == nil {
		m = map[backend.TopicPartition]committed{}
		o.groups[group] = m
	}
	m[tp] = c
}

func (o *offsetLog) forget(group string, tp backend.TopicPartition) {
	if m := o.groups[group]; m != nil {
		delete(m, tp)
		if len(m) == 0 {
			delete(o.groups, group)
		}
	}
}

// commit writes a group's commits in one batch and applies them once the
// high watermark has passed the batch (and, with flush.messages=1, it is
// durable).
func (o *offsetLog) commit(ctx context.Context, group string, commits map[backend.TopicPartition]committed) error {
	if len(commits) == 0 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now().UnixMilli()
	o.builder.Reset(record.NewBatchHeader())
	for tp, c := range commits {
		o.builder.Append(now, appendOffsetKey(nil, group, tp), appendOffsetValue(nil, c, now), nil)
	}
	batch, err := o.builder.Build()
	if err != nil {
		return err
	}
	if err := o.p.appendReplicated(ctx, o.b, batch, false); err != nil {
		return err
	}
	for tp, c := range commits {
		o.set(group, tp, c)
	}
	return nil
}

// fetch returns a group's commit for tp.
func (o *offsetLog) fetch(group string, tp backend.TopicPartition) (committed, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.groups[group][tp]
	return c, ok
}

// all returns a copy of a group's commits.
func (o *offsetLog) all(group string) map[backend.TopicPartition]committed {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[backend.TopicPartition]committed, len(o.groups[group]))
	for tp, c := range o.groups[group] {
		out[tp] = c
	}
	return out
}

// groupNames lists the groups with committed offsets.
func (o *offsetLog) groupNames() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.groups))
	for g := range o.groups {
		out = append(out, g)
	}
	return out
}

// remove deletes a group's commits of tps: a tombstone each (a null
// value), then forgets them once the high watermark has passed the
// batch.
func (o *offsetLog) remove(ctx context.Context, group string, tps []backend.TopicPartition) error {
	if len(tps) == 0 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now().UnixMilli()
	o.builder.Reset(record.NewBatchHeader())
	for _, tp := range tps {
		o.builder.Append(now, appendOffsetKey(nil, group, tp), nil, nil)
	}
	batch, err := o.builder.Build()
	if err != nil {
		return err
	}
	if err := o.p.appendReplicated(ctx, o.b, batch, false); err != nil {
		return err
	}
	for _, tp := range tps {
		o.forget(group, tp)
	}
	return nil
}

func appendOffsetKey(dst []byte, group string, tp backend.TopicPartition) []byte {
	dst = kbin.AppendInt16(dst, offsetKeyVersion)
	dst = kbin.AppendString(dst, group)
	dst = kbin.AppendString(dst, tp.Topic)
	return kbin.AppendInt32(dst, tp.Partition)
}

func appendOffsetValue(dst []byte, c committed, now int64) []byte {
	dst = kbin.AppendInt16(dst, offsetValueVersion)
	dst = kbin.AppendInt64(dst, c.Offset)
	dst = kbin.AppendInt32(dst, c.LeaderEpoch)
	dst = kbin.AppendString(dst, c.Metadata)
	return kbin.AppendInt64(dst, now)
}

var errNotOffsetRecord = errors.New("broker: not an offset commit record")

func parseOffsetKey(key []byte) (string, backend.TopicPartition, error) {
	rd := kbin.Reader{Src: key}
	if v := rd.Int16(); v != 0 && v != offsetKeyVersion {
		return "", backend.TopicPartition{}, errNotOffsetRecord
	}
	group, topic, part := rd.String(), rd.String(), rd.Int32()
	if err := rd.Complete(); err != nil {
		return "", backend.TopicPartition{}, fmt.Errorf("%w: %w", errNotOffsetRecord, err)
	}
	return group, backend.TopicPartition{Topic: topic, Partition: part}, nil
}

func parseOffsetValue(v []byte) (committed, error) {
	rd := kbin.Reader{Src: v}
	ver := rd.Int16()
	c := committed{Offset: rd.Int64(), LeaderEpoch: -1}
	if ver >= 3 {
		c.LeaderEpoch = rd.Int32()
	}
	c.Metadata = rd.String()
	rd.Int64() // commit timestamp
	if ver == 1 {
		rd.Int64() // expire timestamp
	}
	if !rd.Ok() {
		return c, fmt.Errorf("broker: offset commit value version %d: short", ver)
	}
	return c, nil
}
