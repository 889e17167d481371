package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/tierlog/tierlog/backend"
)

// TestOperatorDocs keeps docs/operators.md honest: every tierctl command,
// every flag of each in its row of the flags table, and every topic config
// key, with its default, is in it.
func TestOperatorDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/operators.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	// row returns the flags table's row for a command ("" when none).
	row := func(command string) string {
		for l := range strings.Lines(doc) {
			if strings.HasPrefix(l, "| `"+command+"` | `--") || strings.HasPrefix(l, "| "+command+" | `--") {
				return l
			}
		}
		return ""
	}
	root := newRootCmd()
	for _, c := range leafCommands(root, "") {
		name := strings.Fields(c)[0]
		if !strings.Contains(doc, "| `"+name) {
			t.Errorf("docs/operators.md has no row for tierctl %s", name)
		}
		if name == "completion" {
			c = name // one row for every shell
		}
		cmd, _, err := root.Find(strings.Fields(c))
		if err != nil {
			t.Fatal(err)
		}
		r := row(c)
		cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" {
				return
			}
			if !strings.Contains(r, "`--"+f.Name) {
				t.Errorf("docs/operators.md's flags table lacks tierctl %s --%s", c, f.Name)
			}
		})
	}
	r := row("every command")
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(r, "`--"+f.Name) {
			t.Errorf("docs/operators.md's flags table lacks the global flag --%s", f.Name)
		}
	})
	for _, k := range backend.ConfigKeys() {
		if !strings.Contains(doc, "| `"+k.Name+"` | `"+k.Default+"` |") {
			t.Errorf("docs/operators.md lacks config key %s with its default %s", k.Name, k.Default)
		}
	}
}
