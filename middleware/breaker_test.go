package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/overload"
)

// The breaker opens after Failures failures in a row, keeps requests off
// the store for CoolDown (each decided by its failure mode at once),
// probes once, re-opens on a failed probe and closes on a good one; each
// transition is logged once and reported on the decision that made it.
func TestBreaker(t *testing.T) {
	for _, hang := range []bool{false, true} {
		for _, mode := range []budget.FailureMode{budget.FailOpen, budget.FailClosed} {
			t.Run(fmt.Sprintf("hang=%v/%s", hang, mode), func(t *testing.T) {
				clock := newClock()
				cfg := testConfig(t, clock)
				store := &failingStore{err: errTest, hang: hang}
				broken := learn(t, store, &cfg, request{method: "GET", path: "/api/free", header: bearer(aliceKey)})
				logs := &countingHandler{}
				rec := &recorder{}
				cfg.FailureMode, cfg.Logger, cfg.Observer = mode, slog.New(logs), rec
				cfg.StoreTimeout = 2 * time.Millisecond
				cfg.Breaker = breaker.Config{Failures: 3, CoolDown: time.Second}
				h := graphQLServer(newLimiter(t, cfg), newTestSchema())
				broken(h)
				rec.take()
				want := http.StatusOK
				if mode == budget.FailClosed {
					want = http.StatusServiceUnavailable
				}
				x := request{method: "GET", path: "/api/x", header: bearer(aliceKey)}
				check := func(step string, calls int64, result guard.Result, state guard.BreakerState, changed bool) {
					t.Helper()
					if w := do(t, h, x); w.Code != want && state != guard.BreakerClosed {
						t.Errorf("%s: status %d, want %d", step, w.Code, want)
					}
					if got := store.calls.Load(); got != calls {
						t.Errorf("%s: %d store calls, want %d", step, got, calls)
					}
					evs := rec.take()
					if len(evs) != 1 {
						t.Fatalf("%s: %d events", step, len(evs))
					}
					e := evs[0]
					if e.StoreResult != result || e.Breaker != state || e.BreakerChanged != changed {
						t.Errorf("%s: event store %q breaker %q changed %v; want %q %q %v", step, e.StoreResult, e.Breaker, e.BreakerChanged, result, state, changed)
					}
					if e.Fallback != (mode == budget.FailOpen && result != guard.ResultOK) {
						t.Errorf("%s: Fallback %v", step, e.Fallback)
					}
				}
				failed := guard.ResultError
				if hang {
					failed = guard.ResultTimeout
				}
				check("failure 1", 1, failed, guard.BreakerClosed, false)
				check("failure 2", 2, failed, guard.BreakerClosed, false)
				check("failure 3 opens", 3, failed, guard.BreakerOpen, true)
				for i := range 5 {
					check("open "+strconv.Itoa(i), 3, guard.ResultSkipped, guard.BreakerOpen, false)
				}
				clock.Advance(time.Second)
				check("failed probe re-opens", 4, failed, guard.BreakerOpen, true)
				clock.Advance(999 * time.Millisecond)
				check("still open", 4, guard.ResultSkipped, guard.BreakerOpen, false)
				clock.Advance(time.Millisecond)
				store.healthy.Store(true)
				check("good probe closes", 4, guard.ResultOK, guard.BreakerClosed, true)
				check("closed", 4, guard.ResultOK, guard.BreakerClosed, false)

				text := logs.text()
				if n := strings.Count(text, "circuit breaker open"); n != 2 {
					t.Errorf("%d open warnings, want 2 (opened, re-opened):\n%s", n, text)
				}
				if n := strings.Count(text, "circuit breaker closed"); n != 1 {
					t.Errorf("%d close lines, want 1:\n%s", n, text)
				}
			})
		}
	}
}

// Breaker.Failures None keeps every call on the store; the in-memory
// store has no breaker at all.
func TestBreakerDisabled(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Breaker.Failures = middleware.None
	store := &failingStore{err: errTest}
	broken := learn(t, store, &cfg)
	rec := &recorder{}
	cfg.Observer = rec
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	broken(h)
	for range 20 {
		do(t, h, request{method: "GET", path: "/api/x", header: bearer(aliceKey)})
	}
	if store.calls.Load() != 20 {
		t.Errorf("%d store calls, want 20", store.calls.Load())
	}
	if evs := rec.take(); evs[0].Breaker != "" {
		t.Errorf("Breaker %q without a breaker", evs[0].Breaker)
	}
	cfg = testConfig(t, clock)
	cfg.Breaker = breaker.Config{Failures: -2}
	if _, err := middleware.New(cfg.Dependencies, cfg.Policy); !errors.Is(err, middleware.ErrInvalidConfig) {
		t.Errorf("Failures -2: %v", err)
	}
}

// The bound of docs/middleware.md, "Store failures": during an outage of T
// one process admits a principal at most what the store last said it had
// left, R, plus rate × T, never more than the burst at once; a principal
// it never saw, at most rate × T. The plan "free" holds 100 points and
// restores 1 a second.
func TestFailOpenOutageBound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spent  int // /api/search (10 points) calls before the outage; -1: never seen
		outage time.Duration
	}{
		{"known, 70 left, 20 s", 3, 20 * time.Second},
		{"known, 100 left, 10 s", 0, 10 * time.Second},
		{"known, 0 left, 30 s", 10, 30 * time.Second},
		{"known, 90 left, 60 s", 1, time.Minute},
		{"unknown, 30 s", -1, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			cfg := testConfig(t, clock)
			var learning []request
			if tc.spent >= 0 {
				learning = append(learning, request{method: "GET", path: "/api/free", header: bearer(aliceKey)})
			}
			for range tc.spent {
				learning = append(learning, request{method: "GET", path: "/api/search", header: bearer(aliceKey)})
			}
			store := &failingStore{err: errTest}
			broken := learn(t, store, &cfg, learning...)
			h := graphQLServer(newLimiter(t, cfg), newTestSchema())
			broken(h)
			known := int64(0)
			if tc.spent >= 0 {
				known = 100 - 10*int64(tc.spent)
			}
			var admitted int64
			for end := clock.Now().Add(tc.outage); ; clock.Advance(10 * time.Millisecond) {
				if do(t, h, request{method: "GET", path: "/api/x", header: bearer(aliceKey)}).Code == http.StatusOK {
					admitted++
				}
				if !clock.Now().Before(end) {
					break
				}
			}
			bound := known + int64(tc.outage/time.Second)
			if admitted > bound {
				t.Fatalf("admitted %d points in %v, bound %d + %d", admitted, tc.outage, known, int64(tc.outage/time.Second))
			}
			if admitted < bound-2 { // hammered every 10 ms: the refill is all taken
				t.Errorf("admitted %d, well below the bound %d", admitted, bound)
			}
		})
	}
}

// BenchmarkStoreDown measures a decision while the store hangs (an
// unreachable Redis) once the breaker is open, against the same decision
// on the in-memory store, on the REST middleware around an empty handler.
// It reports p99 of the per-request time over the run (10,000 requests at
// -benchtime=10000x).
//
//	go test -run '^$' -bench BenchmarkStoreDown -benchtime=10000x ./middleware/
func BenchmarkStoreDown(b *testing.B) {
	run := func(b *testing.B, cfg config) {
		cfg.Plans = map[string]budget.Plan{"big": {Burst: 1e9, Rate: 1e9, Per: time.Second}}
		cfg.AnonymousPlan = "big"
		cfg.Logger = discardLogger()
		lim, err := middleware.New(cfg.Dependencies, cfg.Policy)
		if err != nil {
			b.Fatal(err)
		}
		defer lim.Close()
		h := lim.REST(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		r := httptest.NewRequest("GET", "/api/x", nil)
		// Open the breaker (five timeouts of StoreTimeout each).
		for range breaker.DefaultFailures {
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
		took := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			began := time.Now()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			took = append(took, time.Since(began))
			if w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests && w.Code != http.StatusServiceUnavailable {
				b.Fatal(w.Code)
			}
		}
		b.StopTimer()
		slices.Sort(took)
		if len(took) > 0 {
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
		}
	}
	b.Run("memory", func(b *testing.B) { run(b, config{}) })
	b.Run("hanging-store/breaker-open/fail-open", func(b *testing.B) {
		run(b, config{Dependencies: middleware.Dependencies{Store: &failingStore{hang: true}, StoreTimeout: 10 * time.Millisecond, Clock: limiter.SystemClock{}}})
	})
	b.Run("hanging-store/breaker-open/fail-closed", func(b *testing.B) {
		run(b, config{Dependencies: middleware.Dependencies{Store: &failingStore{hang: true}, StoreTimeout: 10 * time.Millisecond}, Policy: middleware.Policy{FailureMode: budget.FailClosed}})
	})
}

// toggleStore is a shared store (it says it is not local, so the Limiter
// gives it a breaker and the over-limit cache) that answers from memory
// until told to fail, counting the calls that reach it while failing.
type toggleStore struct {
	*memorystore.Store
	failing     atomic.Bool
	failedCalls atomic.Int64
}

func (*toggleStore) Local() bool { return false }

func (s *toggleStore) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	if s.failing.Load() {
		s.failedCalls.Add(1)
		return limiter.Decision{}, errTest
	}
	return s.Store.Take(ctx, key, l, cost)
}

// A refusal the over-limit cache answers is not the store's success: a
// client hammering its exhausted budget must not keep the breaker closed
// while every other principal's call fails against the store.
func TestBreakerIgnoresOverLimitCacheAnswers(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	mem := cfg.Store.(*memorystore.Store)
	store := &toggleStore{Store: mem}
	cfg.Store = store
	cfg.OverLimitCache = stack.OverLimitCacheOn
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	search := request{method: "GET", path: "/api/search", header: bearer(aliceKey)}
	for range 10 { // alice spends her 100 points
		do(t, h, search)
	}
	if w := do(t, h, search); w.Code != http.StatusTooManyRequests {
		t.Fatalf("alice not refused: %d", w.Code)
	}
	store.failing.Store(true)
	for range 20 {
		if w := do(t, h, search); w.Code != http.StatusTooManyRequests { // answered by the cache
			t.Fatalf("alice: %d", w.Code)
		}
		do(t, h, request{method: "GET", path: "/api/free", header: bearer(bobKey)}) // reaches the failing store
	}
	if n := store.failedCalls.Load(); n > int64(breaker.DefaultFailures) {
		t.Errorf("%d calls reached the failing store; the breaker should have opened after %d", n, breaker.DefaultFailures)
	}
}

// laneFailingStore fails the takes of lane budgets and passes the others
// to inner.
type laneFailingStore struct{ inner limiter.Store }

func (s laneFailingStore) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	if strings.HasPrefix(key, "lane:") {
		return limiter.Decision{}, errTest
	}
	return s.inner.Take(ctx, key, l, cost)
}

func (s laneFailingStore) Refund(ctx context.Context, key string, l limiter.Limit, amount int64) (limiter.Decision, error) {
	return s.inner.Refund(ctx, key, l, amount)
}

// A lane budget's store call that opens the breaker is reported on the
// decision that made it, as the plan's own call is.
func TestBreakerChangedByLaneBudget(t *testing.T) {
	cfg := testConfig(t, newClock())
	cfg.Store = laneFailingStore{inner: cfg.Store.(limiter.Store)}
	cfg.FailureMode = budget.FailClosed
	cfg.Breaker = breaker.Config{Failures: 1, CoolDown: time.Second}
	cfg.Lanes = []middleware.Lane{
		{Name: "search", Priority: overload.Normal, Match: middleware.LaneMatch{REST: []string{"GET /api/search"}},
			Budget: &middleware.LaneBudget{Burst: 20, Rate: 20, Per: 100 * time.Second}},
		{Name: "rest", Priority: overload.Normal},
	}
	rec := &recorder{}
	cfg.Observer = rec
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	w := do(t, h, request{method: http.MethodGet, path: "/api/search", header: bearer(aliceKey)})
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503 (the lane's store failed, closed)", w.Code)
	}
	evs := rec.take()
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	if e := evs[0]; !e.BreakerChanged || e.Breaker != guard.BreakerOpen {
		t.Errorf("event: breaker %q changed %v; want open, changed", e.Breaker, e.BreakerChanged)
	}
}
