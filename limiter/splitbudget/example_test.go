package splitbudget_test

import (
	"context"
	"fmt"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/splitbudget"
)

// One gateway's view of a shared budget: a lease of 10 tokens serves ten
// requests with one call to the shared store, and Close gives back what
// is left.
func Example() {
	// Production wraps a redisstore shared by every gateway and leaves
	// Clock unset; the example uses a memory store and a fake clock.
	clock := limitertest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	shared, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer shared.Close()
	store, err := splitbudget.New(shared, splitbudget.Config{LeaseFraction: 0.1, Clock: clock})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	// 100 points per minute, bursts of 100: leases of 10.
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 100, Rate: 100, Period: time.Minute}

	for range 4 {
		d, _ := store.Take(ctx, "user:42", limit, 2)
		fmt.Printf("allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	}
	st := store.Stats()
	fmt.Printf("leases=%d local=%d\n", st.Leases, st.Local)
	peek, _ := shared.Take(ctx, "user:42", limit, 0)
	fmt.Printf("shared store before Close: %d\n", peek.Remaining)

	if err := store.Close(); err != nil {
		panic(err)
	}
	peek, _ = shared.Take(ctx, "user:42", limit, 0)
	fmt.Printf("shared store after Close: %d\n", peek.Remaining)
	// Output:
	// allowed=true remaining=98
	// allowed=true remaining=96
	// allowed=true remaining=94
	// allowed=true remaining=92
	// leases=1 local=3
	// shared store before Close: 90
	// shared store after Close: 92
}
