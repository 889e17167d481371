package main

import "testing"

// TestEmbed runs the example end to end, as `make test` does.
func TestEmbed(t *testing.T) {
	if err := run(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}
