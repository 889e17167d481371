package main

import (
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	c := configFlags{}
	if err := c.Set("flush.messages=1"); err != nil || c["flush.messages"] != "1" {
		t.Fatalf("Set: %v %v", err, c)
	}
	if err := c.Set("novalue"); err == nil {
		t.Error("Set accepted a flag without =")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--dir is required"},
		{[]string{"--dir", t.TempDir(), "--store", "mem://b"}, "mem://"},
		{[]string{"--dir", t.TempDir(), "--store", "ftp://b"}, "unknown scheme"},
		{[]string{"--dir", t.TempDir(), "--broker-config", "remote.log.reader.threads=2"}, "need --store"},
		{[]string{"--dir", t.TempDir(), "--store", "file://" + t.TempDir(), "--broker-config", "no.such.key=1"}, "no.such.key"},
		{[]string{"--dir", t.TempDir(), "--config", "no.such.key=1"}, "no.such.key"},
		{[]string{"--dir", t.TempDir(), "--max-partitions", "-1"}, "MaxPartitions -1"},
	} {
		if err := run(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run(%q) = %v, want an error naming %q", c.args, err, c.want)
		}
	}
}
