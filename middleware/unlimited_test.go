package middleware_test

import (
	"net/http"
	"testing"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/middleware"
)

// An Unlimited plan over HTTP: priced and reported as any plan, never
// refused for budget (GraphQL and REST), still refused by a static cap.
func TestUnlimitedPlanOverHTTP(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	p := cfg.Plans["free"]
	p.Unlimited = true
	cfg.Plans["free"] = p
	cfg.GraphQL.MaxDepth = 4
	rec := &recorder{}
	cfg.Observer = rec
	lim := newLimiter(t, cfg)
	schema := newTestSchema()
	h := graphQLServer(lim, schema)

	query(t, h, query61, bearer(aliceKey)) // 61 of 100: 39 left
	rec.take()
	w, resp := query(t, h, query61, bearer(aliceKey)) // enforce would answer 429
	if w.Code != http.StatusOK || len(resp.Errors) != 0 || w.Header().Get(middleware.HeaderRetryAfter) != "" {
		t.Fatalf("unlimited plan, budget short: status %d, errors %+v, Retry-After %q", w.Code, resp.Errors, w.Header().Get(middleware.HeaderRetryAfter))
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "39" || resp.Extensions.Cost == nil || resp.Extensions.Cost.RequestedQueryCost != 61 {
		t.Errorf("headers say %s left (want the bucket as it is, 39), extensions.cost %+v", got, resp.Extensions.Cost)
	}
	if schema.resolvers.Load() != 2 {
		t.Errorf("%d resolvers ran, want 2", schema.resolvers.Load())
	}
	if got := rec.take(); len(got) != 1 || view(got[0]) != (eventView{plan: "free", kind: "graphql", outcome: "admitted",
		requested: 61, store: guard.ResultOK, known: true, remaining: 39}) {
		t.Errorf("events %+v", got)
	}

	// A static cap still refuses.
	w, resp = query(t, h, `{ user(login: "a") { repos(first: 1) { owner { repos(first: 1) { name } } } } }`, bearer(aliceKey))
	if w.Code != http.StatusUnprocessableEntity || resp.code() != "MAX_DEPTH_EXCEEDED" {
		t.Errorf("depth cap on an unlimited plan: status %d code %q", w.Code, resp.code())
	}
	if got := rec.take(); len(got) != 1 || got[0].Outcome != budget.ClassCostExceeded {
		t.Errorf("events %+v", got)
	}

	// REST past the budget: runs.
	for range 10 {
		if w := do(t, h, request{method: http.MethodGet, path: "/api/search", header: bearer(aliceKey)}); w.Code != http.StatusOK {
			t.Fatalf("REST on an unlimited plan: status %d", w.Code)
		}
	}
}
