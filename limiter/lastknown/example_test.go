package lastknown_test

import (
	"context"
	"fmt"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/lastknown"
	"github.com/costguard/costguard/limiter/limitertest"
)

// While the shared store answers, each of its decisions is observed; when
// it fails, the store decides from what it last said. Alice was last seen
// with R = 30 points left of a bucket of 100 refilled at 10 a second: an
// outage of T = 2 s admits at most R + rate × T = 30 + 20 of her points.
// Bob was never seen: his budget starts empty, and only the refill admits.
func Example() {
	ctx := context.Background()
	clock := limitertest.NewFakeClock(time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC))
	fallback, err := lastknown.New(lastknown.Config{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer fallback.Close()
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 100, Rate: 10, Period: time.Second}

	// The shared store's last word on alice: 30 points left (the bucket
	// refills its 70 missing points in 7 s).
	fallback.Observe("alice", limit, 1, limiter.Decision{Allowed: true, Limit: 100, Remaining: 30, ResetAfter: 7 * time.Second})

	// The store is down: take one point at a time until refused.
	drain := func(key string) (admitted int) {
		for {
			d, err := fallback.Take(ctx, key, limit, 1)
			if err != nil {
				panic(err)
			}
			if !d.Allowed {
				return admitted
			}
			admitted++
		}
	}
	fmt.Println("alice at once:", drain("alice"))
	fmt.Println("bob at once:", drain("bob"))
	clock.Advance(2 * time.Second)
	fmt.Println("alice 2 s later:", drain("alice"))
	fmt.Println("bob 2 s later:", drain("bob"))

	// Output:
	// alice at once: 30
	// bob at once: 0
	// alice 2 s later: 20
	// bob 2 s later: 20
}
