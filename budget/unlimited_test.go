package budget_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/limiter/stack"
)

// An Unlimited plan is never refused for budget: what its budgets can pay
// is debited as on any plan; what they cannot runs unpaid and leaves them
// as they were. A static cap's InvalidCost it cannot pay still refuses, by
// the cap's own reason. On the memory store and on Redis.
func TestUnlimitedPlan(t *testing.T) {
	cfg := budget.Config{
		Plans: map[string]budget.Plan{
			"vip":   {Burst: 10, Rate: 10, Per: 10 * time.Second, Unlimited: true},
			"quota": {Burst: 10, Rate: 10, Per: 10 * time.Second, Unlimited: true, Quota: &budget.Quota{Limit: 12, Per: 24 * time.Hour}},
		},
		FieldLimits: map[string]budget.FieldLimit{"Mutation.login": {Limit: 3, Per: time.Minute}},
		InvalidCost: 1,
	}
	stores := map[string]func(t *testing.T, clock limiter.Clock) limiter.Store{
		"memory": func(t *testing.T, clock limiter.Clock) limiter.Store {
			s, err := memorystore.New(memorystore.Config{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T, _ limiter.Clock) limiter.Store {
			s, err := redisstore.New(redistest.StartServer(t).Client(t), redisstore.Config{Prefix: "unlimited"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	tests := []struct {
		name    string
		plan    string
		before  int64 // spent first
		refill  bool  // the bucket refills after before (memory only: Redis keeps its own time)
		cost    int64
		fields  []budget.FieldCount
		charged int64
		left    int64
	}{
		{name: "paid as on any plan", plan: "vip", cost: 4, charged: 4, left: 6},
		{name: "the bucket is short: runs unpaid", plan: "vip", before: 8, cost: 4, left: 2},
		{name: "above the burst: runs unpaid", plan: "vip", cost: 11, left: 10},
		{name: "a field limit never met: runs unpaid", plan: "vip", cost: 1, fields: []budget.FieldCount{{Coordinate: "Mutation.login", Count: 4}}, left: 10},
		{name: "the quota is short: runs unpaid", plan: "quota", before: 10, refill: true, cost: 3, left: 10},
	}
	for storeName, open := range stores {
		t.Run(storeName, func(t *testing.T) {
			for _, tc := range tests {
				if tc.refill && storeName != "memory" {
					continue
				}
				t.Run(tc.name, func(t *testing.T) {
					clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
					store := open(t, clock)
					eng := newEngine(t, cfg, store, clock)
					r, _ := eng.Policy().Plan(tc.plan)
					key := "k:" + t.Name()
					if tc.before > 0 {
						if o := eng.Charge(ctx, budget.Request{Key: key, Rule: r, Cost: tc.before}); o.Verdict != budget.Admitted || o.Charged != tc.before {
							t.Fatalf("spending first: %v, charged %d", o.Verdict, o.Charged)
						}
					}
					if tc.refill {
						clock.Advance(10 * time.Second)
					}
					o := eng.Charge(ctx, budget.Request{Key: key, Rule: r, Cost: tc.cost, Fields: tc.fields, ChargeInvalidIfNever: true})
					if o.Verdict != budget.Admitted || o.Shadowed != 0 || o.Charged != tc.charged || o.RetryAfter != 0 {
						t.Errorf("verdict %v shadowed %v charged %d retry %d; want admitted, charged %d", o.Verdict, o.Shadowed, o.Charged, o.RetryAfter, tc.charged)
					}
					if a := o.Verdict.Answer(); a.Code != "" || a.Status != 0 {
						t.Errorf("answered %q %d", a.Code, a.Status)
					}
					d, err := store.Take(ctx, key, r.Limit(), 0)
					if err != nil {
						t.Fatal(err)
					}
					if d.Remaining != tc.left {
						t.Errorf("%d left in the bucket, want %d", d.Remaining, tc.left)
					}
				})
			}
			t.Run("a static cap it cannot pay for is refused by the cap", func(t *testing.T) {
				clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
				eng := newEngine(t, cfg, open(t, clock), clock)
				r, _ := eng.Policy().Plan("vip")
				key := "k:" + t.Name()
				eng.Charge(ctx, budget.Request{Key: key, Rule: r, Cost: 10})
				if o := eng.ChargeInvalid(ctx, key, r, budget.CapExceeded, false); o.Verdict != budget.CapExceeded {
					t.Errorf("verdict %v, want CapExceeded", o.Verdict)
				}
			})
		})
	}
}

// newEngine is an Engine on store, deciding by cfg, with the stack's
// defaults but no breaker and a store timeout long enough for a loaded
// machine.
func newEngine(t *testing.T, cfg budget.Config, store limiter.Store, clock limiter.Clock) *budget.Engine {
	t.Helper()
	pol, err := budget.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := stack.New(stack.Config{Store: store, OverflowKeys: 64, Clock: clock, StoreTimeout: 5 * time.Second, NoBreaker: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng, err := budget.NewEngine(st, pol, budget.WithClock(clock), budget.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	return eng
}
