package broker

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/backend"
)

// describeConfigs answers a topic's configs (each key the storage layer
// acts on, and the broker-owned keys the topic overrides) and the
// broker's own settings, read-only.
func (b *Broker) describeConfigs(r *kmsg.DescribeConfigsRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeConfigsResponse()
	for _, res := range r.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		var configs []kmsg.DescribeConfigsResponseResourceConfig
		var err error
		switch res.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			configs, err = b.topicConfigs(res.ResourceName)
		case kmsg.ConfigResourceTypeBroker:
			configs, err = b.brokerConfigs(res.ResourceName)
		default:
			err = fmt.Errorf("%w: resource type %v is not served", kerr.InvalidRequest, res.ResourceType)
		}
		rr.ErrorCode = errorCode(err)
		if err != nil {
			rr.ErrorMessage = kmsg.StringPtr(err.Error())
		}
		for _, c := range configs {
			if res.ConfigNames == nil || slices.Contains(res.ConfigNames, c.Name) {
				rr.Configs = append(rr.Configs, c)
			}
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

// topicConfigs are a topic's configs: its override, else the broker's
// default (Options.TopicConfig), else Kafka's.
func (b *Broker) topicConfigs(name string) ([]kmsg.DescribeConfigsResponseResourceConfig, error) {
	b.mu.RLock()
	t := b.topics[name]
	b.mu.RUnlock()
	if t == nil {
		return nil, fmt.Errorf("%w: topic %s", kerr.UnknownTopicOrPartition, name)
	}
	overrides := b.overrides(t)
	var out []kmsg.DescribeConfigsResponseResourceConfig
	add := func(name, value string, source kmsg.ConfigSource) {
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name, c.Value, c.Source = name, kmsg.StringPtr(value), source
		c.IsDefault = source == kmsg.ConfigSourceDefaultConfig
		out = append(out, c)
	}
	seen := map[string]bool{}
	for _, k := range backend.ConfigKeys() {
		seen[k.Name] = true
		if v, ok := overrides[k.Name]; ok {
			add(k.Name, v, kmsg.ConfigSourceDynamicTopicConfig)
		} else if v, ok := b.opts.TopicConfig[k.Name]; ok {
			add(k.Name, v, kmsg.ConfigSourceStaticBrokerConfig)
		} else {
			add(k.Name, k.Default, kmsg.ConfigSourceDefaultConfig)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(overrides)) {
		if !seen[k] {
			add(k, overrides[k], kmsg.ConfigSourceDynamicTopicConfig)
		}
	}
	return out, nil
}

// brokerConfigs are the broker's settings under Kafka's names, read-only
// (static: set by Options or flags).
func (b *Broker) brokerConfigs(id string) ([]kmsg.DescribeConfigsResponseResourceConfig, error) {
	if id != "" && id != strconv.Itoa(NodeID) {
		return nil, fmt.Errorf("%w: broker %q (this is broker %d)", kerr.InvalidRequest, id, NodeID)
	}
	o := b.opts
	settings := [][2]string{
		{"broker.id", strconv.Itoa(NodeID)},
		{"num.partitions", strconv.Itoa(int(o.Partitions))},
		{"auto.create.topics.enable", strconv.FormatBool(!o.NoAutoCreate)},
		{"group.initial.rebalance.delay.ms", strconv.FormatInt(o.InitialRebalanceDelay.Milliseconds(), 10)},
		{"log.cleaner.backoff.ms", strconv.FormatInt(o.CleanerBackoff.Milliseconds(), 10)},
		{"log.cleaner.dedupe.buffer.size", strconv.Itoa(o.CleanerMemoryBytes)},
		{"offsets.topic.segment.bytes", strconv.FormatInt(o.OffsetsSegmentBytes, 10)},
		{"queued.max.request.bytes", strconv.FormatInt(o.QueuedMaxRequestBytes, 10)},
		{"connections.max.idle.ms", strconv.FormatInt(o.ConnectionsMaxIdle.Milliseconds(), 10)},
		{"socket.request.max.bytes", strconv.Itoa(maxRequestBytes)},
	}
	var out []kmsg.DescribeConfigsResponseResourceConfig
	for _, s := range settings {
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name, c.Value, c.ReadOnly, c.Source = s[0], kmsg.StringPtr(s[1]), true, kmsg.ConfigSourceStaticBrokerConfig
		out = append(out, c)
	}
	return out, nil
}

// alterConfigs replaces each topic's overrides with the request's
// (AlterConfigs: what is not named returns to the default).
func (b *Broker) alterConfigs(r *kmsg.AlterConfigsRequest) kmsg.Response {
	resp := kmsg.NewPtrAlterConfigsResponse()
	for _, res := range r.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		err := b.changeConfig(res.ResourceType, res.ResourceName, r.ValidateOnly, func(map[string]string) (map[string]string, error) {
			m := map[string]string{}
			for _, c := range res.Configs {
				if c.Value != nil {
					m[c.Name] = *c.Value
				}
			}
			return m, nil
		})
		rr.ErrorCode = errorCode(err)
		if err != nil {
			rr.ErrorMessage = kmsg.StringPtr(err.Error())
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

// incrementalAlterConfigs applies each topic's operations (SET, DELETE,
// APPEND, SUBTRACT) to its overrides.
func (b *Broker) incrementalAlterConfigs(r *kmsg.IncrementalAlterConfigsRequest) kmsg.Response {
	resp := kmsg.NewPtrIncrementalAlterConfigsResponse()
	for _, res := range r.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		err := b.changeConfig(res.ResourceType, res.ResourceName, r.ValidateOnly, func(cur map[string]string) (map[string]string, error) {
			m := maps.Clone(cur)
			for _, c := range res.Configs {
				if err := applyConfigOp(m, c); err != nil {
					return nil, err
				}
			}
			return m, nil
		})
		rr.ErrorCode = errorCode(err)
		if err != nil {
			rr.ErrorMessage = kmsg.StringPtr(err.Error())
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

// applyConfigOp applies one IncrementalAlterConfigs operation to m. APPEND
// and SUBTRACT work on list values (comma-separated), as Kafka's do.
func applyConfigOp(m map[string]string, c kmsg.IncrementalAlterConfigsRequestResourceConfig) error {
	val := ""
	if c.Value != nil {
		val = *c.Value
	}
	switch c.Op {
	case kmsg.IncrementalAlterConfigOpSet:
		if c.Value == nil {
			return fmt.Errorf("%w: SET %s without a value", kerr.InvalidRequest, c.Name)
		}
		m[c.Name] = val
	case kmsg.IncrementalAlterConfigOpDelete:
		delete(m, c.Name)
	case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
		if c.Name != "cleanup.policy" {
			return fmt.Errorf("%w: %v on %s, which is not a list", kerr.InvalidConfig, c.Op, c.Name)
		}
		var list []string
		if cur, ok := m[c.Name]; ok && cur != "" {
			list = strings.Split(cur, ",")
		}
		for _, v := range strings.Split(val, ",") {
			i := slices.Index(list, v)
			switch {
			case c.Op == kmsg.IncrementalAlterConfigOpAppend && i < 0:
				list = append(list, v)
			case c.Op == kmsg.IncrementalAlterConfigOpSubtract && i >= 0:
				list = slices.Delete(list, i, i+1)
			}
		}
		m[c.Name] = strings.Join(list, ",")
	default:
		return fmt.Errorf("%w: config operation %d", kerr.InvalidRequest, c.Op)
	}
	return nil
}

// changeConfig computes a topic's new overrides with change, checks them,
// and unless validateOnly applies them to every partition
// (Partition.SetConfig) and records them in topics.json, so they outlast
// a restart. Broker configs are static here: INVALID_REQUEST. An
// internal topic refuses a change that would break it (compaction off,
// tiering on): INVALID_CONFIG.
func (b *Broker) changeConfig(typ kmsg.ConfigResourceType, name string, validateOnly bool, change func(map[string]string) (map[string]string, error)) error {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
	case kmsg.ConfigResourceTypeBroker:
		return fmt.Errorf("%w: broker configs are static here (Options, flags)", kerr.InvalidRequest)
	default:
		return fmt.Errorf("%w: resource type %v is not served", kerr.InvalidRequest, typ)
	}
	if b.opts.ReadReplicaOf != nil && b.isReplicaTopic(name) {
		return errReplicaWrite(name) // its config is its origin's
	}
	b.configMu.Lock()
	defer b.configMu.Unlock()
	b.mu.RLock()
	t := b.topics[name]
	b.mu.RUnlock()
	if t == nil {
		return fmt.Errorf("%w: topic %s", kerr.UnknownTopicOrPartition, name)
	}
	next, err := change(b.overrides(t))
	if err != nil {
		return err
	}
	cfg, err := b.topicConfig(next)
	if err != nil {
		return err
	}
	if internalTopic(name) && (!cfg.Compact() || cfg.RemoteStorageEnable) {
		return fmt.Errorf("%w: %s is an internal topic: it stays compacted and local", kerr.InvalidConfig, name)
	}
	if c, ok := b.be.(interface{ CheckConfig(backend.Config) error }); ok {
		// What the backend would refuse when the topic opens again
		// (a local topic takes the change now and opens tiered at the
		// next start): refused now, not then.
		if err := c.CheckConfig(cfg); err != nil {
			return fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
		}
	}
	if validateOnly {
		return nil
	}
	var errs []error
	for _, p := range t.parts {
		if err := p.p.SetConfig(cfg); err != nil {
			errs = append(errs, fmt.Errorf("broker: %s: set config: %w", p.tp, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := b.state.setConfig(name, next); err != nil {
		return err
	}
	b.mu.Lock()
	t.overrides = next
	b.mu.Unlock()
	b.logger.Info("topic config changed", "topic", name, "config", next)
	return nil
}
