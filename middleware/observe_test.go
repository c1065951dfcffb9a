package middleware_test

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/middleware"
)

// recorder keeps the events it observes.
type recorder struct {
	mu     sync.Mutex
	events []middleware.Event
}

func (r *recorder) ObserveDecision(e *middleware.Event) {
	r.mu.Lock()
	r.events = append(r.events, *e)
	r.mu.Unlock()
}

// take returns the events observed since the last take.
func (r *recorder) take() []middleware.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// eventView is what the tests compare: an Event without its time and
// store latency.
type eventView struct {
	plan, kind, outcome, refused, code string
	requested, charged                 int64
	store                              guard.Result
	fallback, known                    bool
	remaining                          int64
}

func view(e middleware.Event) eventView {
	return eventView{plan: e.Plan, kind: string(e.Kind), outcome: string(e.Outcome), refused: string(e.Refused), code: e.Code,
		requested: e.RequestedCost, charged: e.Charged, store: e.StoreResult, fallback: e.Fallback, known: e.Known, remaining: e.Remaining}
}

// Every decision reaches the Observer once, with what was priced, what was
// charged, how the store answered and what the client was told.
func TestObserverSeesEveryDecision(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	rec := &recorder{}
	cfg.Observer = rec
	cfg.GraphQL.MaxDepth = 4
	cfg.MaxBodyBytes = 1 << 10
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())

	deep := `{ user(login: "a") { repos(first: 1) { owner { repos(first: 1) { name } } } } }`
	steps := []struct {
		name string
		run  func()
		want eventView
	}{
		{"admitted", func() { query(t, h, query61, bearer(aliceKey)) },
			eventView{plan: "free", kind: "graphql", outcome: "admitted", requested: 61, charged: 61, store: guard.ResultOK, known: true, remaining: 39}},
		{"rate limited", func() { query(t, h, query61, bearer(aliceKey)) },
			eventView{plan: "free", kind: "graphql", outcome: "rate_limited", code: "RATE_LIMITED", requested: 61, store: guard.ResultOK, known: true, remaining: 39}},
		{"static cap", func() { query(t, h, deep, bearer(aliceKey)) },
			eventView{plan: "free", kind: "graphql", outcome: "cost_exceeded", code: "MAX_DEPTH_EXCEEDED", charged: 1, store: guard.ResultOK, known: true, remaining: 38}},
		{"parse error", func() { query(t, h, `{ user(`, bearer(aliceKey)) },
			eventView{plan: "free", kind: "graphql", outcome: "admitted", charged: 1, store: guard.ResultOK, known: true, remaining: 37}},
		{"body too large", func() {
			do(t, h, request{path: "/graphql", body: `{"query":"` + strings.Repeat(" ", 2<<10) + `{ viewer { login } }"}`, header: bearer(aliceKey)})
		}, eventView{plan: "free", kind: "graphql", outcome: "cost_exceeded", code: "REQUEST_TOO_LARGE", charged: 1, store: guard.ResultOK, known: true, remaining: 36}},
		{"rest", func() { do(t, h, request{method: http.MethodGet, path: "/api/search", header: bearer(aliceKey)}) },
			eventView{plan: "free", kind: "rest", outcome: "admitted", requested: 10, charged: 10, store: guard.ResultOK, known: true, remaining: 26}},
		{"rest too large", func() {
			do(t, h, request{method: http.MethodPost, path: "/api/search", body: strings.Repeat("x", 2<<10), header: bearer(aliceKey)})
		}, eventView{plan: "free", kind: "rest", outcome: "cost_exceeded", code: "request_too_large", requested: 1}},
		{"anonymous", func() { do(t, h, request{method: http.MethodGet, path: "/api/x", remoteAddr: "192.0.2.7:1"}) },
			eventView{plan: "anon", kind: "rest", outcome: "admitted", requested: 1, charged: 1, store: guard.ResultOK, known: true, remaining: 19}},
	}
	for _, s := range steps {
		s.run()
		got := rec.take()
		if len(got) != 1 {
			t.Errorf("%s: %d events, want 1: %+v", s.name, len(got), got)
			continue
		}
		if v := view(got[0]); v != s.want {
			t.Errorf("%s:\n got %+v\nwant %+v", s.name, v, s.want)
		}
		if got[0].Key == "" || got[0].Time.IsZero() {
			t.Errorf("%s: key %q, time %v", s.name, got[0].Key, got[0].Time)
		}
	}
	// A GET mutation is refused for free: no decision.
	do(t, h, request{method: http.MethodGet, path: "/graphql?query=" + strings.ReplaceAll(mutation11, " ", "+"), header: bearer(aliceKey)})
	if got := rec.take(); len(got) != 0 {
		t.Errorf("GET mutation: %d events, want none", len(got))
	}
}

// Store failures say how the store answered and who decided instead.
func TestObserverStoreFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store *failingStore
		mode  budget.FailureMode
		want  eventView
	}{
		{"error, fail open", &failingStore{err: errTest}, budget.FailOpen,
			eventView{plan: "free", kind: "rest", outcome: "admitted", requested: 10, charged: 10, store: guard.ResultError, fallback: true, known: true, remaining: 90}},
		{"timeout, fail closed", &failingStore{hang: true}, budget.FailClosed,
			eventView{plan: "free", kind: "rest", outcome: "unavailable", code: "rate_limiter_unavailable", requested: 10, store: guard.ResultTimeout}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, newClock())
			broken := learn(t, tc.store, &cfg, request{method: http.MethodGet, path: "/api/free", header: bearer(aliceKey)})
			cfg.FailureMode = tc.mode
			rec := &recorder{}
			cfg.Observer = rec
			lim := newLimiter(t, cfg)
			h := graphQLServer(lim, newTestSchema())
			broken(h)
			rec.take()
			do(t, h, request{method: http.MethodGet, path: "/api/search", header: bearer(aliceKey)})
			got := rec.take()
			if len(got) != 1 {
				t.Fatalf("%d events", len(got))
			}
			if v := view(got[0]); v != tc.want {
				t.Errorf("\n got %+v\nwant %+v", v, tc.want)
			}
			if got[0].StoreDuration <= 0 {
				t.Errorf("StoreDuration %v", got[0].StoreDuration)
			}
		})
	}
}

// The debug log names the principal by a hash of its key, never the key.
func TestDecisionLogHashesThePrincipal(t *testing.T) {
	cfg := testConfig(t, newClock())
	logs := &countingHandler{}
	cfg.Logger = slog.New(logs)
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	query(t, h, query61, bearer(aliceKey))
	text := logs.text()
	if !strings.Contains(text, "principal="+identity.HashKey("user:alice")) || strings.Contains(text, "alice") {
		t.Errorf("decision log:\n%s", text)
	}
	if logs.count(slog.LevelDebug) != 1 {
		t.Errorf("%d debug lines, want 1", logs.count(slog.LevelDebug))
	}
}

// Shadow mode runs what enforce mode would refuse for its budget or a
// static cap, answers as if admitted with the real bucket's headers, and
// reports shadow_rejected; the document bounds stay on.
func TestShadowMode(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Mode = budget.Shadow
	cfg.GraphQL.MaxDepth = 4
	cfg.GraphQL.MaxSelections = 20
	rec := &recorder{}
	cfg.Observer = rec
	logs := &countingHandler{}
	cfg.Logger = slog.New(logs)
	lim := newLimiter(t, cfg)
	schema := newTestSchema()
	h := graphQLServer(lim, schema)

	query(t, h, query61, bearer(aliceKey))
	rec.take()
	w, resp := query(t, h, query61, bearer(aliceKey)) // 39 left: enforce would answer 429
	if w.Code != http.StatusOK || len(resp.Errors) != 0 || w.Header().Get(middleware.HeaderRetryAfter) != "" {
		t.Fatalf("shadowed rate limit: status %d, errors %+v, Retry-After %q", w.Code, resp.Errors, w.Header().Get(middleware.HeaderRetryAfter))
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "39" || *resp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != 39 {
		t.Errorf("headers say %s left, extensions %d; want the real bucket, 39", got, *resp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable)
	}
	if schema.resolvers.Load() != 2 {
		t.Errorf("%d resolvers ran, want 2", schema.resolvers.Load())
	}
	if got := rec.take(); len(got) != 1 || view(got[0]) != (eventView{plan: "free", kind: "graphql", outcome: "shadow_rejected", refused: "rate_limited",
		code: "RATE_LIMITED", requested: 61, store: guard.ResultOK, known: true, remaining: 39}) || got[0].Policy != "free" {
		t.Errorf("events %+v", got)
	}

	// A static cap: runs, pays InvalidCost as enforce mode would.
	w, resp = query(t, h, `{ user(login: "a") { repos(first: 1) { owner { repos(first: 1) { name } } } } }`, bearer(aliceKey))
	if w.Code != http.StatusOK || len(resp.Errors) != 0 || schema.resolvers.Load() != 3 {
		t.Errorf("shadowed depth cap: status %d errors %+v resolvers %d", w.Code, resp.Errors, schema.resolvers.Load())
	}
	if got := rec.take(); len(got) != 1 || got[0].Outcome != budget.ClassShadowRejected || got[0].Refused != budget.ClassCostExceeded || got[0].Code != "MAX_DEPTH_EXCEEDED" || got[0].Charged != 1 {
		t.Errorf("events %+v", got)
	}

	// A document bound stays on.
	w, resp = query(t, h, "{"+strings.Repeat(" __typename", 21)+" }", bearer(aliceKey))
	if w.Code != http.StatusUnprocessableEntity || resp.code() != "MAX_SELECTIONS_EXCEEDED" {
		t.Errorf("document bound in shadow mode: status %d code %q", w.Code, resp.code())
	}
	if got := rec.take(); len(got) != 1 || got[0].Outcome != budget.ClassCostExceeded {
		t.Errorf("events %+v", got)
	}

	// REST: runs, no Retry-After.
	for range 5 {
		do(t, h, request{method: http.MethodGet, path: "/api/search", header: bearer(aliceKey)})
	}
	rec.take()
	w = do(t, h, request{method: http.MethodGet, path: "/api/search", header: bearer(aliceKey)})
	if w.Code != http.StatusOK || w.Header().Get(middleware.HeaderRetryAfter) != "" {
		t.Errorf("shadowed REST: status %d Retry-After %q", w.Code, w.Header().Get(middleware.HeaderRetryAfter))
	}
	if got := rec.take(); len(got) != 1 || got[0].Outcome != budget.ClassShadowRejected || got[0].Code != "rate_limited" {
		t.Errorf("events %+v", got)
	}
	if n := strings.Count(logs.text(), "shadow mode let through"); n != 1 {
		t.Errorf("%d shadow warnings, want 1 (once a minute per plan)", n)
	}
}

// A plan's mode overrides the global one.
func TestShadowModePerPlan(t *testing.T) {
	cfg := testConfig(t, newClock())
	cfg.Mode = budget.Shadow
	plans := testPlans()
	p := plans["free"]
	p.Mode = budget.Enforce
	plans["free"] = p
	cfg.Plans = plans
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	query(t, h, query61, bearer(aliceKey))
	if w, _ := query(t, h, query61, bearer(aliceKey)); w.Code != http.StatusTooManyRequests {
		t.Errorf("enforced plan under global shadow: status %d, want 429", w.Code)
	}
	for range 30 { // anon (burst 20) stays in shadow
		if w := do(t, h, request{method: http.MethodGet, path: "/api/x", remoteAddr: "192.0.2.9:1"}); w.Code != http.StatusOK {
			t.Fatalf("shadowed anon plan: status %d", w.Code)
		}
	}
	cfg.Plans = map[string]budget.Plan{"free": {Burst: 1, Rate: 1, Per: 1, Mode: "quiet"}, "anon": testPlans()["anon"]}
	if _, err := middleware.New(cfg.Dependencies, cfg.Policy); !errors.Is(err, middleware.ErrInvalidConfig) {
		t.Errorf("bad plan mode: %v", err)
	}
}
