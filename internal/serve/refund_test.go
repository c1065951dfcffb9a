package serve

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
)

// The worked example: the README query requests 61; octocat's four
// repositories hold 3, 2, 2 and 2 issues, so it actually costs
// 1 + 4 + 9 = 14, and 47 points come back before the headers are written.
func TestRefundOfUnusedCost(t *testing.T) {
	ts := newTestServer(t, defaultConfig(), deps{})
	w, resp := ts.graphql(alice, readmeQuery)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	cost := resp.Extensions.Cost
	require.NotNil(t, cost.ActualQueryCost)
	assert.EqualValues(t, 61, cost.RequestedQueryCost)
	assert.EqualValues(t, 14, *cost.ActualQueryCost)
	assert.EqualValues(t, 5000-14, *cost.ThrottleStatus.CurrentlyAvailable)
	assert.Equal(t, "4986", w.Header().Get(middleware.HeaderXRateLimitRemaining))
	assert.Equal(t, "14", w.Header().Get(middleware.HeaderXRateLimitUsed))

	// A refund never raises a bucket above its burst: with the clock moved
	// on, the bucket is nearly whole again when the refund arrives.
	ts.clock.Advance(time.Hour)
	w, resp = ts.graphql(alice, readmeQuery)
	require.Equal(t, http.StatusOK, w.Code)
	assert.EqualValues(t, 5000-14, *resp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable)
}

// refund_unused: false keeps the whole requested cost; the actual cost is
// still reported.
func TestRefundDisabledPerPlan(t *testing.T) {
	cfg := defaultConfig()
	p := cfg.Plans["free"]
	no := false
	p.RefundUnused = &no
	cfg.Plans["free"] = p
	ts := newTestServer(t, cfg, deps{})
	w, resp := ts.graphql(alice, readmeQuery)
	require.Equal(t, http.StatusOK, w.Code)
	assert.EqualValues(t, 14, *resp.Extensions.Cost.ActualQueryCost)
	assert.EqualValues(t, 5000-61, *resp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable)
}

// Refunds are exact under concurrency, on the memory store and on Redis
// (standalone and Cluster): after n concurrent worked examples the bucket
// holds burst − 14n, never more, never less.
func TestRefundsAreExactUnderConcurrency(t *testing.T) {
	const clients, each = 8, 10
	stores := map[string]func(t *testing.T) limiter.Store{
		"memory": func(*testing.T) limiter.Store { return nil },
		"redis": func(t *testing.T) limiter.Store {
			s, err := redisstore.New(redistest.StartServer(t).Client(t), redisstore.Config{Prefix: "refund"})
			require.NoError(t, err)
			return s
		},
		"cluster": func(t *testing.T) limiter.Store {
			s, err := redisstore.New(redistest.SharedCluster(t).Client(t), redisstore.Config{Prefix: "refund-" + strings.ReplaceAll(t.Name(), "/", "-")})
			require.NoError(t, err)
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			cfg := defaultConfig()
			// A refill so slow it adds nothing during the test.
			cfg.Plans["free"] = planConfig{Plan: budget.Plan{Burst: 100_000, Rate: 1, Per: 24 * time.Hour}}
			// A refund that outlives the default 100 ms store timeout (a
			// Cluster on a loaded machine) is lost by design; this test is
			// about exactness, so it waits.
			ts := newTestServer(t, cfg, deps{store: open(t), storeTimeout: 10 * time.Second})
			srv := httptest.NewServer(ts.h)
			t.Cleanup(srv.Close)

			var wg sync.WaitGroup
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						resp := postGraphQL(t, srv.URL, demoAPIKey, readmeQuery)
						if resp.StatusCode != http.StatusOK {
							t.Errorf("status %d", resp.StatusCode)
							return
						}
					}
				}()
			}
			wg.Wait()
			resp := getWithKey(t, srv.URL+"/api/users/octocat", demoAPIKey)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, strconv.Itoa(100_000-14*clients*each-1), resp.Header.Get(middleware.HeaderXRateLimitRemaining))
		})
	}
}

// postGraphQL posts query over real HTTP with an API key.
func postGraphQL(t *testing.T, base, key, query string) *http.Response {
	t.Helper()
	body, err := json.Marshal(map[string]string{"query": query})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, base+"/graphql", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// getWithKey gets url over real HTTP with an API key.
func getWithKey(t *testing.T, url, key string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}
