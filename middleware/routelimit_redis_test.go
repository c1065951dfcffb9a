package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
)

// Twelve clients through three server instances sharing one Redis
// (standalone and Cluster) log in, each login costing 3 points, under a
// route limit of every algorithm counted by both principal and address:
// the bucket ends debited by exactly 3 per admitted login and the route
// limit by exactly one, whichever of them was the one to refuse.
func TestSharedRedisRouteLimitAllOrNothing(t *testing.T) {
	algorithms := []budget.LimitAlgorithm{budget.TokenBucket, budget.LeakyBucketPolicing, budget.FixedWindow, budget.SlidingLog, budget.SlidingCounter}
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.StartServer(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := tc.client(t)
			for _, alg := range algorithms {
				for _, routeLimit := range []int64{10, 30} { // the route binds; the bucket (16 logins) binds
					t.Run(string(alg), func(t *testing.T) {
						runRouteLimitRace(t, rdb, tc.name+string(alg), alg, routeLimit)
					})
				}
			}
		})
	}
}

func runRouteLimitRace(t *testing.T, rdb redis.UniversalClient, prefix string, alg budget.LimitAlgorithm, routeLimit int64) {
	store, err := redisstore.New(rdb, redisstore.Config{Prefix: "mw-route-" + prefix + "-" + string(rune('a'+routeLimit%26))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	var urls []string
	for range 3 {
		lim := newLimiter(t, config{Dependencies: middleware.Dependencies{
			Store:        store,
			StoreTimeout: time.Minute, // exactness, not timeouts
			Logger:       discardLogger(),
		}, Policy: middleware.Policy{
			Plans: map[string]budget.Plan{
				"free": {Burst: 50, Rate: 1, Per: time.Hour},
				"anon": {Burst: 20, Rate: 20, Per: time.Hour},
			},
			AnonymousPlan: "anon",
			APIKeys:       map[string]identity.APIKey{aliceKey: {Principal: "alice", Plan: "free"}},
			REST: middleware.RESTOptions{
				Routes:      map[string]int64{"POST /api/login": 3},
				RouteLimits: map[string]budget.FieldLimit{"POST /api/login": {Limit: routeLimit, Per: time.Hour, Algorithm: alg, By: budget.ByBoth}},
			},
			FailureMode: budget.FailClosed,
		}})
		ts := httptest.NewServer(lim.REST(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
		t.Cleanup(ts.Close)
		urls = append(urls, ts.URL)
	}
	var admitted, other atomic.Int64
	var wg sync.WaitGroup
	for client := range 12 {
		wg.Go(func() {
			for range 5 {
				req, _ := http.NewRequest(http.MethodPost, urls[client%3]+"/api/login", nil)
				req.Header.Set("Authorization", "Bearer "+aliceKey)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					admitted.Add(1)
				case http.StatusTooManyRequests:
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if other.Load() != 0 {
		t.Errorf("%d answers neither 200 nor 429", other.Load())
	}
	want := min(routeLimit, 50/3)
	if admitted.Load() != want {
		t.Errorf("admitted %d logins; want %d", admitted.Load(), want)
	}
	route := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: routeLimit, Rate: routeLimit, Period: time.Hour}
	switch alg {
	case budget.LeakyBucketPolicing:
		route.Algorithm = limiter.LeakyBucketPolicing
	case budget.FixedWindow:
		route.Algorithm = limiter.FixedWindow
	case budget.SlidingLog:
		route.Algorithm = limiter.SlidingLog
	case budget.SlidingCounter:
		route.Algorithm = limiter.SlidingCounter
	}
	ds := make([]limiter.Decision, 2)
	if err := store.TakeAll(context.Background(), []limiter.Request{
		{Key: "user:alice", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 50, Rate: 1, Period: time.Hour}},
		{Key: "user:alice", Name: "route:POST /api/login", Limit: route},
	}, ds); err != nil {
		t.Fatal(err)
	}
	// The address's count, another key (another Cluster slot): the
	// requests come from 127.0.0.1.
	byAddr := make([]limiter.Decision, 1)
	if err := store.TakeAll(context.Background(), []limiter.Request{{Key: "ip:127.0.0.1", Name: "route:POST /api/login", Limit: route}}, byAddr); err != nil {
		t.Fatal(err)
	}
	if spent := routeLimit - byAddr[0].Remaining; spent != admitted.Load() {
		t.Errorf("the address's route limit spent %d for %d logins", spent, admitted.Load())
	}
	if spent := 50 - ds[0].Remaining; spent != 3*admitted.Load() {
		t.Errorf("bucket spent %d for %d logins of 3", spent, admitted.Load())
	}
	// A token bucket of 10 or 30 an hour refills nothing whole within a
	// run under two minutes.
	if spent := routeLimit - ds[1].Remaining; spent != admitted.Load() {
		t.Errorf("route limit spent %d for %d logins", spent, admitted.Load())
	}
}
