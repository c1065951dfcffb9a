package concurrencytest

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter/concurrency"
)

// HammerResult is what Hammer observed.
type HammerResult struct {
	// Acquired is the number of leases granted (callers × rounds when
	// Hammer passes), Refused the number of refusals met on the way.
	Acquired, Refused int64
	// MaxInFlight is the most callers seen holding a slot at once.
	MaxInFlight int64
}

// HammerTimeout bounds one Hammer run: callers not done by then fail it.
const HammerTimeout = time.Minute

// Hammer runs callers goroutines, spread round robin over slots (one per
// process, say, each with its own client), that each take a slot of key
// under limit rounds times: an Acquire, repeated after each refusal until
// granted, then a brief hold (a few yields of the processor), then a
// Release. A goroutine counts itself in flight, in one atomic counter,
// from the moment its Acquire returns a grant until just before it calls
// Release, so the counter never exceeds the leases the store holds. Hammer
// fails t if that counter ever exceeds limit, if any call fails, if a
// Release finds its lease gone, or if the callers have not all finished
// within HammerTimeout. At the end it checks that nothing leaked: a fresh
// Acquire of key finds no other lease.
//
// Leases are taken with concurrency.DefaultTTL: the store's clock must not
// pass that much during the run (a FakeClock standing still, or a real
// clock and a run well under a minute), so every slot is freed by a
// Release. key should be fresh.
func Hammer(t testing.TB, slots []concurrency.Slots, key string, limit int64, callers, rounds int) HammerResult {
	t.Helper()
	if len(slots) == 0 || callers < 1 || rounds < 1 {
		t.Fatalf("concurrencytest: Hammer needs slots, callers ≥ 1 and rounds ≥ 1 (got %d, %d, %d)", len(slots), callers, rounds)
	}
	ctx, cancel := context.WithTimeout(context.Background(), HammerTimeout)
	defer cancel()
	var (
		inFlight, maxInFlight, acquired, refused atomic.Int64
		wg                                       sync.WaitGroup
	)
	for i := range callers {
		s := slots[i%len(slots)]
		wg.Go(func() {
			for range rounds {
				var d concurrency.Decision
				for {
					var err error
					d, err = s.Acquire(ctx, key, limit, concurrency.DefaultTTL)
					if err != nil {
						t.Errorf("caller %d: Acquire: %v", i, err)
						cancel() // stop the others: the run has failed
						return
					}
					if d.Allowed {
						break
					}
					refused.Add(1)
					runtime.Gosched()
				}
				acquired.Add(1)
				n := inFlight.Add(1)
				if n > limit {
					t.Errorf("caller %d: %d callers in flight, limit %d", i, n, limit)
				}
				for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
				}
				for range 3 {
					runtime.Gosched()
				}
				inFlight.Add(-1)
				if held, err := s.Release(ctx, d.Lease); err != nil || !held {
					t.Errorf("caller %d: Release: %v, %v; want the lease held", i, held, err)
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	r := HammerResult{Acquired: acquired.Load(), Refused: refused.Load(), MaxInFlight: maxInFlight.Load()}
	if t.Failed() {
		return r
	}
	d, err := slots[0].Acquire(context.Background(), key, limit, concurrency.DefaultTTL)
	if err != nil || !d.Allowed || d.Held != 1 {
		t.Errorf("after the hammer: Acquire %+v, %v; want the only lease", d, err)
	}
	if err == nil && d.Allowed {
		_, _ = slots[0].Release(context.Background(), d.Lease)
	}
	return r
}
