package middleware_test

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/overload"
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

// invalidConfigs are configurations New refuses, each a change to a valid
// one: every kind of field, those Reload may change and those it may not.
func invalidConfigs() map[string]func(*middleware.Config) {
	plan := func(f func(*budget.Plan)) func(*middleware.Config) {
		return func(c *middleware.Config) { p := c.Plans["free"]; f(&p); c.Plans["free"] = p }
	}
	return map[string]func(*middleware.Config){
		// What Reload may change.
		"no plans":          func(c *middleware.Config) { c.Plans = nil },
		"unknown anon":      func(c *middleware.Config) { c.AnonymousPlan = "nope" },
		"bad mode":          func(c *middleware.Config) { c.Mode = "loud" },
		"bad failure mode":  func(c *middleware.Config) { c.FailureMode = "sideways" },
		"zero burst":        plan(func(p *budget.Plan) { p.Burst = -1 }),
		"bad plan mode":     plan(func(p *budget.Plan) { p.Mode = "loud" }),
		"quota below burst": plan(func(p *budget.Plan) { p.Quota = &budget.Quota{Limit: 1, Per: time.Hour} }),
		"bad route":         func(c *middleware.Config) { c.REST = middleware.RESTOptions{Routes: map[string]int64{"GET /x": -1}} },
		"bad field limit": func(c *middleware.Config) {
			c.FieldLimits = map[string]budget.FieldLimit{"nodot": {Limit: 1, Per: time.Second}}
		},
		"bad field limit by": func(c *middleware.Config) {
			c.FieldLimits = map[string]budget.FieldLimit{"Query.a": {Limit: 1, Per: time.Second, By: "moon"}}
		},
		"bad route limit pattern": func(c *middleware.Config) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST": {Limit: 5, Per: time.Minute}}
		},
		"bad route limit algorithm": func(c *middleware.Config) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 5, Per: time.Minute, Algorithm: "gcra"}}
		},
		"route limit shaping by both": func(c *middleware.Config) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 5, Per: time.Minute, Algorithm: budget.LeakyBucketShaping, By: budget.ByBoth}}
		},
		"route limit max_delay unshaped": func(c *middleware.Config) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 5, Per: time.Minute, Algorithm: budget.SlidingLog, MaxDelay: time.Second}}
		},
		"route limit max_delay too long": func(c *middleware.Config) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 5, Per: time.Minute, Algorithm: budget.LeakyBucketShaping, MaxDelay: time.Hour}}
		},
		"route limit log too long": func(c *middleware.Config) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 1 << 21, Per: time.Minute, Algorithm: budget.SlidingLog}}
		},
		"shaping limits by two keys": func(c *middleware.Config) {
			c.FieldLimits = map[string]budget.FieldLimit{"Mutation.createIssue": {Limit: 5, Per: time.Minute, Algorithm: budget.LeakyBucketShaping}}
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 5, Per: time.Minute, Algorithm: budget.LeakyBucketShaping, By: budget.ByIP}}
		},
		"bad field limit algorithm": func(c *middleware.Config) {
			c.FieldLimits = map[string]budget.FieldLimit{"Query.a": {Limit: 1, Per: time.Second, Algorithm: "gcra"}}
		},
		"invalid cost > burst":   func(c *middleware.Config) { c.GraphQL.InvalidCost = 1000 },
		"negative max depth":     func(c *middleware.Config) { c.GraphQL.MaxDepth = -5 },
		"bad trusted proxy":      func(c *middleware.Config) { c.TrustedProxies = []string{"not a cidr"} },
		"lane without name":      func(c *middleware.Config) { c.Lanes = []middleware.Lane{{Priority: overload.Normal}} },
		"lane bad challenge":     func(c *middleware.Config) { c.Lanes = []middleware.Lane{{Name: "a", Challenge: "captcha"}} },
		"negative per-principal": func(c *middleware.Config) { c.Concurrency.PerPrincipal = -5 },
		"bad subscriptions":      func(c *middleware.Config) { c.Subscriptions.MaxPerPrincipal = -5 },
		// What New fixes.
		"negative store timeout": func(c *middleware.Config) { c.StoreTimeout = -time.Second },
		"negative body bound":    func(c *middleware.Config) { c.MaxBodyBytes = -1 },
		"negative upload bound":  func(c *middleware.Config) { c.MaxUploadBytes = -1 },
		"in-flight below body":   func(c *middleware.Config) { c.MaxBodyBytes, c.MaxBodyBytesInFlight = 2<<20, 1<<20 },
		"negative memory keys":   func(c *middleware.Config) { c.MemoryStore.MaxKeys = -2 },
		"jitter above one":       func(c *middleware.Config) { c.RetryAfterJitter = 2 },
		"bad breaker":            func(c *middleware.Config) { c.Breaker.Failures = -7 },
		"bad over-limit cache":   func(c *middleware.Config) { c.OverLimitCache = "sometimes" },
		"bad lease fraction":     func(c *middleware.Config) { c.SplitBudget.LeaseFraction = 3 },
		"bad overload":           func(c *middleware.Config) { c.Overload = &overload.Config{MaxInFlight: -3} },
		"bad concurrency ttl":    func(c *middleware.Config) { c.Concurrency.TTL = -time.Second },
	}
}

// A configuration New refuses, Reload refuses, and the running one stays.
func TestReloadRefusesWhatNewRefuses(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	for name, mutate := range invalidConfigs() {
		next := cfg
		next.Plans = testPlans()
		mutate(&next)
		if l, err := middleware.New(next); !errors.Is(err, middleware.ErrInvalidConfig) {
			if l != nil {
				l.Close()
			}
			t.Errorf("%s: New error %v, want ErrInvalidConfig (the table must hold refused configurations)", name, err)
			continue
		}
		if err := lim.Reload(next); !errors.Is(err, middleware.ErrInvalidConfig) {
			t.Errorf("%s: Reload error %v, want ErrInvalidConfig", name, err)
		}
	}
	if w, _ := query(t, h, query61, bearer(aliceKey)); w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitLimit) != "100" {
		t.Errorf("after refused reloads: status %d limit %s", w.Code, w.Header().Get(middleware.HeaderXRateLimitLimit))
	}
}

// A field New fixed is never ignored: a valid change to it is refused by
// name, and the same values (a rebuilt Overload, the same function) pass.
func TestReloadRefusesChangesToWhatNewFixed(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Overload = &overload.Config{MaxInFlight: 100, ShedAt: map[overload.Priority]float64{overload.Sheddable: 0.5}}
	observe := func(*middleware.Event) {}
	cfg.Observer = middleware.ObserverFunc(observe)
	lim := newLimiter(t, cfg)

	same := cfg
	same.Plans = testPlans()
	oc := *cfg.Overload
	oc.ShedAt = map[overload.Priority]float64{overload.Sheddable: 0.5}
	same.Overload = &oc
	same.Observer = middleware.ObserverFunc(observe)
	same.GraphQL.MaxDepth = 3 // reloadable
	if err := lim.Reload(same); err != nil {
		t.Fatalf("Reload with New's fixed values: %v", err)
	}

	other, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for field, mutate := range map[string]func(*middleware.Config){
		"Store":                func(c *middleware.Config) { c.Store = other },
		"StoreTimeout":         func(c *middleware.Config) { c.StoreTimeout = time.Second },
		"MaxBodyBytes":         func(c *middleware.Config) { c.MaxBodyBytes = 1 << 10 },
		"MaxBodyBytesInFlight": func(c *middleware.Config) { c.MaxBodyBytesInFlight = 8 << 20 },
		"MaxUploadBytes":       func(c *middleware.Config) { c.MaxUploadBytes = 1 << 30 },
		"MemoryStore":          func(c *middleware.Config) { c.MemoryStore.MaxKeys = 10 },
		"OverLimitCache":       func(c *middleware.Config) { c.OverLimitCache = stack.OverLimitCacheOff },
		"SplitBudget":          func(c *middleware.Config) { c.SplitBudget.LeaseFraction = 0.5 },
		"Breaker":              func(c *middleware.Config) { c.Breaker.Failures = 9 },
		"RetryAfterJitter":     func(c *middleware.Config) { c.RetryAfterJitter = 0.5 },
		"Overload":             func(c *middleware.Config) { oc := *c.Overload; oc.MaxInFlight = 7; c.Overload = &oc },
		"Concurrency.TTL":      func(c *middleware.Config) { c.Concurrency.TTL = time.Hour },
		"Observer":             func(c *middleware.Config) { c.Observer = middleware.ObserverFunc(func(*middleware.Event) {}) },
		"Logger":               func(c *middleware.Config) { c.Logger = nil },
		"Clock":                func(c *middleware.Config) { c.Clock = newClock() },
	} {
		next := cfg
		mutate(&next)
		err := lim.Reload(next)
		if !errors.Is(err, middleware.ErrInvalidConfig) || !strings.Contains(err.Error(), "change "+field+",") {
			t.Errorf("%s changed: Reload error %v, want ErrInvalidConfig naming it", field, err)
		}
	}
}
