package overlimit_test

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/overlimit"
)

// countingMulti is a memory store counting the TakeAlls reaching it.
type countingMulti struct {
	*counting
	multi limiter.MultiTaker
	all   atomic.Int64
}

func (c *countingMulti) TakeAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	c.all.Add(1)
	return c.multi.TakeAll(ctx, reqs, ds)
}

func setupMulti(t *testing.T) (*overlimit.Store, *countingMulti, *limitertest.FakeClock) {
	t.Helper()
	clock := limitertest.NewFakeClock(t0)
	m := newMemory(t, clock)
	next := &countingMulti{counting: &counting{Store: m}, multi: m}
	s, err := overlimit.New(next, overlimit.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return s, next, clock
}

// TestTakeAllRemembers: a TakeAll refused by a remembered budget is
// answered here, debiting nothing; the store is asked again once the
// remembered RetryAfter has passed.
func TestTakeAllRemembers(t *testing.T) {
	s, next, clock := setupMulti(t)
	quota := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 100, Period: time.Hour}
	reqs := []limiter.Request{
		{Key: "k", Name: "quota", Limit: quota, Cost: 1},
		{Key: "k", Name: "field", Limit: tenPerSec, Cost: 4},
	}
	ds := make([]limiter.Decision, 2)
	for range 2 {
		if err := s.TakeAll(ctx, reqs, ds); err != nil || !limiter.AllAllowed(ds) {
			t.Fatalf("TakeAll: %+v, %v", ds, err)
		}
	}
	if err := s.TakeAll(ctx, reqs, ds); err != nil || ds[1].Allowed || ds[1].RetryAfter != 200*time.Millisecond {
		t.Fatalf("third TakeAll: %+v, %v; want the field refused for 200ms", ds, err)
	}
	asked := next.all.Load()
	clock.Advance(199 * time.Millisecond)
	for _, cost := range []int64{4, 9} {
		reqs[1].Cost = cost
		if err := s.TakeAll(ctx, reqs, ds); err != nil || ds[1].Allowed || ds[0] != (limiter.Decision{}) {
			t.Fatalf("cost %d within RetryAfter: %+v, %v; want a local refusal, the quota not asked", cost, ds, err)
		}
	}
	reqs[1].Cost = 11
	if err := s.TakeAll(ctx, reqs, ds); !errors.Is(err, limiter.ErrCostExceedsCapacity) || ds[1].Allowed {
		t.Fatalf("cost 11 within RetryAfter: %+v, %v; want ErrCostExceedsCapacity", ds, err)
	}
	reqs[1].Cost = 3 // below the remembered cost: the store decides (3.99 tokens by now)
	if err := s.TakeAll(ctx, reqs, ds); err != nil || !limiter.AllAllowed(ds) {
		t.Fatalf("cost 3: %+v, %v; want admitted by the store", ds, err)
	}
	if n := next.all.Load() - asked; n != 1 {
		t.Fatalf("%d TakeAlls reached the store; want only the one below the remembered cost", n)
	}
	peek := make([]limiter.Decision, 1)
	if err := next.multi.TakeAll(ctx, []limiter.Request{{Key: "k", Name: "quota", Limit: quota}}, peek); err != nil || peek[0].Remaining != 97 {
		t.Fatalf("quota %+v, %v; want the three admitted TakeAlls debited, no other", peek[0], err)
	}
	// Name "" shares Take's remembered rejections, and Take shares TakeAll's.
	for range 3 {
		_, _ = s.Take(ctx, "k", tenPerSec, 4)
	}
	asked = next.all.Load()
	plain := []limiter.Request{{Key: "k", Limit: tenPerSec, Cost: 4}}
	if err := s.TakeAll(ctx, plain, ds[:1]); err != nil || ds[0].Allowed || next.all.Load() != asked {
		t.Fatalf("Name \"\" after Take's rejection: %+v, %v; want answered here", ds[0], err)
	}
}

// TestTakeAllUnsupported: over a store without TakeAll, TakeAll says so.
func TestTakeAllUnsupported(t *testing.T) {
	s, _, _ := setup(t, overlimit.Config{})
	ds := make([]limiter.Decision, 1)
	if err := s.TakeAll(ctx, []limiter.Request{{Key: "k", Limit: tenPerSec, Cost: 1}}, ds); !errors.Is(err, limiter.ErrTakeAllUnsupported) {
		t.Fatalf("TakeAll: %v; want ErrTakeAllUnsupported", err)
	}
}

// TestTakeAllAgreesWithTheStore: random TakeAlls through the cache and on
// a twin store never differ in what they admit, the twin's budgets stay
// equal to the cached store's, and a local answer is always a refusal the
// twin also gives.
func TestTakeAllAgreesWithTheStore(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(5, 6))
	s, next, clock := setupMulti(t)
	twin := newMemory(t, clock)
	budgets := []limiter.Request{
		{Key: "k", Limit: third},
		{Key: "k", Name: "a", Limit: tenPerSec},
		{Key: "k", Name: "b", Limit: limiter.Limit{Algorithm: limiter.LeakyBucketPolicing, Burst: 5, Rate: 7, Period: time.Second}},
		{Key: "k", Name: "w", Limit: limiter.Limit{Algorithm: limiter.SlidingCounter, Rate: 8, Period: time.Second}},
	}
	hits := 0
	for step := range 3000 {
		clock.Advance(time.Duration(rng.Int64N(60_000)) * time.Microsecond)
		var reqs []limiter.Request
		for _, i := range rng.Perm(len(budgets))[:1+rng.IntN(len(budgets))] {
			r := budgets[i]
			r.Cost = rng.Int64N(r.Limit.Capacity() + 1)
			reqs = append(reqs, r)
		}
		got, want := make([]limiter.Decision, len(reqs)), make([]limiter.Decision, len(reqs))
		before := next.all.Load()
		err := s.TakeAll(ctx, reqs, got)
		werr := twin.TakeAll(ctx, reqs, want)
		where := fmt.Sprintf("step %d %+v", step, reqs)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%s: %v, twin %v", where, err, werr)
		}
		if limiter.AllAllowed(got) != limiter.AllAllowed(want) {
			t.Fatalf("%s: admitted %v, twin %v\n got  %+v\n want %+v", where, limiter.AllAllowed(got), limiter.AllAllowed(want), got, want)
		}
		if next.all.Load() > before {
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s: request %d through the store %+v, twin %+v", where, i, got[i], want[i])
				}
			}
			continue
		}
		hits++
		for i := range got {
			if got[i].Limit != 0 && (got[i].Allowed || want[i].Allowed || got[i].RetryAfter < want[i].RetryAfter) {
				t.Fatalf("%s: request %d answered locally %+v; twin %+v", where, i, got[i], want[i])
			}
		}
	}
	if hits < 100 {
		t.Fatalf("only %d TakeAlls answered from the cache", hits)
	}
	t.Logf("%d of 3000 TakeAlls answered from the cache", hits)
}
