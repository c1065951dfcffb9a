package limitertest_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
)

func TestFakeClock(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := limitertest.NewFakeClock(time.Now()) // a monotonic reading is dropped
	c.Set(start)
	if got := c.Advance(1500 * time.Millisecond); !got.Equal(start.Add(1500 * time.Millisecond)) {
		t.Fatalf("Advance returned %v", got)
	}
	if got := c.Advance(-2 * time.Second); !got.Equal(start.Add(-500*time.Millisecond)) || !c.Now().Equal(got) {
		t.Fatalf("Advance(-2s) = %v, Now %v", got, c.Now())
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Advance(time.Microsecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(-500*time.Millisecond+8000*time.Microsecond); !got.Equal(want) {
		t.Fatalf("after concurrent advances: %v, want %v", got, want)
	}
}

func TestMaxAdmitted(t *testing.T) {
	at := func(us int64) time.Time { return time.UnixMicro(1_893_456_000_000_000 + us) }
	cases := []struct {
		limit      limiter.Limit
		start, end int64 // µs after a minute boundary
		want       int64
	}{
		{limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 100, Period: time.Minute}, 0, 0, 20},
		{limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 100, Period: time.Minute}, 0, 599_999, 20},
		{limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 100, Period: time.Minute}, 0, 600_000, 21},
		{limiter.Limit{Algorithm: limiter.LeakyBucketShaping, Burst: 1, Rate: 3, Period: time.Second}, 5, 1_000_005, 4},
		{limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 100, Period: time.Minute}, 59_000_000, 59_999_999, 100},
		{limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 100, Period: time.Minute}, 59_000_000, 60_000_000, 200},
		{limiter.Limit{Algorithm: limiter.SlidingCounter, Rate: 10, Period: time.Second}, 0, 2_500_000, 30},
		{limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 3, Period: time.Second}, 7, 1_000_006, 3},
		{limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 3, Period: time.Second}, 7, 1_000_007, 6},
		{limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1, Rate: limiter.MaxSafeInteger, Period: time.Microsecond}, 0, 1 << 40, math.MaxInt64},
		{limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 0, Rate: 1, Period: time.Second}, 0, 10, 0}, // invalid
		{limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 5, Rate: 1, Period: time.Second}, 10, 0, 0}, // end before start
	}
	for _, c := range cases {
		if got := limitertest.MaxAdmitted(c.limit, at(c.start), at(c.end)); got != c.want {
			t.Errorf("%+v over [%d, %d] µs: %d, want %d", c.limit, c.start, c.end, got, c.want)
		}
	}
}

// cheat admits everything: Hammer must catch it.
type cheat struct{}

func (cheat) Take(context.Context, string, limiter.Limit, int64) (limiter.Decision, error) {
	return limiter.Decision{Allowed: true}, nil
}

func (cheat) Refund(context.Context, string, limiter.Limit, int64) (limiter.Decision, error) {
	return limiter.Decision{Allowed: true}, nil
}

// recorder is a testing.TB that keeps failures instead of failing.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Errorf(f string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(f, args...))
}
func (r *recorder) Fatalf(f string, args ...any) { r.Errorf(f, args...) }

func TestHammerCatchesOvershoot(t *testing.T) {
	r := &recorder{TB: t}
	clock := limitertest.NewFakeClock(time.Unix(1_893_456_000, 0))
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 5, Rate: 5, Period: time.Second}
	res := limitertest.Hammer(r, cheat{}, "k", l, 4, 60, clock)
	if len(r.errors) != 1 || res.Admitted <= res.Bound {
		t.Fatalf("Hammer on an admit-everything store: %+v, errors %q; want one overshoot error", res, r.errors)
	}
	if res.Calls != 4*60 {
		t.Errorf("Hammer made %d calls, want 4 callers × 60", res.Calls)
	}
	// At most three calls per caller per instant: 60 calls span at least
	// 20 instants, 19 moves of 15 ms; at least one call per move.
	moved := clock.Now().Sub(time.Unix(1_893_456_000, 0))
	if moved != res.Elapsed || moved%(15*time.Millisecond) != 0 || moved < 19*15*time.Millisecond || moved > 4*60*15*time.Millisecond {
		t.Errorf("Hammer moved the fake clock by %v (Elapsed %v), want a multiple of 15ms in [285ms, 3.6s]", moved, res.Elapsed)
	}
}

// A store that saw every call at one instant (the callers outrunning the
// clock) would not be tested on refill: Hammer moves the clock between the
// calls, each caller making at most three per instant.
func TestHammerSpreadsCallsOverTime(t *testing.T) {
	clock := limitertest.NewFakeClock(time.Unix(1_893_456_000, 0))
	s := &perInstant{clock: clock, calls: map[time.Time]int{}}
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 5, Rate: 5, Period: time.Second}
	const callers, calls = 8, 90
	res := limitertest.Hammer(&recorder{TB: t}, s, "k", l, callers, calls, clock)
	if res.Calls != callers*calls {
		t.Fatalf("%d calls, want %d", res.Calls, callers*calls)
	}
	if len(s.calls) < calls/3 {
		t.Errorf("%d calls at %d instants; want at least %d", res.Calls, len(s.calls), calls/3)
	}
	for at, n := range s.calls {
		// Three per caller, and one each begun before the clock moved.
		if n > 4*callers {
			t.Errorf("%d calls at %v, want at most 4 per caller", n, at)
		}
	}
}

// perInstant admits everything and counts calls per clock reading.
type perInstant struct {
	cheat
	clock *limitertest.FakeClock
	mu    sync.Mutex
	calls map[time.Time]int
}

func (p *perInstant) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	now := p.clock.Now()
	p.mu.Lock()
	p.calls[now]++
	p.mu.Unlock()
	return p.cheat.Take(ctx, key, l, cost)
}

// lostUpdates decides with the exact arithmetic but reads and writes the
// state in two steps, letting other callers in between: concurrent callers
// spend the same tokens. Hammer's callers must overlap enough to catch it.
type lostUpdates struct {
	cheat
	clock *limitertest.FakeClock
	mu    sync.Mutex
	state limiter.BucketState
}

func (s *lostUpdates) Take(_ context.Context, _ string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	runtime.Gosched()
	next, d, err := limiter.TakeBucket(l, st, s.clock.Now().UnixMicro(), cost)
	s.mu.Lock()
	s.state = next
	s.mu.Unlock()
	return d, err
}

func TestHammerCatchesLostUpdates(t *testing.T) {
	r := &recorder{TB: t}
	clock := limitertest.NewFakeClock(time.Unix(1_893_456_000, 0))
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 50, Period: time.Second}
	res := limitertest.Hammer(r, &lostUpdates{clock: clock}, "k", l, 12, 400, clock)
	if len(r.errors) != 1 || res.Admitted <= res.Bound {
		t.Fatalf("Hammer on a store that loses updates: %+v, errors %q; want one overshoot error", res, r.errors)
	}
	t.Logf("admitted %d, bound %d", res.Admitted, res.Bound)
}
