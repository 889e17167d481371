package broker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/backend"
)

// The classic group protocol's states (Kafka's GroupState).
type groupState int

const (
	groupEmpty      groupState = iota // no members
	groupPreparing                    // PreparingRebalance: waiting for the members to (re)join
	groupCompleting                   // CompletingRebalance: joined; waiting for the leader's assignment
	groupStable                       // assignments handed out; heartbeats keep members in
)

// groupCoordinator runs every consumer group on this node: membership
// and rebalances in memory (members rejoin after a restart, as after a
// coordinator move in Kafka), committed offsets in the offsetLog.
type groupCoordinator struct {
	b *Broker

	mu sync.Mutex
	// guarded by mu
	groups map[string]*group
	closed bool
	nextID int64
}

// group is one consumer group. REQUIRES: groupCoordinator.mu held to
// read or write any field.
type group struct {
	name         string
	state        groupState
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	pending      map[string]bool // member ids handed out with MEMBER_ID_REQUIRED
	initialWait  bool            // the initial rebalance delay is running
	rebalance    *time.Timer     // ends PreparingRebalance for members that did not rejoin
}

// member is one member of a group.
type member struct {
	id               string
	instanceID       *string
	clientID         string // the JoinGroup's client id and address (DescribeGroups)
	clientHost       string
	protocols        []kmsg.JoinGroupRequestProtocol // metadata copied out of the request
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	joined           chan *kmsg.JoinGroupResponse // a JoinGroup waiting for the rebalance, or nil
	synced           chan *kmsg.SyncGroupResponse // a SyncGroup waiting for the leader, or nil
	assignment       []byte
	session          *time.Timer
}

func newGroupCoordinator(b *Broker) *groupCoordinator {
	return &groupCoordinator{b: b, groups: map[string]*group{}}
}

// close answers every waiting JoinGroup and SyncGroup and stops the timers.
func (gc *groupCoordinator) close() {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if gc.closed {
		return
	}
	gc.closed = true
	for _, g := range gc.groups {
		if g.rebalance != nil {
			g.rebalance.Stop()
		}
		for _, m := range g.members {
			if m.session != nil {
				m.session.Stop()
			}
			gc.answerLocked(m, kerr.CoordinatorNotAvailable, kerr.CoordinatorNotAvailable)
		}
	}
}

// answerLocked ends a member's waiting JoinGroup and SyncGroup with errors.
// REQUIRES: gc.mu held.
func (gc *groupCoordinator) answerLocked(m *member, joinErr, syncErr *kerr.Error) {
	if m.joined != nil && joinErr != nil {
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.ErrorCode, resp.MemberID, resp.Generation = joinErr.Code, m.id, -1
		m.joined <- resp
		m.joined = nil
	}
	if m.synced != nil && syncErr != nil {
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.ErrorCode = syncErr.Code
		m.synced <- resp
		m.synced = nil
	}
}

func (gc *groupCoordinator) join(ctx context.Context, r *kmsg.JoinGroupRequest, clientID, clientHost string) kmsg.Response {
	fail := func(err *kerr.Error, memberID string) kmsg.Response {
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.ErrorCode, resp.MemberID, resp.Generation = err.Code, memberID, -1
		return resp
	}
	if r.Group == "" {
		return fail(kerr.InvalidGroupID, r.MemberID)
	}
	session := time.Duration(r.SessionTimeoutMillis) * time.Millisecond
	if session < 100*time.Millisecond || session > 30*time.Minute {
		return fail(kerr.InvalidSessionTimeout, r.MemberID)
	}
	rebalance := session
	if r.Version >= 1 {
		rebalance = time.Duration(r.RebalanceTimeoutMillis) * time.Millisecond
	}
	gc.mu.Lock()
	if gc.closed {
		gc.mu.Unlock()
		return fail(kerr.CoordinatorNotAvailable, r.MemberID)
	}
	g := gc.groups[r.Group]
	if g == nil {
		g = &group{name: r.Group, members: map[string]*member{}, pending: map[string]bool{}}
		gc.groups[r.Group] = g
	}
	if g.state != groupEmpty && g.protocolType != r.ProtocolType {
		gc.mu.Unlock()
		return fail(kerr.InconsistentGroupProtocol, r.MemberID)
	}
	id := r.MemberID
	if id == "" {
		gc.nextID++
		id = fmt.Sprintf("%s-%d", r.Group, gc.nextID)
		if r.Version >= 4 {
			// KIP-394: the client rejoins with the id it is given.
			g.pending[id] = true
			gc.mu.Unlock()
			return fail(kerr.MemberIDRequired, id)
		}
	} else if g.members[id] == nil && !g.pending[id] {
		gc.mu.Unlock()
		return fail(kerr.UnknownMemberID, id)
	}
	delete(g.pending, id)
	m := g.members[id]
	if m == nil {
		m = &member{id: id}
		g.members[id] = m
	}
	m.instanceID, m.sessionTimeout, m.rebalanceTimeout = r.InstanceID, session, rebalance
	m.clientID, m.clientHost = clientID, clientHost
	m.protocols = m.protocols[:0]
	for _, p := range r.Protocols {
		p.Metadata = slices.Clone(p.Metadata)
		m.protocols = append(m.protocols, p)
	}
	gc.answerLocked(m, kerr.RebalanceInProgress, kerr.RebalanceInProgress) // an older request of the same member
	ch := make(chan *kmsg.JoinGroupResponse, 1)
	m.joined = ch
	if g.state == groupEmpty {
		g.protocolType = r.ProtocolType
	}
	gc.prepareLocked(g)
	gc.maybeCompleteJoinLocked(g)
	gc.mu.Unlock()
	select {
	case resp := <-ch:
		return resp
	case <-gc.b.closing:
		return fail(kerr.CoordinatorNotAvailable, id)
	}
}

// prepareLocked moves g to PreparingRebalance (if it is not there yet),
// asking every member to rejoin. REQUIRES: gc.mu held.
func (gc *groupCoordinator) prepareLocked(g *group) {
	if g.state == groupPreparing {
		return
	}
	wasEmpty := g.state == groupEmpty
	for _, m := range g.members {
		gc.answerLocked(m, nil, kerr.RebalanceInProgress)
	}
	g.state = groupPreparing
	timeout := time.Duration(0)
	for _, m := range g.members {
		timeout = max(timeout, m.rebalanceTimeout)
	}
	if wasEmpty {
		// Kafka's group.initial.rebalance.delay.ms: let the first
		// members of a new group arrive together.
		g.initialWait = true
		timeout = min(timeout, gc.b.opts.InitialRebalanceDelay)
	}
	g.rebalance = time.AfterFunc(timeout, func() {
		gc.mu.Lock()
		defer gc.mu.Unlock()
		if gc.closed || g.state != groupPreparing {
			return
		}
		g.initialWait = false
		for id, m := range g.members {
			if m.joined == nil { // did not rejoin in time
				gc.removeLocked(g, id)
			}
		}
		gc.maybeCompleteJoinLocked(g)
	})
}

// maybeCompleteJoinLocked ends PreparingRebalance once every member has
// rejoined: a new generation, the protocol every member supports, and the
// answers to the waiting JoinGroups (the leader's with every member's
// metadata). REQUIRES: gc.mu held.
func (gc *groupCoordinator) maybeCompleteJoinLocked(g *group) {
	if g.state != groupPreparing || g.initialWait {
		return
	}
	for _, m := range g.members {
		if m.joined == nil {
			return
		}
	}
	if g.rebalance != nil {
		g.rebalance.Stop()
	}
	g.generation++
	if len(g.members) == 0 {
		g.state, g.leader, g.protocol = groupEmpty, "", ""
		return
	}
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if g.members[g.leader] == nil {
		g.leader = ids[0]
	}
	g.protocol = ""
	for _, p := range g.members[g.leader].protocols {
		all := true
		for _, m := range g.members {
			if !slices.ContainsFunc(m.protocols, func(q kmsg.JoinGroupRequestProtocol) bool { return q.Name == p.Name }) {
				all = false
				break
			}
		}
		if all {
			g.protocol = p.Name
			break
		}
	}
	if g.protocol == "" {
		for id := range g.members {
			gc.answerLocked(g.members[id], kerr.InconsistentGroupProtocol, nil)
			gc.removeMemberLocked(g, id)
		}
		g.state = groupEmpty
		return
	}
	g.state = groupCompleting
	for _, id := range ids {
		m := g.members[id]
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.Generation, resp.Protocol, resp.ProtocolType = g.generation, &g.protocol, &g.protocolType
		resp.LeaderID, resp.MemberID = g.leader, id
		if id == g.leader {
			for _, oid := range ids {
				o := g.members[oid]
				rm := kmsg.NewJoinGroupResponseMember()
				rm.MemberID, rm.InstanceID = oid, o.instanceID
				for _, p := range o.protocols {
					if p.Name == g.protocol {
						rm.ProtocolMetadata = p.Metadata
					}
				}
				resp.Members = append(resp.Members, rm)
			}
		}
		m.joined <- resp
		m.joined = nil
		gc.touchLocked(g, m)
	}
}

// touchLocked restarts a member's session timer. REQUIRES: gc.mu held.
func (gc *groupCoordinator) touchLocked(g *group, m *member) {
	if m.session != nil {
		m.session.Stop()
	}
	m.session = time.AfterFunc(m.sessionTimeout, func() {
		gc.mu.Lock()
		defer gc.mu.Unlock()
		if gc.closed || g.members[m.id] != m || m.joined != nil {
			return // gone, or waiting in a JoinGroup: not expired
		}
		gc.b.logger.Info("group member session expired", "group", g.name, "member", m.id)
		gc.removeLocked(g, m.id)
	})
}

// removeMemberLocked drops a member. REQUIRES: gc.mu held.
func (gc *groupCoordinator) removeMemberLocked(g *group, id string) {
	if m := g.members[id]; m != nil {
		if m.session != nil {
			m.session.Stop()
		}
		gc.answerLocked(m, kerr.UnknownMemberID, kerr.UnknownMemberID)
		delete(g.members, id)
	}
}

// removeLocked drops a member and rebalances the rest. REQUIRES: gc.mu held.
func (gc *groupCoordinator) removeLocked(g *group, id string) {
	gc.removeMemberLocked(g, id)
	if len(g.members) == 0 {
		if g.rebalance != nil {
			g.rebalance.Stop()
		}
		if g.state != groupEmpty {
			g.generation++
		}
		g.state, g.leader, g.protocol, g.initialWait = groupEmpty, "", "", false
		return
	}
	gc.prepareLocked(g)
	gc.maybeCompleteJoinLocked(g)
}

// check finds a group member of the current generation.
// REQUIRES: gc.mu held.
func (gc *groupCoordinator) checkLocked(name, id string, generation int32) (*group, *member, *kerr.Error) {
	g := gc.groups[name]
	if g == nil || g.members[id] == nil {
		return g, nil, kerr.UnknownMemberID
	}
	if generation != g.generation {
		return g, g.members[id], kerr.IllegalGeneration
	}
	return g, g.members[id], nil
}

func (gc *groupCoordinator) sync(ctx context.Context, r *kmsg.SyncGroupRequest) kmsg.Response {
	resp := kmsg.NewPtrSyncGroupResponse()
	gc.mu.Lock()
	g, m, err := gc.checkLocked(r.Group, r.MemberID, r.Generation)
	if err == nil && g.state == groupPreparing {
		err = kerr.RebalanceInProgress
	}
	if err != nil {
		gc.mu.Unlock()
		resp.ErrorCode = err.Code
		return resp
	}
	resp.ProtocolType, resp.Protocol = &g.protocolType, &g.protocol
	if g.state == groupStable {
		resp.MemberAssignment = m.assignment
		gc.mu.Unlock()
		return resp
	}
	gc.answerLocked(m, nil, kerr.RebalanceInProgress)
	ch := make(chan *kmsg.SyncGroupResponse, 1)
	m.synced = ch
	if r.MemberID == g.leader {
		for _, a := range r.GroupAssignment {
			if o := g.members[a.MemberID]; o != nil {
				o.assignment = slices.Clone(a.MemberAssignment)
			}
		}
		g.state = groupStable
		for _, o := range g.members {
			if o.synced != nil {
				sr := kmsg.NewPtrSyncGroupResponse()
				sr.ProtocolType, sr.Protocol, sr.MemberAssignment = &g.protocolType, &g.protocol, o.assignment
				o.synced <- sr
				o.synced = nil
			}
		}
	}
	gc.mu.Unlock()
	select {
	case resp := <-ch:
		return resp
	case <-gc.b.closing:
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
}

func (gc *groupCoordinator) heartbeat(r *kmsg.HeartbeatRequest) kmsg.Response {
	resp := kmsg.NewPtrHeartbeatResponse()
	gc.mu.Lock()
	defer gc.mu.Unlock()
	g, m, err := gc.checkLocked(r.Group, r.MemberID, r.Generation)
	if m != nil {
		gc.touchLocked(g, m)
	}
	if err == nil && g.state == groupPreparing {
		err = kerr.RebalanceInProgress
	}
	if err != nil {
		resp.ErrorCode = err.Code
	}
	return resp
}

func (gc *groupCoordinator) leave(r *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := kmsg.NewPtrLeaveGroupResponse()
	ids := []string{r.MemberID}
	if r.Version >= 3 {
		ids = ids[:0]
		for _, m := range r.Members {
			ids = append(ids, m.MemberID)
		}
	}
	gc.mu.Lock()
	defer gc.mu.Unlock()
	g := gc.groups[r.Group]
	for _, id := range ids {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID = id
		if g == nil || g.members[id] == nil {
			rm.ErrorCode = kerr.UnknownMemberID.Code
		} else {
			gc.removeLocked(g, id)
		}
		resp.Members = append(resp.Members, rm)
	}
	if r.Version < 3 && len(resp.Members) == 1 {
		resp.ErrorCode = resp.Members[0].ErrorCode
	}
	return resp
}

// offsetCommit checks the member (a commit with generation -1 and no
// member id is a standalone commit, allowed for a group with no members)
// and writes the commits to __consumer_offsets.
func (gc *groupCoordinator) offsetCommit(ctx context.Context, r *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetCommitResponse()
	var err *kerr.Error
	gc.mu.Lock()
	if r.Generation >= 0 || r.MemberID != "" {
		var g *group
		// As in Kafka, members commit while the group prepares a
		// rebalance (before they rejoin), not while it waits for the
		// leader's assignment.
		g, _, err = gc.checkLocked(r.Group, r.MemberID, r.Generation)
		if err == nil && g.state == groupCompleting {
			err = kerr.RebalanceInProgress
		}
	} else if g := gc.groups[r.Group]; g != nil && len(g.members) > 0 {
		err = kerr.UnknownMemberID
	}
	gc.mu.Unlock()
	commits := map[backend.TopicPartition]committed{}
	codes := map[backend.TopicPartition]int16{}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			tp := backend.TopicPartition{Topic: t.Topic, Partition: p.Partition}
			c := committed{Offset: p.Offset, LeaderEpoch: p.LeaderEpoch}
			if p.Metadata != nil {
				c.Metadata = *p.Metadata
			}
			switch {
			case err != nil:
				codes[tp] = err.Code
			case len(c.Metadata) > maxCommitMetadata:
				codes[tp] = kerr.OffsetMetadataTooLarge.Code
			default:
				commits[tp] = c
			}
		}
	}
	if werr := gc.b.offsets.commit(ctx, r.Group, commits); werr != nil {
		gc.b.logger.Warn("offset commit", "group", r.Group, "err", werr)
		for tp := range commits {
			codes[tp] = errorCode(werr)
		}
	}
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = codes[backend.TopicPartition{Topic: t.Topic, Partition: p.Partition}]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// offsetFetch answers from the committed offsets (-1 for none). With
// RequireStable, a partition with a transactional commit not yet decided
// is UNSTABLE_OFFSET_COMMIT, as in Kafka.
func (gc *groupCoordinator) offsetFetch(r *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetFetchResponse()
	type want struct {
		topic string
		parts []int32
	}
	var wants []want
	if r.Topics == nil {
		byTopic := map[string][]int32{}
		for tp := range gc.b.offsets.all(r.Group) {
			byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
		}
		for t, ps := range byTopic {
			slices.Sort(ps)
			wants = append(wants, want{t, ps})
		}
	}
	for _, t := range r.Topics {
		wants = append(wants, want{t.Topic, t.Partitions})
	}
	for _, w := range wants {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = w.topic
		for _, p := range w.parts {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
			tp := backend.TopicPartition{Topic: w.topic, Partition: p}
			if c, ok := gc.b.offsets.fetch(r.Group, tp); ok {
				rp.Offset, rp.LeaderEpoch = c.Offset, c.LeaderEpoch
				md := c.Metadata
				rp.Metadata = &md
			}
			if r.RequireStable && gc.b.txns.pendingCommit(r.Group, tp) {
				rp.ErrorCode = kerr.UnstableOffsetCommit.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
