package limitertest

import (
	"context"
	"testing"

	"github.com/costguard/costguard/limiter"
)

// refundAll checks RefundAll when the store is a limiter.MultiRefunder:
// each budget a TakeAll debited, named or not, gets its refund, never
// beyond whole, and the plain budget's refund is Refund's.
func (s suite) refundAll(t *testing.T) {
	store, _, key := s.setupMulti(t)
	r, ok := store.(limiter.MultiRefunder)
	if !ok {
		t.Skipf("%T is not a limiter.MultiRefunder", store)
	}
	ctx := context.Background()
	reqs := []limiter.Request{
		{Key: key, Limit: multiBucket, Cost: 4},
		{Key: key, Name: "window", Limit: multiFixed, Cost: 3},
		{Key: key, Name: "counter", Limit: multiCount, Cost: 5},
	}
	ds := make([]limiter.Decision, len(reqs))
	if err := store.TakeAll(ctx, reqs, ds); err != nil || !limiter.AllAllowed(ds) {
		t.Fatalf("TakeAll: %+v, %v", ds, err)
	}
	back := append([]limiter.Request(nil), reqs...)
	back[0].Cost, back[1].Cost, back[2].Cost = 1, 2, 100 // the last beyond whole
	if err := r.RefundAll(ctx, back, ds); err != nil {
		t.Fatalf("RefundAll: %v", err)
	}
	want := []int64{2, 3, 6}
	for i, d := range ds {
		if !d.Allowed || d.Remaining != want[i] {
			t.Errorf("refund %d: %+v, want Remaining %d", i, d, want[i])
		}
	}
	for i, d := range peekAll(t, store, reqs) {
		if d.Remaining != want[i] {
			t.Errorf("budget %d after the refunds: %+v, want Remaining %d", i, d, want[i])
		}
	}
	// A budget never debited is whole; its refund leaves it whole.
	if err := r.RefundAll(ctx, []limiter.Request{{Key: key, Name: "untouched", Limit: multiBucket, Cost: 2}}, ds[:1]); err != nil || ds[0].Remaining != multiBucket.Burst {
		t.Errorf("refund of a whole budget: %+v, %v", ds[0], err)
	}
	// Refunds are checked as TakeAll's requests are, before anything.
	if err := r.RefundAll(ctx, []limiter.Request{{Key: key, Limit: multiBucket, Cost: -1}}, ds[:1]); err == nil {
		t.Error("a negative refund was accepted")
	}
}
