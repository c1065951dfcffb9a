package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
)

func TestValidate(t *testing.T) {
	valid := []limiter.Limit{
		{Algorithm: limiter.TokenBucket, Burst: 1, Rate: 1, Period: time.Microsecond},
		{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 100, Period: time.Minute},
		{Algorithm: limiter.LeakyBucketShaping, Burst: 1, Rate: limiter.MaxSafeInteger, Period: time.Microsecond},
		{Algorithm: limiter.FixedWindow, Rate: limiter.MaxSafeInteger, Period: limiter.MaxPeriod},
		{Algorithm: limiter.FixedWindow, Burst: 0, Rate: 10_000, Period: 24 * time.Hour},
		{Algorithm: limiter.SlidingCounter, Rate: 104_249, Period: 24 * time.Hour},
		{Algorithm: limiter.SlidingLog, Rate: limiter.MaxLogRate, Period: time.Hour},
		// Capacity exactly at the bound: p = 2^20 units per token.
		{Algorithm: limiter.TokenBucket, Burst: (1<<53 - 1) >> 20, Rate: 1, Period: (1 << 20) * time.Microsecond},
	}
	for _, l := range valid {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}

	cases := []struct {
		limit limiter.Limit
		msg   string // a fragment the message must contain
	}{
		{limiter.Limit{Algorithm: 42, Burst: 1, Rate: 1, Period: time.Second}, "unknown algorithm 42"},
		{limiter.Limit{Burst: 1, Rate: 1}, "period must be positive"},
		{limiter.Limit{Burst: 1, Rate: 1, Period: time.Nanosecond}, "whole number of microseconds"},
		{limiter.Limit{Burst: 1, Rate: 1, Period: limiter.MaxPeriod + time.Microsecond}, "exceeds the maximum"},
		{limiter.Limit{Burst: 1, Rate: 0, Period: time.Second}, "rate must be at least 1"},
		{limiter.Limit{Burst: 1, Rate: limiter.MaxSafeInteger + 1, Period: time.Second}, "rate 9007199254740992 exceeds 2^53-1"},
		{limiter.Limit{Burst: 0, Rate: 1, Period: time.Second}, "token_bucket: burst must be at least 1"},
		{limiter.Limit{Algorithm: limiter.FixedWindow, Burst: -1, Rate: 1, Period: time.Second}, "burst must not be negative"},
		{limiter.Limit{Burst: (1<<53-1)>>20 + 1, Rate: 1, Period: (1 << 20) * time.Microsecond}, "units per token exceeds 2^53-1"},
		{limiter.Limit{Algorithm: limiter.SlidingCounter, Rate: 104_250, Period: 24 * time.Hour}, "sliding_counter: rate 104250 × period 86400000000µs"},
		{limiter.Limit{Algorithm: limiter.SlidingLog, Rate: limiter.MaxLogRate + 1, Period: time.Hour}, "stored timestamps per key"},
	}
	for _, c := range cases {
		err := c.limit.Validate()
		if !errors.Is(err, limiter.ErrInvalidLimit) {
			t.Errorf("%+v: %v, want ErrInvalidLimit", c.limit, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "limiter: invalid limit: ") || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: message %q, want it to contain %q", c.limit, err, c.msg)
		}
	}
	for _, c := range limitertest.InvalidLimits() {
		if err := c.Limit.Validate(); !errors.Is(err, limiter.ErrInvalidLimit) {
			t.Errorf("%s: %v, want ErrInvalidLimit", c.Name, err)
		}
	}
}

func TestAlgorithmString(t *testing.T) {
	want := []string{"token_bucket", "leaky_bucket_policing", "leaky_bucket_shaping", "fixed_window", "sliding_log", "sliding_counter"}
	for i, w := range want {
		if got := limiter.Algorithm(i).String(); got != w {
			t.Errorf("Algorithm(%d) = %q, want %q", i, got, w)
		}
	}
	if got := limiter.Algorithm(200).String(); got != "unknown" {
		t.Errorf("Algorithm(200) = %q", got)
	}
}

// TestWrongAlgorithm checks each transition refuses a Limit of another
// family instead of misreading its state.
func TestWrongAlgorithm(t *testing.T) {
	fixed := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 1, Period: time.Second}
	bucket := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1, Rate: 1, Period: time.Second}
	errs := map[string]error{}
	_, _, errs["TakeBucket"] = limiter.TakeBucket(fixed, limiter.BucketState{}, 0, 1)
	_, _, errs["RefundBucket"] = limiter.RefundBucket(fixed, limiter.BucketState{}, 0, 1)
	_, _, errs["TakeFixedWindow"] = limiter.TakeFixedWindow(bucket, limiter.WindowState{}, 0, 1)
	_, _, errs["RefundFixedWindow"] = limiter.RefundFixedWindow(bucket, limiter.WindowState{}, 0, 1)
	_, _, errs["TakeSlidingCounter"] = limiter.TakeSlidingCounter(fixed, limiter.WindowState{}, 0, 1)
	_, _, errs["RefundSlidingCounter"] = limiter.RefundSlidingCounter(fixed, limiter.WindowState{}, 0, 1)
	_, _, errs["TakeSlidingLog"] = limiter.TakeSlidingLog(fixed, nil, 0, 1)
	_, _, errs["RefundSlidingLog"] = limiter.RefundSlidingLog(fixed, nil, 0, 1)
	for name, err := range errs {
		if !errors.Is(err, limiter.ErrInvalidLimit) || !strings.Contains(err.Error(), "limit passed to the") {
			t.Errorf("%s: %v, want ErrInvalidLimit naming the mismatch", name, err)
		}
	}
}

// TestSanitisedState feeds states no transition would write (another
// limit's, or damaged) and checks the decisions stay within range.
func TestSanitisedState(t *testing.T) {
	bucket := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 5, Rate: 5, Period: time.Second}
	_, d, err := limiter.TakeBucket(bucket, limiter.BucketState{Level: 1 << 60, Last: 1 << 62}, 1_000_000, 0)
	if err != nil || d.Remaining != 0 || d.ResetAfter != time.Second {
		t.Errorf("overfull bucket: %+v, %v; want empty with ResetAfter 1s", d, err)
	}
	_, d, err = limiter.TakeBucket(bucket, limiter.BucketState{Level: -7, Last: -1}, 1_000_000, 0)
	if err != nil || d.Remaining != 5 || d.ResetAfter != 0 {
		t.Errorf("negative level: %+v, %v; want full", d, err)
	}

	fixed := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 10, Period: time.Second}
	_, d, err = limiter.TakeFixedWindow(fixed, limiter.WindowState{Window: 3, Count: 99}, 3_500_000, 0)
	if err != nil || d.Remaining != 0 {
		t.Errorf("overfull window: %+v, %v; want Remaining 0", d, err)
	}
	sliding := limiter.Limit{Algorithm: limiter.SlidingCounter, Rate: 10, Period: time.Second}
	_, d, err = limiter.TakeSlidingCounter(sliding, limiter.WindowState{Window: 3, Count: -4, Prev: 1 << 40}, 3_500_000, 0)
	if err != nil || d.Remaining != 5 {
		t.Errorf("damaged counter: %+v, %v; want prev clamped to 10, Remaining 5", d, err)
	}
	log := limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 3, Period: time.Second}
	_, d, err = limiter.TakeSlidingLog(log, []limiter.LogEntry{{At: 10, N: 0}, {At: 20, N: -3}, {At: 30, N: 1}}, 40, 0)
	if err != nil || d.Remaining != 2 {
		t.Errorf("damaged log: %+v, %v; want Remaining 2", d, err)
	}
}

// TestExtremes drives the arithmetic at its bounds: the largest capacity,
// the fastest refill, idle gaps of a century, times outside the domain.
func TestExtremes(t *testing.T) {
	huge := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: (1<<53 - 1) >> 20, Rate: 1, Period: (1 << 20) * time.Microsecond}
	s, d, err := limiter.TakeBucket(huge, limiter.BucketState{}, 0, huge.Burst)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("drain the largest bucket: %+v, %v", d, err)
	}
	// It refills one token per 2^20 µs: by MaxNow, 2^52 − 1 units are back.
	capacity := huge.Burst << 20
	want := limiter.Decision{Allowed: true, Limit: huge.Burst, Remaining: limiter.MaxNow >> 20,
		ResetAfter: time.Duration(capacity-limiter.MaxNow) * time.Microsecond}
	if _, d, _ = limiter.TakeBucket(huge, s, limiter.MaxNow, 0); d != want {
		t.Errorf("largest bucket after 2^52 µs: %+v, want %+v", d, want)
	}
	if _, d, _ = limiter.TakeBucket(huge, s, 1<<62, 0); d != want {
		t.Errorf("now beyond MaxNow is clamped: %+v, want %+v", d, want)
	}

	fast := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 3, Rate: limiter.MaxSafeInteger, Period: time.Microsecond}
	s, _, _ = limiter.TakeBucket(fast, limiter.BucketState{Last: 100}, 100, 3)
	if _, d, _ = limiter.TakeBucket(fast, s, 101, 0); d.Remaining != 3 {
		t.Errorf("2^53 tokens per µs refill the bucket within 1 µs: %+v", d)
	}

	fixed := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: limiter.MaxSafeInteger, Period: limiter.MaxPeriod}
	s2, d, err := limiter.TakeFixedWindow(fixed, limiter.WindowState{}, limiter.MaxNow, limiter.MaxSafeInteger)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("largest window: %+v, %v", d, err)
	}
	if _, d, _ = limiter.TakeFixedWindow(fixed, s2, limiter.MaxNow, 1); d.Allowed || d.RetryAfter <= 0 {
		t.Errorf("largest window full: %+v", d)
	}
	if _, d, _ = limiter.TakeFixedWindow(fixed, limiter.WindowState{}, -5, 1); !d.Allowed {
		t.Errorf("now before the epoch is clamped to 0: %+v", d)
	}
}

func TestNegativeCost(t *testing.T) {
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 5, Rate: 5, Period: time.Second}
	_, _, err := limiter.TakeBucket(l, limiter.BucketState{}, 0, -1)
	if !errors.Is(err, limiter.ErrInvalidCost) || err.Error() != "limiter: invalid cost: negative cost -1" {
		t.Errorf("TakeBucket(-1): %v", err)
	}
	_, _, err = limiter.RefundBucket(l, limiter.BucketState{}, 0, -2)
	if !errors.Is(err, limiter.ErrInvalidCost) || err.Error() != "limiter: invalid cost: negative refund -2" {
		t.Errorf("RefundBucket(-2): %v", err)
	}
	_, d, err := limiter.TakeBucket(l, limiter.BucketState{}, 0, 6)
	if err == nil || err.Error() != "limiter: cost exceeds capacity: cost 6, capacity 5" || d.Allowed || d.Limit != 5 || d.Remaining != 5 {
		t.Errorf("TakeBucket(6): %+v, %v", d, err)
	}
}

// model adapts one algorithm's pure functions to a common shape for the
// property test. Each call works on a copy, so probing never disturbs the
// state under test.
type model struct {
	limit    limiter.Limit
	capacity int64
	bucket   limiter.BucketState
	window   limiter.WindowState
	log      []limiter.LogEntry
}

func (m *model) take(now, cost int64, commit bool) (limiter.Decision, error) {
	var (
		d   limiter.Decision
		err error
	)
	switch m.limit.Algorithm {
	case limiter.TokenBucket, limiter.LeakyBucketPolicing, limiter.LeakyBucketShaping:
		var s limiter.BucketState
		s, d, err = limiter.TakeBucket(m.limit, m.bucket, now, cost)
		if commit {
			m.bucket = s
		}
	case limiter.FixedWindow:
		var s limiter.WindowState
		s, d, err = limiter.TakeFixedWindow(m.limit, m.window, now, cost)
		if commit {
			m.window = s
		}
	case limiter.SlidingCounter:
		var s limiter.WindowState
		s, d, err = limiter.TakeSlidingCounter(m.limit, m.window, now, cost)
		if commit {
			m.window = s
		}
	case limiter.SlidingLog:
		s, dd, e := limiter.TakeSlidingLog(m.limit, append([]limiter.LogEntry(nil), m.log...), now, cost)
		d, err = dd, e
		if commit {
			m.log = s
		}
	}
	return d, err
}

// TestDecisionsAreExact checks, over random traffic for every algorithm,
// the promises a Decision makes, by probing copies of the state:
//   - taking Remaining fits now and Remaining + 1 does not;
//   - a rejected cost still fails 1 µs before RetryAfter and fits at it;
//   - the budget is whole at ResetAfter and not 1 µs before.
func TestDecisionsAreExact(t *testing.T) {
	limits := []limiter.Limit{
		{Algorithm: limiter.TokenBucket, Burst: 7, Rate: 3, Period: time.Second},
		{Algorithm: limiter.TokenBucket, Burst: 4, Rate: 9, Period: 700 * time.Millisecond},
		{Algorithm: limiter.LeakyBucketPolicing, Burst: 5, Rate: 11, Period: 3 * time.Second},
		{Algorithm: limiter.LeakyBucketShaping, Burst: 6, Rate: 7, Period: time.Second},
		{Algorithm: limiter.FixedWindow, Rate: 9, Period: 1300 * time.Millisecond},
		{Algorithm: limiter.SlidingCounter, Rate: 9, Period: 1300 * time.Millisecond},
		{Algorithm: limiter.SlidingCounter, Rate: 13, Period: 7 * time.Millisecond},
		{Algorithm: limiter.SlidingLog, Rate: 8, Period: 900 * time.Millisecond},
	}
	for _, l := range limits {
		t.Run(fmt.Sprintf("%s/%d_per_%v", l.Algorithm, l.Rate, l.Period), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(l.Rate)))
			capacity := l.Rate
			switch l.Algorithm { // named here, not read from the code under test
			case limiter.TokenBucket, limiter.LeakyBucketPolicing, limiter.LeakyBucketShaping:
				capacity = l.Burst
			}
			m := &model{limit: l, capacity: capacity}
			now := int64(1_893_456_000_000_000) + rng.Int64N(int64(l.Period/time.Microsecond))
			for range 2000 {
				now += rng.Int64N(int64(l.Period/time.Microsecond) / 4)
				cost := rng.Int64N(capacity) + 1
				d, err := m.take(now, cost, true)
				if err != nil {
					t.Fatalf("take(%d) at %d: %v", cost, now, err)
				}
				checkDecision(t, m, now, cost, d)
			}
		})
	}
}

func checkDecision(t *testing.T, m *model, now, cost int64, d limiter.Decision) {
	t.Helper()
	if d.Remaining < 0 || d.Remaining > m.capacity || d.Limit != m.capacity {
		t.Fatalf("at %d: Decision %+v out of range", now, d)
	}
	if d.Remaining > 0 {
		if p, _ := m.take(now, d.Remaining, false); !p.Allowed {
			t.Fatalf("at %d: Remaining %d does not fit: %+v", now, d.Remaining, p)
		}
	}
	if d.Remaining < m.capacity {
		if p, _ := m.take(now, d.Remaining+1, false); p.Allowed {
			t.Fatalf("at %d: Remaining %d + 1 fits: %+v", now, d.Remaining, p)
		}
	}
	if !d.Allowed {
		r := d.RetryAfter.Microseconds()
		if r <= 0 {
			t.Fatalf("at %d: rejected with RetryAfter %v", now, d.RetryAfter)
		}
		if p, _ := m.take(now+r-1, cost, false); p.Allowed {
			t.Fatalf("at %d: cost %d fits 1µs before RetryAfter %v", now, cost, d.RetryAfter)
		}
		if p, _ := m.take(now+r, cost, false); !p.Allowed {
			t.Fatalf("at %d: cost %d does not fit at RetryAfter %v: %+v", now, cost, d.RetryAfter, p)
		}
	} else if d.RetryAfter != 0 {
		t.Fatalf("at %d: admitted with RetryAfter %v", now, d.RetryAfter)
	}
	ra := d.ResetAfter.Microseconds()
	if p, _ := m.take(now+ra, 0, false); p.Remaining != m.capacity || p.ResetAfter != 0 {
		t.Fatalf("at %d: not whole at ResetAfter %v: %+v", now, d.ResetAfter, p)
	}
	if ra > 0 {
		if p, _ := m.take(now+ra-1, 0, false); p.Remaining == m.capacity && p.ResetAfter == 0 {
			t.Fatalf("at %d: already whole 1µs before ResetAfter %v", now, d.ResetAfter)
		}
	}
}

// TestPolicingEqualsTokenBucket pins the documented equivalence.
func TestPolicingEqualsTokenBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	tb := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 9, Rate: 4, Period: time.Second}
	lp := tb
	lp.Algorithm = limiter.LeakyBucketPolicing
	var a, b limiter.BucketState
	now := int64(0)
	for i := range 5000 {
		now += rng.Int64N(400_000)
		cost := rng.Int64N(10)
		var da, db limiter.Decision
		a, da, _ = limiter.TakeBucket(tb, a, now, cost)
		b, db, _ = limiter.TakeBucket(lp, b, now, cost)
		if da != db {
			t.Fatalf("step %d: token bucket %+v, policing %+v", i, da, db)
		}
	}
}

func ExampleTakeBucket() {
	// The seed's limit: 100 per minute with bursts of 20, one token every 600 ms.
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 100, Period: time.Minute}
	var s limiter.BucketState // a fresh key
	now := int64(1_893_456_000_000_000)

	s, d, _ := limiter.TakeBucket(l, s, now, 20)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	s, d, _ = limiter.TakeBucket(l, s, now, 1)
	fmt.Println(d.Allowed, d.RetryAfter)
	_, d, _ = limiter.TakeBucket(l, s, now+600_000, 1)
	fmt.Println(d.Allowed, d.Remaining)
	_, _, err := limiter.TakeBucket(l, s, now, 21)
	fmt.Println(err)
	// Output:
	// true 0 12s
	// false 600ms
	// true 0
	// limiter: cost exceeds capacity: cost 21, capacity 20
}

func ExampleTakeSlidingCounter() {
	// The seed's example: 100 per minute, 100 admitted in the previous
	// window, 10 in this one, 15 s in: 100 × 45/60 + 10 = 85.
	l := limiter.Limit{Algorithm: limiter.SlidingCounter, Rate: 100, Period: time.Minute}
	start := int64(1_893_456_000_000_000) // a minute boundary
	s := limiter.WindowState{Window: start / 60_000_000, Count: 10, Prev: 100}

	_, d, _ := limiter.TakeSlidingCounter(l, s, start+15_000_000, 0)
	fmt.Println(d.Remaining)
	_, d, _ = limiter.TakeSlidingCounter(l, s, start+15_000_000, 16)
	fmt.Println(d.Allowed, d.RetryAfter)
	// Output:
	// 15
	// false 600ms
}

func ExampleWait() {
	clock := limitertest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	store, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	// Five calls per second to a partner API, at most 2 queued.
	limit := limiter.Limit{Algorithm: limiter.LeakyBucketShaping, Burst: 2, Rate: 5, Period: time.Second}
	// Production omits WithTimer; here the timer only reports and fires at once.
	timer := limiter.WithTimer(func(d time.Duration) (<-chan time.Time, func() bool) {
		fmt.Println("waiting", d)
		c := make(chan time.Time, 1)
		c <- clock.Advance(0)
		return c, func() bool { return false }
	})

	ctx := context.Background()
	for range 3 {
		if _, err := limiter.Wait(ctx, store, "partner", limit, 1, timer); err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println("call the partner")
	}
	// Output:
	// call the partner
	// waiting 200ms
	// call the partner
	// limiter: limit exceeded: retry after 200ms
}
