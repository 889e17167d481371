package broker

import (
	"context"
	"slices"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/backend"
)

// String is Kafka's name of a group state.
func (s groupState) String() string {
	switch s {
	case groupPreparing:
		return "PreparingRebalance"
	case groupCompleting:
		return "CompletingRebalance"
	case groupStable:
		return "Stable"
	}
	return "Empty"
}

// groupInfo is what ListGroups and DescribeGroups say of a group: one of
// the coordinator's, or one known only by its committed offsets (Empty,
// no protocol type, as Kafka loads a group of simple commits).
type groupInfo struct {
	name, state, protocolType, protocol string
	members                             []kmsg.DescribeGroupsResponseGroupMember
}

// infos snapshots the groups: the coordinator's, then those with only
// committed offsets.
func (gc *groupCoordinator) infos() map[string]groupInfo {
	out := map[string]groupInfo{}
	for _, name := range gc.b.offsets.groupNames() {
		out[name] = groupInfo{name: name, state: groupEmpty.String()}
	}
	gc.mu.Lock()
	defer gc.mu.Unlock()
	for name, g := range gc.groups {
		if g.state == groupEmpty && len(g.members) == 0 {
			if _, ok := out[name]; !ok && g.protocolType == "" {
				continue // a group that never held a member nor an offset
			}
		}
		gi := groupInfo{name: name, state: g.state.String(), protocolType: g.protocolType, protocol: g.protocol}
		for _, m := range g.members {
			dm := kmsg.NewDescribeGroupsResponseGroupMember()
			dm.MemberID, dm.InstanceID, dm.ClientID, dm.ClientHost = m.id, m.instanceID, m.clientID, m.clientHost
			for _, p := range m.protocols {
				if p.Name == g.protocol {
					dm.ProtocolMetadata = p.Metadata
				}
			}
			dm.MemberAssignment = m.assignment
			gi.members = append(gi.members, dm)
		}
		sort.Slice(gi.members, func(i, j int) bool { return gi.members[i].MemberID < gi.members[j].MemberID })
		out[name] = gi
	}
	return out
}

// listGroups lists the groups, filtered by state (v4+) and type (v5+:
// every group here is "classic").
func (gc *groupCoordinator) listGroups(r *kmsg.ListGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrListGroupsResponse()
	infos := gc.infos()
	names := make([]string, 0, len(infos))
	for n := range infos {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		gi := infos[n]
		if len(r.StatesFilter) > 0 && !slices.ContainsFunc(r.StatesFilter, func(s string) bool { return strings.EqualFold(s, gi.state) }) {
			continue
		}
		if len(r.TypesFilter) > 0 && !slices.ContainsFunc(r.TypesFilter, func(s string) bool { return strings.EqualFold(s, "classic") }) {
			continue
		}
		g := kmsg.NewListGroupsResponseGroup()
		g.Group, g.ProtocolType, g.GroupState, g.GroupType = gi.name, gi.protocolType, gi.state, "classic"
		resp.Groups = append(resp.Groups, g)
	}
	return resp
}

// describeGroups describes each group asked: an unknown one is Dead (and
// GROUP_ID_NOT_FOUND from v6, which this broker does not speak).
func (gc *groupCoordinator) describeGroups(r *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeGroupsResponse()
	infos := gc.infos()
	for _, name := range r.Groups {
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group, g.AuthorizedOperations = name, -2147483648
		if gi, ok := infos[name]; ok {
			g.State, g.ProtocolType, g.Protocol, g.Members = gi.state, gi.protocolType, gi.protocol, gi.members
		} else {
			g.State = "Dead"
		}
		resp.Groups = append(resp.Groups, g)
	}
	return resp
}

// deleteGroups deletes each group without members, its committed
// offsets with it (tombstones in __consumer_offsets); a group with
// members is NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND.
func (gc *groupCoordinator) deleteGroups(ctx context.Context, r *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	for _, name := range r.Groups {
		g := kmsg.NewDeleteGroupsResponseGroup()
		g.Group = name
		g.ErrorCode = errorCode(gc.deleteGroup(ctx, name))
		resp.Groups = append(resp.Groups, g)
	}
	return resp
}

func (gc *groupCoordinator) deleteGroup(ctx context.Context, name string) error {
	commits := gc.b.offsets.all(name)
	gc.mu.Lock()
	g, known := gc.groups[name]
	if known && len(g.members) > 0 {
		gc.mu.Unlock()
		return kerr.NonEmptyGroup
	}
	delete(gc.groups, name)
	gc.mu.Unlock()
	if !known && len(commits) == 0 {
		return kerr.GroupIDNotFound
	}
	tps := make([]backend.TopicPartition, 0, len(commits))
	for tp := range commits {
		tps = append(tps, tp)
	}
	return gc.b.offsets.remove(ctx, name, tps)
}

// offsetDelete deletes a group's committed offsets of the partitions
// asked, as Kafka's GroupCoordinator.handleDeleteOffsets: all of them in
// an Empty group; in a consumer group with members, those of topics no
// member subscribes to (the others GROUP_SUBSCRIBED_TO_TOPIC); in another
// group with members, none (NON_EMPTY_GROUP).
func (gc *groupCoordinator) offsetDelete(ctx context.Context, r *kmsg.OffsetDeleteRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetDeleteResponse()
	commits := gc.b.offsets.all(r.Group)
	gc.mu.Lock()
	g, known := gc.groups[r.Group]
	var subscribed map[string]bool
	switch {
	case !known && len(commits) == 0:
		resp.ErrorCode = kerr.GroupIDNotFound.Code
	case known && len(g.members) > 0 && g.protocolType != "consumer":
		resp.ErrorCode = kerr.NonEmptyGroup.Code
	case known && len(g.members) > 0:
		subscribed = subscriptions(g)
	}
	gc.mu.Unlock()
	if resp.ErrorCode != 0 {
		return resp
	}
	var remove []backend.TopicPartition
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			if subscribed[t.Topic] {
				rp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			} else {
				remove = append(remove, backend.TopicPartition{Topic: t.Topic, Partition: p.Partition})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if err := gc.b.offsets.remove(ctx, r.Group, remove); err != nil {
		resp.ErrorCode = errorCode(err)
	}
	return resp
}

// subscriptions are the topics a consumer group's members subscribe to
// (their consumer protocol metadata); a member whose metadata does not
// parse counts as subscribed to every topic it might hold.
// REQUIRES: gc.mu held.
func subscriptions(g *group) map[string]bool {
	out := map[string]bool{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if p.Name != g.protocol {
				continue
			}
			var md kmsg.ConsumerMemberMetadata
			if err := md.ReadFrom(p.Metadata); err != nil {
				for _, a := range assignedTopics(m.assignment) {
					out[a] = true
				}
				continue
			}
			for _, t := range md.Topics {
				out[t] = true
			}
		}
	}
	return out
}

// assignedTopics are the topics of a consumer protocol assignment.
func assignedTopics(assignment []byte) []string {
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(assignment); err != nil {
		return nil
	}
	var out []string
	for _, t := range a.Topics {
		out = append(out, t.Topic)
	}
	return out
}
