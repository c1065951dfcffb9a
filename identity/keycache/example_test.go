package keycache_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/identity/keycache"
)

// A cache in front of a lookup: the second request for a key is answered
// from memory, and so is a key the lookup did not know.
func Example() {
	backing := newFake() // any identity.KeyLookup: pgkeys.Lookup, StaticKeys, your own
	keys, err := keycache.New(backing, keycache.WithLookupBudget(100, 100))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, k := range []string{"alice-key", "alice-key", "stolen-key", "stolen-key"} {
		principal, plan, err := keys.LookupAPIKey(ctx, k)
		switch {
		case errors.Is(err, identity.ErrUnknownAPIKey):
			fmt.Println(k, "unknown")
		case err != nil:
			fmt.Println(k, "lookup failed:", err)
		default:
			fmt.Println(k, principal, plan)
		}
	}
	s := keys.Stats()
	fmt.Printf("%d lookups, %d hits, %d unknown hits\n", s.Lookups, s.Hits, s.UnknownHits)
	// Output:
	// alice-key alice free
	// alice-key alice free
	// stolen-key unknown
	// stolen-key unknown
	// 2 lookups, 1 hits, 1 unknown hits
}
