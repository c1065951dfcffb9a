package middleware_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
)

// A principal's requests in flight are capped, REST and GraphQL together;
// over the cap: 429 CONCURRENCY_LIMITED, nothing debited; other principals
// and plans without a cap are not affected.
func TestConcurrencyPerPrincipal(t *testing.T) {
	cfg := testConfig(t, newClock())
	cfg.Concurrency = middleware.ConcurrencyOptions{PerPrincipal: 2}
	plans := testPlans()
	anon := plans["anon"]
	anon.MaxConcurrent = middleware.None
	plans["anon"] = anon
	cfg.Plans = plans
	lim := newLimiter(t, cfg)
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("hold") {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, `{"ok":true}`)
	})
	gql := handler.New(newTestSchema().executable())
	gql.AddTransport(transport.POST{})
	mux := http.NewServeMux()
	mux.Handle("/graphql", lim.Handler(gql))
	mux.Handle("/api/", lim.REST(api))

	var held sync.WaitGroup
	hold := func(req request) {
		held.Add(1)
		go func() { defer held.Done(); do(t, mux, req) }()
		<-entered
	}
	hold(request{method: http.MethodGet, path: "/api/a?hold", header: bearer(aliceKey)})
	hold(request{method: http.MethodGet, path: "/api/a?hold", header: bearer(aliceKey)})

	w := do(t, mux, request{method: http.MethodGet, path: "/api/a", header: bearer(aliceKey)})
	var body struct {
		Error string `json:"error"`
		Retry int64  `json:"retry_after_seconds"`
	}
	_ = json.Unmarshal(w.Body.Bytes(), &body)
	if w.Code != http.StatusTooManyRequests || body.Error != "concurrency_limited" || body.Retry < 1 || w.Header().Get("Retry-After") == "" {
		t.Errorf("third REST request: %d %s %v", w.Code, w.Body, w.Header())
	}
	gw, resp := query(t, mux, `{ viewer { login } }`, bearer(aliceKey))
	if gw.Code != http.StatusTooManyRequests || resp.code() != budget.CodeConcurrencyLimited {
		t.Errorf("GraphQL over the cap: %d %q", gw.Code, resp.code())
	}
	if w := do(t, mux, request{method: http.MethodGet, path: "/api/a", header: bearer(bobKey)}); w.Code != http.StatusOK {
		t.Errorf("another principal: %d", w.Code)
	}
	for range 5 { // anon: MaxConcurrent None
		hold(request{method: http.MethodGet, path: "/api/a?hold", remoteAddr: "192.0.2.70:1"})
	}
	close(release)
	held.Wait()
	w = do(t, mux, request{method: http.MethodGet, path: "/api/a", header: bearer(aliceKey)})
	if w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "97" { // 2 held + this one, 1 point each
		t.Errorf("after the release: %d, remaining %s (refusals must cost nothing)", w.Code, w.Header().Get(middleware.HeaderXRateLimitRemaining))
	}
}

// Three processes sharing one Redis hold a principal to its cap exactly.
func TestConcurrencyAcrossProcessesOnRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	const limit, clients, rounds = 3, 12, 8
	var inFlight, peak, admitted, refused atomic.Int64
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond) // hold the slot while others try
		inFlight.Add(-1)
		io.WriteString(w, "ok")
	})
	var urls []string
	for range 3 {
		store, err := redisstore.New(srv.Client(t), redisstore.Config{Prefix: "conc-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		cfg := config{Dependencies: middleware.Dependencies{
			Store:        store,
			StoreTimeout: time.Minute,
			Logger:       discardLogger(),
		}, Policy: middleware.Policy{
			Plans:         map[string]budget.Plan{"free": {Burst: 1 << 30, Rate: 1 << 30, Per: time.Second}},
			AnonymousPlan: "free",
			APIKeys:       map[string]identity.APIKey{aliceKey: {Principal: "alice", Plan: "free"}},
			Concurrency:   middleware.ConcurrencyOptions{PerPrincipal: limit}, // exactness, not timeouts, under -race on a busy machine
			FailureMode:   budget.FailClosed,
		}}
		ts := httptest.NewServer(newLimiter(t, cfg).REST(api))
		t.Cleanup(ts.Close)
		urls = append(urls, ts.URL)
	}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for range rounds {
				req, _ := http.NewRequest(http.MethodGet, urls[c%3]+"/api/x", nil)
				req.Header.Set("Authorization", "Bearer "+aliceKey)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusOK:
					admitted.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests && strings.Contains(string(b), "concurrency_limited"):
					refused.Add(1)
				default:
					t.Errorf("status %d: %s", resp.StatusCode, b)
				}
			}
		})
	}
	wg.Wait()
	if peak.Load() > limit {
		t.Errorf("%d requests of one principal in flight at once, cap %d", peak.Load(), limit)
	}
	if admitted.Load() == 0 || admitted.Load()+refused.Load() != clients*rounds {
		t.Errorf("admitted %d, refused %d of %d", admitted.Load(), refused.Load(), clients*rounds)
	}
	t.Logf("peak %d, admitted %d, refused %d", peak.Load(), admitted.Load(), refused.Load())
}
