package memorystore_test

import (
	"context"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
)

// RefundAll gives back what TakeAll took, named budgets and the plain one
// alike, and never beyond a whole budget.
func TestRefundAll(t *testing.T) {
	clock := limitertest.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	bucket := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 1, Period: time.Hour}
	window := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 100, Period: 24 * time.Hour}
	reqs := []limiter.Request{
		{Key: "k", Limit: bucket, Cost: 6},
		{Key: "k", Name: "quota", Limit: window, Cost: 6},
		{Key: "k", Name: "field", Limit: bucket, Cost: 3},
	}
	ds := make([]limiter.Decision, len(reqs))
	if err := s.TakeAll(ctx, reqs, ds); err != nil || !limiter.AllAllowed(ds) {
		t.Fatalf("TakeAll: %v %+v", err, ds)
	}
	back := []limiter.Request{reqs[0], reqs[1], reqs[2]}
	back[0].Cost, back[1].Cost, back[2].Cost = 2, 4, 100 // the last beyond a whole budget
	if err := s.RefundAll(ctx, back, ds); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{6, 98, 10} {
		if ds[i].Remaining != want {
			t.Errorf("request %d: Remaining %d after the refund, want %d", i, ds[i].Remaining, want)
		}
	}
	// The refunds are in the store: a peek of each says the same.
	for i := range reqs {
		reqs[i].Cost = 0
	}
	if err := s.TakeAll(ctx, reqs, ds); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{6, 98, 10} {
		if ds[i].Remaining != want {
			t.Errorf("request %d: peek Remaining %d, want %d", i, ds[i].Remaining, want)
		}
	}
	// A budget the store does not hold stays unheld.
	before := s.Len()
	if err := s.RefundAll(ctx, []limiter.Request{{Key: "other", Name: "x", Limit: bucket, Cost: 1}}, ds[:1]); err != nil || ds[0].Remaining != 10 {
		t.Fatalf("refund of an unheld budget: %v %+v", err, ds[0])
	}
	if s.Len() != before {
		t.Errorf("Len %d after refunding an unheld budget, want %d", s.Len(), before)
	}
}
