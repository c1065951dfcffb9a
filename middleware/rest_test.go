package middleware_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
)

func TestRESTAdmittedHeaders(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	h := graphQLServer(lim, newTestSchema())

	w := do(t, h, request{method: "GET", path: "/api/search?q=go", header: bearer(aliceKey)})
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", w.Code, w.Body)
	}
	// free: burst 100, 1 point/s. The search costs 10: 90 left, 10 s to full.
	want := map[string]string{
		middleware.HeaderRateLimitPolicy:     `"free";q=100;w=100`,
		middleware.HeaderRateLimit:           `"free";r=90;t=10`,
		middleware.HeaderXRateLimitLimit:     "100",
		middleware.HeaderXRateLimitRemaining: "90",
		middleware.HeaderXRateLimitUsed:      "10",
		middleware.HeaderXRateLimitReset:     strconv.FormatInt(clock.Now().Unix()+10, 10),
		middleware.HeaderRetryAfter:          "",
	}
	for name, v := range want {
		if got := w.Header().Get(name); got != v {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
}

func TestRESTRouteCosts(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	h := graphQLServer(lim, newTestSchema())
	tests := []struct {
		method, path  string
		wantRemaining string
	}{
		{"GET", "/api/search?q=a", "90"},       // route cost 10
		{"HEAD", "/api/search", "80"},          // GET patterns match HEAD
		{"POST", "/api/search", "79"},          // method differs: default 1
		{"GET", "/api/users/octocat", "78"},    // no route: default 1
		{"GET", "/api/free", "78"},             // cost 0: headers, nothing spent
		{"DELETE", "/api/free/sub/path", "77"}, // "/api/free" is exact, not a subtree
	}
	for _, tc := range tests {
		w := do(t, h, request{method: tc.method, path: tc.path, header: bearer(aliceKey)})
		if w.Code != http.StatusOK {
			t.Fatalf("%s %s: status %d", tc.method, tc.path, w.Code)
		}
		if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != tc.wantRemaining {
			t.Errorf("%s %s: remaining %s, want %s", tc.method, tc.path, got, tc.wantRemaining)
		}
	}
}

func TestREST429(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	h := graphQLServer(lim, newTestSchema())

	// anon: burst 20, one point per 5 s. Two searches spend it all.
	anon := request{method: "GET", path: "/api/search", remoteAddr: "198.51.100.7:1234"}
	for i := range 2 {
		if w := do(t, h, anon); w.Code != http.StatusOK {
			t.Fatalf("search %d: status %d", i, w.Code)
		}
	}
	w := do(t, h, anon)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", w.Code)
	}
	// 10 points take 50 s to come back.
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body["error"] != "rate_limited" || body["retry_after_seconds"] != float64(50) || len(body) != 2 {
		t.Errorf("body %s", w.Body)
	}
	for name, v := range map[string]string{
		middleware.HeaderRetryAfter:          "50",
		middleware.HeaderRateLimit:           `"anon";r=0;t=100`,
		middleware.HeaderRateLimitPolicy:     `"anon";q=20;w=100`,
		middleware.HeaderXRateLimitRemaining: "0",
		middleware.HeaderXRateLimitUsed:      "20",
		"Content-Type":                       "application/json; charset=utf-8",
	} {
		if got := w.Header().Get(name); got != v {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
	// A cheaper route still fits once its cost is back.
	clock.Advance(5 * time.Second)
	if w := do(t, h, request{method: "GET", path: "/api/users/x", remoteAddr: anon.remoteAddr}); w.Code != http.StatusOK {
		t.Errorf("cost-1 request after 5 s: status %d", w.Code)
	}
}

// Retry-After is rounded up: retrying one second early fails, retrying on
// time succeeds.
func TestRetryAfterNeverEarly(t *testing.T) {
	for _, cost := range []int64{1, 3, 7} {
		clock := newClock()
		cfg := testConfig(t, clock)
		cfg.Plans = map[string]budget.Plan{"p": {Burst: 7, Rate: 3, Per: 7 * time.Second}} // 3 points per 7 s: waits are fractional
		cfg.AnonymousPlan = "p"
		cfg.APIKeys = nil
		cfg.REST = middleware.RESTOptions{DefaultCost: cost}
		lim := newLimiter(t, cfg)
		h := lim.REST(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		req := request{method: "GET", path: "/x"}
		for i := 0; i < 20; i++ {
			w := do(t, h, req)
			if w.Code == http.StatusOK {
				clock.Advance(300 * time.Millisecond)
				continue
			}
			ra, err := strconv.Atoi(w.Header().Get(middleware.HeaderRetryAfter))
			if err != nil || ra < 1 {
				t.Fatalf("cost %d: Retry-After %q", cost, w.Header().Get(middleware.HeaderRetryAfter))
			}
			if ra > 1 {
				clock.Advance(time.Duration(ra-1) * time.Second)
				if w := do(t, h, req); w.Code != http.StatusTooManyRequests {
					t.Fatalf("cost %d: admitted %d s early (Retry-After %d)", cost, 1, ra)
				}
				clock.Advance(time.Second)
			} else {
				clock.Advance(time.Second)
			}
			if w := do(t, h, req); w.Code != http.StatusOK {
				t.Fatalf("cost %d: rejected at Retry-After %d: %d", cost, ra, w.Code)
			}
		}
	}
}

func TestRESTUnknownAPIKey(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	h := graphQLServer(lim, newTestSchema())
	for _, header := range []http.Header{
		bearer("nobody-issued-this"),
		{"X-Api-Key": {"nobody-issued-this"}},
	} {
		w := do(t, h, request{method: "GET", path: "/api/users/x", header: header})
		if w.Code != http.StatusUnauthorized {
			t.Errorf("%v: status %d, want 401", header, w.Code)
		}
		if got := strings.TrimSpace(w.Body.String()); got != `{"error":"unknown_api_key"}` {
			t.Errorf("body %s", got)
		}
		if w.Header().Get(middleware.HeaderRetryAfter) != "" || w.Header().Get(middleware.HeaderRateLimit) != "" {
			t.Errorf("401 carries rate-limit headers: %v", w.Header())
		}
	}
}

// An unknown key is 401 even when every budget is spent: never 429.
func TestUnknownKeyNever429(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	h := graphQLServer(lim, newTestSchema())
	for range 30 {
		do(t, h, request{method: "GET", path: "/api/search", header: bearer("guess")})
	}
	if w := do(t, h, request{method: "GET", path: "/api/search", header: bearer("guess")}); w.Code != http.StatusUnauthorized {
		t.Errorf("status %d, want 401", w.Code)
	}
}

func TestConfigRefused(t *testing.T) {
	clock := newClock()
	tests := []struct {
		name   string
		mutate func(*config)
		want   []string // substrings of the error
	}{
		{"route costs more than a plan's burst", func(c *config) {
			c.REST.Routes = map[string]int64{"GET /api/export": 50}
		}, []string{`"GET /api/export"`, "costs 50", `plan "anon"`, "burst 20"}},
		{"default cost above a burst", func(c *config) { c.REST.DefaultCost = 21 }, []string{"default cost 21", `"anon"`}},
		{"negative route cost", func(c *config) { c.REST.Routes = map[string]int64{"/x": -1} }, []string{`"/x"`, "negative"}},
		{"malformed pattern", func(c *config) { c.REST.Routes = map[string]int64{"GET  /x {": 1} }, []string{"REST route"}},
		{"no plans", func(c *config) { c.Plans = nil }, []string{"no plans"}},
		{"zero burst", func(c *config) { c.Plans["free"] = budget.Plan{Rate: 1, Per: time.Second} }, []string{`plan "free"`, "positive"}},
		{"negative rate", func(c *config) { c.Plans["free"] = budget.Plan{Burst: 1, Rate: -1, Per: time.Second} }, []string{`plan "free"`}},
		{"sub-microsecond period", func(c *config) { c.Plans["free"] = budget.Plan{Burst: 1, Rate: 1, Per: 1500} }, []string{`plan "free"`, "microseconds"}},
		{"unknown anonymous plan", func(c *config) { c.AnonymousPlan = "gold" }, []string{`"gold"`}},
		{"missing anonymous plan", func(c *config) { c.AnonymousPlan = "" }, []string{"anonymous plan"}},
		{"key grants unknown plan", func(c *config) {
			c.APIKeys = map[string]identity.APIKey{"k": {Principal: "p", Plan: "gold"}}
		}, []string{`"gold"`}},
		{"bad failure mode", func(c *config) { c.FailureMode = "maybe" }, []string{`"maybe"`}},
		{"bad plan failure mode", func(c *config) {
			c.Plans["free"] = budget.Plan{Burst: 1, Rate: 1, Per: time.Second, FailureMode: "sometimes"}
		}, []string{`"sometimes"`}},
		{"negative timeout", func(c *config) { c.StoreTimeout = -time.Second }, []string{"StoreTimeout"}},
		{"jitter above 1", func(c *config) { c.RetryAfterJitter = 1.5 }, []string{"RetryAfterJitter"}},
		{"negative jitter", func(c *config) { c.RetryAfterJitter = -0.1 }, []string{"RetryAfterJitter"}},
		{"bad trusted proxy", func(c *config) { c.TrustedProxies = []string{"10.0.0.0/33"} }, []string{`"10.0.0.0/33"`}},
		{"bad proxy header", func(c *config) { c.ProxyHeader = "X-Real-IP" }, []string{`"X-Real-IP"`}},
		{"negative GraphQL option", func(c *config) { c.GraphQL.MaxDepth = -2 }, []string{"GraphQL", "MaxDepth", "None"}},
		{"no default list size", func(c *config) { c.GraphQL.DefaultListSize = middleware.None }, []string{"DefaultListSize"}},
		{"plan name with a control character", func(c *config) { c.Plans["a\nb"] = budget.Plan{Burst: 1, Rate: 1, Per: time.Second} }, []string{"plan name"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, clock)
			tc.mutate(&cfg)
			lim, err := middleware.New(cfg.Dependencies, cfg.Policy)
			if err == nil {
				lim.Close()
				t.Fatal("New accepted the config")
			}
			if !errors.Is(err, middleware.ErrInvalidConfig) {
				t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %s", err, s)
				}
			}
			if !strings.HasPrefix(err.Error(), "middleware: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Store = nil // an owned in-memory store
	cfg.REST = middleware.RESTOptions{}
	lim := newLimiter(t, cfg)
	h := lim.REST(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	w := do(t, h, request{method: "GET", path: "/anything"})
	if w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "19" {
		t.Errorf("default REST cost: status %d remaining %q, want 200 and 19", w.Code, w.Header().Get(middleware.HeaderXRateLimitRemaining))
	}
}

// Jitter only ever adds, up to the configured fraction, and the body agrees
// with the header.
func TestRetryAfterJitterOnlyAdds(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.RetryAfterJitter = 0.5
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	anon := request{method: "GET", path: "/api/search", remoteAddr: "198.51.100.7:1234"}
	do(t, h, anon)
	do(t, h, anon) // the bucket is empty; 10 points take 50 s
	seen := map[int]bool{}
	for range 200 {
		w := do(t, h, anon)
		ra, err := strconv.Atoi(w.Header().Get(middleware.HeaderRetryAfter))
		if w.Code != http.StatusTooManyRequests || err != nil {
			t.Fatalf("status %d, Retry-After %q", w.Code, w.Header().Get(middleware.HeaderRetryAfter))
		}
		if ra < 50 || ra >= 75 {
			t.Fatalf("Retry-After %d outside [50, 75)", ra)
		}
		if want := `"retry_after_seconds":` + strconv.Itoa(ra) + `}`; !strings.Contains(w.Body.String(), want) {
			t.Fatalf("body %s disagrees with Retry-After %d", w.Body, ra)
		}
		seen[ra] = true
	}
	if len(seen) < 5 {
		t.Errorf("only %d distinct values in 200 draws: no jitter?", len(seen))
	}
}
