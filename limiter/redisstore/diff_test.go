package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
)

// reference is package limiter's pure arithmetic holding one key's state the
// way the memory store does: the Lua scripts must agree with it call for
// call. Like the memory store, it keeps the state every decision returns
// (rejections and peeks included: with a clock that steps back, the drained
// state is not the same as the stored one) and forgets a key whose budget
// is whole again.
type reference struct {
	bucket limiter.BucketState
	window limiter.WindowState
	log    []limiter.LogEntry
}

func (r *reference) call(l limiter.Limit, now time.Time, refund bool, n int64) (limiter.Decision, error) {
	next := *r
	d, err := next.transition(l, now.UnixMicro(), refund, n)
	switch {
	case err != nil && !errors.Is(err, limiter.ErrCostExceedsCapacity):
	case d.ResetAfter <= 0:
		*r = reference{}
	default:
		*r = next
	}
	return d, err
}

func (r *reference) transition(l limiter.Limit, us int64, refund bool, n int64) (limiter.Decision, error) {
	var (
		d   limiter.Decision
		err error
	)
	switch l.Algorithm {
	case limiter.TokenBucket, limiter.LeakyBucketPolicing, limiter.LeakyBucketShaping:
		if refund {
			r.bucket, d, err = limiter.RefundBucket(l, r.bucket, us, n)
		} else {
			r.bucket, d, err = limiter.TakeBucket(l, r.bucket, us, n)
		}
	case limiter.FixedWindow:
		if refund {
			r.window, d, err = limiter.RefundFixedWindow(l, r.window, us, n)
		} else {
			r.window, d, err = limiter.TakeFixedWindow(l, r.window, us, n)
		}
	case limiter.SlidingCounter:
		if refund {
			r.window, d, err = limiter.RefundSlidingCounter(l, r.window, us, n)
		} else {
			r.window, d, err = limiter.TakeSlidingCounter(l, r.window, us, n)
		}
	case limiter.SlidingLog:
		if refund {
			r.log, d, err = limiter.RefundSlidingLog(l, r.log, us, n)
		} else {
			r.log, d, err = limiter.TakeSlidingLog(l, r.log, us, n)
		}
	}
	return d, err
}

// diffLimits are the limits the differential test drives: round and
// awkward ratios, and capacities at the 2^53 edge where a Lua double would
// first lose an integer.
func diffLimits() []limiter.Limit {
	const maxSafe = limiter.MaxSafeInteger
	hourUnits := int64(time.Hour / time.Microsecond) // units per token at Rate 1 per hour
	return []limiter.Limit{
		{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 100, Period: time.Minute},
		{Algorithm: limiter.TokenBucket, Burst: 2, Rate: 3, Period: time.Second},
		{Algorithm: limiter.TokenBucket, Burst: 7, Rate: 1_000_003, Period: time.Second},
		{Algorithm: limiter.TokenBucket, Burst: maxSafe / hourUnits, Rate: 1, Period: time.Hour},
		{Algorithm: limiter.TokenBucket, Burst: maxSafe, Rate: maxSafe, Period: time.Microsecond},
		{Algorithm: limiter.TokenBucket, Burst: 1, Rate: 1, Period: limiter.MaxPeriod},
		{Algorithm: limiter.LeakyBucketPolicing, Burst: 5, Rate: 7, Period: 3 * time.Second},
		{Algorithm: limiter.LeakyBucketShaping, Burst: 4, Rate: 3, Period: time.Second},
		{Algorithm: limiter.LeakyBucketShaping, Burst: maxSafe / 999_983, Rate: 17, Period: 999_983 * time.Microsecond},
		{Algorithm: limiter.FixedWindow, Rate: 10, Period: time.Second},
		{Algorithm: limiter.FixedWindow, Rate: 3, Period: 7 * time.Millisecond},
		{Algorithm: limiter.FixedWindow, Rate: maxSafe, Period: limiter.MaxPeriod},
		{Algorithm: limiter.SlidingCounter, Rate: 10, Period: time.Second},
		{Algorithm: limiter.SlidingCounter, Rate: 7, Period: 333_333 * time.Microsecond},
		{Algorithm: limiter.SlidingCounter, Rate: maxSafe / int64(24*time.Hour/time.Microsecond), Period: 24 * time.Hour},
		{Algorithm: limiter.SlidingLog, Rate: 5, Period: time.Second},
		{Algorithm: limiter.SlidingLog, Rate: 40, Period: 3 * time.Millisecond},
		{Algorithm: limiter.SlidingLog, Rate: limiter.MaxLogRate, Period: 24 * time.Hour},
	}
}

// capacityOf is the most a single call can ever take under l.
func capacityOf(l limiter.Limit) int64 {
	switch l.Algorithm { // named here, not read from the code under test
	case limiter.TokenBucket, limiter.LeakyBucketPolicing, limiter.LeakyBucketShaping:
		return l.Burst
	}
	return l.Rate
}

// TestSameDecisionsAsPureArithmetic drives random calls (costs from 0 to
// beyond capacity, refunds, time steps forward, backward, to just before and
// exactly at RetryAfter, and past the end of the representable range)
// through the Redis store and through package limiter's pure functions, and
// requires identical decisions and errors at every step.
func TestSameDecisionsAsPureArithmetic(t *testing.T) {
	steps := 250
	if testing.Short() {
		steps = 60
	}
	starts := []time.Time{
		time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2031, 6, 7, 8, 9, 10, 123457000, time.UTC),
		time.UnixMicro(limiter.MaxNow - 5_000_000), // runs into the clamp
	}
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			rdb := target.client(t)
			for i, l := range diffLimits() {
				if err := l.Validate(); err != nil {
					t.Fatalf("limit %d: %v", i, err)
				}
				for j, start := range starts {
					t.Run(fmt.Sprintf("%d_%s/start%d", i, l.Algorithm, j), func(t *testing.T) {
						t.Parallel()
						seed := uint64(i*len(starts) + j)
						diffOne(t, rdb, l, start, steps, rand.New(rand.NewPCG(seed, 0x5eed)))
					})
				}
			}
		})
	}
}

// differ runs each call through the Redis store and the reference.
type differ struct {
	store limiter.Store
	ref   *reference
	clock *limitertest.FakeClock
	limit limiter.Limit
	calls int
}

func newDiffer(t *testing.T, rdb redis.Scripter, l limiter.Limit, start time.Time) *differ {
	clock := limitertest.NewFakeClock(start)
	return &differ{store: newStore(t, rdb, clock), ref: &reference{}, clock: clock, limit: l}
}

// step makes one call on both and fails t unless they agree.
func (df *differ) step(t *testing.T, refund bool, n int64) limiter.Decision {
	t.Helper()
	ctx := context.Background()
	now := df.clock.Now()
	want, wantErr := df.ref.call(df.limit, now, refund, n)
	var (
		got limiter.Decision
		err error
	)
	op := "Take"
	if refund {
		op = "Refund"
		got, err = df.store.Refund(ctx, "k", df.limit, n)
	} else {
		got, err = df.store.Take(ctx, "k", df.limit, n)
	}
	where := fmt.Sprintf("call %d: %s(%d) at %d µs", df.calls, op, n, now.UnixMicro())
	df.calls++
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("%s: error %v, want %v", where, err, wantErr)
	}
	if got != want {
		t.Fatalf("%s:\n redis %+v\n pure  %+v", where, got, want)
	}
	return got
}

func diffOne(t *testing.T, rdb redis.Scripter, l limiter.Limit, start time.Time, steps int, rng *rand.Rand) {
	df := newDiffer(t, rdb, l, start)
	clock := df.clock
	capacity := capacityOf(l)
	var lastRetry time.Duration
	var lastRejected time.Time

	for range steps {
		// Move the clock.
		switch k := rng.IntN(12); {
		case k < 3: // stand still: many calls in one µs
		case k < 6:
			clock.Advance(time.Duration(rng.Int64N(int64(l.Period)/2+1)) / time.Microsecond * time.Microsecond)
		case k == 6:
			clock.Advance(l.Period)
		case k == 7:
			clock.Advance(-time.Duration(rng.Int64N(1000)+1) * time.Microsecond)
		case k == 8 && lastRetry > 0:
			clock.Set(lastRejected.Add(lastRetry - time.Microsecond))
		case k == 9 && lastRetry > 0:
			clock.Set(lastRejected.Add(lastRetry))
		case k == 10:
			clock.Advance(time.Duration(rng.Int64N(1_000_000)+1) * time.Microsecond)
		default:
			clock.Advance(time.Microsecond)
		}

		refund := rng.IntN(5) == 0
		var n int64
		switch k := rng.IntN(10); {
		case k == 0:
			n = 0
		case k == 1:
			n = capacity
		case k == 2:
			n = capacity + 1
		case k == 3:
			n = math.MaxInt64
		default:
			n = 1 + rng.Int64N(min(capacity, 8))
		}
		now := clock.Now()
		if d := df.step(t, refund, n); !d.Allowed && d.RetryAfter > 0 {
			lastRetry, lastRejected = d.RetryAfter, now
		}
	}
}

// TestSlidingLogLongWalks: logs of many entries, so that pruning, the walk
// to the k-th oldest unit and refunds cross the script's read chunks.
func TestSlidingLogLongWalks(t *testing.T) {
	l := limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 2000, Period: time.Second}
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			df := newDiffer(t, target.client(t), l, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			for i := range 900 { // 900 entries, 1 or 2 units each, 1 ms apart
				df.clock.Advance(time.Millisecond)
				df.step(t, false, 1+int64(i%2))
			}
			// 1350 units: k = 550 units, about 367 entries to walk.
			if d := df.step(t, false, 1200); d.Allowed {
				t.Fatal("cost 1200 admitted over 1350 of 2000 units")
			}
			df.step(t, true, 100)                    // about 67 entries, one by one
			df.clock.Advance(500 * time.Millisecond) // 400 entries expire in one call
			if d := df.step(t, false, 2000); d.Allowed {
				t.Fatal("cost 2000 admitted over a non-empty log") // walks all ~433 left
			}
			df.clock.Advance(time.Second) // everything expires
			if d := df.step(t, false, 2000); !d.Allowed {
				t.Fatal("cost 2000 rejected by an expired log")
			}
		})
	}
}
