package kept_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/costguard/costguard/internal/kept"
)

// A name cut from a large input is a copy of at most the bound, cut at a
// rune boundary.
func TestStringCopiesAndCuts(t *testing.T) {
	doc := "query " + strings.Repeat("é", 100) + " { x }" + strings.Repeat(" ", 1<<20)
	in := doc[len("query "):strings.Index(doc, " {")]
	got := kept.String(in, kept.MaxOperation)
	if len(got) > kept.MaxOperation || !utf8.ValidString(got) || !strings.HasPrefix(in, got) || len(got) < kept.MaxOperation-1 {
		t.Fatalf("String = %q (%d bytes)", got, len(got))
	}
	if kept.Shares(got, doc) {
		t.Fatal("the kept name shares the document's memory")
	}
	short := doc[:5]
	if got := kept.String(short, 64); got != short || kept.Shares(got, doc) {
		t.Fatalf("a short name: %q, shares %v", got, kept.Shares(got, doc))
	}
	if kept.Cut(short, 64) != short || !kept.Shares(kept.Cut(short, 64), doc) {
		t.Fatal("Cut copies")
	}
	if kept.String("", 4) != "" || kept.String("abc", 0) != "" {
		t.Fatal("empty bounds")
	}
}

// A long key is shortened to a name of its own: two keys sharing a long
// prefix stay apart, the same key always gets the same name, and Bound
// finds what Key stored.
func TestKeyStaysDistinct(t *testing.T) {
	body := strings.Repeat("k", 1<<20)
	a, b := "user:"+body[:2000]+"a", "user:"+body[:2000]+"b"
	ka, kb := kept.Key(a, kept.MaxKey), kept.Key(b, kept.MaxKey)
	if len(ka) > kept.MaxKey || len(kb) > kept.MaxKey || ka == kb {
		t.Fatalf("keys %q and %q", ka, kb)
	}
	if kept.Bound(a, kept.MaxKey) != ka || kept.Key(a, kept.MaxKey) != ka {
		t.Fatal("a key's name is not stable")
	}
	small := body[:100]
	if k := kept.Key(small, kept.MaxKey); k != small || kept.Shares(k, body) {
		t.Fatal("a key that fits is not copied as it is")
	}
	if k := kept.Bound(small, kept.MaxKey); !kept.Shares(k, body) {
		t.Fatal("Bound copies a key that fits")
	}
}

func TestShares(t *testing.T) {
	s := strings.Repeat("x", 100)
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{s[10:20], s, true},
		{s, s[99:], true},
		{s[:10], s[10:], false},
		{strings.Clone(s), s, false},
		{"", s, false},
	} {
		if got := kept.Shares(c.a, c.b); got != c.want {
			t.Errorf("Shares(%d bytes, %d bytes) = %v", len(c.a), len(c.b), got)
		}
	}
}

// Names keeps one copy of each name, never the caller's memory, and no
// more than MaxNames of them.
func TestNames(t *testing.T) {
	var n kept.Names
	big := strings.Repeat("p", 1<<20)
	a, b := n.Own(big[:10]), n.Own(big[:10])
	if a != big[:10] || kept.Shares(a, big) || !kept.Shares(a, b) {
		t.Fatal("a name is not one copy")
	}
	if got := n.Own(big); len(got) != kept.MaxName || kept.Shares(got, big) {
		t.Fatalf("a long name: %d bytes", len(got))
	}
	for i := range 2 * kept.MaxNames {
		if s := n.Own(big[:i]); kept.Shares(s, big) {
			t.Fatal("shares")
		}
	}
}
