package budget_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/override"
)

func overridePolicy(t *testing.T) *budget.Policy {
	t.Helper()
	pol, err := budget.Compile(budget.Config{
		Plans: map[string]budget.Plan{
			"free": {Burst: 100, Rate: 100, Per: time.Minute, Quota: &budget.Quota{Limit: 1000, Per: 24 * time.Hour}, MaxConcurrent: 3},
			"pro":  {Burst: 1000, Rate: 1000, Per: time.Minute, FailureMode: budget.FailClosed},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func intp(n int) *int { return &n }

// An override compiles to a rule of its plan (or the principal's) with the
// limits it replaces, named for RateLimit-Policy, keeping the plan's other
// settings; its budgets' keys depend on its limits only.
func TestPolicyOverride(t *testing.T) {
	pol := overridePolicy(t)
	free, _ := pol.Plan("free")
	for _, tc := range []struct {
		name       string
		o          override.Override
		rule       string // name
		burst      int64
		quota      string // name and limit, "" for none
		concurrent int64
		failOpen   bool
	}{
		{"a plan", override.Override{Plan: "pro"}, "pro", 1000, "", 0, false},
		{"a burst", override.Override{Burst: 500}, "override:free", 500, "override:free-daily 1000", 3, true},
		{"a quota in the plan's window", override.Override{Quota: &override.Quota{Limit: 5000}}, "override:free", 100, "override:free-daily 5000", 3, true},
		{"a quota of its own window", override.Override{Plan: "pro", Quota: &override.Quota{Limit: 5000, Per: time.Hour}}, "override:pro", 1000, "override:pro-hourly 5000", 0, false},
		{"no cap", override.Override{Concurrency: intp(0)}, "override:free", 100, "override:free-daily 1000", 0, true},
		{"a cap", override.Override{Plan: "pro", Concurrency: intp(7)}, "override:pro", 1000, "", 7, false},
	} {
		r, err := pol.Override(free, tc.o)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		quota := ""
		if q := r.QuotaRule(); q != nil {
			quota = q.Name + " " + itoa(q.Limit.Rate)
		}
		if r.Name() != tc.rule || r.Burst != tc.burst || quota != tc.quota || r.MaxConcurrent() != tc.concurrent || r.FailOpen() != tc.failOpen || r.Override() != tc.o.String() {
			t.Errorf("%s: %s burst %d quota %q cap %d open %v override %q", tc.name, r.Name(), r.Burst, quota, r.MaxConcurrent(), r.FailOpen(), r.Override())
		}
	}
	if free.Override() != "" {
		t.Error("a plan's rule names an override")
	}
	for _, tc := range []struct {
		o    override.Override
		is   error
		says string
	}{
		{override.Override{Plan: "gold"}, budget.ErrUnknownPlan, `no such plan "gold" (the plans are "free", "pro")`},
		{override.Override{Burst: 2000}, budget.ErrInvalidConfig, `plan "free": the quota's limit 1000 is below the burst 2000`},
		{override.Override{Plan: "pro", Quota: &override.Quota{Limit: 5000}}, budget.ErrInvalidConfig, `plan "pro": it has no quota, so a quota needs its window`},
		{override.Override{Burst: -1}, budget.ErrInvalidConfig, "must not be negative"},
		{override.Override{Concurrency: intp(-2)}, budget.ErrInvalidConfig, "concurrency -2 is negative"},
	} {
		_, err := pol.Override(free, tc.o)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: %v, want %v saying %q", tc.o, err, tc.is, tc.says)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// An override's budgets are its own: they start full whatever the
// principal spent on its plan, the plan's budget is untouched by what the
// override spends, and two overrides with the same limits share them.
func TestOverrideBudgetsAreApart(t *testing.T) {
	ctx := context.Background()
	pol := overridePolicy(t)
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	st, err := stack.New(stack.Config{Clock: clock, OverflowKeys: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eng, err := budget.NewEngine(st, pol, budget.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	free, _ := pol.Plan("free")
	charge := func(r *budget.Rule, cost int64) int64 {
		t.Helper()
		o := eng.Charge(ctx, budget.Request{Key: "user:alice", Rule: r, Cost: cost})
		if o.Verdict != budget.Admitted {
			t.Fatalf("%s: %v", r.Name(), o.Verdict)
		}
		return o.Decision.Remaining
	}
	if left := charge(free, 90); left != 10 {
		t.Fatalf("free: %d left", left)
	}
	asPro, _ := pol.Override(free, override.Override{Plan: "pro"})
	if left := charge(asPro, 1); left != 999 {
		t.Errorf("the override's bucket: %d left, want 999 (full, not free's 10 read under pro's limit)", left)
	}
	again, _ := pol.Override(free, override.Override{Plan: "pro", Until: time.Unix(1_900_000_000, 0)})
	if left := charge(again, 1); left != 998 {
		t.Errorf("the same limits again: %d left, want 998 (the same budget)", left)
	}
	reads, err := eng.Read(ctx, "user:alice", free)
	if err != nil || len(reads) != 2 || reads[0].Decision.Remaining != 10 || reads[1].Name != "free-daily" || reads[1].Decision.Remaining != 910 {
		t.Errorf("free's budgets after the override spent: %+v %v", reads, err)
	}
}
