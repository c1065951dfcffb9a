package limitertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
)

// Model is a reference MultiTaker built from package limiter's pure
// functions alone: one state per (Key, Name, Algorithm), decided at the
// instant the caller passes. Tests compare stores against it decision by
// decision. It is not safe for concurrent use.
type Model struct {
	budgets map[modelKey]*modelBudget
}

type modelKey struct {
	key, name string
	alg       limiter.Algorithm
}

type modelBudget struct {
	bucket limiter.BucketState
	window limiter.WindowState
	log    []limiter.LogEntry
}

// NewModel returns a Model holding no budget (every budget whole).
func NewModel() *Model { return &Model{budgets: map[modelKey]*modelBudget{}} }

// Take is a Take of r alone at now (µs since the Unix epoch), committed
// when commit is true and r is admitted.
func (m *Model) Take(r limiter.Request, now int64, commit bool) (limiter.Decision, error) {
	k := modelKey{r.Key, r.Name, r.Limit.Algorithm}
	b := m.budgets[k]
	if b == nil {
		b = &modelBudget{}
	}
	var (
		next modelBudget
		d    limiter.Decision
		err  error
	)
	switch a := r.Limit.Algorithm; {
	case a.IsBucket():
		next.bucket, d, err = limiter.TakeBucket(r.Limit, b.bucket, now, r.Cost)
	case a == limiter.FixedWindow:
		next.window, d, err = limiter.TakeFixedWindow(r.Limit, b.window, now, r.Cost)
	case a == limiter.SlidingCounter:
		next.window, d, err = limiter.TakeSlidingCounter(r.Limit, b.window, now, r.Cost)
	default:
		next.log, d, err = limiter.TakeSlidingLog(r.Limit, append([]limiter.LogEntry(nil), b.log...), now, r.Cost)
	}
	if commit && err == nil && d.Allowed {
		m.budgets[k] = &next
	}
	return d, err
}

// TakeAll is limiter.MultiTaker.TakeAll at now, by its definition: every
// request is decided alone on the state before the call, and all are
// committed only when each is admitted; otherwise the requests that alone
// would fit answer as a peek. Its error wraps the first error a request
// met (ErrCostExceedsCapacity), or CheckTakeAll's.
func (m *Model) TakeAll(reqs []limiter.Request, now int64, ds []limiter.Decision) error {
	if err := limiter.CheckTakeAll(reqs, ds); err != nil {
		return err
	}
	var first error
	for i, r := range reqs {
		d, err := m.Take(r, now, false)
		ds[i] = d
		if err != nil && first == nil {
			first = fmt.Errorf("model: request %d: %w", i, err)
		}
	}
	if first != nil || !limiter.AllAllowed(ds) {
		for i, r := range reqs {
			if ds[i].Allowed && r.Cost > 0 {
				r.Cost = 0
				ds[i], _ = m.Take(r, now, false)
			}
		}
		return first
	}
	for _, r := range reqs {
		m.Take(r, now, true)
	}
	return nil
}

// multiStore is what the TakeAll cases need of a store.
type multiStore interface {
	limiter.Store
	limiter.MultiTaker
}

// takeAll runs the TakeAll cases when the store is a MultiTaker. Every
// request of a case names one Key, so a Cluster store can take them in one
// script call.
func (s suite) takeAll(t *testing.T) {
	probe, _, _ := s.setup(t)
	if _, ok := probe.(multiStore); !ok {
		t.Skipf("%T is not a limiter.MultiTaker", probe)
	}
	t.Run("all_fit", s.takeAllFit)
	t.Run("one_refuses", s.takeAllOneRefuses)
	t.Run("exceeds_capacity", s.takeAllExceeds)
	t.Run("refused_before_deciding", s.takeAllInvalid)
	t.Run("name_empty_is_take", s.takeAllSharesTake)
	t.Run("model", s.takeAllModel)
	t.Run("concurrent", s.takeAllConcurrent)
	t.Run("refund_all", s.refundAll)
}

func (s suite) setupMulti(t *testing.T) (multiStore, *FakeClock, string) {
	store, clock, key := s.setup(t)
	return store.(multiStore), clock, key
}

// Limits of the TakeAll cases, one per family.
var (
	multiBucket = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 5, Rate: 5, Period: time.Second}
	multiShape  = limiter.Limit{Algorithm: limiter.LeakyBucketShaping, Burst: 4, Rate: 10, Period: time.Second}
	multiFixed  = limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 4, Period: time.Second}
	multiLog    = limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 3, Period: time.Second}
	multiCount  = limiter.Limit{Algorithm: limiter.SlidingCounter, Rate: 6, Period: time.Second}
)

// peekAll returns a peek of each request's budget, one TakeAll per budget.
func peekAll(t *testing.T, store multiStore, reqs []limiter.Request) []limiter.Decision {
	t.Helper()
	out := make([]limiter.Decision, len(reqs))
	for i, r := range reqs {
		r.Cost = 0
		if err := store.TakeAll(context.Background(), []limiter.Request{r}, out[i:i+1]); err != nil {
			t.Fatalf("peek of request %d: %v", i, err)
		}
	}
	return out
}

func (s suite) takeAllFit(t *testing.T) {
	store, clock, key := s.setupMulti(t)
	ctx := context.Background()
	clock.Advance(250 * ms) // off the window boundaries
	// The shaping queue holds one slot already: its admission reports a delay.
	if d, err := store.Take(ctx, key, multiShape, 1); err != nil || !d.Allowed {
		t.Fatalf("Take: %+v, %v", d, err)
	}
	reqs := []limiter.Request{
		{Key: key, Name: "", Limit: multiShape, Cost: 2}, // the budget Take spent
		{Key: key, Name: "bucket", Limit: multiBucket, Cost: 2},
		{Key: key, Name: "fixed", Limit: multiFixed, Cost: 3},
		{Key: key, Name: "log", Limit: multiLog, Cost: 1},
		{Key: key, Name: "counter", Limit: multiCount, Cost: 4},
	}
	ds := make([]limiter.Decision, len(reqs))
	if err := store.TakeAll(ctx, reqs, ds); err != nil || !limiter.AllAllowed(ds) {
		t.Fatalf("TakeAll: %+v, %v", ds, err)
	}
	want := []limiter.Decision{
		shaped(allow(4, 1, 300*ms), 100*ms),
		allow(5, 3, 400*ms),
		allow(4, 1, 750*ms),
		allow(3, 2, s1),
		allow(6, 2, 1750*ms),
	}
	for i := range want {
		if ds[i] != want[i] {
			t.Errorf("decision %d (%s): %+v, want %+v", i, reqs[i].Limit.Algorithm, ds[i], want[i])
		}
	}
	// Every budget was debited.
	for i, d := range peekAll(t, store, reqs) {
		if d.Remaining != want[i].Remaining {
			t.Errorf("peek %d (%s): Remaining %d, want %d", i, reqs[i].Limit.Algorithm, d.Remaining, want[i].Remaining)
		}
	}
}

// takeAllOneRefuses puts the refusing budget at each position: nothing is
// debited, the others are answered as peeks, and the refuser's
// RetryAfter is exact: refused 1 µs before it, everything fits at it.
func (s suite) takeAllOneRefuses(t *testing.T) {
	limits := []limiter.Limit{multiBucket, multiFixed, multiLog, multiCount}
	for refuser := range limits {
		t.Run(fmt.Sprintf("position_%d_%s", refuser, limits[refuser].Algorithm), func(t *testing.T) {
			store, clock, key := s.setupMulti(t)
			ctx := context.Background()
			clock.Advance(250 * ms)
			reqs := make([]limiter.Request, len(limits))
			for i, l := range limits {
				reqs[i] = limiter.Request{Key: key, Name: fmt.Sprint("b", i), Limit: l, Cost: 2}
			}
			// Leave the refuser one unit: a cost of 2 does not fit.
			spend := reqs[refuser]
			spend.Cost = spend.Limit.Capacity() - 1
			one := make([]limiter.Decision, 1)
			if err := store.TakeAll(ctx, []limiter.Request{spend}, one); err != nil || !one[0].Allowed {
				t.Fatalf("spending: %+v, %v", one[0], err)
			}
			clock.Advance(100 * ms)
			before := peekAll(t, store, reqs)

			model := NewModel()
			now := clock.Now().UnixMicro()
			model.Take(spend, now-100_000, true)
			want := make([]limiter.Decision, len(reqs))
			if err := model.TakeAll(reqs, now, want); err != nil {
				t.Fatal(err)
			}
			ds := make([]limiter.Decision, len(reqs))
			if err := store.TakeAll(ctx, reqs, ds); err != nil {
				t.Fatalf("TakeAll: %v", err)
			}
			for i := range ds {
				if ds[i] != want[i] {
					t.Errorf("decision %d: %+v, want %+v", i, ds[i], want[i])
				}
				if ds[i].Allowed != (i != refuser) {
					t.Errorf("decision %d: Allowed %v", i, ds[i].Allowed)
				}
			}
			if after := peekAll(t, store, reqs); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("a refused TakeAll changed the budgets:\n before %+v\n after  %+v", before, after)
			}
			retry := ds[refuser].RetryAfter
			if retry <= 0 {
				t.Fatalf("refuser's RetryAfter %v", retry)
			}
			at := clock.Now()
			clock.Set(at.Add(retry - us))
			if err := store.TakeAll(ctx, reqs, ds); err != nil || ds[refuser].Allowed || limiter.AllAllowed(ds) {
				t.Fatalf("1µs before RetryAfter %v: %+v, %v; want the same refusal", retry, ds, err)
			}
			clock.Set(at.Add(retry))
			if err := store.TakeAll(ctx, reqs, ds); err != nil || !limiter.AllAllowed(ds) {
				t.Fatalf("at RetryAfter %v: %+v, %v; want all admitted", retry, ds, err)
			}
		})
	}
}

func (s suite) takeAllExceeds(t *testing.T) {
	store, clock, key := s.setupMulti(t)
	ctx := context.Background()
	clock.Advance(250 * ms)
	reqs := []limiter.Request{
		{Key: key, Name: "a", Limit: multiBucket, Cost: 2},
		{Key: key, Name: "b", Limit: multiFixed, Cost: 5},
		{Key: key, Name: "", Limit: multiLog, Cost: 1},
	}
	ds := make([]limiter.Decision, len(reqs))
	err := store.TakeAll(ctx, reqs, ds)
	if !errors.Is(err, limiter.ErrCostExceedsCapacity) {
		t.Fatalf("TakeAll: %v; want ErrCostExceedsCapacity", err)
	}
	// The other two fit, and answer as peeks: nothing was debited.
	want := []limiter.Decision{allow(5, 5, 0), deny(4, 4, 0, 0), allow(3, 3, 0)}
	for i := range want {
		if ds[i] != want[i] {
			t.Errorf("decision %d: %+v, want %+v", i, ds[i], want[i])
		}
	}
	for i, d := range peekAll(t, store, reqs) {
		if d.Remaining != reqs[i].Limit.Capacity() {
			t.Errorf("budget %d debited: %+v", i, d)
		}
	}
}

func (s suite) takeAllInvalid(t *testing.T) {
	store, _, key := s.setupMulti(t)
	ctx := context.Background()
	ok := limiter.Request{Key: key, Name: "ok", Limit: multiBucket, Cost: 1}
	bad := multiBucket
	bad.Burst = 0
	cases := []struct {
		name string
		reqs []limiter.Request
		err  error
	}{
		{"duplicate", []limiter.Request{ok, {Key: key, Limit: multiFixed, Cost: 1}, {Key: key, Name: "ok", Limit: multiFixed, Cost: 1}}, limiter.ErrDuplicateBudget},
		{"invalid_limit", []limiter.Request{ok, {Key: key, Name: "bad", Limit: bad, Cost: 1}}, limiter.ErrInvalidLimit},
		{"negative_cost", []limiter.Request{ok, {Key: key, Name: "neg", Limit: multiFixed, Cost: -1}}, limiter.ErrInvalidCost},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds := make([]limiter.Decision, len(c.reqs))
			ds[0].Allowed = true
			if err := store.TakeAll(ctx, c.reqs, ds); !errors.Is(err, c.err) {
				t.Fatalf("TakeAll: %v; want %v", err, c.err)
			}
			for i, d := range ds {
				if d != (limiter.Decision{}) {
					t.Errorf("decision %d: %+v; want zero", i, d)
				}
			}
			if d := peekAll(t, store, []limiter.Request{ok})[0]; d.Remaining != 5 {
				t.Fatalf("a refused TakeAll debited: %+v", d)
			}
		})
	}
	if err := store.TakeAll(ctx, nil, nil); err != nil {
		t.Errorf("TakeAll of nothing: %v", err)
	}
}

// takeAllSharesTake: Name "" is Take's budget; any other name is another.
func (s suite) takeAllSharesTake(t *testing.T) {
	store, _, key := s.setupMulti(t)
	ctx := context.Background()
	if _, err := store.Take(ctx, key, multiBucket, 3); err != nil {
		t.Fatal(err)
	}
	ds := make([]limiter.Decision, 2)
	reqs := []limiter.Request{{Key: key, Limit: multiBucket, Cost: 1}, {Key: key, Name: "other", Limit: multiBucket, Cost: 1}}
	if err := store.TakeAll(ctx, reqs, ds); err != nil || ds[0].Remaining != 1 || ds[1].Remaining != 4 {
		t.Fatalf("TakeAll: %+v, %v; want Remaining 1 (Take's budget) and 4", ds, err)
	}
	if d, err := store.Take(ctx, key, multiBucket, 0); err != nil || d.Remaining != 1 {
		t.Fatalf("Take's peek: %+v, %v; want Remaining 1", d, err)
	}
}

// takeAllModel compares random TakeAlls over five budgets of every family,
// at random instants, with the Model, decision by decision.
func (s suite) takeAllModel(t *testing.T) {
	store, clock, key := s.setupMulti(t)
	ctx := context.Background()
	budgets := []limiter.Request{
		{Key: key, Name: "", Limit: multiBucket},
		{Key: key, Name: "shape", Limit: multiShape},
		{Key: key, Name: "fixed", Limit: multiFixed},
		{Key: key, Name: "log", Limit: multiLog},
		{Key: key, Name: "counter", Limit: multiCount},
	}
	model := NewModel()
	rng := rand.New(rand.NewPCG(11, 12))
	admitted, refused, exceeded := 0, 0, 0
	for step := range 300 {
		clock.Advance(time.Duration(rng.Int64N(250_000)) * us)
		now := clock.Now().UnixMicro()
		var reqs []limiter.Request
		for _, i := range rng.Perm(len(budgets))[:1+rng.IntN(len(budgets))] {
			r := budgets[i]
			r.Cost = rng.Int64N(r.Limit.Capacity()/2 + 1)
			if rng.IntN(40) == 0 {
				r.Cost = r.Limit.Capacity() + 1
			}
			reqs = append(reqs, r)
		}
		got := make([]limiter.Decision, len(reqs))
		want := make([]limiter.Decision, len(reqs))
		gotErr := store.TakeAll(ctx, reqs, got)
		wantErr := model.TakeAll(reqs, now, want)
		if errors.Is(gotErr, limiter.ErrCostExceedsCapacity) != errors.Is(wantErr, limiter.ErrCostExceedsCapacity) ||
			(gotErr == nil) != (wantErr == nil) {
			t.Fatalf("step %d: error %v, model %v", step, gotErr, wantErr)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("step %d at +%v: request %d (%s cost %d):\n got  %+v\n want %+v",
					step, clock.Now().Sub(t0), i, reqs[i].Limit.Algorithm, reqs[i].Cost, got[i], want[i])
			}
		}
		switch {
		case wantErr != nil:
			exceeded++
		case limiter.AllAllowed(want):
			admitted++
		default:
			refused++
		}
	}
	if admitted < 30 || refused < 30 || exceeded < 3 {
		t.Errorf("weak coverage: %d admitted, %d refused, %d over capacity", admitted, refused, exceeded)
	}
}

// takeAllConcurrent hammers TakeAll on overlapping budgets, with Takes on
// the budget named "" mixed in, while the clock stands still: each budget
// ends spent by exactly the admissions that named it, and never beyond
// its capacity.
func (s suite) takeAllConcurrent(t *testing.T) {
	store, _, key := s.setupMulti(t)
	ctx := context.Background()
	x := limiter.Request{Key: key, Name: "x", Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 60, Period: time.Hour}, Cost: 1}
	y := limiter.Request{Key: key, Name: "y", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 90, Rate: 1, Period: time.Hour}, Cost: 1}
	z := limiter.Request{Key: key, Name: "", Limit: limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 70, Period: time.Hour}, Cost: 1}
	groups := [][]limiter.Request{{x, y}, {y, z}, {x, y, z}, {z}}
	var admitted [4]atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				g := (w + i) % len(groups)
				if g == 3 && i%2 == 0 { // a plain Take of the budget named ""
					d, err := store.Take(ctx, key, z.Limit, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted[g].Add(1)
					}
					continue
				}
				ds := make([]limiter.Decision, len(groups[g]))
				if err := store.TakeAll(ctx, groups[g], ds); err != nil {
					t.Error(err)
					return
				}
				if limiter.AllAllowed(ds) {
					admitted[g].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	a := [4]int64{admitted[0].Load(), admitted[1].Load(), admitted[2].Load(), admitted[3].Load()}
	wantSpent := []int64{a[0] + a[2], a[0] + a[1] + a[2], a[1] + a[2] + a[3]}
	for i, d := range peekAll(t, store, []limiter.Request{x, y, z}) {
		spent := d.Limit - d.Remaining
		if spent != wantSpent[i] || spent > d.Limit {
			t.Errorf("budget %d spent %d; admissions naming it: %d (capacity %d)", i, spent, wantSpent[i], d.Limit)
		}
	}
	if a[0]+a[1]+a[2] == 0 {
		t.Error("nothing admitted")
	}
	t.Logf("admitted per group: %v", a)
}
