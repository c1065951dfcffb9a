package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/middleware"
)

// Each failure mode, for a store that errors and one that hangs, on REST and
// GraphQL.
func TestStoreFailureModes(t *testing.T) {
	stores := map[string]func() *failingStore{
		"erroring": func() *failingStore {
			return &failingStore{err: errors.New("dial tcp 10.0.0.1:6379: connection refused")}
		},
		"hanging": func() *failingStore { return &failingStore{hang: true} },
	}
	for storeName, newStore := range stores {
		for _, mode := range []budget.FailureMode{budget.FailOpen, budget.FailClosed} {
			t.Run(storeName+"/"+string(mode), func(t *testing.T) {
				clock := newClock()
				store := newStore()
				logs := &countingHandler{}
				cfg := testConfig(t, clock)
				// The fallback learns alice's bucket (full) while the store
				// answers: it starts from that, not from a fresh burst.
				broken := learn(t, store, &cfg, request{method: "GET", path: "/api/free", header: bearer(aliceKey)})
				cfg.FailureMode = mode
				cfg.StoreTimeout = 5 * time.Millisecond
				cfg.Logger = slog.New(logs)
				lim := newLimiter(t, cfg)
				schema := newTestSchema()
				h := graphQLServer(lim, schema)
				broken(h)

				rest := do(t, h, request{method: "GET", path: "/api/search", header: bearer(aliceKey)})
				gw, gresp := query(t, h, `{ user(login: "a") { login } }`, bearer(aliceKey))

				if strings.Contains(rest.Body.String()+gw.Body.String(), "connection refused") ||
					strings.Contains(rest.Body.String()+gw.Body.String(), "deadline") {
					t.Errorf("a store error reached the client:\n%s\n%s", rest.Body, gw.Body)
				}
				if store.calls.Load() == 0 {
					t.Fatal("the store was never called")
				}
				switch mode {
				case budget.FailOpen:
					if rest.Code != http.StatusOK || gw.Code != http.StatusOK {
						t.Fatalf("fail open: statuses REST %d GraphQL %d, want 200 (%s)", rest.Code, gw.Code, gw.Body)
					}
					// The local fallback bucket keeps counting: 100 − 10 − 1.
					if got := gw.Header().Get(middleware.HeaderXRateLimitRemaining); got != "89" {
						t.Errorf("fallback remaining %q, want 89", got)
					}
					if gresp.Extensions.Cost == nil || *gresp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != 89 {
						t.Errorf("extensions.cost %+v", gresp.Extensions.Cost)
					}
					if schema.resolvers.Load() != 1 {
						t.Errorf("resolvers %d, want 1", schema.resolvers.Load())
					}
				case budget.FailClosed:
					if rest.Code != http.StatusServiceUnavailable || gw.Code != http.StatusServiceUnavailable {
						t.Fatalf("fail closed: statuses REST %d GraphQL %d, want 503", rest.Code, gw.Code)
					}
					var body map[string]any
					if err := json.Unmarshal(rest.Body.Bytes(), &body); err != nil {
						t.Fatal(err)
					}
					if body["error"] != "rate_limiter_unavailable" || body["retry_after_seconds"] != float64(1) {
						t.Errorf("REST body %s", rest.Body)
					}
					for _, w := range []http.Header{rest.Header(), gw.Header()} {
						if w.Get(middleware.HeaderRetryAfter) != "1" {
							t.Errorf("Retry-After %q, want 1", w.Get(middleware.HeaderRetryAfter))
						}
					}
					if gresp.code() != budget.CodeRateLimiterUnavailable || gresp.Errors[0].Extensions["retryAfterSeconds"] != float64(1) {
						t.Errorf("GraphQL errors %+v", gresp.Errors)
					}
					if gresp.Extensions.Cost == nil || gresp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != nil {
						t.Errorf("extensions.cost %+v: want currentlyAvailable null", gresp.Extensions.Cost)
					}
					if schema.resolvers.Load() != 0 {
						t.Errorf("resolvers ran: %d", schema.resolvers.Load())
					}
				}
				// Two failures, one warning of the store's failure (and, failing
				// open, one of the fallback's decisions); a minute later, one
				// more of each.
				perMinute := 1
				if mode == budget.FailOpen {
					perMinute = 2
				}
				if n := logs.count(slog.LevelWarn); n != perMinute || strings.Count(logs.text(), "rate-limit store failed") != 1 {
					t.Errorf("%d warnings, want %d:\n%s", n, perMinute, logs.text())
				}
				clock.Advance(time.Minute)
				do(t, h, request{method: "GET", path: "/api/x", header: bearer(aliceKey)})
				if n := logs.count(slog.LevelWarn); n != 2*perMinute {
					t.Errorf("after a minute: %d warnings, want %d", n, 2*perMinute)
				}
				if !strings.Contains(logs.text(), "failures_since_last_warning=1") {
					t.Errorf("the second warning does not count the suppressed failure:\n%s", logs.text())
				}
			})
		}
	}
}

// A plan's failure mode overrides the global one.
func TestFailureModePerPlan(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	broken := learn(t, &failingStore{err: errors.New("down")}, &cfg, request{method: "GET", path: "/api/free"})
	cfg.FailureMode = budget.FailOpen
	cfg.Plans["free"] = budget.Plan{Burst: 100, Rate: 100, Per: 100 * time.Second, FailureMode: budget.FailClosed}
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	broken(h)
	if w := do(t, h, request{method: "GET", path: "/api/x", header: bearer(aliceKey)}); w.Code != http.StatusServiceUnavailable {
		t.Errorf("closed plan: status %d, want 503", w.Code)
	}
	if w := do(t, h, request{method: "GET", path: "/api/x"}); w.Code != http.StatusOK {
		t.Errorf("open (anonymous) plan: status %d, want 200", w.Code)
	}
}

// Fail open still limits: the fallback bucket starts from what the store
// last said (20 points) and rejects once it is empty; a principal the
// process never saw starts empty.
func TestFailOpenFallbackLimits(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	broken := learn(t, &failingStore{err: errors.New("down")}, &cfg, request{method: "GET", path: "/api/free", remoteAddr: "192.0.2.1:1"})
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	broken(h)
	anon := request{method: "GET", path: "/api/search", remoteAddr: "192.0.2.1:1"}
	codes := []int{do(t, h, anon).Code, do(t, h, anon).Code, do(t, h, anon).Code}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Errorf("statuses %v, want [200 200 429]", codes)
	}
	stranger := request{method: "GET", path: "/api/x", remoteAddr: "192.0.2.2:1"}
	if w := do(t, h, stranger); w.Code != http.StatusTooManyRequests || w.Header().Get(middleware.HeaderRetryAfter) != "5" {
		t.Errorf("unknown principal: %d, Retry-After %q; want 429 after 5 s (its empty bucket's refill)", w.Code, w.Header().Get(middleware.HeaderRetryAfter))
	}
	clock.Advance(5 * time.Second)
	if w := do(t, h, stranger); w.Code != http.StatusOK {
		t.Errorf("unknown principal after one point's refill: %d", w.Code)
	}
}

func TestIdentifierFailure(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Identifier = identity.IdentifierFunc(func(r *http.Request) (identity.Identity, error) {
		if r.URL.Query().Get("plan") != "" {
			return identity.Identity{Key: "user:x", Plan: r.URL.Query().Get("plan")}, nil
		}
		return identity.Identity{}, errors.New("session store timeout")
	})
	logs := &countingHandler{}
	cfg.Logger = slog.New(logs)
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	for _, path := range []string{"/api/x", "/api/x?plan=gold", "/graphql", "/graphql?plan=gold"} {
		w := do(t, h, request{path: path, body: `{"query":"{ viewer { login } }"}`})
		if w.Code != http.StatusServiceUnavailable || w.Header().Get(middleware.HeaderRetryAfter) == "" {
			t.Errorf("%s: status %d Retry-After %q, want 503 with Retry-After", path, w.Code, w.Header().Get(middleware.HeaderRetryAfter))
		}
		if strings.Contains(w.Body.String(), "session store") || strings.Contains(w.Body.String(), "gold") {
			t.Errorf("%s: internal error leaked: %s", path, w.Body)
		}
	}
	if logs.count(slog.LevelError) != 4 {
		t.Errorf("%d error logs, want 4", logs.count(slog.LevelError))
	}
}

// A client that went away is not a store failure: nothing is logged.
func TestClientGoneIsNotAStoreFailure(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Store = &failingStore{hang: true}
	logs := &countingHandler{}
	cfg.Logger = slog.New(logs)
	lim := newLimiter(t, cfg)
	h := lim.REST(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("handler ran") }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest("GET", "/api/x", nil).WithContext(ctx)
	h.ServeHTTP(httptest.NewRecorder(), r)
	if n := len(logs.text()); n != 0 {
		t.Errorf("logged:\n%s", logs.text())
	}
}

// Store-failure warnings are gated once a minute for each plan: two plans
// failing at once (one failing open, one closed) get a line each, and the
// next failures of either within the minute none.
func TestStoreFailureWarningPerPlan(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Store = &failingStore{err: errTest}
	plans := testPlans()
	anon := plans["anon"]
	anon.FailureMode = budget.FailClosed
	plans["anon"] = anon
	cfg.Plans = plans
	logs := &countingHandler{}
	cfg.Logger = slog.New(logs)
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	for range 3 {
		do(t, h, request{method: "GET", path: "/api/x", header: bearer(aliceKey)})
		do(t, h, request{method: "GET", path: "/api/x", remoteAddr: "192.0.2.1:1"})
	}
	text := logs.text()
	if n := strings.Count(text, "rate-limit store failed"); n != 2 {
		t.Fatalf("%d store warnings, want 2 (one per plan):\n%s", n, text)
	}
	if !strings.Contains(text, "plan=free failure_mode=open") || !strings.Contains(text, "plan=anon failure_mode=closed") {
		t.Errorf("warnings do not name each plan and mode:\n%s", text)
	}
	clock.Advance(time.Minute)
	do(t, h, request{method: "GET", path: "/api/x", header: bearer(aliceKey)})
	if n := strings.Count(logs.text(), "rate-limit store failed"); n != 3 {
		t.Errorf("%d store warnings after a minute, want 3", n)
	}
	if !strings.Contains(logs.text(), "failures_since_last_warning=2") {
		t.Errorf("the minute's suppressed failures are not counted:\n%s", logs.text())
	}
}

// Fail open does not multiply with outages: two processes on one store,
// whose link flaps K times. What each process's fallback admits during an
// outage is debited from the store when it answers again, so each outage
// starts from what the store then says. Per process, over all the
// outages, the fallback admits at most what it last knew of the budget
// plus the refill over the outages (1 point a second here), not that much
// again each outage.
func TestFailOpenDoesNotMultiplyWithOutages(t *testing.T) {
	const (
		outages   = 6
		outage    = 2 * time.Second // 2 points of refill each
		quiet     = time.Second     // between outages: 1 point
		cost      = 10              // GET /api/search
		processes = 2
	)
	clock := newClock()
	shared := testConfig(t, clock).Store.(limiter.Store)
	links := make([]*failingStore, processes)
	handlers := make([]http.Handler, processes)
	for i := range processes {
		links[i] = &failingStore{err: errors.New("connection reset"), inner: shared}
		links[i].healthy.Store(true)
		cfg := testConfig(t, clock)
		cfg.Store = links[i]
		cfg.StoreTimeout = 5 * time.Millisecond
		cfg.FailureMode = budget.FailOpen
		handlers[i] = graphQLServer(newLimiter(t, cfg), newTestSchema())
	}
	search := request{method: "GET", path: "/api/search", header: bearer(aliceKey)}
	admittedInOutages := make([]int64, processes)
	for k := range outages {
		// The store answers: each process decides one search through it.
		for i := range processes {
			links[i].healthy.Store(true)
			if w := do(t, handlers[i], search); w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests {
				t.Fatalf("outage %d, healthy: %d %s", k, w.Code, w.Body)
			}
		}
		clock.Advance(quiet)
		// The link breaks: each process admits what its fallback allows.
		for i := range processes {
			links[i].healthy.Store(false)
		}
		for i := range processes {
			for range 50 {
				if w := do(t, handlers[i], search); w.Code != http.StatusOK {
					break
				}
				admittedInOutages[i] += cost
			}
		}
		clock.Advance(outage)
	}
	// The first outage may spend what was left of the burst; every later
	// one only its refill (and what the quiet second before it brought).
	refill := int64(outages) * int64((outage+quiet)/time.Second)
	for i, got := range admittedInOutages {
		t.Logf("process %d admitted %d points over %d outages", i, got, outages)
		if bound := 100 + refill; got > bound {
			t.Errorf("process %d admitted %d points over %d outages; at most %d (the burst and the refill)", i, got, outages, bound)
		}
	}
}
