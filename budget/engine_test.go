package budget_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/stack"
)

var ctx = context.Background()

// fixture is an Engine on a memory store, with a fake clock.
type fixture struct {
	eng   *budget.Engine
	mem   *memorystore.Store
	clock *limitertest.FakeClock
}

func newFixture(t *testing.T, cfg budget.Config, store func(*memorystore.Store) limiter.Store) *fixture {
	t.Helper()
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	mem, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	var s limiter.Store = mem
	if store != nil {
		s = store(mem)
	}
	return &fixture{eng: newEngine(t, cfg, s, clock), mem: mem, clock: clock}
}

func (f *fixture) rule(t *testing.T, name string) *budget.Rule {
	t.Helper()
	r, ok := f.eng.Policy().Plan(name)
	if !ok {
		t.Fatalf("no plan %q", name)
	}
	return r
}

// left reads key's bucket on r behind the engine's back.
func (f *fixture) left(t *testing.T, key string, r *budget.Rule) int64 {
	t.Helper()
	d, err := f.mem.Take(ctx, key, r.Limit(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

func plans(mode budget.Mode) map[string]budget.Plan {
	return map[string]budget.Plan{
		"free":  {Burst: 10, Rate: 10, Per: 10 * time.Second, Mode: mode},
		"quota": {Burst: 10, Rate: 10, Per: 10 * time.Second, Mode: mode, Quota: &budget.Quota{Limit: 12, Per: 24 * time.Hour}},
	}
}

// A cost above the burst is answered with the code a static cap on the
// price has: one code for "too expensive", whichever refused it.
func TestCodeMaxCostExceeded(t *testing.T) {
	if budget.CodeMaxCostExceeded != complexity.CodeMaxCostExceeded {
		t.Errorf("budget %q, complexity %q", budget.CodeMaxCostExceeded, complexity.CodeMaxCostExceeded)
	}
}

// Each way a charge ends: the verdict, the code and status it is
// answered with, what it debited.
func TestCharge(t *testing.T) {
	tests := []struct {
		name     string
		mode     budget.Mode
		plan     string
		before   int64 // spent first, in one charge
		cost     int64
		fields   []budget.FieldCount
		never    bool // ChargeInvalidIfNever
		verdict  budget.Verdict
		shadowed budget.Verdict
		code     string
		status   int
		charged  int64
		left     int64
	}{
		{name: "admitted", plan: "free", cost: 4, verdict: budget.Admitted, charged: 4, left: 6},
		{name: "rate limited", plan: "free", before: 8, cost: 4, verdict: budget.RateLimited, code: budget.CodeRateLimited, status: 429, left: 2},
		{name: "over budget", plan: "free", cost: 11, verdict: budget.OverBudget, code: complexity.CodeMaxCostExceeded, status: 422, left: 10},
		{name: "over budget pays InvalidCost", plan: "free", cost: 11, never: true, verdict: budget.OverBudget, code: complexity.CodeMaxCostExceeded, status: 422, charged: 1, left: 9},
		{name: "quota exceeded", plan: "quota", before: 10, cost: 3, verdict: budget.QuotaExceeded, code: budget.CodeQuotaExceeded, status: 429, left: 0},
		{name: "field limited", plan: "free", cost: 1, fields: []budget.FieldCount{{Coordinate: "Mutation.login", Count: 2}}, before: 0,
			verdict: budget.Admitted, charged: 1, left: 9},
		{name: "field never", plan: "free", cost: 1, fields: []budget.FieldCount{{Coordinate: "Mutation.login", Count: 4}},
			verdict: budget.FieldLimited, code: budget.CodeFieldRateLimited, status: 429, left: 10},
		{name: "shadow lets a refusal run", mode: budget.Shadow, plan: "free", before: 8, cost: 4, verdict: budget.Admitted, shadowed: budget.RateLimited, left: 2},
		{name: "shadow lets a cost above the burst run", mode: budget.Shadow, plan: "free", cost: 11, verdict: budget.Admitted, shadowed: budget.OverBudget, left: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, budget.Config{
				Plans:       plans(tc.mode),
				FieldLimits: map[string]budget.FieldLimit{"Mutation.login": {Limit: 3, Per: time.Minute}},
				InvalidCost: 1,
			}, nil)
			r := f.rule(t, tc.plan)
			if tc.before > 0 {
				if o := f.eng.Charge(ctx, budget.Request{Key: "k", Rule: r, Cost: tc.before}); o.Verdict != budget.Admitted {
					t.Fatalf("spending first: %v", o.Verdict)
				}
			}
			o := f.eng.Charge(ctx, budget.Request{Key: "k", Rule: r, Cost: tc.cost, Fields: tc.fields, ChargeInvalidIfNever: tc.never})
			a := o.Verdict.Answer()
			if o.Verdict != tc.verdict || o.Shadowed != tc.shadowed || a.Code != tc.code || a.Status != tc.status || o.Charged != tc.charged {
				t.Errorf("verdict %v shadowed %v code %q status %d charged %d; want %v %v %q %d %d",
					o.Verdict, o.Shadowed, a.Code, a.Status, o.Charged, tc.verdict, tc.shadowed, tc.code, tc.status, tc.charged)
			}
			if got := f.left(t, "k", r); got != tc.left {
				t.Errorf("%d left in the bucket, want %d", got, tc.left)
			}
			if o.Verdict != budget.Admitted && o.Verdict != budget.OverBudget && !o.Never && o.RetryAfter < 1 {
				t.Errorf("a refusal without Retry-After: %+v", o)
			}
		})
	}
}

// A request refused before it could be priced pays InvalidCost; the
// verdict is the one its adapter names, and shadow mode lets a static cap's
// refusal run but never the budget's refusal of the payment.
func TestChargeInvalid(t *testing.T) {
	tests := []struct {
		name       string
		mode       budget.Mode
		before     int64
		paid       budget.Verdict
		shadowable bool
		verdict    budget.Verdict
		shadowed   budget.Verdict
		left       int64
	}{
		{name: "a static cap", paid: budget.CapExceeded, verdict: budget.CapExceeded, left: 9},
		{name: "refused by the adapter", paid: budget.Invalid, verdict: budget.Invalid, left: 9},
		{name: "cannot pay", before: 10, paid: budget.CapExceeded, verdict: budget.RateLimited, left: 0},
		{name: "shadow, a static cap", mode: budget.Shadow, paid: budget.CapExceeded, shadowable: true, verdict: budget.Admitted, shadowed: budget.CapExceeded, left: 9},
		{name: "shadow, not shadowable", mode: budget.Shadow, paid: budget.CapExceeded, verdict: budget.CapExceeded, left: 9},
		{name: "shadow, cannot pay: refused by its own reason", mode: budget.Shadow, before: 10, paid: budget.Invalid, verdict: budget.Invalid, left: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, budget.Config{Plans: plans(tc.mode), InvalidCost: 1}, nil)
			r := f.rule(t, "free")
			if tc.before > 0 {
				f.eng.Charge(ctx, budget.Request{Key: "k", Rule: r, Cost: tc.before})
			}
			o := f.eng.ChargeInvalid(ctx, "k", r, tc.paid, tc.shadowable)
			if o.Verdict != tc.verdict || o.Shadowed != tc.shadowed {
				t.Errorf("verdict %v shadowed %v, want %v %v", o.Verdict, o.Shadowed, tc.verdict, tc.shadowed)
			}
			if got := f.left(t, "k", r); got != tc.left {
				t.Errorf("%d left, want %d", got, tc.left)
			}
		})
	}
}

// A lane's budget is drawn with the plan's, both or neither.
func TestLaneBudget(t *testing.T) {
	f := newFixture(t, budget.Config{Plans: plans(""), Lanes: []budget.LaneBudget{{Name: "search", Burst: 5, Rate: 5, Per: time.Minute}}}, nil)
	r, ln := f.rule(t, "free"), f.eng.Policy().Lane("search")
	if o := f.eng.Charge(ctx, budget.Request{Key: "k", Rule: r, Lane: ln, Cost: 4}); o.Verdict != budget.Admitted || o.LaneCharged != 4 {
		t.Fatalf("first: %+v", o)
	}
	o := f.eng.Charge(ctx, budget.Request{Key: "k", Rule: r, Lane: ln, Cost: 4})
	if o.Verdict != budget.RateLimited || o.ByLane != ln || o.Charged != 0 {
		t.Fatalf("second: verdict %v by lane %v charged %d", o.Verdict, o.ByLane, o.Charged)
	}
	if got := f.left(t, "k", r); got != 6 {
		t.Errorf("the plan's bucket holds %d, want 6: the lane's refusal gives its debit back", got)
	}
}

// Peek reads without spending; Settle gives back what a response did not
// use and debits what it used beyond its price.
func TestPeekAndSettle(t *testing.T) {
	f := newFixture(t, budget.Config{Plans: plans("")}, nil)
	r := f.rule(t, "quota")
	if o := f.eng.Peek(ctx, budget.Request{Key: "k", Rule: r}); !o.Known || o.Decision.Remaining != 10 {
		t.Fatalf("peek: %+v", o)
	}
	req := budget.Request{Key: "k", Rule: r, Cost: 6}
	o := f.eng.Settle(ctx, req, f.eng.Charge(ctx, req), 2, true, "q")
	if o.Refunded != 4 || o.Excess != 0 || o.Decision.Remaining != 8 {
		t.Errorf("below the price: refunded %d excess %d, %d left", o.Refunded, o.Excess, o.Decision.Remaining)
	}
	if o.Limits[0].Decision.Remaining != 10 {
		t.Errorf("the quota holds %d after the refund, want 10", o.Limits[0].Decision.Remaining)
	}
	o = f.eng.Settle(ctx, req, f.eng.Charge(ctx, req), 9, true, "q") // 2 left before
	if o.Refunded != 0 || o.Excess != 3 || o.Decision.Remaining != 0 {
		t.Errorf("above the price: refunded %d excess %d, %d left", o.Refunded, o.Excess, o.Decision.Remaining)
	}
	j := budget.Request{Key: "j", Rule: r, Cost: 6}
	if o := f.eng.Settle(ctx, j, f.eng.Charge(ctx, j), 2, false, "q"); o.Refunded != 0 {
		t.Errorf("a response with errors was refunded %d", o.Refunded)
	}
}

// failing fails every call, as a store that is away.
type failing struct{ limiter.Store }

func (failing) Take(context.Context, string, limiter.Limit, int64) (limiter.Decision, error) {
	return limiter.Decision{}, errors.New("connection refused")
}

// A store failure is decided by the plan's failure mode: the fallback
// (which starts empty for a budget it never heard of) or Unavailable.
func TestFailureMode(t *testing.T) {
	for _, tc := range []struct {
		mode    budget.FailureMode
		verdict budget.Verdict
		code    string
	}{
		{budget.FailOpen, budget.RateLimited, budget.CodeRateLimited},
		{budget.FailClosed, budget.Unavailable, budget.CodeRateLimiterUnavailable},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			free := map[string]budget.Plan{"free": plans("")["free"]} // a quota would need TakeAll
			f := newFixture(t, budget.Config{Plans: free, FailureMode: tc.mode}, func(m *memorystore.Store) limiter.Store { return failing{m} })
			o := f.eng.Charge(ctx, budget.Request{Key: "k", Rule: f.rule(t, "free"), Cost: 1})
			if o.Verdict != tc.verdict || o.Verdict.Answer().Code != tc.code || o.Trace.Fallback != (tc.mode == budget.FailOpen) {
				t.Errorf("%+v", o)
			}
		})
	}
}

// The verdict table: what each verdict is answered and reported as.
func TestAnswers(t *testing.T) {
	tests := []struct {
		v          budget.Verdict
		code       string
		status     int
		restStatus int
		class      budget.Class
	}{
		{budget.Admitted, "", 0, 0, budget.ClassAdmitted},
		{budget.RateLimited, "RATE_LIMITED", 429, 429, budget.ClassRateLimited},
		{budget.OverBudget, "MAX_COST_EXCEEDED", 422, 429, budget.ClassCostExceeded},
		{budget.Unavailable, "RATE_LIMITER_UNAVAILABLE", 503, 503, budget.ClassUnavailable},
		{budget.CapExceeded, "", 422, 0, budget.ClassCostExceeded},
		{budget.Invalid, "", 0, 0, budget.ClassAdmitted},
		{budget.Shed, "OVERLOADED", 503, 503, budget.ClassShed},
		{budget.ConcurrencyLimited, "CONCURRENCY_LIMITED", 429, 429, budget.ClassRateLimited},
		{budget.QuotaExceeded, "QUOTA_EXCEEDED", 429, 429, budget.ClassRateLimited},
		{budget.FieldLimited, "FIELD_RATE_LIMITED", 429, 429, budget.ClassRateLimited},
		{budget.RouteLimited, "ROUTE_RATE_LIMITED", 429, 429, budget.ClassRateLimited},
	}
	for _, tc := range tests {
		a := tc.v.Answer()
		if a.Code != tc.code || a.Status != tc.status || a.RESTStatus != tc.restStatus || tc.v.Class() != tc.class {
			t.Errorf("verdict %d: %+v %q; want %q %d %d %q", tc.v, a, tc.v.Class(), tc.code, tc.status, tc.restStatus, tc.class)
		}
	}
}

// A policy the stores cannot serve is refused by Swap, and the running
// one stays.
func TestSwap(t *testing.T) {
	f := newFixture(t, budget.Config{Plans: plans("")}, nil)
	old := f.eng.Policy()
	split, err := budget.Compile(budget.Config{Plans: map[string]budget.Plan{"free": {Burst: 10, Rate: 10, Per: time.Second, SplitBudget: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.eng.Swap(split); !errors.Is(err, budget.ErrInvalidConfig) || f.eng.Policy() != old {
		t.Errorf("swap to a split plan without leases: %v", err)
	}
	other, _ := budget.Compile(budget.Config{Plans: map[string]budget.Plan{"pro": {Burst: 50, Rate: 50, Per: time.Second}}})
	if err := f.eng.Swap(other); err != nil || f.eng.Policy() != other {
		t.Errorf("swap: %v", err)
	}
}

// Compile refuses what cannot be decided.
func TestCompile(t *testing.T) {
	tests := map[string]budget.Config{
		"no plans":         {},
		"bad burst":        {Plans: map[string]budget.Plan{"p": {Rate: 1, Per: time.Second}}},
		"bad name":         {Plans: map[string]budget.Plan{"\n": {Burst: 1, Rate: 1, Per: time.Second}}},
		"small quota":      {Plans: map[string]budget.Plan{"p": {Burst: 10, Rate: 1, Per: time.Second, Quota: &budget.Quota{Limit: 5, Per: time.Hour}}}},
		"bad mode":         {Plans: plans(""), Mode: "loud"},
		"bad failure mode": {Plans: plans(""), FailureMode: "maybe"},
		"bad field":        {Plans: plans(""), FieldLimits: map[string]budget.FieldLimit{"login": {Limit: 1, Per: time.Second}}},
		"bad lane":         {Plans: plans(""), Lanes: []budget.LaneBudget{{Name: "x", Burst: 0, Rate: 1, Per: time.Second}}},
		"negative invalid": {Plans: plans(""), InvalidCost: -1},
		"long plan name":   {Plans: map[string]budget.Plan{strings.Repeat("p", budget.MaxNameBytes+1): {Burst: 1, Rate: 1, Per: time.Second}}},
		"long lane name":   {Plans: plans(""), Lanes: []budget.LaneBudget{{Name: strings.Repeat("l", budget.MaxNameBytes+1), Burst: 1, Rate: 1, Per: time.Second}}},
	}
	for name, cfg := range tests {
		if _, err := budget.Compile(cfg); !errors.Is(err, budget.ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The longest name is whole wherever decisions are reported.
	longest := strings.Repeat("p", budget.MaxNameBytes)
	if _, err := budget.Compile(budget.Config{Plans: map[string]budget.Plan{longest: {Burst: 1, Rate: 1, Per: time.Second}}}); err != nil {
		t.Errorf("a plan name of %d bytes: %v", budget.MaxNameBytes, err)
	}
}

// A plan with a quota on a store that decides one budget at a time is
// refused when the engine is built, not at its first request.
func TestNeedsTakeAll(t *testing.T) {
	mem, err := memorystore.New(memorystore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	st, err := stack.New(stack.Config{Store: failing{mem}, OverflowKeys: 8, NoBreaker: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pol, err := budget.Compile(budget.Config{Plans: plans("")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := budget.NewEngine(st, pol); !errors.Is(err, budget.ErrInvalidConfig) || !errors.Is(err, limiter.ErrTakeAllUnsupported) {
		t.Errorf("NewEngine: %v", err)
	}
}

// A refusal's Retry-After is honest: at that instant, by the injected
// clock, the same charge is admitted.
func TestRetryAfterIsHonest(t *testing.T) {
	f := newFixture(t, budget.Config{Plans: plans("")}, nil)
	r := f.rule(t, "free") // 10 points, 1 a second
	req := budget.Request{Key: "k", Rule: r, Cost: 7}
	f.eng.Charge(ctx, req)
	o := f.eng.Charge(ctx, req)
	if o.Verdict != budget.RateLimited || o.RetryAfter != 4 {
		t.Fatalf("second charge: %v, retry after %d; want rate limited, 4 s (3 left, 4 to wait for)", o.Verdict, o.RetryAfter)
	}
	f.clock.Advance(time.Duration(o.RetryAfter-1) * time.Second)
	if o := f.eng.Charge(ctx, req); o.Verdict != budget.RateLimited {
		t.Fatalf("a second early: %v", o.Verdict)
	}
	f.clock.Advance(time.Second)
	if o := f.eng.Charge(ctx, req); o.Verdict != budget.Admitted {
		t.Errorf("at Retry-After: %v", o.Verdict)
	}
}
