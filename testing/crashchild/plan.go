package crashchild

import (
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// EnvSeed names the environment variable holding the seed of the crash
// tests' choices (Seed, Rand): set it to the seed a run logged to replay
// that run.
const EnvSeed = "TIERLOG_CRASH_SEED"

// KillSelf SIGKILLs this process and does not return.
func KillSelf() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	for {
		// The signal is on its way. (A bare select{} can be reported as
		// a deadlock before it lands.)
		time.Sleep(time.Second)
	}
}

// KillAt counts a child's steps and SIGKILLs the process at the k-th.
// Step may be called from several goroutines at once: exactly one call
// is the k-th.
type KillAt struct {
	k int64
	n atomic.Int64
}

// NewKillAt returns a KillAt that kills at step k (from 1); with k < 1
// it never kills, and only counts.
func NewKillAt(k int) *KillAt { return &KillAt{k: int64(k)} }

// Step counts a step; the k-th does not return (KillSelf).
func (c *KillAt) Step() {
	if c.n.Add(1) == c.k {
		KillSelf()
	}
}

// Steps is how many steps have been counted.
func (c *KillAt) Steps() int64 { return c.n.Load() }

// Seed is the seed of a crash test's choices: EnvSeed's value when it is
// set (t fails if it is not a number), else the clock's. It logs the seed
// and how to replay it.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(EnvSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("crashchild: %s=%q: %v", EnvSeed, s, err)
		}
		seed = v
	}
	t.Logf("crash seed %d (%s=%d replays it)", seed, EnvSeed, seed)
	return seed
}

// Rand is a random source seeded with Seed(t) and stream; tests that
// share a binary pass different streams, so one seed gives each its own
// choices.
func Rand(t testing.TB, stream uint64) *rand.Rand {
	t.Helper()
	return rand.New(rand.NewPCG(Seed(t), stream))
}

// Plan is the k's a crash loop kills its children at: one a run.
type Plan struct {
	// Runs is how many runs the loop makes; Short how many under -short.
	Runs, Short int
	// Steps is how many steps a child takes, or may take: every k is in
	// 1..Steps. It MUST be at least 1.
	Steps int
	// Spread spreads the k's evenly over 1..Steps, the first at 1, with no
	// randomness, and makes a run at every step when there are no more
	// steps than runs. Else each k is drawn at random from 1..Steps.
	Spread bool
}

// Ks returns the loop's k's in the order to run them, drawn from rng
// (which may be nil with Spread).
func (p Plan) Ks(rng *rand.Rand) []int {
	return p.ks(rng, testing.Short())
}

func (p Plan) ks(rng *rand.Rand, short bool) []int {
	if p.Steps < 1 {
		panic("crashchild: a Plan with no steps")
	}
	runs := p.Runs
	if short {
		runs = p.Short
	}
	if p.Spread {
		runs = min(runs, p.Steps)
	}
	ks := make([]int, runs)
	for i := range ks {
		if p.Spread {
			ks[i] = 1 + i*p.Steps/runs
		} else {
			ks[i] = 1 + rng.IntN(p.Steps)
		}
	}
	return ks
}
