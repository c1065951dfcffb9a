package middleware_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/middleware"
)

func TestQueryCacheBounds(t *testing.T) {
	ctx := context.Background()
	doc := &ast.QueryDocument{}
	// "{ a }" is 5 bytes and 3 tokens: 5 + 3×256 = 773 bytes.
	c, err := middleware.NewQueryCache(3, 773*2)
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
	if c.Len() != 2 || c.Bytes() != 773*2 {
		t.Errorf("len %d bytes %d", c.Len(), c.Bytes())
	}
	// A document over the whole bound is never kept, and evicts nothing.
	c.Add(ctx, "{ "+strings.Repeat("x ", 10)+"}", doc)
	if c.Len() != 2 {
		t.Errorf("an oversized document changed the cache: len %d", c.Len())
	}

	// The entry bound.
	c, _ = middleware.NewQueryCache(3, 1<<30)
	for i := range 10 {
		c.Add(ctx, fmt.Sprintf("{ f%d }", i), doc)
	}
	if c.Len() != 3 {
		t.Errorf("len %d, want 3", c.Len())
	}
	if _, ok := c.Get(ctx, "{ f9 }"); !ok {
		t.Error("the newest entry is missing")
	}
	if _, err := middleware.NewQueryCache(-1, 0); err == nil {
		t.Error("negative bound accepted")
	}
}
