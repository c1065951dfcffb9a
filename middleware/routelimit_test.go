package middleware_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
)

// timers records the waits a Limiter asks for and fires each at once,
// or, with cancel set, ends the request instead (its client leaves).
type timers struct {
	mu     sync.Mutex
	waits  []time.Duration
	cancel context.CancelFunc
}

func (ts *timers) timer(d time.Duration) (<-chan time.Time, func() bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.waits = append(ts.waits, d)
	c := make(chan time.Time, 1)
	if ts.cancel != nil {
		ts.cancel() // never fires: the client leaves first
	} else {
		c <- time.Time{}
	}
	return c, func() bool { return true }
}

func (ts *timers) take() []time.Duration {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	w := ts.waits
	ts.waits = nil
	return w
}

// Every algorithm of a REST route limit: the requests past the limit get
// 429 route_rate_limited with Retry-After, their plan's bucket untouched,
// RateLimit-Policy listing the route's policy and the event naming it;
// another address still passes. Retry-After is honest.
func TestRESTRouteLimitAlgorithms(t *testing.T) {
	tests := []struct {
		alg    budget.LimitAlgorithm
		policy string
	}{
		{budget.TokenBucket, `"POST /api/login";q=3;w=900`},
		{budget.LeakyBucketPolicing, `"POST /api/login";q=3;w=900`},
		{budget.FixedWindow, `"POST /api/login";q=3;w=900`},
		{budget.SlidingLog, `"POST /api/login";q=3;w=900`},
		{budget.SlidingCounter, `"POST /api/login";q=3;w=900`},
	}
	for _, tc := range tests {
		t.Run(string(tc.alg), func(t *testing.T) {
			clock := newClock()
			cfg := testConfig(t, clock)
			cfg.REST.RouteLimits = map[string]budget.FieldLimit{
				"POST /api/login": {Limit: 3, Per: 15 * time.Minute, Algorithm: tc.alg, By: budget.ByIP},
			}
			rec := &recorder{}
			cfg.Observer = rec
			h := graphQLServer(newLimiter(t, cfg), newTestSchema())
			login := request{method: "POST", path: "/api/login", remoteAddr: "198.51.100.7:1234"}
			for i := range 3 {
				w := do(t, h, login)
				if w.Code != http.StatusOK {
					t.Fatalf("login %d: %d %s", i+1, w.Code, w.Body)
				}
				if got := w.Header().Get(middleware.HeaderRateLimitPolicy); got != `"anon";q=20;w=100, `+tc.policy {
					t.Errorf("login %d: RateLimit-Policy %s", i+1, got)
				}
			}
			w := do(t, h, login)
			var body struct {
				Error string `json:"error"`
				Retry int64  `json:"retry_after_seconds"`
			}
			_ = json.Unmarshal(w.Body.Bytes(), &body)
			if w.Code != http.StatusTooManyRequests || body.Error != "route_rate_limited" || body.Retry <= 0 || w.Header().Get(middleware.HeaderRetryAfter) == "" {
				t.Fatalf("login 4: %d %s Retry-After %q", w.Code, w.Body, w.Header().Get(middleware.HeaderRetryAfter))
			}
			if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "17" {
				t.Errorf("the route's refusal: bucket remaining %s, want 17 (three logins paid)", got)
			}
			if got := w.Header().Get(middleware.HeaderRateLimitPolicy); !strings.Contains(got, tc.policy) {
				t.Errorf("refusal's RateLimit-Policy %s", got)
			}
			evs := rec.take()
			last := evs[len(evs)-1]
			if last.Code != "route_rate_limited" || last.Policy != "POST /api/login" || last.RouteLimit != "POST /api/login" || last.Outcome != budget.ClassRateLimited || last.Charged != 0 {
				t.Errorf("refusal event %+v", last)
			}
			if evs[0].RouteLimit != "POST /api/login" || evs[0].Policy != "" {
				t.Errorf("admitted event: route %q policy %q", evs[0].RouteLimit, evs[0].Policy)
			}
			other := login
			other.remoteAddr = "203.0.113.9:1234"
			if w := do(t, h, other); w.Code != http.StatusOK {
				t.Errorf("another address: %d", w.Code)
			}
			// Another route has no route limit.
			if w := do(t, h, request{method: "POST", path: "/api/logout", remoteAddr: login.remoteAddr}); w.Code != http.StatusOK || strings.Contains(w.Header().Get(middleware.HeaderRateLimitPolicy), "login") {
				t.Errorf("unlimited route: %d %s", w.Code, w.Header().Get(middleware.HeaderRateLimitPolicy))
			}
			clock.Advance(time.Duration(body.Retry) * time.Second)
			if w := do(t, h, login); w.Code != http.StatusOK {
				t.Errorf("after Retry-After %ds: %d %s", body.Retry, w.Code, w.Body)
			}
		})
	}
}

// The plan's bucket refuses: the route limit is left as it was, and
// counts by principal follow the principal across addresses; by both,
// each count must admit.
func TestRESTRouteLimitAllOrNothing(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.REST.Routes = map[string]int64{"GET /api/search": 10}
	cfg.REST.RouteLimits = map[string]budget.FieldLimit{
		"POST /api/login": {Limit: 2, Per: time.Hour, Algorithm: budget.SlidingLog, By: budget.ByBoth},
	}
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	anon := "198.51.100.7:1234"
	for range 2 { // the anonymous bucket, 20: empty
		if w := do(t, h, request{method: "GET", path: "/api/search", remoteAddr: anon}); w.Code != http.StatusOK {
			t.Fatalf("search: %d", w.Code)
		}
	}
	login := request{method: "POST", path: "/api/login", remoteAddr: anon}
	if w := do(t, h, login); w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"rate_limited"`) {
		t.Fatalf("empty bucket: %d %s", w.Code, w.Body)
	}
	clock.Advance(10 * time.Second) // two points
	for i := range 2 {
		if w := do(t, h, login); w.Code != http.StatusOK {
			t.Fatalf("login %d after the refill: %d %s (the bucket's refusal took a count)", i+1, w.Code, w.Body)
		}
	}
	if w := do(t, h, login); w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "route_rate_limited") {
		t.Fatalf("third login: %d %s", w.Code, w.Body)
	}
	// alice from that address: the address's count is spent.
	alice := request{method: "POST", path: "/api/login", remoteAddr: anon, header: bearer(aliceKey)}
	if w := do(t, h, alice); w.Code != http.StatusTooManyRequests {
		t.Fatalf("alice from the spent address: %d", w.Code)
	}
	// alice from elsewhere: her count was not taken by that refusal.
	for i, addr := range []string{"203.0.113.1:1", "203.0.113.2:1"} {
		alice.remoteAddr = addr
		w := do(t, h, alice)
		if w.Code != http.StatusOK {
			t.Fatalf("alice login %d: %d %s", i+1, w.Code, w.Body)
		}
		// Counted twice, listed once.
		if got := w.Header().Get(middleware.HeaderRateLimitPolicy); got != `"free";q=100;w=100, "POST /api/login";q=2;w=3600` {
			t.Errorf("alice login %d: RateLimit-Policy %s", i+1, got)
		}
	}
	alice.remoteAddr = "203.0.113.3:1"
	if w := do(t, h, alice); w.Code != http.StatusTooManyRequests {
		t.Fatalf("alice's third: %d", w.Code)
	}
	// and that refusal did not take the new address's count.
	if w := do(t, h, request{method: "POST", path: "/api/login", remoteAddr: "203.0.113.3:1"}); w.Code != http.StatusOK {
		t.Fatalf("the new address: %d", w.Code)
	}
}

// A leaky_bucket_shaping route limit holds each admitted request for its
// turn, never beyond MaxDelay, refuses what would wait longer, and a
// client that leaves while waiting never reaches the handler (its turn
// stays taken).
func TestRESTRouteLimitShaping(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.REST.RouteLimits = map[string]budget.FieldLimit{
		"POST /api/slow": {Limit: 10, Per: time.Second, Algorithm: budget.LeakyBucketShaping, MaxDelay: 250 * time.Millisecond},
	}
	rec := &recorder{}
	cfg.Observer = rec
	lim := newLimiter(t, cfg)
	ts := &timers{}
	middleware.SetTimer(lim, ts.timer)
	var ran int
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ })
	h := lim.REST(api)
	slow := request{method: "POST", path: "/api/slow", header: bearer(aliceKey)}
	for i := range 3 {
		if w := do(t, h, slow); w.Code != http.StatusOK {
			t.Fatalf("request %d: %d %s", i+1, w.Code, w.Body)
		}
	}
	if got := ts.take(); len(got) != 2 || got[0] != 100*time.Millisecond || got[1] != 200*time.Millisecond || ran != 3 {
		t.Fatalf("waits %v, ran %d; want [100ms 200ms], 3", got, ran)
	}
	w := do(t, h, slow)
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "route_rate_limited") {
		t.Fatalf("a fourth would wait 300ms: %d %s", w.Code, w.Body)
	}
	if got := w.Header().Get(middleware.HeaderRateLimitPolicy); !strings.Contains(got, `"POST /api/slow";q=10;w=1`) {
		t.Errorf("RateLimit-Policy %s", got)
	}
	evs := rec.take()
	if evs[1].Delay != 100*time.Millisecond || evs[2].Delay != 200*time.Millisecond {
		t.Errorf("event delays %v %v", evs[1].Delay, evs[2].Delay)
	}

	// The client leaves while it waits: the handler never runs, and the
	// turn is taken all the same.
	clock.Advance(time.Second)
	if w := do(t, h, slow); w.Code != http.StatusOK {
		t.Fatal(w.Code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel = cancel
	r := httptest.NewRequest("POST", "/api/slow", nil).WithContext(ctx)
	r.Header.Set("Authorization", "Bearer "+aliceKey)
	before := ran
	h.ServeHTTP(httptest.NewRecorder(), r)
	if ran != before {
		t.Error("the handler ran for a client that left while waiting")
	}
	ts.cancel = nil
	ts.take()
	if w := do(t, h, slow); w.Code != http.StatusOK {
		t.Fatal(w.Code)
	}
	if got := ts.take(); len(got) != 1 || got[0] != 200*time.Millisecond {
		t.Errorf("after a turn given up: waits %v, want [200ms] (the turn stays taken)", got)
	}
}

// A GraphQL root field with a leaky_bucket_shaping field limit waits its
// turn before the operation runs.
func TestGraphQLFieldLimitShaping(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.FieldLimits = map[string]budget.FieldLimit{
		"Mutation.createIssue": {Limit: 10, Per: time.Second, Algorithm: budget.LeakyBucketShaping, MaxDelay: 100 * time.Millisecond},
	}
	lim := newLimiter(t, cfg)
	ts := &timers{}
	middleware.SetTimer(lim, ts.timer)
	s := newTestSchema()
	h := graphQLServer(lim, s)
	for i := range 2 {
		if w, resp := query(t, h, mutation11, bearer(aliceKey)); w.Code != http.StatusOK || len(resp.Errors) > 0 {
			t.Fatalf("mutation %d: %d %s", i+1, w.Code, w.Body)
		}
	}
	if got := ts.take(); len(got) != 1 || got[0] != 100*time.Millisecond {
		t.Errorf("waits %v; want [100ms]", got)
	}
	w, resp := query(t, h, mutation11, bearer(aliceKey))
	if w.Code != http.StatusTooManyRequests || resp.code() != budget.CodeFieldRateLimited {
		t.Errorf("a third would wait 200ms: %d %s", w.Code, w.Body)
	}
	if n := s.issueCount(); n != 2 {
		t.Errorf("%d issues created; want 2", n)
	}
}

// A plan served from split-budget leases takes route limits too.
func TestRESTRouteLimitSplitBudget(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Plans = testPlans()
	p := cfg.Plans["free"]
	p.SplitBudget = true
	cfg.Plans["free"] = p
	cfg.REST.RouteLimits = map[string]budget.FieldLimit{"POST /api/login": {Limit: 2, Per: time.Minute, Algorithm: budget.SlidingCounter}}
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	login := request{method: "POST", path: "/api/login", header: bearer(aliceKey)}
	for i := range 2 {
		if w := do(t, h, login); w.Code != http.StatusOK {
			t.Fatalf("login %d: %d %s", i+1, w.Code, w.Body)
		}
	}
	if w := do(t, h, login); w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "route_rate_limited") {
		t.Fatalf("login 3: %d %s", w.Code, w.Body)
	}
}
