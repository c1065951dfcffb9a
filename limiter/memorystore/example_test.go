package memorystore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
)

// A token bucket per principal: spend, get rejected with an honest
// retry-after, refund what a request did not use.
func Example() {
	// Production leaves Clock unset (the system's monotonic clock); the
	// example moves a fake one.
	clock := limitertest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	store, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	ctx := context.Background()
	// 100 points per minute, bursts of 20: a point every 600 ms.
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 100, Period: time.Minute}

	d, _ := store.Take(ctx, "user:42", limit, 15)
	fmt.Printf("allowed=%v remaining=%d reset-after=%v\n", d.Allowed, d.Remaining, d.ResetAfter)
	d, _ = store.Take(ctx, "user:42", limit, 10)
	fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)

	clock.Advance(d.RetryAfter)
	d, _ = store.Take(ctx, "user:42", limit, 10)
	fmt.Printf("allowed=%v remaining=%d\n", d.Allowed, d.Remaining)

	d, _ = store.Refund(ctx, "user:42", limit, 4) // the query cost less than priced
	fmt.Printf("after refund remaining=%d\n", d.Remaining)

	_, err = store.Take(ctx, "user:42", limit, 21)
	fmt.Println(errors.Is(err, limiter.ErrCostExceedsCapacity), err)
	// Output:
	// allowed=true remaining=5 reset-after=9s
	// allowed=false remaining=5 retry-after=3s
	// allowed=true remaining=0
	// after refund remaining=4
	// true limiter: cost exceeds capacity: cost 21, capacity 20
}

// Shaping traffic to a fragile downstream: each caller is given a departure
// slot and told how long to wait (limiter.Wait does the waiting).
func Example_shaping() {
	clock := limitertest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	store, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	// 10 SMS per second, at most 3 queued.
	limit := limiter.Limit{Algorithm: limiter.LeakyBucketShaping, Burst: 3, Rate: 10, Period: time.Second}

	for range 4 {
		d, _ := store.Take(context.Background(), "sms-gateway", limit, 1)
		fmt.Printf("allowed=%v delay=%v retry-after=%v\n", d.Allowed, d.Delay, d.RetryAfter)
	}
	// Output:
	// allowed=true delay=0s retry-after=0s
	// allowed=true delay=100ms retry-after=0s
	// allowed=true delay=200ms retry-after=0s
	// allowed=false delay=0s retry-after=100ms
}

// Configuration is validated when the store is built, not at the first
// request.
func ExampleNew() {
	_, err := memorystore.New(memorystore.Config{MaxKeys: 1000, Shards: 2000})
	fmt.Println(err)
	fmt.Println(errors.Is(err, memorystore.ErrInvalidConfig))
	// Output:
	// memorystore: invalid config: Shards (2000) exceeds MaxKeys (1000)
	// true
}

// One request meets three budgets of its principal: the cost bucket, a
// daily quota and a per-field limit. TakeAll debits all three or none; a
// refused call reports every budget as it stands.
func ExampleStore_TakeAll() {
	clock := limitertest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	store, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	ctx := context.Background()
	cost := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 100, Period: time.Minute}
	quota := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 1000, Period: 24 * time.Hour}
	search := limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 2, Period: time.Second}
	request := func(points, searches int64) []limiter.Request {
		return []limiter.Request{
			{Key: "user:42", Limit: cost, Cost: points}, // Name "": the budget Take("user:42") spends
			{Key: "user:42", Name: "quota", Limit: quota, Cost: points},
			{Key: "user:42", Name: "field:search", Limit: search, Cost: searches},
		}
	}
	ds := make([]limiter.Decision, 3)
	for _, searches := range []int64{2, 1} {
		if err := store.TakeAll(ctx, request(5, searches), ds); err != nil {
			panic(err)
		}
		fmt.Printf("all=%v cost-remaining=%d quota-remaining=%d search-remaining=%d retry-after=%v\n",
			limiter.AllAllowed(ds), ds[0].Remaining, ds[1].Remaining, ds[2].Remaining, ds[2].RetryAfter)
	}
	d, _ := store.Take(ctx, "user:42", cost, 0)
	fmt.Println("cost bucket after the refusal:", d.Remaining)
	// Output:
	// all=true cost-remaining=15 quota-remaining=995 search-remaining=0 retry-after=0s
	// all=false cost-remaining=15 quota-remaining=995 search-remaining=0 retry-after=1s
	// cost bucket after the refusal: 15
}
