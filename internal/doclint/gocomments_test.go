package doclint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// finding is one process word in a Go comment.
type finding struct {
	line  int    // of the file, 1-based
	match string // the words matched
	text  string // the comment's line, trimmed
}

// goCommentFindings returns the process words in the comments of the Go
// file at path, line by line. The file is parsed, so a word inside a string
// or a rune literal is never read as a comment. A generated file ("Code
// generated ... DO NOT EDIT." before its package clause, as go/ast defines
// it) is not read: its comments are its generator's.
func goCommentFindings(path string) ([]finding, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	var out []finding
	for _, group := range f.Comments {
		for _, c := range group.List {
			first := fset.Position(c.Slash).Line
			for i, line := range strings.Split(c.Text, "\n") {
				for _, m := range processWords.FindAllString(line, -1) {
					out = append(out, finding{line: first + i, match: m, text: strings.TrimSpace(line)})
				}
			}
		}
	}
	return out, nil
}

// goFiles are the repository's .go files, every module's: the nested
// modules (in go.work or not) are directories of the same tree. The
// directories the go command ignores (names starting with "." or "_") are
// skipped, and so is this package, which names the words it refuses.
func goFiles(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
				return filepath.SkipDir
			}
			if abs, err := filepath.Abs(path); err == nil && abs == self {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && d.Type().IsRegular() {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("only %d .go files found under %s", len(files), root)
	}
	return files
}

func TestGoCommentsHaveNoProcessWords(t *testing.T) {
	for _, path := range goFiles(t) {
		found, err := goCommentFindings(path)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, f := range found {
			t.Errorf("%s:%d: %q tells the history, not the code: %s", filepath.ToSlash(path), f.line, f.match, f.text)
		}
	}
}

// The reader itself, on fixtures: every kind of comment is read, at its
// line; strings are not comments; a generated file is not read.
func TestGoCommentFindings(t *testing.T) {
	found, err := goCommentFindings(filepath.Join("testdata", "comments.go"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, fmt.Sprintf("%d %s", f.line, f.match))
	}
	want := []string{
		"1 issue 9",         // the package doc
		"6 This round",      // a doc comment
		"13 landed",         // the third line of a block comment
		"14 session",        // a trailing comment
		"17 reviewer",       // a block comment inside an expression
		"23 second finding", // review vocabulary
	}
	if !slices.Equal(got, want) {
		t.Errorf("found %q\nwant  %q", got, want)
	}

	found, err = goCommentFindings(filepath.Join("testdata", "generated.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 0 {
		t.Errorf("a generated file was read: %+v", found)
	}

	if _, err := goCommentFindings(filepath.Join("testdata", "missing.go")); err == nil {
		t.Error("a file that cannot be read passes")
	}
}
