package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/middleware"
)

// countingStore is a limiter.Store (not a *memorystore.Store, so it counts
// as shared) that counts the calls reaching it.
type countingStore struct {
	limiter.Store
	takes, refunds atomic.Int64
}

func (c *countingStore) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, key, l, cost)
}

func (c *countingStore) Refund(ctx context.Context, key string, l limiter.Limit, n int64) (limiter.Decision, error) {
	c.refunds.Add(1)
	return c.Store.Refund(ctx, key, l, n)
}

func newMemoryStore(t *testing.T, clock limiter.Clock) *memorystore.Store {
	t.Helper()
	m, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// Which stores get the over-limit cache in each mode. The cache is
// observed through what it is documented to do: after a rejection, tokens
// given back behind its back (here, straight to the memory store) are not
// seen until the Retry-After has passed.
func TestOverLimitCacheModes(t *testing.T) {
	cases := []struct {
		name   string
		store  func(mem *memorystore.Store) limiter.Store
		mode   stack.OverLimitCache
		cached bool
		err    string
	}{
		{"shared store, default", shared, "", true, ""},
		{"shared store, auto", shared, stack.OverLimitCacheAuto, true, ""},
		{"shared store, on", shared, stack.OverLimitCacheOn, true, ""},
		{"shared store, off", shared, stack.OverLimitCacheOff, false, ""},
		{"memory store, auto", func(m *memorystore.Store) limiter.Store { return m }, stack.OverLimitCacheAuto, false, ""},
		{"memory store, on", func(m *memorystore.Store) limiter.Store { return m }, stack.OverLimitCacheOn, true, ""},
		{"unknown mode", shared, "sometimes", false, `OverLimitCache "sometimes" is none of "auto", "on", "off"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := newClock()
			mem := newMemoryStore(t, clock)
			cfg := testConfig(t, clock)
			cfg.Store = c.store(mem)
			cfg.OverLimitCache = c.mode
			lim, err := middleware.New(cfg.Dependencies, cfg.Policy)
			if c.err != "" {
				if !errors.Is(err, middleware.ErrInvalidConfig) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("New: %v; want ErrInvalidConfig mentioning %s", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lim.Close() })
			h := graphQLServer(lim, newTestSchema())
			search := request{method: "GET", path: "/api/search", header: bearer(aliceKey)} // 10 points of alice's 100
			for range 10 {
				if w := do(t, h, search); w.Code != http.StatusOK {
					t.Fatalf("spending the burst: %d", w.Code)
				}
			}
			if w := do(t, h, search); w.Code != http.StatusTooManyRequests {
				t.Fatalf("exhausted: %d, want 429", w.Code)
			}
			if _, err := mem.Refund(context.Background(), "user:alice", limiter.Limit{
				Algorithm: limiter.TokenBucket, Burst: 100, Rate: 100, Period: 100 * time.Second,
			}, 50); err != nil {
				t.Fatal(err)
			}
			w := do(t, h, search)
			if got := w.Code == http.StatusTooManyRequests; got != c.cached {
				t.Fatalf("after tokens came back behind the cache: %d; cached %v, want %v", w.Code, got, c.cached)
			}
			clock.Advance(10 * time.Second) // the Retry-After of the remembered rejection
			if w := do(t, h, search); w.Code != http.StatusOK {
				t.Fatalf("after Retry-After: %d, want 200", w.Code)
			}
		})
	}
}

func shared(m *memorystore.Store) limiter.Store { return &countingStore{Store: m} }

// A SplitBudget plan is served from leases; an exact plan next to it
// still asks the store for every request. Close gives the leases back.
func TestSplitBudgetPlans(t *testing.T) {
	clock := newClock()
	mem := newMemoryStore(t, clock)
	store := &countingStore{Store: mem}
	cfg := testConfig(t, clock)
	cfg.Store = store
	cfg.Plans = map[string]budget.Plan{
		"ux":      {Burst: 100, Rate: 100, Per: 100 * time.Second, SplitBudget: true},
		"billing": {Burst: 100, Rate: 100, Per: 100 * time.Second},
		"anon":    {Burst: 20, Rate: 20, Per: 100 * time.Second},
	}
	cfg.APIKeys = map[string]identity.APIKey{
		aliceKey: {Principal: "alice", Plan: "ux"},
		bobKey:   {Principal: "bob", Plan: "billing"},
	}
	cfg.SplitBudget = middleware.SplitBudgetOptions{LeaseFraction: 0.1, SettleInterval: time.Hour}
	lim, err := middleware.New(cfg.Dependencies, cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	h := graphQLServer(lim, newTestSchema())
	users := func(key string) request { return request{method: "GET", path: "/api/users/x", header: bearer(key)} } // 1 point

	for i := range 5 {
		w := do(t, h, users(aliceKey))
		if want := strconv.Itoa(99 - i); w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitRemaining) != want {
			t.Fatalf("ux request %d: %d, remaining %q, want 200 and %s", i, w.Code, w.Header().Get(middleware.HeaderXRateLimitRemaining), want)
		}
	}
	if n := store.takes.Load(); n != 1 {
		t.Fatalf("5 requests on the split plan made %d store calls, want 1 (one lease)", n)
	}
	for i := range 5 {
		w := do(t, h, users(bobKey))
		if want := strconv.Itoa(99 - i); w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitRemaining) != want {
			t.Fatalf("billing request %d: %d, remaining %q, want 200 and %s", i, w.Code, w.Header().Get(middleware.HeaderXRateLimitRemaining), want)
		}
	}
	if n := store.takes.Load(); n != 6 {
		t.Fatalf("5 requests on the exact plan: %d store calls in all, want 6", n)
	}
	peek := func(key string) int64 {
		d, err := mem.Take(context.Background(), key, limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 100, Rate: 100, Period: 100 * time.Second}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	if got := peek("user:alice"); got != 90 {
		t.Fatalf("the store holds %d of alice's tokens, want 90 (a lease of 10 out)", got)
	}
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	if got := peek("user:alice"); got != 95 {
		t.Fatalf("after Close the store holds %d of alice's tokens, want 95", got)
	}
}

func TestSplitBudgetConfig(t *testing.T) {
	clock := newClock()
	mem := newMemoryStore(t, clock)
	cases := []struct {
		name  string
		store limiter.Store
		opts  middleware.SplitBudgetOptions
		err   string
	}{
		{"lease fraction above 1", mem, middleware.SplitBudgetOptions{LeaseFraction: 2}, "LeaseFraction 2 is not in (0, 1]"},
		{"negative settle interval", mem, middleware.SplitBudgetOptions{SettleInterval: -time.Second}, "SettleInterval must not be negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, clock)
			cfg.Store = c.store
			plans := testPlans()
			free := plans["free"]
			free.SplitBudget = true
			plans["free"] = free
			cfg.Plans = plans
			cfg.SplitBudget = c.opts
			_, err := middleware.New(cfg.Dependencies, cfg.Policy)
			if !errors.Is(err, middleware.ErrInvalidConfig) || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("New: %v; want ErrInvalidConfig mentioning %s", err, c.err)
			}
		})
	}
}
