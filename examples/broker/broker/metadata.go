package broker

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
)

// clusterID is the cluster id every Metadata answer carries.
const clusterID = "tierlog-example-broker"

// hostPort is the address clients are told to connect to: Advertise, or
// the listener's with an unspecified host (0.0.0.0, ::) as loopback.
func (b *Broker) hostPort() (string, int32) {
	addr := b.opts.Advertise
	if addr == "" {
		addr = b.ln.Addr().String()
	}
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	p, _ := strconv.Atoi(port)
	return host, int32(p)
}

// legalTopic reports whether Kafka accepts name as a topic: the
// library's rule (local.ValidateTopic), the one the log directory's
// names follow.
func legalTopic(name string) bool { return local.ValidateTopic(name) == nil }

func (b *Broker) metadata(r *kmsg.MetadataRequest) kmsg.Response {
	resp := kmsg.NewPtrMetadataResponse()
	host, port := b.hostPort()
	br := kmsg.NewMetadataResponseBroker()
	br.NodeID, br.Host, br.Port = NodeID, host, port
	resp.Brokers = append(resp.Brokers, br)
	cid := clusterID
	resp.ClusterID = &cid
	resp.ControllerID = NodeID
	// A null list asks for every topic; so does an empty list at version
	// 0 (it has no null). Auto-creation is on for versions before 4.
	var names []string
	if r.Topics == nil || r.Version == 0 && len(r.Topics) == 0 {
		names = b.topicNames()
	}
	for _, t := range r.Topics {
		if t.Topic != nil {
			names = append(names, *t.Topic)
		}
	}
	autoCreate := r.Version < 4 || r.AllowAutoTopicCreation
	for _, name := range names {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = kmsg.StringPtr(name)
		mt.IsInternal = internalTopic(name)
		if !legalTopic(name) {
			mt.ErrorCode = kerr.InvalidTopicException.Code
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		t, err := b.topic(name, autoCreate)
		switch {
		case err != nil:
			mt.ErrorCode = errorCode(err)
		case t == nil:
			mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		default:
			for _, p := range t.parts {
				mp := kmsg.NewMetadataResponseTopicPartition()
				mp.Partition, mp.Leader, mp.LeaderEpoch = p.tp.Partition, NodeID, p.epoch
				mp.Replicas, mp.ISR = []int32{NodeID}, []int32{NodeID}
				mt.Partitions = append(mt.Partitions, mp)
			}
		}
		resp.Topics = append(resp.Topics, mt)
	}
	return resp
}

func (b *Broker) createTopics(r *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := kmsg.NewPtrCreateTopicsResponse()
	tooMany := b.tooManyPartitions(r)
	for _, t := range r.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Topic, t.NumPartitions, 1
		if rt.NumPartitions == -1 {
			rt.NumPartitions = b.opts.Partitions
		}
		overrides := map[string]string{}
		for _, c := range t.Configs {
			if c.Value != nil {
				overrides[c.Name] = *c.Value
			}
		}
		var err error
		switch {
		case b.opts.ReadReplicaOf != nil:
			err = fmt.Errorf("%w: this broker is a read replica: its topics are its origin's bucket's", kerr.PolicyViolation)
		case tooMany != nil:
			err = tooMany
		case !legalTopic(t.Topic):
			err = kerr.InvalidTopicException
		case rt.NumPartitions <= 0:
			// -1 is the default; Kafka refuses the rest.
			err = fmt.Errorf("%w: NumPartitions %d (-1: the default)", kerr.InvalidPartitions, t.NumPartitions)
		case t.ReplicationFactor > 1, t.ReplicationFactor == 0, t.ReplicationFactor < -1:
			err = fmt.Errorf("%w: ReplicationFactor %d on a single node (1, or -1: the default)", kerr.InvalidReplicationFactor, t.ReplicationFactor)
		case len(t.ReplicaAssignment) > 0:
			err = kerr.InvalidReplicaAssignment
		case r.ValidateOnly:
			_, err = b.topicConfig(overrides)
		default:
			var created bool
			created, err = b.createTopic(t.Topic, rt.NumPartitions, overrides)
			if err == nil && !created {
				err = kerr.TopicAlreadyExists
			}
		}
		rt.ErrorCode = errorCode(err)
		if err != nil {
			msg := err.Error()
			rt.ErrorMessage = &msg
		}
		for k, v := range overrides {
			c := kmsg.NewCreateTopicsResponseTopicConfig()
			c.Name, c.Value = k, kmsg.StringPtr(v)
			rt.Configs = append(rt.Configs, c)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// tooManyPartitions refuses a CreateTopics whose topics ask for more
// partitions together than Options.MaxPartitionsPerRequest, whole, with
// POLICY_VIOLATION (Kafka's controller: "Unable to perform excessively
// large batch operation"); nil when it is within.
func (b *Broker) tooManyPartitions(r *kmsg.CreateTopicsRequest) error {
	var n int64
	for _, t := range r.Topics {
		if t.NumPartitions == -1 {
			n += int64(b.opts.Partitions)
		} else if t.NumPartitions > 0 {
			n += int64(t.NumPartitions)
		}
	}
	if n > int64(b.opts.MaxPartitionsPerRequest) {
		return fmt.Errorf("%w: the request asks for %d partitions, past %d (MaxPartitionsPerRequest)",
			kerr.PolicyViolation, n, b.opts.MaxPartitionsPerRequest)
	}
	return nil
}

func (b *Broker) deleteTopics(r *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := kmsg.NewPtrDeleteTopicsResponse()
	names := r.TopicNames
	for _, t := range r.Topics {
		if t.Topic != nil {
			names = append(names, *t.Topic)
		}
	}
	for _, name := range names {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic = kmsg.StringPtr(name)
		var err error
		if internalTopic(name) {
			err = errInternalTopic(name)
		} else if b.opts.ReadReplicaOf != nil && b.isReplicaTopic(name) {
			err = errReplicaWrite(name)
		} else if err = b.deleteTopic(name); errors.Is(err, backend.ErrNotFound) {
			err = kerr.UnknownTopicOrPartition
		}
		rt.ErrorCode = errorCode(err)
		if err != nil && r.Version >= 5 {
			rt.ErrorMessage = kmsg.StringPtr(err.Error())
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
