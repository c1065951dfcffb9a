package middleware_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
)

// Operations are priced through compiled plans, cached per parsed
// document: the same document with other variables gets their price and
// their field counts, never the first request's.
func TestCompiledPlansFollowVariables(t *testing.T) {
	clock := newClock()
	cfg := fieldLimitConfig(t, clock, map[string]budget.FieldLimit{"Repository.issues": {Limit: 12, Per: time.Hour}})
	cfg.Plans["free"] = budget.Plan{Burst: 10000, Rate: 10000, Per: time.Hour, DisableRefund: true}
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	const q = `query($n: Int, $deep: Boolean!) { user(login: "a") { repos(first: $n) { name issues(first: 2) @include(if: $deep) { id } } } }`
	post := func(vars map[string]any) (int, int64) {
		body, _ := json.Marshal(map[string]any{"query": q, "variables": vars})
		w := do(t, h, request{path: "/graphql", body: string(body), header: bearer(aliceKey)})
		var resp gqlResponse
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp.Extensions.Cost == nil {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		return w.Code, resp.Extensions.Cost.RequestedQueryCost
	}
	for _, tc := range []struct {
		vars   map[string]any
		status int
		cost   int64
	}{
		{map[string]any{"n": 5, "deep": true}, 200, 1 + 5*(1+2)}, // 5 issue lists counted
		{map[string]any{"n": 2, "deep": false}, 200, 1 + 2},      // none counted
		{map[string]any{"n": 6, "deep": true}, 200, 1 + 6*(1+2)}, // 6 more: 11 of 12
		{map[string]any{"n": 2, "deep": true}, 429, 1 + 2*(1+2)}, // 2 more: over the limit
		{map[string]any{"n": 9, "deep": false}, 200, 1 + 9},      // still fine without issues
		{map[string]any{"n": 200, "deep": false}, 422, 0},        // over max_breadth, from the plan too
	} {
		status, cost := post(tc.vars)
		if status != tc.status || (tc.cost != 0 && cost != tc.cost) {
			t.Errorf("%v: %d costing %d, want %d costing %d", tc.vars, status, cost, tc.status, tc.cost)
		}
	}
	// The refusal took nothing: the twelfth issue list still fits.
	if status, _ := post(map[string]any{"n": 1, "deep": true}); status != http.StatusOK {
		t.Errorf("the twelfth issue list: %d, want 200", status)
	}
	if status, _ := post(map[string]any{"n": 1, "deep": true}); status != http.StatusTooManyRequests {
		t.Errorf("a thirteenth: %d, want 429", status)
	}
}
