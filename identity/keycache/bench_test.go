package keycache_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/identity/keycache"
)

// BenchmarkLookup compares a cache hit with the bare StaticKeys lookup of
// the same key among 10,000: the price of the cache's lock, clock and
// recency list over StaticKeys' hash and map read. docs/keys.md quotes
// the ratio.
//
//	go test -run='^$' -bench=Lookup -count=6 ./identity/keycache
func BenchmarkLookup(b *testing.B) {
	keys := make(map[string]identity.APIKey, 10_000)
	for i := range 10_000 {
		keys["key-"+strconv.Itoa(i)] = identity.APIKey{Principal: "user-" + strconv.Itoa(i), Plan: "free"}
	}
	static := identity.NewStaticKeys(keys)
	cache, err := keycache.New(static, keycache.WithLookupBudget(1_000_000, 1_000_000))
	if err != nil {
		b.Fatal(err)
	}
	const key = "key-4242"
	for _, bm := range []struct {
		name   string
		lookup identity.KeyLookup
	}{{"StaticKeys", static}, {"Cache-hit", cache}} {
		ctx := context.Background()
		if _, _, err := bm.lookup.LookupAPIKey(ctx, key); err != nil {
			b.Fatal(err)
		}
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := bm.lookup.LookupAPIKey(ctx, key); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bm.name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, _, err := bm.lookup.LookupAPIKey(ctx, key); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
