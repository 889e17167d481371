package soak_test

import (
	"flag"
	"os"
	"testing"
	"time"

	"github.com/tierlog/tierlog/testing/soak"
)

var duration = flag.Duration("soak.duration", 40*time.Second,
	"how long the soak's loop runs (make soak: 10m); the final check comes after")

var killNodes = flag.Bool("soak.kill-nodes", false,
	"SIGKILL MinIO cluster nodes at random times (make soak sets it)")

func TestMain(m *testing.M) { os.Exit(soak.Main(m)) }

// TestSoak runs the soak: 40 s by default (in go test ./... and make test),
// -soak.duration for longer and -soak.kill-nodes for MinIO node kills
// (make soak). The seed is logged; TIERLOG_SOAK_SEED
// replays it.
func TestSoak(t *testing.T) {
	r := soak.Run(t, soak.Config{Duration: *duration, KillNodes: *killNodes})
	t.Log(r.Summary())
}
