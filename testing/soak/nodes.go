package soak

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tierlog/tierlog/testing/s3server"
)

// nodeKiller SIGKILLs a node of the soak's MinIO cluster at random times,
// besides the proxy's faults, and starts it again (same arguments, same
// drives) a few seconds later, one node down at a time, which the
// cluster's erasure set survives. It drains the node's client
// connections first (Node.DrainAndKill): a node SIGKILLed while it
// coordinates a PUT can leave the object unreadable for good (seen here
// in three runs: the manifest's new version on 4 of the 8 drives, the old
// on the other 4, and the cluster answering the old one, or 404), a MinIO
// defect that tierlog refuses safely (the partition stops, deleting
// nothing) but that ends the soak; the node still dies in the middle of
// its share of its peers' writes. After a node is back no other is
// killed for healCalm: objects written while it was down sit on 6 of the
// 8 drives until MinIO heals them onto it, and a second node lost before
// then leaves them on 4, at the edge of read quorum: two
// overlapping failures, which a 4-node cluster is not built to survive.
// Used from the parent's loop only.
type nodeKiller struct {
	c       *s3server.Cluster // nil: a single MinIO, no node to kill
	down    *s3server.Node    // the node killed, until it is back
	upAt    time.Time         // when it is started again
	started chan error        // its restart, in flight
	calm    time.Time         // no kill before this (a node came back)
}

// healCalm is how long after a node is back the next may be killed.
const healCalm = 30 * time.Second

// A node is killed once its client connections have drained
// (s3server.Node.DrainAndKill): each closed once quiet for drainQuiet,
// for drainFor at most, after which it is killed all the same.
const (
	drainQuiet = 250 * time.Millisecond
	drainFor   = 5 * time.Second
)

func newNodeKiller(c *s3server.Cluster) *nodeKiller { return &nodeKiller{c: c} }

// size is the cluster's number of nodes (0 for a single MinIO).
func (k *nodeKiller) size() int {
	if k.c == nil {
		return 0
	}
	return len(k.c.Nodes)
}

// toggle, called at every tick of the parent's loop, notes a restart that
// has finished, starts the node down again once its time is up (in the
// background: a node takes seconds to rejoin), and, with every node up,
// sometimes kills one.
func (k *nodeKiller) toggle(t *testing.T, rng *rand.Rand, rep *Report) {
	switch {
	case k.c == nil:
	case k.started != nil:
		select {
		case err := <-k.started:
			k.back(t, err)
		default:
		}
	case k.down != nil:
		if time.Now().After(k.upAt) {
			k.restart()
		}
	case time.Now().Before(k.calm):
	case rng.IntN(25) == 0: // about every 7.5 s at the loop's 300 ms tick
		n := k.c.Nodes[rng.IntN(len(k.c.Nodes))]
		ctx, cancel := context.WithTimeout(context.Background(), drainFor)
		drained, err := n.DrainAndKill(ctx, drainQuiet)
		cancel()
		if err != nil {
			t.Fatalf("soak: %v", err)
		}
		if !drained {
			rep.NodeKillsUndrained++
		}
		downFor := time.Second + time.Duration(rng.Int64N(int64(5*time.Second)))
		k.down, k.upAt = n, time.Now().Add(downFor)
		rep.NodeKills++
		rep.NodeKillsByNode[n.Index]++
		t.Logf("soak: MinIO node %d of %d (%s) SIGKILLed, started again in %v", n.Index, len(k.c.Nodes), n.Endpoint, downFor.Round(time.Millisecond))
	}
}

// restart starts the node down again in the background.
func (k *nodeKiller) restart() {
	n, ch := k.down, make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		ch <- n.Start(ctx)
	}()
	k.started = ch
}

// back notes the end of a restart; a node that cannot be started again
// fails the soak.
func (k *nodeKiller) back(t *testing.T, err error) {
	n := k.down
	k.down, k.started = nil, nil
	if err != nil {
		t.Fatalf("soak: start MinIO node %d again: %v", n.Index, err)
	}
	k.calm = time.Now().Add(healCalm)
	t.Logf("soak: MinIO node %d is back", n.Index)
}

// restoreAll brings a node still down back and waits until it is, so
// that the final life and check run on the whole cluster.
func (k *nodeKiller) restoreAll(t *testing.T) {
	if k.c == nil || k.down == nil {
		return
	}
	if k.started == nil {
		k.restart()
	}
	k.back(t, <-k.started)
}
