package middleware

import (
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
)

// Event.Policy names the budget that refused, as RateLimit-Policy does.
func TestRefusingPolicy(t *testing.T) {
	pol, err := budget.Compile(budget.Config{
		Plans: map[string]budget.Plan{"free": {Burst: 10, Rate: 10, Per: time.Minute, Quota: &budget.Quota{Limit: 100, Per: 24 * time.Hour}}},
		Lanes: []budget.LaneBudget{{Name: "search", Burst: 5, Rate: 5, Per: time.Minute}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := pol.Plan("free")
	p := &plan{Rule: r}
	for _, tc := range []struct {
		name string
		o    budget.Outcome
		want string
	}{
		{"admitted", budget.Outcome{Verdict: budget.Admitted}, ""},
		{"the bucket", budget.Outcome{Verdict: budget.RateLimited}, "free"},
		{"above the burst", budget.Outcome{Verdict: budget.OverBudget}, "free"},
		{"shadowed bucket", budget.Outcome{Verdict: budget.Admitted, Shadowed: budget.RateLimited}, "free"},
		{"the quota", budget.Outcome{Verdict: budget.QuotaExceeded, ByLimit: &budget.Use{Quota: r.QuotaRule()}}, "free-daily"},
		{"a field limit", budget.Outcome{Verdict: budget.FieldLimited, ByLimit: &budget.Use{Field: &budget.FieldRule{Coord: "Mutation.login"}}}, "Mutation.login"},
		{"a lane budget", budget.Outcome{Verdict: budget.RateLimited, ByLane: pol.Lane("search")}, "lane:search"},
		{"a static cap", budget.Outcome{Verdict: budget.CapExceeded}, ""},
		{"the store away", budget.Outcome{Verdict: budget.Unavailable}, ""},
	} {
		if got := refusingPolicy(p, tc.o); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
