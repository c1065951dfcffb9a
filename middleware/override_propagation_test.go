package middleware_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/override"
	"github.com/costguard/costguard/override/redisoverride"
)

// Three Limiters share one override store (the memory store of their
// process; Redis through a client each, standalone and Cluster) with the
// default poll interval: an override set through one applies in the other
// two within a second, and so does its deletion. The wall clock runs: the
// watchers poll in real time.
func TestOverridePropagation(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup returns a new override store for each Limiter, and their
		// shared budget store (nil: each Limiter's own memory).
		setup func(t *testing.T) (func() override.Store, limiter.Store)
	}{
		{"memory", func(t *testing.T) (func() override.Store, limiter.Store) {
			m, err := override.NewMemory(0)
			if err != nil {
				t.Fatal(err)
			}
			return func() override.Store { return m }, nil
		}},
		{"redis", func(t *testing.T) (func() override.Store, limiter.Store) {
			srv := redistest.StartServer(t)
			return func() override.Store { return redisOverrides(t, srv.Client(t)) }, nil
		}},
		{"cluster", func(t *testing.T) (func() override.Store, limiter.Store) {
			cl := redistest.SharedCluster(t)
			st, err := redisstore.New(cl.Client(t), redisstore.Config{Prefix: "mw-override-budgets"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return func() override.Store { return redisOverrides(t, cl.Client(t)) }, st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, budgets := tc.setup(t)
			var hs []http.Handler
			var lims []*middleware.Limiter
			for range 3 {
				lim := newLimiter(t, config{Dependencies: middleware.Dependencies{
					Store:     budgets,
					Overrides: middleware.OverrideOptions{Store: next()},
					Logger:    discardLogger(),
				}, Policy: middleware.Policy{
					FailureMode: budget.FailClosed, // a store error is a 503, never hidden
					Plans: map[string]budget.Plan{
						"free": {Burst: 100, Rate: 100, Per: 100 * time.Second, Quota: &budget.Quota{Limit: 1000, Per: 24 * time.Hour}},
						"pro":  {Burst: 1000, Rate: 1000, Per: 100 * time.Second},
						"anon": {Burst: 20, Rate: 20, Per: 100 * time.Second},
					},
					AnonymousPlan: "anon",
					APIKeys:       map[string]identity.APIKey{aliceKey: {Principal: "alice", Plan: "free"}},
				}})
				lims = append(lims, lim)
				hs = append(hs, graphQLServer(lim, newTestSchema()))
			}
			policy := func(h http.Handler) string {
				w := do(t, h, request{method: "GET", path: "/api/users/x", header: bearer(aliceKey)})
				return w.Header().Get(middleware.HeaderRateLimitPolicy)
			}
			measure := func(what string, change func() error, want string) {
				if err := change(); err != nil {
					t.Fatal(err)
				}
				set := time.Now()
				if got := policy(hs[0]); got != want {
					t.Errorf("%s: the Limiter that made it serves %q, want %q at once", what, got, want)
				}
				var wg sync.WaitGroup
				for i := 1; i < len(hs); i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Since(set) < 3*time.Second {
							if policy(hs[i]) == want {
								took := time.Since(set)
								t.Logf("%s: Limiter %d applied it after %v", what, i, took.Round(time.Millisecond))
								if took >= time.Second {
									t.Errorf("%s: Limiter %d took %v, more than a second", what, i, took)
								}
								return
							}
							time.Sleep(5 * time.Millisecond) // real time: the watchers poll in it
						}
						t.Errorf("%s: Limiter %d never applied it", what, i)
					}()
				}
				wg.Wait()
			}
			ctx := context.Background()
			measure("set", func() error { return lims[0].SetOverride(ctx, "alice", override.Override{Plan: "pro"}) }, `"pro";q=1000;w=100`)
			measure("delete", func() error { _, err := lims[0].DeleteOverride(ctx, "alice"); return err }, `"free";q=100;w=100, "free-daily";q=1000;w=86400`)
			if budgets == nil {
				return
			}
			// On a shared Cluster, an override's bucket and quota are one
			// principal's budgets in one slot, decided at once and shared
			// by every process.
			measure("limits", func() error {
				return lims[0].SetOverride(ctx, "alice", override.Override{Plan: "free", Burst: 500, Quota: &override.Quota{Limit: 5000}})
			}, `"override:free";q=500;w=500, "override:free-daily";q=5000;w=86400`)
			before := do(t, hs[0], request{method: "GET", path: "/api/users/x", header: bearer(aliceKey)})
			for i, h := range hs {
				w := do(t, h, request{method: "GET", path: "/api/users/x", header: bearer(aliceKey)})
				if w.Code != http.StatusOK {
					t.Fatalf("Limiter %d: %d %s", i, w.Code, w.Body)
				}
				if i == len(hs)-1 {
					left, _ := strconv.Atoi(before.Header().Get(middleware.HeaderXRateLimitRemaining))
					if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != strconv.Itoa(left-3) {
						t.Errorf("after one request through each Limiter: %s left, want %d (one shared budget)", got, left-3)
					}
				}
			}
		})
	}
}

func redisOverrides(t *testing.T, c redis.UniversalClient) override.Store {
	s, err := redisoverride.New(redisoverride.Config{Client: c, Prefix: "mw-override"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
