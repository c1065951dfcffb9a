package keycache_test

import (
	"context"
	"strings"
	"testing"

	"github.com/costguard/costguard/identity/keycache"
	"github.com/costguard/costguard/internal/kept"
)

// bigAnswer answers every key with a principal and a plan cut from one
// large string, as a lookup that decodes a large document might.
type bigAnswer struct{ big string }

func (b bigAnswer) LookupAPIKey(context.Context, string) (string, string, error) {
	return b.big[:30], b.big[30:34], nil
}

// What the cache keeps of a lookup's answer is a copy: a hit answers with
// strings that share nothing with the lookup's.
func TestKeepsCopiesOfTheAnswer(t *testing.T) {
	src := bigAnswer{strings.Repeat("a", 1<<20)}
	c, err := keycache.New(src)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 { // a miss, then a hit
		principal, plan, err := c.LookupAPIKey(ctx, "key")
		if err != nil {
			t.Fatal(err)
		}
		if principal != src.big[:30] || plan != "aaaa" {
			t.Fatalf("%q, %q", principal, plan)
		}
	}
	principal, plan, _ := c.LookupAPIKey(ctx, "key")
	if kept.Shares(principal, src.big) || kept.Shares(plan, src.big) {
		t.Fatal("the cache keeps the lookup's memory")
	}
}
