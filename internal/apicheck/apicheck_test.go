package apicheck

import (
	"flag"
	"fmt"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite ../../api/costguard.txt from the library's packages")

// root is the module root; file is the listing, relative to it.
var (
	root = filepath.Join("..", "..")
	file = filepath.Join("api", "costguard.txt")
)

// header opens the listing; lines that start with # are not API.
const header = `# The public API of the module github.com/costguard/costguard: every exported
# name of its packages but internal ones and commands. The optional modules
# (identity/pgkeys, middleware/prommetrics, middleware/wsclose) are not in it.
# Made by go test ./internal/apicheck -update; see api/README.md.
`

// loadLibrary is load(root), run once for every test that needs it.
var loadLibrary = sync.OnceValues(func() ([]*types.Package, error) { return load(root) })

func TestAPI(t *testing.T) {
	pkgs, err := loadLibrary()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, pkg := range pkgs {
		got = append(got, listing(pkg)...)
	}
	path := filepath.Join(root, file)
	if *update {
		if err := os.WriteFile(path, []byte(header+strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v\nmake it with: go test ./internal/apicheck -update", err)
	}
	var want []string
	for _, line := range strings.Split(string(b), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			want = append(want, line)
		}
	}
	added, removed := difference(got, want), difference(want, got)
	if len(added) == 0 && len(removed) == 0 {
		return
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "the public API differs from %s (%d added, %d removed):\n", filepath.ToSlash(file), len(added), len(removed))
	// In the listing's order, so that a changed line shows as - then +.
	diff := make([]string, 0, len(added)+len(removed))
	for _, line := range removed {
		diff = append(diff, line+"\x00-")
	}
	for _, line := range added {
		diff = append(diff, line+"\x00+")
	}
	slices.Sort(diff)
	for _, d := range diff {
		line, sign, _ := strings.Cut(d, "\x00")
		fmt.Fprintf(&msg, "%s %s\n", sign, line)
	}
	msg.WriteString("If the change is meant, update the listing with\n\tgo test ./internal/apicheck -update\n" +
		"and commit it with the change; a removed line breaks callers: say so in the commit message.")
	t.Error(msg.String())
}

// difference returns the lines of a that are not in b, in a's order.
func difference(a, b []string) []string {
	in := make(map[string]bool, len(b))
	for _, line := range b {
		in[line] = true
	}
	var out []string
	for _, line := range a {
		if !in[line] {
			out = append(out, line)
		}
	}
	return out
}
