package doclint

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// processWords are the words a reader of the documentation or the code
// cannot act on: they tell the history of a change, or of its review, not
// what is true of the product. Matched case-insensitively, on word
// boundaries. There is no escape: say what a user can rely on instead
// ("gqlparser's validation is quadratic", not "issue 9 measured"), and
// point at another project's tracker by its address, not "issue #972".
var processWords = regexp.MustCompile(`(?i)\bissue\s+#?\d+\b|\bthis\s+round\b|\bsessions?\b|\blanded\b` +
	`|\breviewers?\b|\bcode\s+review\b|\b(?:first|second|third|fourth|fifth|\d+(?:st|nd|rd|th))\s+findings?\b`)

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
		"a reviewer's", "Reviewers", "after code review", "the probe's second finding", "3rd finding",
	} {
		if !processWords.MatchString(s) {
			t.Errorf("%q passes the lint", s)
		}
	}
	for _, s := range []string{
		"Issue.title", "issues(first: 50)", "an issue of the schema", "round trips", "rounded up",
		"calls landing in the same batch", "lands", "sessionID", "tissue 9", "issue9",
		"review the diff", "a reviewed document", "reviews(first: 2)", "each round's findings",
		"finding its shard full", "a second read",
	} {
		if processWords.MatchString(s) {
			t.Errorf("%q is refused by the lint", s)
		}
	}
}

var (
	fence   = regexp.MustCompile("(?ms)^```.*?^```")
	heading = regexp.MustCompile(`(?m)^#+ (.*)$`)
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	notSlug = regexp.MustCompile(`[^\p{L}\p{N}_ -]`)
)

// anchor is the fragment GitHub gives a heading: lower case, punctuation
// dropped, spaces as hyphens.
func anchor(h string) string {
	return strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
}

// TestDocsLinksResolve: every relative link of the docs names a file that
// exists and, for a Markdown page, a heading it has, so moving a topic to
// its page cannot leave a reader at a dead end.
func TestDocsLinksResolve(t *testing.T) {
	files := docs(t)
	anchors := map[string]map[string]bool{}
	texts := map[string]string{}
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		texts[path] = string(b)
		set := map[string]bool{}
		for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
			set[anchor(m[1])] = true
		}
		anchors[filepath.Clean(path)] = set
	}
	for _, path := range files {
		for _, m := range link.FindAllStringSubmatch(texts[path], -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := filepath.Clean(path)
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: no such file", filepath.ToSlash(path), target)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			set, ok := anchors[dest]
			if !ok {
				continue // a Markdown file outside the docs, such as a package's
			}
			if !set[frag] {
				t.Errorf("%s: link %s: %s has no heading with that anchor", filepath.ToSlash(path), target, filepath.ToSlash(dest))
			}
		}
	}
}
