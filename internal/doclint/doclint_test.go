package doclint

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// processWords are the words a reader of the documentation cannot act on:
// they tell the history of a change, not what is true of the product.
// Matched case-insensitively, on word boundaries. There is no escape: say
// what a user can rely on instead ("gqlparser's validation is quadratic",
// not "issue 9 measured").
var processWords = regexp.MustCompile(`(?i)\bissue\s+#?\d+\b|\bthis\s+round\b|\bsessions?\b|\blanded\b`)

// docs are the files users read, relative to the module root.
func docs(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md found")
	}
	return append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "BENCHMARKS.md")}, pages...)
}

func TestDocsHaveNoProcessWords(t *testing.T) {
	for _, path := range docs(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range processWords.FindAllString(line, -1) {
				t.Errorf("%s:%d: %q tells the history, not the product: %s", filepath.ToSlash(path), i+1, m, strings.TrimSpace(line))
			}
		}
	}
}

// The pattern itself: what it must catch and what it must leave alone.
func TestProcessWordsPattern(t *testing.T) {
	for _, s := range []string{
		"issue 9 measured", "Issue #12", "as in ISSUE  5", "before this round", "This Round's numbers",
		"a session", "Sessions", "the change landed", "Landed.",
	} {
		if !processWords.MatchString(s) {
			t.Errorf("%q passes the lint", s)
		}
	}
	for _, s := range []string{
		"Issue.title", "issues(first: 50)", "an issue of the schema", "round trips", "rounded up",
		"calls landing in the same batch", "lands", "sessionID", "tissue 9", "issue9",
	} {
		if processWords.MatchString(s) {
			t.Errorf("%q is refused by the lint", s)
		}
	}
}
