package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
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

// redisLimiter builds a Limiter on a Redis store. Time is Redis's own.
func redisLimiter(t *testing.T, store limiter.Store, mode budget.FailureMode, timeout time.Duration) *middleware.Limiter {
	t.Helper()
	return newLimiter(t, config{Dependencies: middleware.Dependencies{
		Store:        store,
		StoreTimeout: timeout,
		Logger:       discardLogger(),
	}, Policy: middleware.Policy{
		Plans: map[string]budget.Plan{
			// No meaningful refill during the test, and no refunds: the
			// tests count admitted requests by their requested price.
			"free": {Burst: 500, Rate: 1, Per: time.Hour, DisableRefund: true},
			"anon": {Burst: 20, Rate: 20, Per: time.Hour, DisableRefund: true},
		},
		AnonymousPlan: "anon",
		APIKeys:       map[string]identity.APIKey{aliceKey: {Principal: "alice", Plan: "free"}},
		REST:          middleware.RESTOptions{Routes: map[string]int64{"GET /api/search": 10}},
		FailureMode:   mode,
	}})
}

// Twelve clients through three server instances sharing one Redis spend one
// principal's budget with GraphQL and REST requests: the admitted cost is
// exactly the burst, never more.
func TestSharedRedisNeverOverspends(t *testing.T) {
	srv := redistest.StartServer(t)
	store, err := redisstore.New(srv.Client(t), redisstore.Config{Prefix: "mw-test"})
	if err != nil {
		t.Fatal(err)
	}
	// A generous timeout: under -race on a busy machine a round trip can be
	// slow, and this test is about exactness, not timeouts.
	var urls []string
	for range 3 {
		ts := httptest.NewServer(graphQLServer(redisLimiter(t, store, budget.FailClosed, time.Minute), newTestSchema()))
		t.Cleanup(ts.Close)
		urls = append(urls, ts.URL)
	}
	type call struct {
		method, path, body string
		cost               int64
	}
	gql := func(q string) string { b, _ := json.Marshal(map[string]string{"query": q}); return string(b) }
	calls := []call{
		{"POST", "/graphql", gql(query61), 61},
		{"GET", "/api/search?q=x", "", 10},
		{"POST", "/graphql", gql(mutation11), 11},
		{"GET", "/api/users/octocat", "", 1},
	}
	send := func(base string, c call) (int, error) {
		req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return resp.StatusCode, nil
	}

	var admitted, unavailable atomic.Int64
	var wg sync.WaitGroup
	for client := range 12 {
		wg.Go(func() {
			for i := range 25 {
				c := calls[(client+i)%len(calls)]
				code, err := send(urls[client%3], c)
				switch {
				case err != nil:
					t.Error(err)
					return
				case code == http.StatusOK:
					admitted.Add(c.cost)
				case code == http.StatusServiceUnavailable:
					unavailable.Add(1)
				case code != http.StatusTooManyRequests:
					t.Errorf("%s %s: status %d", c.method, c.path, code)
				}
			}
		})
	}
	wg.Wait()
	// Drain what is left one point at a time.
	for i := 0; ; i++ {
		code, err := send(urls[i%3], calls[3])
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusOK {
			break
		}
		admitted.Add(1)
	}
	if unavailable.Load() != 0 {
		t.Errorf("%d store timeouts", unavailable.Load())
	}
	if got := admitted.Load(); got != 500 {
		t.Errorf("admitted %d points from a burst of 500", got)
	}
}

// With the real Redis gone, each failure mode does what it says, promptly,
// and limiting resumes when Redis is back.
func TestRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	store, err := redisstore.New(srv.Client(t), redisstore.Config{Prefix: "mw-test"})
	if err != nil {
		t.Fatal(err)
	}
	open := graphQLServer(redisLimiter(t, store, budget.FailOpen, 100*time.Millisecond), newTestSchema())
	closed := graphQLServer(redisLimiter(t, store, budget.FailClosed, 100*time.Millisecond), newTestSchema())
	search := request{method: "GET", path: "/api/search", header: bearer(aliceKey)}

	if w := do(t, closed, search); w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "490" {
		t.Fatalf("Redis up: %d %v", w.Code, w.Header())
	}
	if w := do(t, open, search); w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "480" {
		t.Fatalf("Redis up, second process: %d %v", w.Code, w.Header())
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if w := do(t, closed, search); w.Code != http.StatusServiceUnavailable {
		t.Errorf("closed, Redis down: %d", w.Code)
	}
	if w, resp := query(t, closed, query61, bearer(aliceKey)); w.Code != http.StatusServiceUnavailable || resp.code() != budget.CodeRateLimiterUnavailable {
		t.Errorf("closed, Redis down, GraphQL: %d %+v", w.Code, resp.Errors)
	}
	// The fallback bucket is local and starts from what this process last
	// heard from Redis (480 left), not from a fresh burst of 500: an outage
	// must not hand out spare capacity.
	if w := do(t, open, search); w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "470" {
		t.Errorf("open, Redis down: %d %v", w.Code, w.Header())
	}
	// A principal this process never saw starts empty.
	if w := do(t, open, request{method: "GET", path: "/api/search", remoteAddr: "192.0.2.9:1"}); w.Code != http.StatusTooManyRequests {
		t.Errorf("open, Redis down, unknown principal: %d %v", w.Code, w.Header())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Restart empties the data set: a full bucket again, in Redis. (go-redis
	// retries a command whose pooled connection died with the old server.)
	last := do(t, closed, search)
	if last.Code != http.StatusOK || last.Header().Get(middleware.HeaderXRateLimitRemaining) != "490" {
		t.Errorf("Redis back: %d %v", last.Code, last.Header())
	}
}

// Twelve clients through three server instances on one Redis (standalone
// and Cluster) spend one principal's bucket, quota and field limit with
// mutations of one and three createIssue selections and queries of none:
// every budget ends debited by exactly what the admitted requests cost, so
// no refusal by one left another debited.
func TestSharedRedisMultiLimitAllOrNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.StartServer(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, err := redisstore.New(tc.client(t), redisstore.Config{Prefix: "mw-multi-" + tc.name})
			if err != nil {
				t.Fatal(err)
			}
			bucket := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 300, Rate: 1, Period: time.Hour}
			quota := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 400, Period: 24 * time.Hour}
			field := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 20, Period: time.Hour}
			var urls []string
			for range 3 {
				cfg := config{Dependencies: middleware.Dependencies{
					Store:        store,
					StoreTimeout: time.Minute, // exactness, not timeouts
					Logger:       discardLogger(),
				}, Policy: middleware.Policy{
					Plans: map[string]budget.Plan{
						"free": {Burst: bucket.Burst, Rate: bucket.Rate, Per: bucket.Period, DisableRefund: true,
							Quota: &budget.Quota{Limit: quota.Rate, Per: quota.Period}},
						"anon": {Burst: 20, Rate: 20, Per: time.Hour},
					},
					FieldLimits:   map[string]budget.FieldLimit{"Mutation.createIssue": {Limit: field.Burst, Per: field.Period}},
					AnonymousPlan: "anon",
					APIKeys:       map[string]identity.APIKey{aliceKey: {Principal: "alice", Plan: "free"}},
					FailureMode:   budget.FailClosed,
				}}
				ts := httptest.NewServer(graphQLServer(newLimiter(t, cfg), newTestSchema()))
				t.Cleanup(ts.Close)
				urls = append(urls, ts.URL)
			}
			type call struct {
				q                string
				cost, selections int64
			}
			calls := []call{{query61, 61, 0}, {mutation11, 11, 1}, {aliasedIssues(3), 13, 3}}
			var cost, selections, unavailable atomic.Int64
			var wg sync.WaitGroup
			for client := range 12 {
				wg.Go(func() {
					for i := range 20 {
						c := calls[(client+i)%len(calls)]
						body, _ := json.Marshal(map[string]string{"query": c.q})
						req, _ := http.NewRequest(http.MethodPost, urls[client%3]+"/graphql", bytes.NewReader(body))
						req.Header.Set("Authorization", "Bearer "+aliceKey)
						req.Header.Set("Content-Type", "application/json")
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							t.Error(err)
							return
						}
						resp.Body.Close()
						switch resp.StatusCode {
						case http.StatusOK:
							cost.Add(c.cost)
							selections.Add(c.selections)
						case http.StatusServiceUnavailable:
							unavailable.Add(1)
						case http.StatusTooManyRequests:
						default:
							t.Errorf("status %d", resp.StatusCode)
						}
					}
				})
			}
			wg.Wait()
			if unavailable.Load() != 0 {
				t.Errorf("%d store failures", unavailable.Load())
			}
			ds := make([]limiter.Decision, 3)
			err = store.TakeAll(context.Background(), []limiter.Request{
				{Key: "user:alice", Limit: bucket},
				{Key: "user:alice", Name: "quota", Limit: quota},
				{Key: "user:alice", Name: "field:Mutation.createIssue", Limit: field},
			}, ds)
			if err != nil {
				t.Fatal(err)
			}
			// The refill over the test (1 point an hour, 20 selections an
			// hour) is below one whole token for runs under three minutes.
			if spent := bucket.Burst - ds[0].Remaining; spent != cost.Load() {
				t.Errorf("bucket spent %d, admitted requests cost %d", spent, cost.Load())
			}
			if spent := quota.Rate - ds[1].Remaining; spent != cost.Load() {
				t.Errorf("quota spent %d, admitted requests cost %d", spent, cost.Load())
			}
			if spent := field.Burst - ds[2].Remaining; spent != selections.Load() {
				t.Errorf("field limit spent %d, admitted requests selected it %d times", spent, selections.Load())
			}
			if cost.Load() == 0 || selections.Load() == 0 {
				t.Errorf("nothing admitted: cost %d, selections %d", cost.Load(), selections.Load())
			}
			t.Logf("admitted cost %d, selections %d", cost.Load(), selections.Load())
		})
	}
}
