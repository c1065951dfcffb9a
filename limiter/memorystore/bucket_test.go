package memorystore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
)

// randomBucketLimit draws a bucket Limit whose scale varies over the whole
// valid range: periods from 1 µs to MaxPeriod, rates from 1 to far above
// the period, bursts up to the 2^53 capacity bound. About one in eight is
// invalid (zero burst, a period that is not whole µs, a burst past the
// bound), so the tests also cover the calls the fast path must refuse.
func randomBucketLimit(r *rand.Rand) limiter.Limit {
	algs := []limiter.Algorithm{limiter.TokenBucket, limiter.LeakyBucketPolicing, limiter.LeakyBucketShaping}
	periods := []time.Duration{time.Microsecond, time.Millisecond, time.Second, time.Minute, time.Hour, 24 * time.Hour, limiter.MaxPeriod}
	l := limiter.Limit{Algorithm: algs[r.IntN(len(algs))]}
	if r.IntN(2) == 0 {
		l.Period = periods[r.IntN(len(periods))]
	} else {
		l.Period = time.Duration(1+r.Int64N(int64(time.Hour/time.Microsecond))) * time.Microsecond
	}
	rates := []int64{1, 2, 3, 7, 10, 100, 999, 1000, 1_000_000, 1 << 40, limiter.MaxSafeInteger}
	if r.IntN(2) == 0 {
		l.Rate = rates[r.IntN(len(rates))]
	} else {
		l.Rate = 1 + r.Int64N(1<<(1+r.IntN(52)))
	}
	l.Burst = 1 + r.Int64N(1<<(1+r.IntN(20)))
	switch r.IntN(16) {
	case 0:
		l.Burst = 0
	case 1:
		l.Period += 1 // not a whole number of µs
	case 2:
		l.Burst = limiter.MaxSafeInteger
	}
	return l
}

// randomTime draws a time in µs: an edge of the clock's range a quarter
// of the time, else a moment after 2027 up to a year and a half apart.
func randomTime(r *rand.Rand) int64 {
	if r.IntN(4) == 0 {
		times := []int64{-1, 0, 1, limiter.MaxNow - 1, limiter.MaxNow, limiter.MaxNow + 1}
		return times[r.IntN(len(times))]
	}
	return 1_800_000_000_000_000 + r.Int64N(1<<(1+r.IntN(40)))
}

// randomCost draws what a call takes, or gives back when refund, from a
// budget of capacity c: far beyond any capacity for some refunds, the
// whole capacity one time in eight, else up to it.
func randomCost(r *rand.Rand, c int64, refund bool) int64 {
	switch {
	case refund && r.IntN(4) == 0:
		return r.Int64N(1 << 62)
	case r.IntN(8) == 0:
		return c
	}
	return r.Int64N(min(c, 1<<20) + 1)
}

// TestBucketFastPathMatchesLimiter checks the store's bucket arithmetic
// against limiter.TakeBucket and limiter.RefundBucket on random limits,
// states (including out-of-range ones, which both must sanitise alike),
// times and costs: same state, same decision.
func TestBucketFastPathMatchesLimiter(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var cache paramCache
	checked := 0
	for i := 0; i < 200_000; i++ {
		l := randomBucketLimit(r)
		p := cache.get(l)
		if (p != nil) != (l.Validate() == nil) {
			t.Fatalf("%+v: cached %v, Validate %v", l, p != nil, l.Validate())
		}
		if p == nil {
			continue
		}
		var level int64
		switch r.IntN(4) {
		case 0:
			level = -1 - r.Int64N(1<<40)
		case 1:
			level = p.capacity + r.Int64N(1<<40)
		default:
			level = r.Int64N(p.capacity + 1)
		}
		state := limiter.BucketState{Level: level, Last: randomTime(r)}
		now := randomTime(r)
		refund := r.IntN(3) == 0 && l.Algorithm != limiter.LeakyBucketShaping
		n := randomCost(r, l.Burst, refund)

		var (
			wantState limiter.BucketState
			want, got limiter.Decision
			err       error
		)
		st := entry{a: state.Level, b: state.Last}
		if refund {
			wantState, want, err = limiter.RefundBucket(l, state, now, n)
		} else {
			wantState, want, err = limiter.TakeBucket(l, state, now, n)
		}
		p.step(&got, &st, now, n, refund)
		if err != nil {
			t.Fatalf("limiter: %+v %+v now %d n %d: %v", l, state, now, n, err)
		}
		if got != want || st.a != wantState.Level || st.b != wantState.Last {
			t.Fatalf("%+v from %+v at %d, refund %v of %d:\n got %+v, state (%d, %d)\nwant %+v, state %+v",
				l, state, now, refund, n, got, st.a, st.b, want, wantState)
		}
		checked++
	}
	if checked < 100_000 {
		t.Fatalf("only %d valid cases drawn", checked)
	}
}

// TestStoreMatchesLimiter runs random Takes and Refunds over a few keys and
// many limits (more than the parameter cache holds, so slots are shared and
// replaced) through the store and through limiter's functions on a state
// kept by the test: same decisions, same errors, on every path.
func TestStoreMatchesLimiter(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	clock := limitertest.NewFakeClock(t0)
	s, err := New(Config{Clock: clock, MaxKeys: 1000, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	limits := make([]limiter.Limit, 40)
	for i := range limits {
		limits[i] = randomBucketLimit(r)
	}
	type ref struct {
		alg   limiter.Algorithm
		state limiter.BucketState
	}
	refs := map[string]*ref{}
	ctx := context.Background()
	for i := range 100_000 {
		if r.IntN(4) == 0 {
			clock.Advance(time.Duration(r.Int64N(int64(time.Second))))
		}
		key := fmt.Sprintf("k%d", r.IntN(20))
		l := limits[r.IntN(len(limits))]
		n := r.Int64N(min(l.Burst, 50)+2) - 1 // −1 … Burst+1 for small bursts
		if r.IntN(50) == 0 {
			n = l.Burst + 1
		}
		refund := r.IntN(4) == 0
		now := clock.Now().UnixMicro()

		var base limiter.BucketState // a fresh key, or one that held another algorithm
		if rf := refs[key]; rf != nil && rf.alg == l.Algorithm {
			base = rf.state
		}
		var (
			next            limiter.BucketState
			want, got       limiter.Decision
			wantErr, gotErr error
		)
		if refund {
			next, want, wantErr = limiter.RefundBucket(l, base, now, n)
			got, gotErr = s.Refund(ctx, key, l, n)
		} else {
			next, want, wantErr = limiter.TakeBucket(l, base, now, n)
			got, gotErr = s.Take(ctx, key, l, n)
		}
		// Failed calls change nothing, except that a cost above capacity
		// still drains the bucket to now (equivalent to the old state).
		if wantErr == nil || errors.Is(wantErr, limiter.ErrCostExceedsCapacity) {
			refs[key] = &ref{alg: l.Algorithm, state: next}
		}
		if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("op %d: %s %+v refund %v n %d at %d:\n got %+v, %v\nwant %+v, %v",
				i, key, l, refund, n, now, got, gotErr, want, wantErr)
		}
	}
}

func TestDivisor(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ds := []int64{1, 2, 3, 5, 7, 10, 1000, 1 << 20, 1<<20 - 1, 1<<20 + 1, 1<<52 + 1, limiter.MaxSafeInteger - 1, limiter.MaxSafeInteger}
	for range 200 {
		ds = append(ds, 1+r.Int64N(int64(1)<<(1+r.IntN(53))-1))
	}
	for _, d := range ds {
		v := newDivisor(d)
		xs := []int64{0, 1, d - 1, d, d + 1, 2*d - 1, 2 * d, 1<<54 - 1, 1<<62 - 1, 1<<62 - d}
		for range 200 {
			xs = append(xs, r.Int64N(1<<(1+r.IntN(62))))
		}
		for _, x := range xs {
			if x < 0 {
				continue
			}
			if got, want := v.floor(x), x/d; got != want {
				t.Fatalf("⌊%d / %d⌋ = %d, want %d", x, d, got, want)
			}
			if x < 1<<62-d {
				if got, want := v.ceil(x), (x+d-1)/d; got != want {
					t.Fatalf("⌈%d / %d⌉ = %d, want %d", x, d, got, want)
				}
			}
		}
	}
}

// randomWindowLimit draws a FixedWindow Limit over the whole valid range
// of periods and rates; about one in eight is invalid (a zero rate, a
// period that is not whole µs or past MaxPeriod, a rate past 2^53 − 1).
func randomWindowLimit(r *rand.Rand) limiter.Limit {
	periods := []time.Duration{time.Microsecond, time.Millisecond, time.Second, time.Minute, time.Hour, 24 * time.Hour, limiter.MaxPeriod}
	l := limiter.Limit{Algorithm: limiter.FixedWindow, Burst: r.Int64N(3)}
	if r.IntN(2) == 0 {
		l.Period = periods[r.IntN(len(periods))]
	} else {
		l.Period = time.Duration(1+r.Int64N(int64(time.Hour/time.Microsecond))) * time.Microsecond
	}
	rates := []int64{1, 2, 3, 10, 1000, 1 << 40, limiter.MaxSafeInteger}
	if r.IntN(2) == 0 {
		l.Rate = rates[r.IntN(len(rates))]
	} else {
		l.Rate = 1 + r.Int64N(1<<(1+r.IntN(30)))
	}
	switch r.IntN(16) {
	case 0:
		l.Rate = 0
	case 1:
		l.Period += 1 // not a whole number of µs
	case 2:
		l.Period = limiter.MaxPeriod + time.Microsecond
	case 3:
		l.Rate = limiter.MaxSafeInteger + 1
	}
	return l
}

// TestWindowFastPathMatchesLimiter checks the store's fixed-window
// arithmetic against limiter.TakeFixedWindow and
// limiter.RefundFixedWindow on random limits, states (including
// out-of-range ones and a stored Prev), times and costs: same state, same
// decision.
func TestWindowFastPathMatchesLimiter(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var cache paramCache
	checked := 0
	for range 200_000 {
		l := randomWindowLimit(r)
		p := cache.window(l)
		if (p != nil) != (l.Validate() == nil) {
			t.Fatalf("%+v: cached %v, Validate %v", l, p != nil, l.Validate())
		}
		if p == nil {
			continue
		}
		now := randomTime(r)
		period := int64(l.Period / time.Microsecond)
		var state limiter.WindowState
		switch r.IntN(5) {
		case 0:
			state.Window = -1 - r.Int64N(1<<40)
		case 1:
			state.Window = limiter.MaxNow/period + r.Int64N(1<<20)
		default:
			state.Window = max(0, now)/period - r.Int64N(3) + r.Int64N(2) // this window, the last, the next
		}
		switch r.IntN(4) {
		case 0:
			state.Count = -1 - r.Int64N(1<<40)
		case 1:
			state.Count = l.Rate + r.Int64N(1<<40)
		default:
			state.Count = r.Int64N(l.Rate + 1)
		}
		if r.IntN(4) == 0 {
			state.Prev = r.Int64N(l.Rate + 1) // an entry written under another algorithm's rules
		}
		refund := r.IntN(3) == 0
		n := randomCost(r, l.Rate, refund)

		var (
			wantState limiter.WindowState
			want, got limiter.Decision
			err       error
		)
		st := entry{a: state.Window, b: state.Count}
		st.setPrev(state.Prev)
		if refund {
			wantState, want, err = limiter.RefundFixedWindow(l, state, now, n)
		} else {
			wantState, want, err = limiter.TakeFixedWindow(l, state, now, n)
		}
		p.stepWindow(&got, &st, now, n, refund)
		if err != nil {
			t.Fatalf("limiter: %+v %+v now %d n %d: %v", l, state, now, n, err)
		}
		if got != want || st.a != wantState.Window || st.b != wantState.Count || st.prev() != wantState.Prev {
			t.Fatalf("%+v from %+v at %d, refund %v of %d:\n got %+v, state (%d, %d, %d)\nwant %+v, state %+v",
				l, state, now, refund, n, got, st.a, st.b, st.prev(), want, wantState)
		}
		checked++
	}
	if checked < 100_000 {
		t.Fatalf("only %d valid cases drawn", checked)
	}
}

// TestStoreWindowsMatchLimiter runs random Takes, Refunds, TakeAlls and
// RefundAlls of fixed windows over many limits (more than the parameter
// cache holds), each key under one, through the store and through
// limiter's functions on a state kept by the test: same decisions, same
// errors.
func TestStoreWindowsMatchLimiter(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	clock := limitertest.NewFakeClock(t0)
	s, err := New(Config{Clock: clock, MaxKeys: 1000, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	limits := make([]limiter.Limit, 40)
	for i := range limits {
		limits[i] = randomWindowLimit(r)
		if r.IntN(2) == 0 {
			limits[i].Rate = 1 + r.Int64N(60) // small enough to be refused
			limits[i].Period = time.Duration(1+r.Int64N(5)) * time.Second
		}
	}
	refs := map[string]limiter.WindowState{}
	ctx := context.Background()
	for i := range 100_000 {
		if r.IntN(4) == 0 {
			clock.Advance(time.Duration(r.Int64N(int64(time.Second))))
		}
		// Each key keeps one limit: a window's state means nothing under
		// another period.
		k := r.IntN(len(limits))
		key, name, l := fmt.Sprintf("k%d", k), "", limits[k]
		many := r.IntN(2) == 0
		if many && r.IntN(2) == 0 {
			name = "quota"
		}
		n := r.Int64N(min(l.Rate, 50)+2) - 1 // −1 … Rate+1 for small rates
		if r.IntN(50) == 0 {
			n = l.Rate + 1
		}
		refund := r.IntN(4) == 0
		now := clock.Now().UnixMicro()

		id := key + "/" + name // Name "" is the plain key, for Take and TakeAll alike
		var (
			next            limiter.WindowState
			want, got       limiter.Decision
			wantErr, gotErr error
		)
		if refund {
			next, want, wantErr = limiter.RefundFixedWindow(l, refs[id], now, n)
		} else {
			next, want, wantErr = limiter.TakeFixedWindow(l, refs[id], now, n)
		}
		req := []limiter.Request{{Key: key, Name: name, Limit: l, Cost: n}}
		ds := make([]limiter.Decision, 1)
		switch {
		case !many && refund:
			got, gotErr = s.Refund(ctx, key, l, n)
		case !many:
			got, gotErr = s.Take(ctx, key, l, n)
		case refund:
			gotErr = s.RefundAll(ctx, req, ds)
			got = ds[0]
		default:
			gotErr = s.TakeAll(ctx, req, ds)
			got = ds[0]
		}
		// A refused TakeAll stores nothing: limiter's rolled state is the
		// same budget under the same period.
		if wantErr == nil || (!many && errors.Is(wantErr, limiter.ErrCostExceedsCapacity)) {
			refs[id] = next
		}
		if many && wantErr != nil {
			// TakeAll and RefundAll check their requests in their own
			// words, and report no decision for a request in error: the
			// same kind of error is enough.
			kind := false
			for _, e := range []error{limiter.ErrInvalidCost, limiter.ErrInvalidLimit, limiter.ErrCostExceedsCapacity} {
				kind = kind || errors.Is(wantErr, e) && errors.Is(gotErr, e)
			}
			if !kind {
				t.Fatalf("op %d: %s %+v refund %v n %d: error %v, want one like %v", i, id, l, refund, n, gotErr, wantErr)
			}
			continue
		}
		if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("op %d: %s %+v refund %v n %d at %d:\n got %+v, %v\nwant %+v, %v",
				i, id, l, refund, n, now, got, gotErr, want, wantErr)
		}
	}
}
