package middleware_test

import (
	"errors"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
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
	next.APIKeys = map[string]identity.APIKey{"carol-key": {Principal: "carol", Plan: "free"}}
	next.REST = middleware.RESTOptions{Routes: map[string]int64{"GET /api/search": 15}}
	next.GraphQL.MaxDepth = 2
	if err := lim.Reload(next.Policy); err != nil {
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
	if err := lim.Reload(next.Policy); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if w, resp := query(t, h, doc, bearer(aliceKey)); w.Code != http.StatusUnprocessableEntity || resp.code() != "MAX_TOKENS_EXCEEDED" {
		t.Errorf("MaxTokens 5 after reload: status %d code %q", w.Code, resp.code())
	}
	if err := lim.Reload(cfg.Policy); err != nil {
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

	for name, mutate := range map[string]func(*config){
		"no plans":         func(c *config) { c.Plans = nil },
		"unknown anon":     func(c *config) { c.AnonymousPlan = "nope" },
		"bad mode":         func(c *config) { c.Mode = "loud" },
		"bad route":        func(c *config) { c.REST = middleware.RESTOptions{Routes: map[string]int64{"GET /x": -1}} },
		"split budget new": func(c *config) { p := c.Plans["free"]; p.SplitBudget = true; c.Plans["free"] = p },
	} {
		next := cfg
		next.Plans = testPlans()
		mutate(&next)
		if err := lim.Reload(next.Policy); !errors.Is(err, middleware.ErrInvalidConfig) {
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
			if err := lim.Reload(next.Policy); err != nil {
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

// invalidPolicies are policies New refuses, each a change to a valid one.
func invalidPolicies() map[string]func(*middleware.Policy) {
	plan := func(f func(*budget.Plan)) func(*middleware.Policy) {
		return func(c *middleware.Policy) { p := c.Plans["free"]; f(&p); c.Plans["free"] = p }
	}
	return map[string]func(*middleware.Policy){
		"no plans":          func(c *middleware.Policy) { c.Plans = nil },
		"unknown anon":      func(c *middleware.Policy) { c.AnonymousPlan = "nope" },
		"bad mode":          func(c *middleware.Policy) { c.Mode = "loud" },
		"bad failure mode":  func(c *middleware.Policy) { c.FailureMode = "sideways" },
		"zero burst":        plan(func(p *budget.Plan) { p.Burst = -1 }),
		"bad plan mode":     plan(func(p *budget.Plan) { p.Mode = "loud" }),
		"quota below burst": plan(func(p *budget.Plan) { p.Quota = &budget.Quota{Limit: 1, Per: time.Hour} }),
		"api key plan": func(c *middleware.Policy) {
			c.APIKeys = map[string]identity.APIKey{"k": {Principal: "p", Plan: "gold"}}
		},
		"bad route": func(c *middleware.Policy) { c.REST = middleware.RESTOptions{Routes: map[string]int64{"GET /x": -1}} },
		"bad field limit": func(c *middleware.Policy) {
			c.FieldLimits = map[string]budget.FieldLimit{"nodot": {Limit: 1, Per: time.Second}}
		},
		"bad field limit by": func(c *middleware.Policy) {
			c.FieldLimits = map[string]budget.FieldLimit{"Query.a": {Limit: 1, Per: time.Second, By: "moon"}}
		},
		"bad route limit pattern": func(c *middleware.Policy) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST": {Limit: 5, Per: time.Minute}}
		},
		"bad route limit algorithm": func(c *middleware.Policy) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 5, Per: time.Minute, Algorithm: "gcra"}}
		},
		"route limit shaping by both": func(c *middleware.Policy) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 5, Per: time.Minute, Algorithm: budget.LeakyBucketShaping, By: budget.ByBoth}}
		},
		"route limit max_delay unshaped": func(c *middleware.Policy) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 5, Per: time.Minute, Algorithm: budget.SlidingLog, MaxDelay: time.Second}}
		},
		"route limit max_delay too long": func(c *middleware.Policy) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 5, Per: time.Minute, Algorithm: budget.LeakyBucketShaping, MaxDelay: time.Hour}}
		},
		"route limit log too long": func(c *middleware.Policy) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 1 << 21, Per: time.Minute, Algorithm: budget.SlidingLog}}
		},
		"shaping limits by two keys": func(c *middleware.Policy) {
			c.FieldLimits = map[string]budget.FieldLimit{"Mutation.createIssue": {Limit: 5, Per: time.Minute, Algorithm: budget.LeakyBucketShaping}}
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 5, Per: time.Minute, Algorithm: budget.LeakyBucketShaping, By: budget.ByIP}}
		},
		"bad field limit algorithm": func(c *middleware.Policy) {
			c.FieldLimits = map[string]budget.FieldLimit{"Query.a": {Limit: 1, Per: time.Second, Algorithm: "gcra"}}
		},
		"invalid cost > burst": func(c *middleware.Policy) { c.GraphQL.InvalidCost = 1000 },
		"negative max depth":   func(c *middleware.Policy) { c.GraphQL.MaxDepth = -5 },
		"bad trusted proxy":    func(c *middleware.Policy) { c.TrustedProxies = []string{"not a cidr"} },
		"lane without name":    func(c *middleware.Policy) { c.Lanes = []middleware.Lane{{Priority: overload.Normal}} },
		"lane bad challenge":   func(c *middleware.Policy) { c.Lanes = []middleware.Lane{{Name: "a", Challenge: "captcha"}} },
		"lane pow, no challenger": func(c *middleware.Policy) {
			c.Lanes = []middleware.Lane{{Name: "a", Challenge: middleware.ChallengePoW}}
		},
		"negative per-principal": func(c *middleware.Policy) { c.Concurrency.PerPrincipal = -5 },
		"bad subscriptions":      func(c *middleware.Policy) { c.Subscriptions.MaxPerPrincipal = -5 },
		"split budget new":       plan(func(p *budget.Plan) { p.SplitBudget = true }),
	}
}

// A policy New refuses, Reload refuses (the same checks: there is one),
// and the running one stays. A plan turning SplitBudget on is the one
// refusal of Reload's own: New built no leases.
func TestReloadRefusesWhatNewRefuses(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	for name, mutate := range invalidPolicies() {
		next := cfg.Policy
		next.Plans = testPlans()
		mutate(&next)
		if l, err := middleware.New(cfg.Dependencies, next); !errors.Is(err, middleware.ErrInvalidConfig) {
			if l != nil {
				l.Close()
			}
			if name != "split budget new" {
				t.Errorf("%s: New error %v, want ErrInvalidConfig (the table must hold refused policies)", name, err)
				continue
			}
		}
		if err := lim.Reload(next); !errors.Is(err, middleware.ErrInvalidConfig) {
			t.Errorf("%s: Reload error %v, want ErrInvalidConfig", name, err)
		}
	}
	if w, _ := query(t, h, query61, bearer(aliceKey)); w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitLimit) != "100" {
		t.Errorf("after refused reloads: status %d limit %s", w.Code, w.Header().Get(middleware.HeaderXRateLimitLimit))
	}
}

// New refuses bad dependencies, each naming its key.
func TestNewRefusesBadDependencies(t *testing.T) {
	for name, mutate := range map[string]func(*middleware.Dependencies){
		"negative store timeout": func(c *middleware.Dependencies) { c.StoreTimeout = -time.Second },
		"negative body bound":    func(c *middleware.Dependencies) { c.MaxBodyBytes = -1 },
		"negative upload bound":  func(c *middleware.Dependencies) { c.MaxUploadBytes = -1 },
		"in-flight below body":   func(c *middleware.Dependencies) { c.MaxBodyBytes, c.MaxBodyBytesInFlight = 2<<20, 1<<20 },
		"negative memory keys":   func(c *middleware.Dependencies) { c.MemoryStore.MaxKeys = -2 },
		"jitter above one":       func(c *middleware.Dependencies) { c.RetryAfterJitter = 2 },
		"bad breaker":            func(c *middleware.Dependencies) { c.Breaker.Failures = -7 },
		"bad over-limit cache":   func(c *middleware.Dependencies) { c.OverLimitCache = "sometimes" },
		"bad lease fraction":     func(c *middleware.Dependencies) { c.SplitBudget.LeaseFraction = 3 },
		"bad overload":           func(c *middleware.Dependencies) { c.Overload = &overload.Config{MaxInFlight: -3} },
		"bad slot ttl":           func(c *middleware.Dependencies) { c.SlotTTL = -time.Second },
	} {
		cfg := testConfig(t, newClock())
		mutate(&cfg.Dependencies)
		if l, err := middleware.New(cfg.Dependencies, cfg.Policy); !errors.Is(err, middleware.ErrInvalidConfig) {
			if l != nil {
				l.Close()
			}
			t.Errorf("%s: New error %v, want ErrInvalidConfig", name, err)
		}
	}
}

// The policy's API keys come first, then Dependencies.KeyLookup: a key in
// both grants what the policy says, and a Reload that drops a key from the
// policy leaves the lookup's answer for it.
func TestAPIKeysThenKeyLookup(t *testing.T) {
	cfg := testConfig(t, newClock())
	cfg.KeyLookup = identity.NewStaticKeys(map[string]identity.APIKey{
		aliceKey:  {Principal: "alice", Plan: "anon"},
		"db-only": {Principal: "dave", Plan: "anon"},
	})
	var last atomic.Pointer[middleware.Event]
	cfg.Observer = middleware.ObserverFunc(func(e *middleware.Event) { c := *e; last.Store(&c) })
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	plan := func(key string) string {
		t.Helper()
		if w, resp := query(t, h, `{ viewer { login } }`, bearer(key)); w.Code != http.StatusOK {
			t.Fatalf("key %s: status %d code %q", key, w.Code, resp.code())
		}
		return last.Load().Plan
	}
	if got := plan(aliceKey); got != "free" {
		t.Errorf("a key in both: plan %q, want the policy's free", got)
	}
	if got := plan("db-only"); got != "anon" {
		t.Errorf("a key only the lookup knows: plan %q, want anon", got)
	}
	next := cfg.Policy
	next.APIKeys = nil
	if err := lim.Reload(next); err != nil {
		t.Fatal(err)
	}
	if got := plan(aliceKey); got != "anon" {
		t.Errorf("after the policy dropped it: plan %q, want the lookup's anon", got)
	}
}

// Reload checks field limits against the schemas of the servers a Limiter
// is on, and only those still in use: a server dropped for another (an
// upstream's schema fetched again) does not keep refusing what the new
// schema allows.
func TestReloadChecksOnlyServersInUse(t *testing.T) {
	cfg := testConfig(t, newClock())
	lim := newLimiter(t, cfg)
	withFields := func(sdl string) http.Handler {
		schema := gqlparser.MustLoadSchema(&ast.Source{Name: "s.graphqls", Input: sdl})
		return lim.Handler(handler.New(&graphql.ExecutableSchemaMock{SchemaFunc: func() *ast.Schema { return schema }}))
	}
	old := withFields(`type Query { a: Int }`)
	current := withFields(`type Query { a: Int b: Int }`)
	policy := cfg.Policy
	policy.FieldLimits = map[string]budget.FieldLimit{"Query.b": {Limit: 1, Per: time.Second}}
	if err := lim.Reload(policy); err == nil {
		t.Errorf("Query.b limited while a server without it is in use: accepted")
	}
	runtime.KeepAlive(old)
	old = nil
	for i := 0; i < 10; i++ {
		runtime.GC()
		if err := lim.Reload(policy); err == nil {
			break
		} else if i == 9 {
			t.Errorf("Query.b limited once the server without it is dropped: %v", err)
		}
	}
	runtime.KeepAlive(current)
}
