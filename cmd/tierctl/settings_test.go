package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSettingsPrecedence: a .properties file sets the store and topic
// config; the environment overrides the file; a flag overrides both.
func TestSettingsPrecedence(t *testing.T) {
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	if code, _, errOut := tierctl(t, "produce", logs, "--partition", "orders-0", "--count", "20000", "--record-size", "200",
		"--config", "segment.bytes=1048576"); code != 0 {
		t.Fatalf("produce: %s", errOut)
	}
	part := filepath.Join(logs, "orders-0")
	fileBucket, envBucket := filepath.Join(root, "file-bucket"), filepath.Join(root, "env-bucket")
	props := filepath.Join(root, "tierctl.properties")
	os.WriteFile(props, []byte(`# operator settings, Kafka-style
store = file://`+fileBucket+`?create=true
local.retention.ms: 0
log-level=off
`), 0o644)

	// The file alone: its store, and its local.retention.ms=0.
	code, out, errOut := tierctl(t, "offload", part, "--config-file", props, "--json")
	var res map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res["uploaded"].(float64) < 3 || res["localSegmentsDeleted"] != res["uploaded"] {
		t.Fatalf("offload with --config-file: exit %d %s %s", code, out, errOut)
	}
	if ents, _ := os.ReadDir(filepath.Join(fileBucket, "orders-0")); len(ents) < 10 {
		t.Fatalf("the file's store got %d objects", len(ents))
	}

	// The environment overrides the file (TIERCTL_CONFIG_FILE names it).
	t.Setenv("TIERCTL_CONFIG_FILE", props)
	t.Setenv("TIERCTL_STORE", "file://"+envBucket+"?create=true")
	// (The env's bucket is empty: ls of the offloaded partition says it
	// has no manifest there.)
	if code, out, errOut := tierctl(t, "ls", part); code != 2 || !strings.Contains(errOut, envBucket) || !strings.Contains(errOut, "no manifest") {
		t.Fatalf("ls with an empty env bucket: exit %d\n%s%s", code, out, errOut)
	}
	// A flag overrides both.
	if code, out, errOut := tierctl(t, "ls", part, "--store", "file://"+fileBucket); code != 0 || strings.Count(out, "remote ") < 3 {
		t.Fatalf("ls --store: exit %d\n%s%s", code, out, errOut)
	}
	// TIERCTL_CONFIG adds topic config under the command line's.
	t.Setenv("TIERCTL_CONFIG", "segment.bytes=notanumber")
	if code, _, errOut := tierctl(t, "produce", logs, "--partition", "x-0", "--count", "1"); code != 2 || !strings.Contains(errOut, "segment.bytes") {
		t.Fatalf("a bad TIERCTL_CONFIG value: exit %d %s", code, errOut)
	}
	if code, _, errOut := tierctl(t, "produce", logs, "--partition", "x-0", "--count", "1", "--config", "segment.bytes=1048576"); code != 0 {
		t.Fatalf("--config over TIERCTL_CONFIG: exit %d %s", code, errOut)
	}
	os.Unsetenv("TIERCTL_CONFIG")

	// Errors name what was wrong.
	t.Setenv("TIERCTL_CONFIG_FILE", "")
	bad := filepath.Join(root, "bad.properties")
	os.WriteFile(bad, []byte("store=file:///tmp\nsegment.byte=1\n"), 0o644)
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"ls", part, "--config-file", bad}, "segment.byte"},
		{nil, []string{"ls", part, "--config-file", filepath.Join(root, "missing.properties")}, "missing.properties"},
		{map[string]string{"TIERCTL_GRACE": "soon"}, []string{"gc", "--partition", "orders-0", "--store", "file://" + fileBucket}, "TIERCTL_GRACE"},
		{nil, []string{"ls", part, "--log-level", "loud"}, "--log-level"},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		code, _, errOut := tierctl(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v %v: exit %d %q, want 2 naming %s", c.env, c.args, code, errOut, c.want)
		}
		for k := range c.env {
			os.Unsetenv(k)
		}
	}
}

// TestLogLevel: --log-level info shows the library's structured log lines
// on stderr; the default (warn) keeps a clean run quiet.
func TestLogLevel(t *testing.T) {
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	tierctl(t, "produce", logs, "--partition", "orders-0", "--count", "10000", "--record-size", "200", "--config", "segment.bytes=1048576")
	part := filepath.Join(logs, "orders-0")
	store := "file://" + filepath.Join(root, "bucket") + "?create=true"
	code, _, errOut := tierctl(t, "offload", part, "--store", store, "--log-level", "info")
	if code != 0 || !strings.Contains(errOut, "level=INFO") || !strings.Contains(errOut, `msg="offloaded segment"`) {
		t.Fatalf("offload --log-level info: exit %d\n%s", code, errOut)
	}
	tierctl(t, "produce", logs, "--partition", "orders-0", "--count", "10000", "--record-size", "200", "--config", "segment.bytes=1048576")
	if code, _, errOut := tierctl(t, "offload", part, "--store", store); code != 0 || errOut != "" {
		t.Fatalf("offload at the default level: exit %d, stderr %q", code, errOut)
	}
}

// TestProgressBars: --progress always draws a bar on stderr for each long
// command; auto draws none when stderr is not a terminal (as here); a bad
// mode is a usage error.
func TestProgressBars(t *testing.T) {
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	part := filepath.Join(logs, "orders-0")
	store := "file://" + filepath.Join(root, "bucket") + "?create=true"
	for _, args := range [][]string{
		{"produce", logs, "--partition", "orders-0", "--count", "20000", "--config", "segment.bytes=1048576"},
		{"verify", logs},
		{"offload", part, "--store", store, "--config", "local.retention.ms=0"},
		{"restore", filepath.Join(root, "restored"), "--store", store, "--partition", "orders-0"},
		// (compact refuses orders-0 once offloaded: a partition of its own)
		{"produce", logs, "--partition", "users-0", "--count", "20000", "--key-space", "100", "--config", "segment.bytes=262144"},
		{"compact", filepath.Join(logs, "users-0"), "--config", "cleanup.policy=compact"},
	} {
		// Each command once with a bar (first: offload and compact then
		// have work to do), then again with auto.
		name := args[0]
		code, _, errOut := tierctl(t, append(args, "--progress", "always")...)
		if code != 0 || !strings.Contains(errOut, name) || !strings.Contains(errOut, "100%") && name != "compact" {
			t.Fatalf("%s --progress always: exit %d, stderr %q", name, code, errOut)
		}
		if name == "restore" {
			os.RemoveAll(filepath.Join(root, "restored"))
		}
		if code, _, errOut := tierctl(t, args...); code != 0 || errOut != "" {
			t.Fatalf("%s, progress auto without a terminal: exit %d, stderr %q", name, code, errOut)
		}
	}
	if code, _, errOut := tierctl(t, "verify", logs, "--progress", "sometimes"); code != 2 || !strings.Contains(errOut, "--progress") {
		t.Fatalf("a bad --progress: exit %d %q", code, errOut)
	}
}
