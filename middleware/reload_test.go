package middleware_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
)

// Reload swaps plans, API keys, REST costs and GraphQL caps; budgets stay.
func TestReloadSwapsSettings(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	lim := newLimiter(t, cfg)
	schema := newTestSchema()
	h := graphQLServer(lim, schema)

	if w, _ := query(t, h, query61, bearer(aliceKey)); w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "39" {
		t.Fatalf("before reload: status %d, remaining %s", w.Code, w.Header().Get(middleware.HeaderXRateLimitRemaining))
	}

	next := cfg
	next.Plans = testPlans()
	next.Plans["free"] = budget.Plan{Burst: 200, Rate: 100, Per: 100 * time.Second}
	next.APIKeys = identity.NewStaticKeys(map[string]identity.APIKey{"carol-key": {Principal: "carol", Plan: "free"}})
	next.REST = middleware.RESTOptions{Routes: map[string]int64{"GET /api/search": 15}}
	next.GraphQL.MaxDepth = 2
	if err := lim.Reload(next); err != nil {
		t.Fatalf("Reload: %v", err)
	}

	// alice's key is gone; carol's works, on the bigger plan.
	if w, resp := query(t, h, `{ viewer { login } }`, bearer(aliceKey)); w.Code != http.StatusUnauthorized || resp.code() != middleware.CodeUnknownAPIKey {
		t.Errorf("removed key: status %d code %q", w.Code, resp.code())
	}
	w, resp := query(t, h, query61, bearer("carol-key"))
	if w.Code != http.StatusUnprocessableEntity || resp.code() != "MAX_DEPTH_EXCEEDED" {
		t.Errorf("MaxDepth 2 after reload: status %d code %q", w.Code, resp.code())
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitLimit); got != "200" {
		t.Errorf("X-RateLimit-Limit after reload = %q, want 200", got)
	}
	w = do(t, h, request{method: http.MethodGet, path: "/api/search", header: bearer("carol-key")})
	if w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "184" { // 200 − 1 (invalid) − 15
		t.Errorf("REST after reload: status %d remaining %s", w.Code, w.Header().Get(middleware.HeaderXRateLimitRemaining))
	}
}

// A document screened under the old bounds is screened again under the
// new ones: the screen cache remembers what a query passed, not that it
// passed.
func TestReloadRechecksScreenedDocuments(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	doc := `{ viewer { login } }` // 6 tokens
	for range 2 {
		if w, resp := query(t, h, doc, bearer(aliceKey)); w.Code != http.StatusOK {
			t.Fatalf("before reload: status %d code %q", w.Code, resp.code())
		}
	}
	next := cfg
	next.GraphQL.MaxTokens = 5
	if err := lim.Reload(next); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if w, resp := query(t, h, doc, bearer(aliceKey)); w.Code != http.StatusUnprocessableEntity || resp.code() != "MAX_TOKENS_EXCEEDED" {
		t.Errorf("MaxTokens 5 after reload: status %d code %q", w.Code, resp.code())
	}
	if err := lim.Reload(cfg); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if w, resp := query(t, h, doc, bearer(aliceKey)); w.Code != http.StatusOK {
		t.Errorf("back to the old bounds: status %d code %q", w.Code, resp.code())
	}
}

// A bad configuration is refused and the running one stays.
func TestReloadRefusesBadConfig(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())

	for name, mutate := range map[string]func(*middleware.Config){
		"no plans":         func(c *middleware.Config) { c.Plans = nil },
		"unknown anon":     func(c *middleware.Config) { c.AnonymousPlan = "nope" },
		"bad mode":         func(c *middleware.Config) { c.Mode = "loud" },
		"bad route":        func(c *middleware.Config) { c.REST = middleware.RESTOptions{Routes: map[string]int64{"GET /x": -1}} },
		"split budget new": func(c *middleware.Config) { p := c.Plans["free"]; p.SplitBudget = true; c.Plans["free"] = p },
	} {
		next := cfg
		next.Plans = testPlans()
		mutate(&next)
		if err := lim.Reload(next); !errors.Is(err, middleware.ErrInvalidConfig) {
			t.Errorf("%s: Reload error %v, want ErrInvalidConfig", name, err)
		}
	}
	if w, _ := query(t, h, query61, bearer(aliceKey)); w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitLimit) != "100" {
		t.Errorf("after refused reloads: status %d limit %s", w.Code, w.Header().Get(middleware.HeaderXRateLimitLimit))
	}
}

// Requests in flight while the configuration is swapped over and over
// finish under one configuration or the other; none fails. Run with -race.
func TestReloadUnderLoad(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Plans["free"] = budget.Plan{Burst: 1 << 30, Rate: 1 << 30, Per: time.Second}
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())

	stop := make(chan struct{})
	var reloads sync.WaitGroup
	reloads.Add(1)
	go func() {
		defer reloads.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			next := cfg
			next.Plans = testPlans()
			next.Plans["free"] = budget.Plan{Burst: 1<<30 + int64(i%2), Rate: 1 << 30, Per: time.Second}
			next.GraphQL.MaxDepth = 10 + i%2
			if err := lim.Reload(next); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var clients sync.WaitGroup
	for range 4 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for range 50 {
				if w, _ := query(t, h, query61, bearer(aliceKey)); w.Code != http.StatusOK {
					t.Errorf("status %d during reloads: %s", w.Code, w.Body)
					return
				}
				if w := do(t, h, request{method: http.MethodGet, path: "/api/search", header: bearer(aliceKey)}); w.Code != http.StatusOK {
					t.Errorf("REST status %d during reloads", w.Code)
					return
				}
			}
		}()
	}
	clients.Wait()
	close(stop)
	reloads.Wait()
}
