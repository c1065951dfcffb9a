package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/override"
)

// overrideConfig is testConfig with a third plan, pro, and a quota on free.
func overrideConfig(t *testing.T, clock *fakeClock) config {
	cfg := testConfig(t, clock)
	cfg.Plans["pro"] = budget.Plan{Burst: 1000, Rate: 1000, Per: 100 * time.Second, DisableRefund: true}
	cfg.Overrides.PollInterval = middleware.None // this process only: every change is applied at once
	return cfg
}

type eventLog struct {
	mu     sync.Mutex
	events []middleware.Event
}

func (l *eventLog) ObserveDecision(e *middleware.Event) {
	l.mu.Lock()
	l.events = append(l.events, *e)
	l.mu.Unlock()
}

func (l *eventLog) last() middleware.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.events[len(l.events)-1]
}

// An override replaces the plan, or some limits, of one principal: its
// requests are decided, and their headers written, by the override's rule,
// from budgets of its own; deleting it returns the principal to its plan's
// budget as it stood. Events carry the override, and the principal's own
// plan beside the one in force.
func TestOverrideApplies(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	cfg := overrideConfig(t, clock)
	events := &eventLog{}
	cfg.Observer = events
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	search := func() *http.Response {
		w := do(t, h, request{method: "GET", path: "/api/search?q=go", header: bearer(aliceKey)})
		return w.Result()
	}
	check := func(step, policy, remaining, override string) {
		t.Helper()
		r := search()
		if r.StatusCode != http.StatusOK || r.Header.Get(middleware.HeaderRateLimitPolicy) != policy || r.Header.Get(middleware.HeaderXRateLimitRemaining) != remaining {
			t.Errorf("%s: %d %q remaining %q, want 200 %q remaining %q", step, r.StatusCode,
				r.Header.Get(middleware.HeaderRateLimitPolicy), r.Header.Get(middleware.HeaderXRateLimitRemaining), policy, remaining)
		}
		if e := events.last(); e.Override != override || e.PrincipalPlan != "free" {
			t.Errorf("%s: event override %q, principal's plan %q, want %q and free (alice's own, whatever the override)", step, e.Override, e.PrincipalPlan, override)
		}
	}
	check("free", `"free";q=100;w=100`, "90", "")

	if err := lim.SetOverride(ctx, "alice", override.Override{Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	check("pro", `"pro";q=1000;w=100`, "990", "plan=pro")
	check("pro again", `"pro";q=1000;w=100`, "980", "plan=pro")

	if err := lim.SetOverride(ctx, "user:alice", override.Override{Burst: 500, Rate: 50, Per: 10 * time.Second, Until: clock.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	check("limits", `"override:free";q=500;w=100`, "490", "burst=500 rate=50 per=10s")

	// Expiry is judged by the clock: at its until the override stops, and
	// alice is back on her own budget (90, refilled 1 a second for 60 s).
	clock.Advance(time.Minute)
	check("expired", `"free";q=100;w=100`, "90", "")

	// The same override again starts from where its budget stood, not full.
	if err := lim.SetOverride(ctx, "alice", override.Override{Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	check("pro, a minute later", `"pro";q=1000;w=100`, "990", "plan=pro")
	if ok, err := lim.DeleteOverride(ctx, "alice"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	check("deleted", `"free";q=100;w=100`, "80", "")
	if ok, err := lim.DeleteOverride(ctx, "alice"); ok || err != nil {
		t.Fatalf("deleting nothing: %v %v", ok, err)
	}
}

// SetOverride refuses what could not apply, with errors a caller can tell
// apart.
func TestSetOverrideRefuses(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	cfg := overrideConfig(t, clock)
	cfg.Plans["free"] = budget.Plan{Burst: 100, Rate: 100, Per: 100 * time.Second, Quota: &budget.Quota{Limit: 1000, Per: 24 * time.Hour}}
	lim := newLimiter(t, cfg)
	for _, tc := range []struct {
		principal string
		o         override.Override
		is        error
		says      string
	}{
		{"alice", override.Override{Plan: "gold"}, budget.ErrUnknownPlan, `no such plan "gold" (the plans are "anon", "free", "pro")`},
		{"alice", override.Override{}, override.ErrInvalid, "name a plan"},
		{"key:nope", override.Override{Plan: "pro"}, override.ErrInvalidPrincipal, "SHA-256"},
		{"alice", override.Override{Plan: "pro", Until: clock.Now()}, override.ErrInvalid, "not in the future"},
		// Without a plan, the limits must fit every plan: free's quota is 1000.
		{"alice", override.Override{Burst: 2000}, budget.ErrInvalidConfig, `plan "free": the quota's limit 1000 is below the burst 2000`},
		{"alice", override.Override{Plan: "pro", Quota: &override.Quota{Limit: 5000}}, budget.ErrInvalidConfig, "a quota needs its window"},
		// The search route costs 10: a burst of 5 could never pay it.
		{"alice", override.Override{Plan: "pro", Burst: 5}, budget.ErrInvalidConfig, "burst 5 is below 10"},
	} {
		err := lim.SetOverride(ctx, tc.principal, tc.o)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s %v: %v, want %v saying %q", tc.principal, tc.o, err, tc.is, tc.says)
		}
	}
	if err := lim.SetOverride(ctx, "alice", override.Override{Plan: "pro", Burst: 2000}); err != nil {
		t.Errorf("limits on a named plan: %v", err)
	}
}

// A limits override of a plan with a quota keeps the quota's window and
// draws from a quota of its own; Principal reports both budgets.
func TestPrincipalReport(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	cfg := overrideConfig(t, clock)
	cfg.Plans["free"] = budget.Plan{Burst: 100, Rate: 100, Per: 100 * time.Second, Quota: &budget.Quota{Limit: 1000, Per: 24 * time.Hour}, DisableRefund: true}
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	do(t, h, request{method: "GET", path: "/api/search?q=go", header: bearer(aliceKey)})

	report := func(principal, plan string) string {
		t.Helper()
		st, err := lim.Principal(ctx, principal, plan)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(st)
		return string(b)
	}
	if got, want := report("alice", "free"), `{"principal":"user:alice","plan":"free","override":null,"policies":[{"name":"free","limit":100,"remaining":90,"reset_seconds":10},{"name":"free-daily","limit":1000,"remaining":990,"reset_seconds":75355}]}`; got != want {
		t.Errorf("without override:\n got %s\nwant %s", got, want)
	}
	if _, err := lim.Principal(ctx, "alice", ""); !errors.Is(err, middleware.ErrPlanNeeded) {
		t.Errorf("no plan: %v", err)
	}
	if err := lim.SetOverride(ctx, "alice", override.Override{Burst: 500, Quota: &override.Quota{Limit: 5000}}); err == nil {
		t.Fatal("a quota without a window on every plan: accepted (anon has no quota)")
	}
	if err := lim.SetOverride(ctx, "alice", override.Override{Plan: "free", Burst: 500, Quota: &override.Quota{Limit: 5000}}); err != nil {
		t.Fatal(err)
	}
	w := do(t, h, request{method: "GET", path: "/api/search?q=go", header: bearer(aliceKey)})
	if got, want := w.Header().Get(middleware.HeaderRateLimitPolicy), `"override:free";q=500;w=500, "override:free-daily";q=5000;w=86400`; got != want {
		t.Errorf("policy %q, want %q", got, want)
	}
	got := report("alice", "")
	want := `{"principal":"user:alice","plan":"free","override":{"plan":"free","burst":500,"quota":{"limit":5000}},"policies":[{"name":"override:free","limit":500,"remaining":490,"reset_seconds":10},{"name":"override:free-daily","limit":5000,"remaining":4990,"reset_seconds":75355}]}`
	if got != want {
		t.Errorf("with override:\n got %s\nwant %s", got, want)
	}
	// An address is on the anonymous plan.
	if got, want := report("ip:203.0.113.7", ""), `{"principal":"ip:203.0.113.7","plan":"anon","override":null,"policies":[{"name":"anon","limit":20,"remaining":20,"reset_seconds":0}]}`; got != want {
		t.Errorf("address:\n got %s\nwant %s", got, want)
	}
}

// An override's concurrency cap and plan apply on every install path:
// a REST request held in flight fills a cap of 1, so the principal's
// GraphQL operation is refused; with the cap lifted it runs, priced by the
// override's plan.
func TestOverrideConcurrencyAndGraphQL(t *testing.T) {
	ctx := context.Background()
	cfg := overrideConfig(t, newClock())
	cfg.Concurrency = middleware.ConcurrencyOptions{PerPrincipal: 5}
	lim := newLimiter(t, cfg)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	})
	gql := handler.New(newTestSchema().executable())
	gql.AddTransport(transport.POST{})
	mux := http.NewServeMux()
	mux.Handle("/graphql", lim.Handler(gql))
	mux.Handle("/api/", lim.REST(api))

	one := 1
	if err := lim.SetOverride(ctx, "alice", override.Override{Plan: "pro", Concurrency: &one}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		do(t, mux, request{method: http.MethodGet, path: "/api/hold", header: bearer(aliceKey)})
	}()
	<-entered
	if w, resp := query(t, mux, `{ viewer { login } }`, bearer(aliceKey)); w.Code != http.StatusTooManyRequests || resp.code() != budget.CodeConcurrencyLimited {
		t.Errorf("over the override's cap of 1: %d %q", w.Code, resp.code())
	}
	zero := 0
	if err := lim.SetOverride(ctx, "alice", override.Override{Plan: "pro", Concurrency: &zero}); err != nil {
		t.Fatal(err)
	}
	w, resp := query(t, mux, `{ viewer { login } }`, bearer(aliceKey))
	if w.Code != http.StatusOK || w.Header().Get(middleware.HeaderRateLimitPolicy) != `"override:pro";q=1000;w=100` {
		t.Errorf("cap lifted: %d %q %s", w.Code, resp.code(), w.Header().Get(middleware.HeaderRateLimitPolicy))
	}
	close(release)
	<-done
}

// Budgets in a store of the caller's with overrides in this process's
// memory are said once, at the first override.
func TestOverrideInThisProcessOnlyIsSaid(t *testing.T) {
	ctx := context.Background()
	cfg := overrideConfig(t, newClock())
	logs := &countingHandler{}
	cfg.Logger = slog.New(logs)
	lim := newLimiter(t, cfg)
	if logs.count(slog.LevelWarn) != 0 {
		t.Fatalf("New warned:\n%s", logs.text())
	}
	for range 2 {
		if err := lim.SetOverride(ctx, "alice", override.Override{Plan: "pro"}); err != nil {
			t.Fatal(err)
		}
	}
	if logs.count(slog.LevelWarn) != 1 || !strings.Contains(logs.text(), "applies in this process only") {
		t.Errorf("want one warning, got:\n%s", logs.text())
	}
}
