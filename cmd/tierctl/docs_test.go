package main

import (
	"os"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
)

// TestOperatorDocs keeps docs/operators.md honest: every tierctl command
// and every topic config key, with its default, is in it.
func TestOperatorDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/operators.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, c := range leafCommands(newRootCmd(), "") {
		name := strings.Fields(c)[0]
		if !strings.Contains(doc, "| `"+name) {
			t.Errorf("docs/operators.md has no row for tierctl %s", name)
		}
	}
	for _, k := range backend.ConfigKeys() {
		if !strings.Contains(doc, "| `"+k.Name+"` | `"+k.Default+"` |") {
			t.Errorf("docs/operators.md lacks config key %s with its default %s", k.Name, k.Default)
		}
	}
}
