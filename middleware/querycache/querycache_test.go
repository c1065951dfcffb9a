package querycache_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/costguard/costguard/middleware/querycache"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

func TestQueryCacheBounds(t *testing.T) {
	ctx := context.Background()
	doc := &ast.QueryDocument{}
	// "{ a }" is 5 bytes and 3 tokens: 8192 + 5 + 3×256 = 8965 bytes.
	c, err := querycache.New(3, 8965*2)
	if err != nil {
		t.Fatal(err)
	}
	c.Add(ctx, "{ a }", doc)
	c.Add(ctx, "{ b }", doc)
	if _, ok := c.Get(ctx, "{ a }"); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	c.Add(ctx, "{ c }", doc) // over the bytes: b, the least recent, goes
	if _, ok := c.Get(ctx, "{ b }"); ok {
		t.Error("b kept past the byte bound")
	}
	if c.Len() != 2 || c.Bytes() != 8965*2 {
		t.Errorf("len %d bytes %d", c.Len(), c.Bytes())
	}
	// A document over the whole bound is never kept, and evicts nothing.
	c.Add(ctx, "{ "+strings.Repeat("x ", 100)+"}", doc)
	if c.Len() != 2 {
		t.Errorf("an oversized document changed the cache: len %d", c.Len())
	}

	// The entry bound.
	c, _ = querycache.New(3, 1<<30)
	for i := range 10 {
		c.Add(ctx, fmt.Sprintf("{ f%d }", i), doc)
	}
	if c.Len() != 3 {
		t.Errorf("len %d, want 3", c.Len())
	}
	if _, ok := c.Get(ctx, "{ f9 }"); !ok {
		t.Error("the newest entry is missing")
	}
	if _, err := querycache.New(-1, 0); err == nil {
		t.Error("negative bound accepted")
	}
}

// The cache's estimate of a parsed document (8 KiB, its bytes and 256 a token)
// is not below what gqlparser's tree actually holds, for documents of very
// different shapes: so query_cache_bytes bounds real memory.
func TestQueryCacheEstimateCoversTheTree(t *testing.T) {
	docs := map[string]string{
		"one long string": `{ __type(name: "` + strings.Repeat("x", 200_000) + `") { name } }`,
		"many fields":     "{" + strings.Repeat(" __typename", 2000) + " }",
		"many aliases":    "{" + strings.Repeat(" a1234: __typename", 2000) + " }",
		"nested lists":    "{" + strings.Repeat(` user(login: "a") { repos(first: 10) { name issues(first: 5) { title } } }`, 300) + " }",
		"argument values": "{ f(" + strings.Repeat(" a: [1, 2, 3, {b: 1}]", 1000) + ") }",
	}
	for name, q := range docs {
		t.Run(name, func(t *testing.T) {
			const copies = 50
			kept := make([]*ast.QueryDocument, 0, copies)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range copies {
				doc, err := parser.ParseQuery(&ast.Source{Input: strings.Clone(q)})
				if err != nil {
					t.Fatal(err)
				}
				kept = append(kept, doc)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			held := int64(after.HeapAlloc-before.HeapAlloc) / copies
			runtime.KeepAlive(kept)

			c, _ := querycache.New(1, 1<<40)
			c.Add(context.Background(), q, kept[0])
			t.Logf("%d bytes: the tree holds %d, the estimate is %d", len(q), held, c.Bytes())
			if c.Bytes() < held {
				t.Errorf("estimate %d is below the %d bytes the parsed document holds", c.Bytes(), held)
			}
		})
	}
}

// A flood of distinct registrations stays within the persisted cache's
// bounds, by entries and by bytes, evicting the least recently used.
func TestPersistedBounded(t *testing.T) {
	c, err := querycache.NewPersisted(10, 4096)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c.Add(ctx, "keep", "{ a }")
	for i := range 1000 {
		if _, ok := c.Get(ctx, "keep"); !ok {
			t.Fatalf("the entry in use was evicted after %d registrations", i)
		}
		c.Add(ctx, fmt.Sprintf("h%d", i), fmt.Sprintf("{ f%d }", i))
		if c.Len() > 10 || c.Bytes() > 4096 {
			t.Fatalf("after %d registrations: %d entries, %d bytes", i, c.Len(), c.Bytes())
		}
	}
	c.Add(ctx, "huge", strings.Repeat("x", 5000))
	if _, ok := c.Get(ctx, "huge"); ok {
		t.Error("a document larger than the cache was kept")
	}
	if _, err := querycache.NewPersisted(-1, 0); !errors.Is(err, querycache.ErrInvalidConfig) {
		t.Errorf("NewPersisted(-1, 0): %v", err)
	}
}
