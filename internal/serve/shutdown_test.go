package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
)

// TestRunShutdownFinishesInFlight: a shutdown (the context SIGTERM
// cancels) refuses new connections at once, lets a slow request in flight
// finish with its refund, stores that refund (a second server on the same
// Redis sees it), and leaves no goroutine behind.
func TestRunShutdownFinishesInFlight(t *testing.T) {
	srv := redistest.StartServer(t) // its process watcher is part of the baseline
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	require.NoError(t, os.WriteFile(path, []byte("demo_latency: 300ms\n"), 0o600))
	args := []string{"-addr", "127.0.0.1:0", "-config", path, "-redis", "redis://" + srv.Addr() + "/0"}
	client := &http.Client{Transport: &http.Transport{}, Timeout: waitLimit}
	rdb := srv.Client(t)
	require.NoError(t, rdb.Ping(t.Context()).Err())
	baseline := runtime.NumGoroutine()

	r := startRun(t, args...)
	type answer struct {
		status int
		body   []byte
		err    error
		at     time.Time
	}
	answered := make(chan answer, 1)
	go func() {
		body, _ := json.Marshal(map[string]string{"query": readmeQuery})
		req, _ := http.NewRequest(http.MethodPost, r.url+"/graphql", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+demoAPIKey)
		resp, err := client.Do(req)
		if err != nil {
			answered <- answer{err: err, at: time.Now()}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- answer{status: resp.StatusCode, body: b, err: err, at: time.Now()}
	}()
	// The request is in flight once its price is debited: alice's bucket
	// appears in Redis before the resolvers start their 300 ms. (Other
	// keys appear at start: the data-loss probe's epoch key.)
	require.Eventually(t, func() bool {
		keys, err := rdb.Keys(t.Context(), "*{user:alice}*bucket*").Result()
		return err == nil && len(keys) > 0
	}, waitLimit, time.Millisecond, "the slow request was never debited")

	stopped := make(chan error, 1)
	go func() { stopped <- r.stop() }()
	// New connections are refused while the slow request is still running.
	refusedAt := waitRefused(t, r.url)

	a := <-answered
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	assert.True(t, refusedAt.Before(a.at), "a new connection was accepted until the slow request had finished")
	var resp gqlResponse
	require.NoError(t, json.Unmarshal(a.body, &resp), string(a.body))
	require.NotNil(t, resp.Extensions.Cost.ActualQueryCost)
	assert.EqualValues(t, 14, *resp.Extensions.Cost.ActualQueryCost, "the in-flight request was priced and refunded")
	require.NoError(t, <-stopped, "a graceful shutdown returns nil")

	// Everything run started has ended: the HTTP server, the limiter, the
	// store's batcher and the Redis client's pool.
	client.CloseIdleConnections()
	requireGoroutinesEnded(t, baseline)

	// The refund reached Redis: a new server sees 5000 - 14 - 1 after a
	// REST call of cost 1, not 5000 - 61 - 1.
	r2 := startRun(t, args...)
	req, _ := http.NewRequest(http.MethodGet, r2.url+"/api/users/octocat", nil)
	req.Header.Set("Authorization", "Bearer "+demoAPIKey)
	resp2, err := client.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp2.Body)
	resp2.Body.Close()
	require.Equal(t, http.StatusOK, resp2.StatusCode)
	assert.Equal(t, fmt.Sprint(5000-14-1), resp2.Header.Get(middleware.HeaderXRateLimitRemaining))
	require.NoError(t, r2.stop())
	client.CloseIdleConnections()
}

// TestRunShutdownReturnsLeases: a plan with split_budget: true spends from
// a lease taken out of Redis at once; a shutdown gives the unspent part
// back, so Redis then holds the burst less exactly what the admitted
// requests cost, and no goroutine is left behind.
func TestRunShutdownReturnsLeases(t *testing.T) {
	const (
		burst = 5000
		lease = burst / 20 // split_budget.lease_fraction 0.05
	)
	srv := redistest.StartServer(t) // its process watcher is part of the baseline
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	// A refill of 1 point a day leaves every count exact for the test's
	// length; a settle interval of an hour leaves the lease to the
	// shutdown to give back.
	cfg := "split_budget: {lease_fraction: 0.05, settle_interval: 1h}\n" +
		"plans: {free: {burst: 5000, rate: 1, per: 24h, split_budget: true}, anon: {burst: 500, rate: 500, per: 1h}}\n" +
		"api_keys: {" + demoAPIKey + ": {principal: alice, plan: free}}\n"
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	args := []string{"-addr", "127.0.0.1:0", "-config", path, "-redis", "redis://" + srv.Addr() + "/0"}
	client := &http.Client{Transport: &http.Transport{}, Timeout: waitLimit}
	rdb := srv.Client(t)
	require.NoError(t, rdb.Ping(t.Context()).Err())
	// inRedis peeks at alice's budget in Redis (a take of 0) through a
	// store of its own, closed before it returns.
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: burst, Rate: 1, Period: 24 * time.Hour}
	inRedis := func() int64 {
		t.Helper()
		st, err := redisstore.New(rdb, redisstore.Config{})
		require.NoError(t, err)
		defer st.Close()
		d, err := st.Take(t.Context(), "user:alice", limit, 0)
		require.NoError(t, err)
		return d.Remaining
	}
	baseline := runtime.NumGoroutine()

	r := startRun(t, args...)
	do := func(req *http.Request) *http.Response {
		t.Helper()
		req.Header.Set("Authorization", "Bearer "+demoAPIKey)
		resp, err := client.Do(req)
		require.NoError(t, err)
		return resp
	}
	// Three REST calls of 1 point and the README query (61 requested, 14
	// actual after the refund), all from one lease.
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, r.url+"/api/users/octocat", nil)
		resp := do(req)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	body, _ := json.Marshal(map[string]string{"query": readmeQuery})
	req, _ := http.NewRequest(http.MethodPost, r.url+"/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp := do(req)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var gql gqlResponse
	require.NoError(t, json.Unmarshal(b, &gql), string(b))
	require.NotNil(t, gql.Extensions.Cost.ActualQueryCost)
	require.EqualValues(t, 14, *gql.Extensions.Cost.ActualQueryCost)
	const spent = 3*1 + 14

	// The process holds one whole lease: Redis has paid it out, not the
	// 17 points spent from it.
	assert.EqualValues(t, burst-lease, inRedis(), "Redis while the lease is held")

	require.NoError(t, r.stop(), "a graceful shutdown returns nil")
	client.CloseIdleConnections()
	requireGoroutinesEnded(t, baseline)

	// The unspent lease went back: only what was admitted is gone.
	assert.EqualValues(t, burst-spent, inRedis(), "Redis after the shutdown")
}

// requireGoroutinesEnded waits until no more goroutines run than baseline,
// counted before run started, and fails with every stack if some remain.
func requireGoroutinesEnded(t *testing.T, baseline int) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(5 * time.Millisecond) // polling a count; no result is timed
	}
	if n := runtime.NumGoroutine(); n > baseline {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after shutdown, %d before start:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
	}
}

// waitRefused waits until the server at url refuses new connections and
// returns when it first did.
func waitRefused(t *testing.T, url string) time.Time {
	t.Helper()
	host := strings.TrimPrefix(url, "http://")
	var refusedAt time.Time
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", host, time.Second)
		if err != nil {
			refusedAt = time.Now()
			return true
		}
		c.Close()
		return false
	}, waitLimit, time.Millisecond, "the listener stayed open during the shutdown")
	return refusedAt
}
