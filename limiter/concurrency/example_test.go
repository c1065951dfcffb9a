package concurrency_test

import (
	"context"
	"fmt"
	"time"

	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/limitertest"
)

// Two requests of one principal in flight at most: the third is refused
// until one of them completes, or until a crashed holder's lease expires.
func Example() {
	// Production leaves Clock unset (the system's monotonic clock); the
	// example moves a fake one.
	clock := limitertest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	slots, err := concurrency.NewMemory(concurrency.MemoryConfig{Clock: clock})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	first, _ := slots.Acquire(ctx, "user:42", 2, concurrency.DefaultTTL)
	second, _ := slots.Acquire(ctx, "user:42", 2, concurrency.DefaultTTL)
	third, _ := slots.Acquire(ctx, "user:42", 2, concurrency.DefaultTTL)
	fmt.Printf("allowed=%v,%v,%v held=%d retry-after=%v\n", first.Allowed, second.Allowed, third.Allowed, third.Held, third.RetryAfter)

	held, _ := slots.Release(ctx, first.Lease) // the first request completed
	d, _ := slots.Acquire(ctx, "user:42", 2, concurrency.DefaultTTL)
	fmt.Printf("released=%v allowed=%v remaining=%d\n", held, d.Allowed, d.Remaining())

	// The process serving the two requests in flight crashed: their
	// leases expire.
	clock.Advance(concurrency.DefaultTTL)
	d, _ = slots.Acquire(ctx, "user:42", 2, concurrency.DefaultTTL)
	fmt.Printf("after the ttl: allowed=%v held=%d\n", d.Allowed, d.Held)
	held, _ = slots.Release(ctx, second.Lease)
	fmt.Printf("releasing the expired lease: held=%v\n", held)
	// Output:
	// allowed=true,true,false held=2 retry-after=1s
	// released=true allowed=true remaining=0
	// after the ttl: allowed=true held=1
	// releasing the expired lease: held=false
}
