package limitertest

import (
	"context"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
)

// HammerResult is what Hammer observed.
type HammerResult struct {
	// Admitted and Rejected are sums of cost.
	Admitted, Rejected int64
	// Calls is the number of Take calls made.
	Calls int64
	// Elapsed is the clock time between the first and the last call.
	Elapsed time.Duration
	// Bound is MaxAdmitted over Elapsed: Admitted must not exceed it.
	Bound int64
}

const (
	// hammerSteps is how many increments Hammer moves a fake clock through.
	hammerSteps = 200
	// perStep bounds each caller's calls per fake-clock step, so fast
	// stores do not spin through millions of calls at one instant.
	perStep = 3
)

// Hammer runs callers goroutines that Take from key concurrently (costs
// cycling 1, 2, 3, capped at the limit's capacity) until the clock has
// moved by duration, then fails t if the admitted cost exceeds
// MaxAdmitted(limit, start, end): zero overshoot allowed. key should be
// fresh.
//
// With a clock that has an Advance(time.Duration) time.Time method (a
// *FakeClock), Hammer moves it itself in 200 steps, each after the callers
// have made about one call apiece (and at most three), so nothing sleeps.
// With a real clock it runs for duration of wall time.
func Hammer(t testing.TB, store limiter.Store, key string, limit limiter.Limit, callers int, duration time.Duration, clock limiter.Clock) HammerResult {
	t.Helper()
	if callers < 1 || duration <= 0 {
		t.Fatalf("limitertest: Hammer needs callers ≥ 1 and a positive duration (got %d, %v)", callers, duration)
	}
	if err := limit.Validate(); err != nil {
		t.Fatalf("limitertest: Hammer: %v", err)
	}
	maxCost := min(3, limit.Capacity())

	ctx := context.Background()
	start := clock.Now()
	end := start.Add(duration)
	var (
		admitted, rejected, calls atomic.Int64
		firstErr                  atomic.Pointer[error]
		wg                        sync.WaitGroup
	)
	fake, _ := clock.(interface {
		Advance(time.Duration) time.Time
	})
	for i := range callers {
		wg.Go(func() {
			var (
				seen     time.Time
				seenUsed int
			)
			for n := int64(i); firstErr.Load() == nil; n++ {
				now := clock.Now()
				if !now.Before(end) {
					return
				}
				if fake != nil { // at most perStep calls per caller per step
					if !now.Equal(seen) {
						seen, seenUsed = now, 0
					}
					if seenUsed == perStep {
						runtime.Gosched()
						continue
					}
					seenUsed++
				}
				cost := 1 + n%maxCost
				d, err := store.Take(ctx, key, limit, cost)
				calls.Add(1)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				if d.Allowed {
					admitted.Add(cost)
				} else {
					rejected.Add(cost)
				}
			}
		})
	}
	if fake != nil {
		step := max(duration/hammerSteps, time.Microsecond)
		var base int64 // calls counted when the clock last moved
		for now := start; now.Before(end) && firstErr.Load() == nil; {
			// Move on once the callers have made about one call apiece
			// since the last move. base is read before moving, so every
			// call at the new instant counts, and as each caller may make
			// perStep ≥ 1 calls per instant the target is always reached.
			for calls.Load() < base+int64(callers) && firstErr.Load() == nil {
				runtime.Gosched()
			}
			base = calls.Load()
			now = fake.Advance(min(step, end.Sub(now)))
		}
	}
	wg.Wait()
	last := clock.Now()

	if p := firstErr.Load(); p != nil {
		t.Fatalf("limitertest: Hammer: Take(%q): %v", key, *p)
	}
	// Sub uses monotonic readings when the clock has them, so a wall-clock
	// step during the run does not distort the bound.
	elapsed := last.Sub(start)
	r := HammerResult{
		Admitted: admitted.Load(),
		Rejected: rejected.Load(),
		Calls:    calls.Load(),
		Elapsed:  elapsed,
		Bound:    MaxAdmitted(limit, start, start.Round(0).Add(elapsed)),
	}
	t.Logf("hammer %s: %d callers, %d calls, admitted %d, rejected %d, bound %d over %v",
		limit.Algorithm, callers, r.Calls, r.Admitted, r.Rejected, r.Bound, r.Elapsed)
	if r.Admitted > r.Bound {
		t.Errorf("limitertest: Hammer: admitted %d > bound %d over %v: overshoot of %d",
			r.Admitted, r.Bound, r.Elapsed, r.Admitted-r.Bound)
	}
	if r.Admitted == 0 {
		t.Errorf("limitertest: Hammer: nothing admitted in %d calls on a fresh key", r.Calls)
	}
	return r
}

// MaxAdmitted is the most cost a fresh key may admit to calls whose store
// times lie in [start, end] (read with microsecond precision, as the stores
// do):
//
//   - buckets: Burst + ⌊Rate × E / P⌋, E = end − start in µs;
//   - FixedWindow and SlidingCounter: Rate × the number of Period-aligned
//     windows [start, end] touches (neither admits more than Rate into one
//     window);
//   - SlidingLog: Rate × ⌈(E + 1) / P⌉ (no half-open interval of length P
//     holds more than Rate).
//
// It returns 0 for an invalid limit or end before start. It saturates at
// math.MaxInt64.
func MaxAdmitted(limit limiter.Limit, start, end time.Time) int64 {
	if limit.Validate() != nil {
		return 0
	}
	s, e := start.UnixMicro(), end.UnixMicro()
	if e < s {
		return 0
	}
	period := int64(limit.Period / time.Microsecond)
	switch a := limit.Algorithm; {
	case a.IsBucket():
		hi, lo := bits.Mul64(uint64(limit.Rate), uint64(e-s))
		if hi >= uint64(period) {
			return 1<<63 - 1
		}
		q, _ := bits.Div64(hi, lo, uint64(period))
		return satAdd(limit.Burst, q)
	case a == limiter.FixedWindow, a == limiter.SlidingCounter:
		return satMul(limit.Rate, uint64(floorDiv(e, period)-floorDiv(s, period)+1))
	default: // SlidingLog
		return satMul(limit.Rate, uint64((e-s)/period+1))
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func satAdd(a int64, b uint64) int64 {
	if b > uint64(1<<63-1-a) {
		return 1<<63 - 1
	}
	return a + int64(b)
}

func satMul(a int64, b uint64) int64 {
	hi, lo := bits.Mul64(uint64(a), b)
	if hi != 0 || lo > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(lo)
}
