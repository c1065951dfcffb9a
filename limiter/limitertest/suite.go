package limitertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
)

// t0 is where every case's clock starts: 2030-01-01T00:00:00Z, a multiple
// of every Period the cases use, so window boundaries fall on round offsets.
var t0 = time.Unix(1_893_456_000, 0).UTC()

// Run runs the behaviour suite against the stores newStore builds: one store
// and one FakeClock (starting at 2030-01-01T00:00:00Z) per case. newStore
// must build the store on that clock and register its own cleanup with t.
func Run(t *testing.T, newStore func(t *testing.T, clock limiter.Clock) limiter.Store) {
	var nonce [6]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		t.Fatalf("limitertest: nonce: %v", err)
	}
	s := suite{newStore: newStore, nonce: hex.EncodeToString(nonce[:])}

	for _, c := range scriptCases() {
		t.Run(c.name, func(t *testing.T) { s.runScript(t, c) })
	}
	t.Run("retry_honesty", s.retryHonesty)
	t.Run("keys_independent", s.keysIndependent)
	t.Run("invalid_limits", s.invalidLimits)
	t.Run("negative_costs", s.negativeCosts)
	t.Run("wait", s.wait)
	t.Run("hammer", s.hammer)
	t.Run("take_all", s.takeAll)
}

type suite struct {
	newStore func(t *testing.T, clock limiter.Clock) limiter.Store
	nonce    string
}

// setup returns a fresh store, its clock at t0 and a key no other case or
// process uses.
func (s suite) setup(t *testing.T) (limiter.Store, *FakeClock, string) {
	t.Helper()
	clock := NewFakeClock(t0)
	store := s.newStore(t, clock)
	if store == nil {
		t.Fatal("limitertest: newStore returned nil")
	}
	return store, clock, s.key(t, "")
}

func (s suite) key(t *testing.T, suffix string) string {
	return "limitertest:" + s.nonce + ":" + t.Name() + suffix
}

type op uint8

const (
	take op = iota
	refund
)

func (o op) String() string {
	if o == refund {
		return "Refund"
	}
	return "Take"
}

// step is one call at clock offset at from t0, with the decision and error
// (a sentinel, matched with errors.Is) it must produce.
type step struct {
	at   time.Duration
	op   op
	cost int64
	want limiter.Decision
	err  error
}

type scriptCase struct {
	name  string
	limit limiter.Limit
	steps []step
}

func (s suite) runScript(t *testing.T, c scriptCase) {
	store, clock, key := s.setup(t)
	ctx := context.Background()
	for i, st := range c.steps {
		clock.Set(t0.Add(st.at))
		var (
			got limiter.Decision
			err error
		)
		if st.op == refund {
			got, err = store.Refund(ctx, key, c.limit, st.cost)
		} else {
			got, err = store.Take(ctx, key, c.limit, st.cost)
		}
		where := fmt.Sprintf("step %d: %s(cost %d) at +%v", i, st.op, st.cost, st.at)
		if !errors.Is(err, st.err) {
			t.Fatalf("%s: error %v, want %v", where, err, st.err)
		}
		if st.err != nil && !errors.Is(st.err, limiter.ErrCostExceedsCapacity) {
			continue // no decision to speak of
		}
		if got != st.want {
			t.Fatalf("%s:\n got  %+v\n want %+v", where, got, st.want)
		}
	}
}

const (
	ms = time.Millisecond
	us = time.Microsecond
	s1 = time.Second
)

// allow and deny build expected decisions.
func allow(limit, remaining int64, resetAfter time.Duration) limiter.Decision {
	return limiter.Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: resetAfter}
}

func deny(limit, remaining int64, retryAfter, resetAfter time.Duration) limiter.Decision {
	return limiter.Decision{Limit: limit, Remaining: remaining, RetryAfter: retryAfter, ResetAfter: resetAfter}
}

func shaped(d limiter.Decision, delay time.Duration) limiter.Decision {
	d.Delay = delay
	return d
}

func scriptCases() []scriptCase {
	// Seed example: 100 per minute, burst 20. One token every 600 ms.
	tb := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 100, Period: time.Minute}
	// One token every 333⅓ ms: exercises rounding of RetryAfter to the µs.
	third := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 2, Rate: 3, Period: time.Second}
	// One token every 500 ms; fractional levels must not show in Remaining.
	half := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 3, Rate: 2, Period: time.Second}
	tenPerSec := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}
	police := limiter.Limit{Algorithm: limiter.LeakyBucketPolicing, Burst: 5, Rate: 5, Period: time.Second}
	// A departure every 100 ms, at most 3 tokens queued.
	shape := limiter.Limit{Algorithm: limiter.LeakyBucketShaping, Burst: 3, Rate: 10, Period: time.Second}
	fixed := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 100, Period: time.Minute}
	slidingMin := limiter.Limit{Algorithm: limiter.SlidingCounter, Rate: 100, Period: time.Minute}
	sliding10 := limiter.Limit{Algorithm: limiter.SlidingCounter, Rate: 10, Period: 10 * time.Second}
	logLimit := limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 3, Period: 10 * time.Second}

	return []scriptCase{
		{"token_bucket/seed_burst_then_refill", tb, []step{
			{at: 0, cost: 1, want: allow(20, 19, 600*ms)},
			{at: 0, cost: 19, want: allow(20, 0, 12*s1)},
			{at: 0, cost: 1, want: deny(20, 0, 600*ms, 12*s1)},
			{at: 300 * ms, cost: 1, want: deny(20, 0, 300*ms, 11700*ms)},
			{at: 600 * ms, cost: 1, want: allow(20, 0, 12*s1)},
			{at: 6600 * ms, cost: 0, want: allow(20, 10, 6*s1)},
			{at: 6600 * ms, cost: 10, want: allow(20, 0, 12*s1)},
			{at: 7 * s1, cost: 0, want: allow(20, 0, 11600*ms)},
			{at: time.Hour, cost: 0, want: allow(20, 20, 0)},
			{at: time.Hour, cost: 20, want: allow(20, 0, 12*s1)},
		}},
		{"token_bucket/cost_above_capacity", tb, []step{
			{at: 0, cost: 5, want: allow(20, 15, 3*s1)},
			{at: 0, cost: 21, want: deny(20, 15, 0, 3*s1), err: limiter.ErrCostExceedsCapacity},
			{at: time.Hour, cost: 21, want: deny(20, 20, 0, 0), err: limiter.ErrCostExceedsCapacity},
			{at: time.Hour, cost: 20, want: allow(20, 0, 12*s1)},
		}},
		{"token_bucket/refund_capped", tb, []step{
			{at: 0, cost: 15, want: allow(20, 5, 9*s1)},
			{at: 0, op: refund, cost: 5, want: allow(20, 10, 6*s1)},
			{at: 0, op: refund, cost: 0, want: allow(20, 10, 6*s1)},
			{at: 0, op: refund, cost: 100, want: allow(20, 20, 0)},
			{at: 0, op: refund, cost: 1, want: allow(20, 20, 0)},
			{at: 0, cost: 20, want: allow(20, 0, 12*s1)},
			{at: 0, cost: 1, want: deny(20, 0, 600*ms, 12*s1)},
		}},
		{"token_bucket/exact_microseconds", third, []step{
			{at: 0, cost: 2, want: allow(2, 0, 666667*us)},
			{at: 0, cost: 1, want: deny(2, 0, 333334*us, 666667*us)},
			{at: 333333 * us, cost: 1, want: deny(2, 0, 1*us, 333334*us)},
			{at: 333334 * us, cost: 1, want: allow(2, 0, 666666*us)},
		}},
		{"token_bucket/fractional_remaining", half, []step{
			{at: 0, cost: 3, want: allow(3, 0, 1500*ms)},
			{at: 250 * ms, cost: 1, want: deny(3, 0, 250*ms, 1250*ms)},
			{at: 499 * ms, cost: 0, want: allow(3, 0, 1001*ms)},
			{at: 500 * ms, cost: 1, want: allow(3, 0, 1500*ms)},
			{at: 1250 * ms, cost: 0, want: allow(3, 1, 750*ms)},
		}},
		{"token_bucket/clock_backwards_adds_nothing", tenPerSec, []step{
			{at: s1, cost: 10, want: allow(10, 0, s1)},
			{at: 500 * ms, cost: 0, want: allow(10, 0, s1)},
			{at: 500 * ms, cost: 1, want: deny(10, 0, 100*ms, s1)},
			{at: 1500 * ms, cost: 0, want: allow(10, 5, 500*ms)},
		}},
		{"leaky_bucket_policing/overflow_rejected", police, []step{
			{at: 0, cost: 5, want: allow(5, 0, s1)},
			{at: 0, cost: 1, want: deny(5, 0, 200*ms, s1)},
			{at: 100 * ms, cost: 1, want: deny(5, 0, 100*ms, 900*ms)},
			{at: 200 * ms, cost: 1, want: allow(5, 0, s1)},
			{at: 200 * ms, cost: 6, want: deny(5, 0, 0, s1), err: limiter.ErrCostExceedsCapacity},
			{at: 200 * ms, op: refund, cost: 2, want: allow(5, 2, 600*ms)},
			{at: 200 * ms, op: refund, cost: 9, want: allow(5, 5, 0)},
		}},
		{"leaky_bucket_shaping/delays", shape, []step{
			{at: 0, cost: 1, want: shaped(allow(3, 2, 100*ms), 0)},
			{at: 0, cost: 1, want: shaped(allow(3, 1, 200*ms), 100*ms)},
			{at: 0, cost: 1, want: shaped(allow(3, 0, 300*ms), 200*ms)},
			{at: 0, cost: 1, want: deny(3, 0, 100*ms, 300*ms)},
			{at: 50 * ms, cost: 1, want: deny(3, 0, 50*ms, 250*ms)},
			{at: 100 * ms, cost: 1, want: shaped(allow(3, 0, 300*ms), 200*ms)},
			{at: 100 * ms, cost: 0, want: allow(3, 0, 300*ms)},
			{at: 100 * ms, cost: 4, want: deny(3, 0, 0, 300*ms), err: limiter.ErrCostExceedsCapacity},
			{at: 100 * ms, op: refund, cost: 1, err: limiter.ErrRefundUnsupported},
			{at: s1, cost: 2, want: shaped(allow(3, 1, 200*ms), 0)},
			{at: 1050 * ms, cost: 1, want: shaped(allow(3, 0, 250*ms), 150*ms)},
		}},
		{"fixed_window/boundary_burst_2x", fixed, []step{
			// 100 just before a minute boundary and 100 just after: 200
			// admitted within one second, each window "within limit".
			{at: 59 * s1, cost: 100, want: allow(100, 0, s1)},
			{at: 59 * s1, cost: 1, want: deny(100, 0, s1, s1)},
			{at: 59*s1 + 999999*us, cost: 1, want: deny(100, 0, us, us)},
			{at: 60 * s1, cost: 100, want: allow(100, 0, 60*s1)},
			{at: 60 * s1, cost: 1, want: deny(100, 0, 60*s1, 60*s1)},
		}},
		{"fixed_window/epoch_aligned_reset_refund", fixed, []step{
			{at: 10 * s1, cost: 0, want: allow(100, 100, 0)},
			{at: 10 * s1, cost: 30, want: allow(100, 70, 50*s1)},
			{at: 10 * s1, cost: 101, want: deny(100, 70, 0, 50*s1), err: limiter.ErrCostExceedsCapacity},
			{at: 30 * s1, op: refund, cost: 10, want: allow(100, 80, 30*s1)},
			{at: 30 * s1, op: refund, cost: 500, want: allow(100, 100, 0)},
			{at: 30 * s1, cost: 100, want: allow(100, 0, 30*s1)},
			{at: 90 * s1, cost: 0, want: allow(100, 100, 0)},
		}},
		{"fixed_window/clock_backwards_stands_at_window_start", fixed, []step{
			{at: 90 * s1, cost: 70, want: allow(100, 30, 30*s1)},
			{at: 30 * s1, cost: 0, want: allow(100, 30, 60*s1)},
			{at: 30 * s1, cost: 31, want: deny(100, 30, 60*s1, 60*s1)},
		}},
		{"sliding_counter/seed_weighting", slidingMin, []step{
			{at: 30 * s1, cost: 100, want: allow(100, 0, 90*s1)},
			// 15 s into the next window: 100 × (1 − 15/60) + cur.
			{at: 75 * s1, cost: 10, want: allow(100, 15, 105*s1)}, // estimate 85
			{at: 75 * s1, cost: 16, want: deny(100, 15, 600*ms, 105*s1)},
			{at: 75 * s1, cost: 15, want: allow(100, 0, 105*s1)},
			{at: 75600 * ms, cost: 0, want: allow(100, 1, 104400*ms)},
			{at: 76 * s1, cost: 100, want: deny(100, 1, 104*s1, 104*s1)},
			{at: 76 * s1, cost: 101, want: deny(100, 1, 0, 104*s1), err: limiter.ErrCostExceedsCapacity},
			{at: 76 * s1, op: refund, cost: 5, want: allow(100, 6, 104*s1)},
			{at: 200 * s1, cost: 0, want: allow(100, 100, 0)},
		}},
		{"sliding_counter/retry_in_next_window", sliding10, []step{
			{at: 9 * s1, cost: 10, want: allow(10, 0, 11*s1)},
			{at: 9 * s1, cost: 4, want: deny(10, 0, 5*s1, 11*s1)},
			{at: 13990 * ms, cost: 4, want: deny(10, 3, 10*ms, 6010*ms)},
			{at: 14 * s1, cost: 4, want: allow(10, 0, 16*s1)},
			// Refund beyond cur reaches back into prev.
			{at: 14 * s1, op: refund, cost: 7, want: allow(10, 5, 6*s1)}, // prev 7: ⌈7 × 6/10⌉ = 5
		}},
		{"sliding_log/same_instant_all_counted", logLimit, []step{
			{at: 0, cost: 1, want: allow(3, 2, 10*s1)},
			{at: 0, cost: 1, want: allow(3, 1, 10*s1)},
			{at: 2 * s1, cost: 1, want: allow(3, 0, 10*s1)},
			{at: 2 * s1, cost: 1, want: deny(3, 0, 8*s1, 10*s1)},
			{at: 9990 * ms, cost: 2, want: deny(3, 0, 10*ms, 2010*ms)},
			{at: 10 * s1, cost: 2, want: allow(3, 0, 10*s1)},
			{at: 10 * s1, cost: 4, want: deny(3, 0, 0, 10*s1), err: limiter.ErrCostExceedsCapacity},
			{at: 10 * s1, op: refund, cost: 1, want: allow(3, 1, 10*s1)},
			// The clock steps back: time stands at the newest entry.
			{at: 5 * s1, cost: 1, want: allow(3, 0, 10*s1)},
			{at: 12 * s1, cost: 0, want: allow(3, 1, 8*s1)},
			{at: 12 * s1, op: refund, cost: 9, want: allow(3, 3, 0)},
		}},
		{"sliding_log/one_cost_many_units", logLimit, []step{
			{at: 0, cost: 3, want: allow(3, 0, 10*s1)},
			{at: 0, cost: 1, want: deny(3, 0, 10*s1, 10*s1)},
			{at: 10 * s1, cost: 3, want: allow(3, 0, 10*s1)},
		}},
	}
}

// retryHonesty checks, for every algorithm, that after a rejection with
// RetryAfter R the same cost is rejected at R − 10 ms and admitted at R.
func (s suite) retryHonesty(t *testing.T) {
	limits := []limiter.Limit{
		{Algorithm: limiter.TokenBucket, Burst: 5, Rate: 7, Period: time.Second},
		{Algorithm: limiter.LeakyBucketPolicing, Burst: 4, Rate: 3, Period: time.Second},
		{Algorithm: limiter.LeakyBucketShaping, Burst: 4, Rate: 3, Period: time.Second},
		{Algorithm: limiter.FixedWindow, Rate: 5, Period: time.Second},
		{Algorithm: limiter.SlidingLog, Rate: 5, Period: time.Second},
		{Algorithm: limiter.SlidingCounter, Rate: 5, Period: time.Second},
	}
	for _, l := range limits {
		for _, cost := range []int64{1, 2} {
			t.Run(fmt.Sprintf("%s/cost_%d", l.Algorithm, cost), func(t *testing.T) {
				store, clock, key := s.setup(t)
				ctx := context.Background()
				// Off any window boundary; drain the budget at one instant so
				// the rejection is a whole token or unit short.
				clock.Advance(123 * time.Millisecond)
				var d limiter.Decision
				for i := 0; ; i++ {
					var err error
					if d, err = store.Take(ctx, key, l, cost); err != nil {
						t.Fatalf("Take: %v", err)
					}
					if !d.Allowed {
						break
					}
					if i > 100 {
						t.Fatalf("never rejected: %+v", d)
					}
				}
				r := d.RetryAfter
				if r < 10*time.Millisecond {
					t.Fatalf("RetryAfter %v too short to probe", r)
				}
				rejected := clock.Now()
				clock.Set(rejected.Add(r - 10*time.Millisecond))
				if d, err := store.Take(ctx, key, l, cost); err != nil || d.Allowed {
					t.Fatalf("at R − 10ms (R = %v): %+v, %v; want a rejection", r, d, err)
				}
				clock.Set(rejected.Add(r))
				if d, err := store.Take(ctx, key, l, cost); err != nil || !d.Allowed {
					t.Fatalf("at R = %v: %+v, %v; want admission", r, d, err)
				}
			})
		}
	}
}

// keysIndependent checks that spending one key leaves another whole.
func (s suite) keysIndependent(t *testing.T) {
	store, _, key := s.setup(t)
	ctx := context.Background()
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 3, Rate: 1, Period: time.Minute}
	if d, err := store.Take(ctx, key+"/a", l, 3); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("key a: %+v, %v", d, err)
	}
	if d, err := store.Take(ctx, key+"/a", l, 1); err != nil || d.Allowed {
		t.Fatalf("key a exhausted: %+v, %v", d, err)
	}
	if d, err := store.Take(ctx, key+"/b", l, 1); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("key b: %+v, %v; want allowed with 2 remaining", d, err)
	}
}

// invalidLimits checks that malformed limits are refused by Take and Refund.
func (s suite) invalidLimits(t *testing.T) {
	store, _, key := s.setup(t)
	ctx := context.Background()
	for _, c := range InvalidLimits() {
		if d, err := store.Take(ctx, key, c.Limit, 1); !errors.Is(err, limiter.ErrInvalidLimit) || d.Allowed {
			t.Errorf("Take with %s: %+v, %v; want ErrInvalidLimit", c.Name, d, err)
		}
		if d, err := store.Refund(ctx, key, c.Limit, 1); !errors.Is(err, limiter.ErrInvalidLimit) || d.Allowed {
			t.Errorf("Refund with %s: %+v, %v; want ErrInvalidLimit", c.Name, d, err)
		}
	}
}

// InvalidLimit is a named malformed limit.
type InvalidLimit struct {
	Name  string
	Limit limiter.Limit
}

// InvalidLimits lists limits every store must reject with ErrInvalidLimit.
func InvalidLimits() []InvalidLimit {
	ok := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}
	with := func(f func(*limiter.Limit)) limiter.Limit {
		l := ok
		f(&l)
		return l
	}
	return []InvalidLimit{
		{"unknown algorithm", with(func(l *limiter.Limit) { l.Algorithm = 99 })},
		{"zero period", with(func(l *limiter.Limit) { l.Period = 0 })},
		{"negative period", with(func(l *limiter.Limit) { l.Period = -time.Second })},
		{"sub-microsecond period", with(func(l *limiter.Limit) { l.Period = 1500 * time.Nanosecond })},
		{"period beyond MaxPeriod", with(func(l *limiter.Limit) { l.Period = limiter.MaxPeriod + time.Microsecond })},
		{"zero rate", with(func(l *limiter.Limit) { l.Rate = 0 })},
		{"negative rate", with(func(l *limiter.Limit) { l.Rate = -1 })},
		{"zero burst", with(func(l *limiter.Limit) { l.Burst = 0 })},
		{"negative burst", with(func(l *limiter.Limit) { l.Burst = -5 })},
		{"negative burst on a window", with(func(l *limiter.Limit) { l.Algorithm, l.Burst = limiter.FixedWindow, -1 })},
		{"capacity beyond 2^53", with(func(l *limiter.Limit) {
			l.Burst, l.Rate, l.Period = 1<<40, 1, time.Hour // 3.6e9 units per token
		})},
		{"sliding counter product beyond 2^53", with(func(l *limiter.Limit) {
			l.Algorithm, l.Rate, l.Period = limiter.SlidingCounter, 1<<30, 24*time.Hour
		})},
		{"sliding log rate beyond MaxLogRate", with(func(l *limiter.Limit) {
			l.Algorithm, l.Rate = limiter.SlidingLog, limiter.MaxLogRate+1
		})},
	}
}

// negativeCosts checks that negative costs and refunds are refused.
func (s suite) negativeCosts(t *testing.T) {
	store, _, key := s.setup(t)
	ctx := context.Background()
	for _, l := range everyAlgorithm() {
		if d, err := store.Take(ctx, key, l, -1); !errors.Is(err, limiter.ErrInvalidCost) || d.Allowed {
			t.Errorf("%s: Take(-1): %+v, %v; want ErrInvalidCost", l.Algorithm, d, err)
		}
		if d, err := store.Refund(ctx, key, l, -1); !errors.Is(err, limiter.ErrInvalidCost) || d.Allowed {
			t.Errorf("%s: Refund(-1): %+v, %v; want ErrInvalidCost", l.Algorithm, d, err)
		}
	}
}

func everyAlgorithm() []limiter.Limit {
	var ls []limiter.Limit
	for a := limiter.TokenBucket; a <= limiter.SlidingCounter; a++ {
		ls = append(ls, limiter.Limit{Algorithm: a, Burst: 10, Rate: 10, Period: time.Second})
	}
	return ls
}

// wait checks limiter.Wait on a shaping limit: it blocks for the reserved
// Delay, reports rejections and gives up when ctx ends.
func (s suite) wait(t *testing.T) {
	shape := limiter.Limit{Algorithm: limiter.LeakyBucketShaping, Burst: 3, Rate: 10, Period: time.Second}
	ctx := context.Background()

	t.Run("delays", func(t *testing.T) {
		store, _, key := s.setup(t)
		var waited []time.Duration
		fired := limiter.WithTimer(func(d time.Duration) (<-chan time.Time, func() bool) {
			waited = append(waited, d)
			c := make(chan time.Time, 1)
			c <- time.Time{}
			return c, func() bool { return false }
		})
		for i, want := range []time.Duration{0, 100 * ms, 200 * ms} {
			d, err := limiter.Wait(ctx, store, key, shape, 1, fired)
			if err != nil || !d.Allowed || d.Delay != want {
				t.Fatalf("Wait %d: %+v, %v; want allowed with delay %v", i, d, err, want)
			}
		}
		if fmt.Sprint(waited) != fmt.Sprint([]time.Duration{100 * ms, 200 * ms}) {
			t.Errorf("timers for %v, want [100ms 200ms] (no timer for a zero delay)", waited)
		}
		d, err := limiter.Wait(ctx, store, key, shape, 1, fired)
		if !errors.Is(err, limiter.ErrLimitExceeded) || d.Allowed || d.RetryAfter != 100*ms {
			t.Fatalf("Wait on a full queue: %+v, %v; want ErrLimitExceeded with RetryAfter 100ms", d, err)
		}
		if _, err := limiter.Wait(ctx, store, key, shape, 4, fired); !errors.Is(err, limiter.ErrCostExceedsCapacity) {
			t.Fatalf("Wait(cost 4): %v; want ErrCostExceedsCapacity", err)
		}
	})

	t.Run("ctx_ends_while_waiting", func(t *testing.T) {
		store, _, key := s.setup(t)
		if _, err := store.Take(ctx, key, shape, 1); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stopped := false
		never := limiter.WithTimer(func(time.Duration) (<-chan time.Time, func() bool) {
			cancel() // the caller gives up while the timer runs
			return nil, func() bool { stopped = true; return true }
		})
		d, err := limiter.Wait(wctx, store, key, shape, 1, never)
		if !errors.Is(err, context.Canceled) || d.Delay != 100*ms {
			t.Fatalf("Wait: %+v, %v; want context.Canceled after reserving a 100ms slot", d, err)
		}
		if !stopped {
			t.Error("the timer was not stopped")
		}
	})

	t.Run("ctx_done_before_start_takes_nothing", func(t *testing.T) {
		store, _, key := s.setup(t)
		done, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := limiter.Wait(done, store, key, shape, 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait: %v; want context.Canceled", err)
		}
		if d, err := store.Take(ctx, key, shape, 0); err != nil || d.Remaining != 3 {
			t.Fatalf("peek: %+v, %v; want the queue untouched", d, err)
		}
	})
}

// hammer runs 12 concurrent callers of 400 calls each per algorithm on a
// fake clock (4,800 calls over at least 2 s of its time) and checks that
// nothing beyond the limit is admitted.
func (s suite) hammer(t *testing.T) {
	limits := []limiter.Limit{
		{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 50, Period: time.Second},
		{Algorithm: limiter.LeakyBucketPolicing, Burst: 7, Rate: 30, Period: time.Second},
		{Algorithm: limiter.LeakyBucketShaping, Burst: 7, Rate: 30, Period: time.Second},
		{Algorithm: limiter.FixedWindow, Rate: 40, Period: 300 * time.Millisecond},
		{Algorithm: limiter.SlidingLog, Rate: 40, Period: 300 * time.Millisecond},
		{Algorithm: limiter.SlidingCounter, Rate: 40, Period: 300 * time.Millisecond},
	}
	for _, l := range limits {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			store, clock, key := s.setup(t)
			Hammer(t, store, key, l, 12, 400, clock)
		})
	}
}
