package limiter_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
)

// TestAdmitsMatchesTake checks limiter.Admits, the rule the stores' TakeAll
// decides by, against the transition functions: over random traffic, and
// over states written under a higher Rate (the one way a peek is refused),
// a cost is admitted exactly when Admits says so of a peek at the same
// instant.
func TestAdmitsMatchesTake(t *testing.T) {
	limits := []limiter.Limit{
		{Algorithm: limiter.TokenBucket, Burst: 7, Rate: 3, Period: time.Second},
		{Algorithm: limiter.LeakyBucketPolicing, Burst: 5, Rate: 11, Period: 3 * time.Second},
		{Algorithm: limiter.LeakyBucketShaping, Burst: 6, Rate: 7, Period: time.Second},
		{Algorithm: limiter.FixedWindow, Rate: 9, Period: 1300 * time.Millisecond},
		{Algorithm: limiter.SlidingCounter, Rate: 9, Period: 1300 * time.Millisecond},
		{Algorithm: limiter.SlidingCounter, Rate: 13, Period: 7 * time.Millisecond},
		{Algorithm: limiter.SlidingLog, Rate: 8, Period: 900 * time.Millisecond},
	}
	for _, l := range limits {
		for _, higher := range []int64{1, 3} { // the Rate the state was written under, × l.Rate
			t.Run(fmt.Sprintf("%s/%d_per_%v/written_at_%dx", l.Algorithm, l.Rate, l.Period, higher), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(3, uint64(l.Rate*higher)))
				w := l
				w.Rate *= higher
				writer := &model{limit: w}
				capacity := l.Capacity()
				period := int64(l.Period / time.Microsecond)
				now := int64(1_893_456_000_000_000) + rng.Int64N(period)
				refusedPeeks := 0
				for range 3000 {
					now += rng.Int64N(period / 3)
					if _, err := writer.take(now, rng.Int64N(w.Capacity())+1, true); err != nil {
						t.Fatal(err)
					}
					probe := &model{limit: l, bucket: writer.bucket, window: writer.window, log: writer.log}
					peek, err := probe.take(now, 0, false)
					if err != nil {
						t.Fatal(err)
					}
					if !peek.Allowed {
						refusedPeeks++
					}
					for cost := int64(0); cost <= capacity+1; cost++ {
						d, err := probe.take(now, cost, false)
						admitted := err == nil && d.Allowed
						if got := limiter.Admits(peek, cost); got != admitted {
							t.Fatalf("at %d cost %d: Admits(%+v) = %v, Take says %+v, %v", now, cost, peek, got, d, err)
						}
					}
				}
				t.Logf("%d refused peeks", refusedPeeks)
			})
		}
	}
}

func TestCheckTakeAll(t *testing.T) {
	tb := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 5, Rate: 5, Period: time.Second}
	fw := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 5, Period: time.Second}
	many := make([]limiter.Request, limiter.MaxTakeAll+1)
	for i := range many {
		many[i] = limiter.Request{Key: fmt.Sprint(i), Limit: tb}
	}
	tests := []struct {
		name string
		reqs []limiter.Request
		n    int // len(decisions); -1 for len(reqs)
		err  error
		msg  string
	}{
		{name: "none", n: -1},
		{name: "distinct", n: -1, reqs: []limiter.Request{
			{Key: "a", Limit: tb, Cost: 1}, {Key: "a", Name: "q", Limit: fw}, {Key: "b", Limit: tb}, {Key: "a\x00q", Limit: tb}}},
		{name: "duplicate", n: -1, err: limiter.ErrDuplicateBudget, msg: "limiter: duplicate budget in TakeAll: requests 0 and 2",
			reqs: []limiter.Request{{Key: "a", Name: "q", Limit: tb}, {Key: "a", Limit: tb}, {Key: "a", Name: "q", Limit: fw}}},
		{name: "invalid limit", n: -1, err: limiter.ErrInvalidLimit,
			reqs: []limiter.Request{{Key: "a", Limit: tb}, {Key: "b", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 1, Period: time.Second}}}},
		{name: "negative cost", n: -1, err: limiter.ErrInvalidCost, msg: "limiter: TakeAll request 1: limiter: invalid cost: negative cost -1",
			reqs: []limiter.Request{{Key: "a", Limit: tb}, {Key: "b", Limit: tb, Cost: -1}}},
		{name: "too many", n: -1, err: limiter.ErrTooManyBudgets, reqs: many},
		{name: "short decisions", n: 1, msg: "limiter: TakeAll: 1 decisions for 2 requests",
			reqs: []limiter.Request{{Key: "a", Limit: tb}, {Key: "b", Limit: tb}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.n
			if n < 0 {
				n = len(tt.reqs)
			}
			ds := make([]limiter.Decision, n)
			for i := range ds {
				ds[i] = limiter.Decision{Allowed: true, Remaining: 9}
			}
			err := limiter.CheckTakeAll(tt.reqs, ds)
			if tt.err != nil && !errors.Is(err, tt.err) || tt.err == nil && (err == nil) != (tt.msg == "") {
				t.Fatalf("CheckTakeAll: %v, want %v", err, tt.err)
			}
			if tt.msg != "" && (err == nil || err.Error() != tt.msg) {
				t.Fatalf("CheckTakeAll: %q, want %q", err, tt.msg)
			}
			if tt.err != nil {
				for i, d := range ds {
					if d != (limiter.Decision{}) {
						t.Errorf("decision %d left %+v after an error", i, d)
					}
				}
			}
		})
	}
}

func TestAllAllowed(t *testing.T) {
	yes, no := limiter.Decision{Allowed: true}, limiter.Decision{}
	for _, tt := range []struct {
		ds   []limiter.Decision
		want bool
	}{
		{nil, true},
		{[]limiter.Decision{yes, yes}, true},
		{[]limiter.Decision{yes, no}, false},
		{[]limiter.Decision{no}, false},
	} {
		if got := limiter.AllAllowed(tt.ds); got != tt.want {
			t.Errorf("AllAllowed(%+v) = %v", tt.ds, got)
		}
	}
}
