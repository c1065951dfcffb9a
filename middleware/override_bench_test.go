package middleware_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/override"
)

// BenchmarkOverrideLookup measures a REST request through the limiter with
// no override anywhere, with 10,000 overrides for other principals, and
// with an override for the requesting principal: what overrides add to the
// request path (a snapshot load; a map lookup and the clock; the compiled
// rule under a lock).
//
//	go test -run '^$' -bench BenchmarkOverrideLookup -benchmem ./middleware/
func BenchmarkOverrideLookup(b *testing.B) {
	for _, tc := range []struct {
		name             string
		others, yourself bool
	}{{"none", false, false}, {"others", true, false}, {"own", true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			lim, err := middleware.New(middleware.Dependencies{
				Logger:    discardLogger(),
				Overrides: middleware.OverrideOptions{PollInterval: middleware.None},
			}, middleware.Policy{
				Plans: map[string]budget.Plan{
					"big":  {Burst: 1e12, Rate: 1e12, Per: time.Second},
					"huge": {Burst: 1e13, Rate: 1e13, Per: time.Second},
				},
				AnonymousPlan: "big",
				APIKeys:       map[string]identity.APIKey{"alice-key": {Principal: "alice", Plan: "big"}},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer lim.Close()
			ctx := context.Background()
			if tc.others {
				for i := range override.DefaultMaxOverrides - 1 {
					if err := lim.SetOverride(ctx, fmt.Sprintf("user%d", i), override.Override{Plan: "huge"}); err != nil {
						b.Fatal(err)
					}
				}
			}
			if tc.yourself {
				if err := lim.SetOverride(ctx, "alice", override.Override{Plan: "huge"}); err != nil {
					b.Fatal(err)
				}
			}
			benchREST(b, lim, "alice-key")
		})
	}
}
