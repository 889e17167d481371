package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestPageIsTheExample: docs/embedding.md's walk is this program's code.
// Each code block the page marks `<!-- walk:NAME -->` must be, line for
// line, the region of main.go between `// walk:NAME` and `// walk:end`
// (less the function body's indent), and both name the same steps in the
// same order.
func TestPageIsTheExample(t *testing.T) {
	page, err := os.ReadFile("../../docs/embedding.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	pageSteps, pageCode := pageBlocks(t, string(page))
	srcSteps, srcCode := sourceRegions(t, string(src))
	if !slices.Equal(pageSteps, srcSteps) {
		t.Fatalf("the page's walk has steps %v, examples/embed %v", pageSteps, srcSteps)
	}
	if len(srcSteps) < 6 {
		t.Fatalf("examples/embed marks %d steps (%v), want the whole walk", len(srcSteps), srcSteps)
	}
	for i, step := range srcSteps {
		if pageCode[i] != srcCode[i] {
			t.Errorf("step %s: the page's code differs from examples/embed/main.go's\n--- page:\n%s\n--- main.go:\n%s", step, pageCode[i], srcCode[i])
		}
	}
}

var pageMarker = regexp.MustCompile("(?m)^<!-- walk:([a-z-]+) -->\n```go\n")

// pageBlocks returns the names and code of the page's marked blocks.
func pageBlocks(t *testing.T, page string) (names, code []string) {
	t.Helper()
	for _, m := range pageMarker.FindAllStringSubmatchIndex(page, -1) {
		rest := page[m[1]:]
		end := strings.Index(rest, "```\n")
		if end < 0 {
			t.Fatalf("walk:%s: the code block never ends", page[m[2]:m[3]])
		}
		names = append(names, page[m[2]:m[3]])
		code = append(code, rest[:end])
	}
	return names, code
}

// sourceRegions returns the names and code of main.go's marked regions,
// each line less one tab.
func sourceRegions(t *testing.T, src string) (names, code []string) {
	t.Helper()
	var cur []string
	name := ""
	for _, line := range strings.SplitAfter(src, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "// walk:end":
			if name == "" {
				t.Fatal("main.go: walk:end without a walk:NAME")
			}
			names, code = append(names, name), append(code, strings.Join(cur, ""))
			name, cur = "", nil
		case strings.HasPrefix(trimmed, "// walk:"):
			if name != "" {
				t.Fatalf("main.go: walk:%s inside walk:%s", strings.TrimPrefix(trimmed, "// walk:"), name)
			}
			name = strings.TrimPrefix(trimmed, "// walk:")
		case name != "":
			cur = append(cur, strings.TrimPrefix(line, "\t"))
		}
	}
	if name != "" {
		t.Fatalf("main.go: walk:%s never ends", name)
	}
	return names, code
}
