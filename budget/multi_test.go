package budget_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/memorystore"
)

// countingStore counts the TakeAll and RefundAll calls that reach a
// memory store.
type countingStore struct {
	*memorystore.Store
	takeAlls, refundAlls atomic.Int64
}

func (s *countingStore) TakeAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	s.takeAlls.Add(1)
	return s.Store.TakeAll(ctx, reqs, ds)
}

func (s *countingStore) RefundAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	s.refundAlls.Add(1)
	return s.Store.RefundAll(ctx, reqs, ds)
}

// The address's limits are decided before the principal's budgets: a
// request its address's limit refuses asks nothing of the principal's
// budgets, so nothing is taken from them and nothing given back.
func TestAddressLimitsDecideFirst(t *testing.T) {
	var counted *countingStore
	f := newFixture(t, budget.Config{
		Plans:       plans(""),
		FieldLimits: map[string]budget.FieldLimit{"Mutation.login": {Limit: 1, Per: time.Hour, By: budget.ByIP}},
	}, func(mem *memorystore.Store) limiter.Store {
		counted = &countingStore{Store: mem}
		return counted
	})
	r := f.rule(t, "quota")
	req := budget.Request{Key: "user:a", Addr: "ip:1", Rule: r, Cost: 3,
		Fields: []budget.FieldCount{{Coordinate: "Mutation.login", Count: 1}}}
	if o := f.eng.Charge(ctx, req); o.Verdict != budget.Admitted {
		t.Fatalf("first: %v", o.Verdict)
	}
	takes, refunds := counted.takeAlls.Load(), counted.refundAlls.Load()
	o := f.eng.Charge(ctx, req)
	if o.Verdict != budget.FieldLimited || o.ByLimit == nil || !o.ByLimit.ByAddr {
		t.Fatalf("second: %v by %+v", o.Verdict, o.ByLimit)
	}
	if n := counted.takeAlls.Load() - takes; n != 1 {
		t.Errorf("the refusal made %d TakeAll calls; want 1, the address's", n)
	}
	if n := counted.refundAlls.Load() - refunds; n != 0 {
		t.Errorf("the refusal made %d RefundAll calls; want none", n)
	}
	if o.Known {
		t.Errorf("the refusal reports the principal's bucket (%+v); it was not asked", o.Decision)
	}
	if got := f.left(t, "user:a", r); got != 7 {
		t.Errorf("the principal's bucket holds %d; want 7 (the first charge's 3 only)", got)
	}
}

// A lane's budget refusing a request gives back every budget of the plan
// the request was debited (its bucket and its quota), and the outcome
// shows them as the refund left them.
func TestLaneRefusalGivesBackEveryBudget(t *testing.T) {
	f := newFixture(t, budget.Config{Plans: plans(""), Lanes: []budget.LaneBudget{{Name: "search", Burst: 5, Rate: 5, Per: time.Hour}}}, nil)
	r, ln := f.rule(t, "quota"), f.eng.Policy().Lane("search")
	if o := f.eng.Charge(ctx, budget.Request{Key: "k", Rule: r, Lane: ln, Cost: 4}); o.Verdict != budget.Admitted || o.LaneCharged != 4 {
		t.Fatalf("first: %+v", o)
	}
	o := f.eng.Charge(ctx, budget.Request{Key: "k", Rule: r, Lane: ln, Cost: 4})
	if o.Verdict != budget.RateLimited || o.ByLane != ln || o.Charged != 0 {
		t.Fatalf("second: verdict %v by lane %v charged %d", o.Verdict, o.ByLane, o.Charged)
	}
	if len(o.Limits) != 1 || o.Limits[0].Quota == nil || o.Limits[0].Decision.Remaining != 8 || o.Decision.Remaining != 6 {
		t.Errorf("the refused outcome shows bucket %d and limits %+v; want the bucket at 6 and the quota at 8, as given back",
			o.Decision.Remaining, o.Limits)
	}
	if got := f.left(t, "k", r); got != 6 {
		t.Errorf("the plan's bucket holds %d; want 6", got)
	}
	// Without the lane, 6 more fit the bucket (6 left) and the quota (8).
	o = f.eng.Charge(ctx, budget.Request{Key: "k", Rule: r, Cost: 6})
	if o.Verdict != budget.Admitted || o.Limits[0].Decision.Remaining != 2 {
		t.Errorf("after the refusal: %v, quota left %d; want admitted, 2 left", o.Verdict, o.Limits[0].Decision.Remaining)
	}
}
