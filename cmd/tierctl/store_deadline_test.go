package main

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
)

// TestStoreDeadlineDefault checks, without waiting for it, the bound every
// command with --store holds a request to: at most 30 s by default (a
// Backend's own defaults stay at 151.5 s), raised by --store-deadline or
// TIERCTL_STORE_DEADLINE, and a deadline too short to try twice refused.
func TestStoreDeadlineDefault(t *testing.T) {
	if got, want := (objstore.Options{}).Bound(), 151500*time.Millisecond; got != want {
		t.Fatalf("a Backend's default bound is %v, want %v", got, want)
	}
	cmds := storeCommands(newRootCmd(), "")
	sort.Strings(cmds)
	if len(cmds) < 10 {
		t.Fatalf("only %d commands with --store: %v", len(cmds), cmds)
	}
	bound := func(t *testing.T, c string, args ...string) (objstore.Options, error) {
		t.Helper()
		cmd, _, err := newRootCmd().Find(strings.Fields(c))
		if err != nil {
			t.Fatal(err)
		}
		if cmd.Flags().Lookup("store-deadline") == nil {
			t.Fatalf("tierctl %s has --store and no --store-deadline", c)
		}
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		if err := applySettings(cmd); err != nil {
			t.Fatal(err)
		}
		return commandStoreOptions(cmd)
	}
	for _, c := range cmds {
		o, err := bound(t, c)
		if err != nil {
			t.Fatalf("tierctl %s: %v", c, err)
		}
		if o.Bound() > 30*time.Second || o.MaxAttempts < 2 {
			t.Errorf("tierctl %s: by default %d attempts of %v, a bound of %v: want at most 30 s with a retry", c, o.MaxAttempts, o.Timeout, o.Bound())
		}
		o, err = bound(t, c, "--store-deadline", "2m")
		if err != nil || o.Bound() > 2*time.Minute || o.Bound() < 2*time.Minute-time.Second {
			t.Errorf("tierctl %s --store-deadline 2m: a bound of %v (%d × %v), %v", c, o.Bound(), o.MaxAttempts, o.Timeout, err)
		}
	}
	t.Setenv("TIERCTL_STORE_DEADLINE", "90s")
	if o, err := bound(t, "manifest show"); err != nil || o.Bound() > 90*time.Second || o.Bound() < 89*time.Second {
		t.Errorf("TIERCTL_STORE_DEADLINE=90s: a bound of %v, %v", o.Bound(), err)
	}
	if _, err := bound(t, "ls", "--store-deadline", "500ms"); err == nil || !strings.Contains(err.Error(), "--store-deadline") {
		t.Errorf("--store-deadline 500ms: %v, want an error naming the flag", err)
	}
}

// TestStoreDeadlineReachesTheRequests runs the built binary against a
// server that never answers with --store-deadline 2s (and the same from
// the environment): the command fails, and says it gave up after its
// two attempts of 950 ms each, which the deadline set.
func TestStoreDeadlineReachesTheRequests(t *testing.T) {
	tierctlBinary(t)
	addr := silentListener(t)
	env := []string{"AWS_ACCESS_KEY_ID=tierlogtest", "AWS_SECRET_ACCESS_KEY=tierlogtestsecret"}
	store := "s3://bkt/tl?endpoint=http://" + addr + "&region=us-east-1&path-style=true"
	for _, inv := range []invocation{
		binRun(t, env, "manifest", "show", "--store", store, "--partition", "orders-0", "--store-deadline", "2s"),
		binRun(t, append(env, "TIERCTL_STORE_DEADLINE=2s"), "gc", "--store", store, "--partition", "orders-0"),
	} {
		out := inv.stdout + inv.stderr
		if inv.code == 0 || !strings.Contains(out, "950ms") || !strings.Contains(out, "attempt 2 of 2") || !strings.Contains(out, addr) {
			t.Errorf("tierctl %v: exit %d, want a failure naming the endpoint and its 2 attempts of 950ms\n%s", inv.args, inv.code, out)
		}
	}
	inv := binRun(t, env, "ls", t.TempDir(), "--store", store, "--store-deadline", "10ms")
	if inv.code != exitUsage || !strings.Contains(inv.stderr, "--store-deadline") {
		t.Errorf("--store-deadline 10ms: exit %d\n%s", inv.code, inv.stderr)
	}
}
