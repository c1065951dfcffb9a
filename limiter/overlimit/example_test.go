package overlimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/overlimit"
)

// A scrape bot that has spent its budget keeps asking: after the first
// rejection, the cache answers for the store until the retry-after has
// passed.
func Example() {
	// Production leaves Clock unset and wraps a redisstore; the example
	// moves a fake clock over a memory store.
	clock := limitertest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	mem, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer mem.Close()
	store, err := overlimit.New(mem, overlimit.Config{Clock: clock})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	// 100 points per minute, bursts of 20: a point every 600 ms.
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 100, Period: time.Minute}

	_, _ = store.Take(ctx, "bot", limit, 20)
	d, _ := store.Take(ctx, "bot", limit, 1) // the store rejects; remembered
	fmt.Printf("allowed=%v retry-after=%v remembered=%d\n", d.Allowed, d.RetryAfter, store.Len())

	clock.Advance(200 * time.Millisecond)
	d, _ = store.Take(ctx, "bot", limit, 1) // answered here
	fmt.Printf("allowed=%v retry-after=%v\n", d.Allowed, d.RetryAfter)
	d, _ = store.Take(ctx, "bot", limit, 3) // costs more: two more tokens to wait for
	fmt.Printf("allowed=%v retry-after=%v\n", d.Allowed, d.RetryAfter)

	clock.Advance(400 * time.Millisecond) // R has passed: the store is asked again
	d, _ = store.Take(ctx, "bot", limit, 1)
	fmt.Printf("allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// allowed=false retry-after=600ms remembered=1
	// allowed=false retry-after=400ms
	// allowed=false retry-after=1.6s
	// allowed=true remaining=0
}
