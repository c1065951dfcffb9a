package apicheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFunctionLines bounds the functions of the adapter's share of the
// repository: everything outside the engines (complexity, limiter,
// budget), the example schema (graph) and the modules that only use the
// library (examples, bench, deploy). A function longer than this does
// several steps of a request's life; each step gets a name instead.
const maxFunctionLines = 80

// engineDirs are the top-level directories the bound leaves out.
var engineDirs = []string{"complexity", "limiter", "budget", "graph", "examples", "bench", "deploy"}

func TestFunctionLengths(t *testing.T) {
	long, err := longFunctions(filepath.Join("..", ".."), maxFunctionLines)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range long {
		t.Errorf("%s is longer than %d lines", f, maxFunctionLines)
	}
}

func TestLongFunctionsCounts(t *testing.T) {
	dir := t.TempDir()
	src := "package p\n\nfunc short() {\n}\n\nfunc long() {\n" + strings.Repeat("\t_ = 1\n", 5) + "}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	long, err := longFunctions(dir, 6)
	if err != nil {
		t.Fatal(err)
	}
	if len(long) != 1 || !strings.Contains(long[0], "long (7 lines)") {
		t.Errorf("long functions %q, want long (7 lines) alone, tests left out", long)
	}
}

// longFunctions lists the functions of the non-test, non-generated Go
// files under root, outside engineDirs and testdata, longer than limit
// lines from func to the closing brace.
func longFunctions(root string, limit int) ([]string, error) {
	fset := token.NewFileSet()
	var long []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" ||
				!strings.Contains(rel, string(filepath.Separator)) && slices.Contains(engineDirs, name)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > limit {
				long = append(long, fmt.Sprintf("%s:%d: %s (%d lines)", rel, fset.Position(fn.Pos()).Line, fn.Name.Name, n))
			}
		}
		return nil
	})
	return long, err
}
