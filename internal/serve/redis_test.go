package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
)

func TestRunWithRedis(t *testing.T) {
	rs := redistest.StartServer(t)
	rdb := rs.Client(t)

	srv := startRun(t, "-addr", "127.0.0.1:0", "-redis", "redis://"+rs.Addr()+"/0")
	assert.Equal(t, "Redis at "+rs.Addr()+", db 0", srv.budgets)
	resp := get(t, srv.url+"/api/search?q=octo")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "490", resp.Header.Get(middleware.HeaderXRateLimitRemaining))
	keys, err := rdb.Keys(t.Context(), redisstore.DefaultPrefix+":*").Result()
	require.NoError(t, err)
	assert.NotEmpty(t, keys, "the budget lives in Redis")

	// A second process on the same Redis, found through REDIS_URL, sees the
	// same budget.
	t.Setenv("REDIS_URL", "redis://"+rs.Addr()+"/0")
	other := startRun(t, "-addr", "127.0.0.1:0")
	assert.Equal(t, srv.budgets, other.budgets)
	resp = get(t, other.url+"/api/users/octocat")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "489", resp.Header.Get(middleware.HeaderXRateLimitRemaining))
}

func TestRunWithRedisCluster(t *testing.T) {
	addrs := strings.Join(redistest.SharedCluster(t).Addrs(), ",")
	a := startRun(t, "-addr", "127.0.0.1:0", "-redis-cluster", addrs)
	b := startRun(t, "-addr", "127.0.0.1:0", "-redis-cluster", addrs)
	assert.Equal(t, "Redis Cluster via "+addrs, a.budgets)

	remaining := func(base string) int {
		resp := get(t, base+"/api/users/octocat")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		n, err := strconv.Atoi(resp.Header.Get(middleware.HeaderXRateLimitRemaining))
		require.NoError(t, err)
		return n
	}
	first := remaining(a.url)
	assert.Equal(t, first-1, remaining(b.url), "two processes share the budget through the Cluster")
}

func TestRunRedisUnreachable(t *testing.T) {
	rs := redistest.StartServer(t)
	require.NoError(t, rs.Stop())
	err := Run(t.Context(), []string{"-addr", "127.0.0.1:0", "-redis", "redis://" + rs.Addr()}, io.Discard, io.Discard, nil, Options{})
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "Redis at "+rs.Addr()+", db 0 does not answer"),
		"main adds the only prefix: %v", err)
}

// The store run opens owns the batcher's goroutines; closing it stops them
// and then closes the client, so calls afterwards fail with ErrClosed
// rather than reaching Redis.
func TestOpenStoreCloseStopsTheStore(t *testing.T) {
	rs := redistest.StartServer(t)
	st, err := openStore(t.Context(), "redis://"+rs.Addr()+"/0", "")
	require.NoError(t, err)
	lim := limiter.Limit{Burst: 10, Rate: 10, Period: time.Minute}
	_, err = st.store.Take(t.Context(), "k", lim, 1)
	require.NoError(t, err)

	require.NoError(t, st.close())
	_, err = st.store.Take(t.Context(), "k", lim, 1)
	assert.ErrorIs(t, err, redisstore.ErrClosed, "redisstore.Store.Close was not called")
}

// 12 clients spread over 3 server processes sharing one Redis (or one
// Cluster) never spend more than the principal's budget, and every point
// is accounted for: what was admitted plus what is left is the burst.
func TestServersSharingRedisNeverOverspend(t *testing.T) {
	// Each entry starts (or finds) one Redis deployment and returns a way to
	// open a client to it: one client per server process.
	deployments := map[string]func(t *testing.T) func() redis.UniversalClient{
		"redis": func(t *testing.T) func() redis.UniversalClient {
			rs := redistest.StartServer(t)
			return func() redis.UniversalClient { return rs.Client(t) }
		},
		"cluster": func(t *testing.T) func() redis.UniversalClient {
			cl := redistest.SharedCluster(t)
			return func() redis.UniversalClient { return cl.Client(t) }
		},
	}
	for name, deploy := range deployments {
		t.Run(name, func(t *testing.T) {
			connect := deploy(t)
			const (
				burst   = 300
				servers = 3
				clients = 12
				perEach = 40
			)
			cfg := defaultConfig()
			// Refill is 1 point a day: nothing comes back during the test.
			cfg.Plans["free"] = planConfig{Plan: budget.Plan{Burst: burst, Rate: 1, Per: 24 * time.Hour}}
			// Exactness of the shared store is what is tested: a store call
			// that times out on a loaded machine answers 503 rather than
			// admitting through this process's fallback bucket.
			cfg.FailureMode = budget.FailClosed
			prefix := fmt.Sprintf("overspend-%s-%d", name, time.Now().UnixNano())

			var urls []string
			for range servers {
				st, err := redisstore.New(connect(), redisstore.Config{Prefix: prefix})
				require.NoError(t, err)
				ts := newTestServer(t, cfg, deps{store: st, clock: limiter.SystemClock{}})
				hs := httptest.NewServer(ts.h)
				t.Cleanup(hs.Close)
				urls = append(urls, hs.URL)
			}

			type op struct {
				method, path, body string
				cost               int64
			}
			ops := []op{
				{http.MethodGet, "/api/users/octocat", "", 1},
				{http.MethodGet, "/api/search?q=octo", "", 10},
				{http.MethodPost, "/graphql", `{"query":"{ user(login: \"octocat\") { repos(first: 2) { name } } }"}`, 3},
			}
			var admitted, rejected, unavailable atomic.Int64
			var wg sync.WaitGroup
			for c := range clients {
				wg.Go(func() {
					for i := range perEach {
						o := ops[(c+i)%len(ops)]
						req, err := http.NewRequest(o.method, urls[(c+i)%servers]+o.path, strings.NewReader(o.body))
						if err != nil {
							t.Error(err)
							return
						}
						req.Header.Set("Authorization", "Bearer "+demoAPIKey)
						req.Header.Set("Content-Type", "application/json")
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							t.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						switch resp.StatusCode {
						case http.StatusOK:
							admitted.Add(o.cost)
						case http.StatusTooManyRequests:
							rejected.Add(1)
						case http.StatusServiceUnavailable:
							// The store timed out: the script may still have
							// debited, once, with nothing admitted.
							unavailable.Add(1)
						default:
							t.Errorf("%s %s: status %d", o.method, o.path, resp.StatusCode)
							return
						}
					}
				})
			}
			wg.Wait()

			// A document that fails validation pays invalid_cost (1) when
			// the bucket holds it, and reports the bucket.
			resp := withKey(t, urls[0]+"/graphql", `{"query":"{ nosuchfield }"}`)
			for try := 0; resp.StatusCode == http.StatusServiceUnavailable && try < 20; try++ {
				// The probe timed out (and may have spent its point): again.
				resp = withKey(t, urls[0]+"/graphql", `{"query":"{ nosuchfield }"}`)
				unavailable.Add(1)
			}
			left, err := strconv.ParseInt(resp.Header.Get(middleware.HeaderXRateLimitRemaining), 10, 64)
			require.NoError(t, err)
			if resp.StatusCode != http.StatusTooManyRequests {
				left++
			}

			t.Logf("admitted %d points, %d requests refused, %d left", admitted.Load(), rejected.Load(), left)
			assert.LessOrEqual(t, admitted.Load(), int64(burst), "overspent")
			if unavailable.Load() == 0 {
				assert.Equal(t, int64(burst), admitted.Load()+left, "every point is accounted for")
			} else {
				t.Logf("%d store calls timed out", unavailable.Load())
				assert.LessOrEqual(t, admitted.Load()+left, int64(burst))
			}
			assert.Positive(t, rejected.Load(), "the test must push past the budget")
		})
	}
}

// With the store down, failure_mode decides: open admits through a local
// bucket, closed answers 503 with Retry-After.
func TestStoreDown(t *testing.T) {
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) {
			rs := redistest.StartServer(t)
			st, err := redisstore.New(rs.Client(t), redisstore.Config{})
			require.NoError(t, err)
			cfg := defaultConfig()
			cfg.FailureMode = budget.FailureMode(mode)
			logs := &syncBuffer{}
			ts := newTestServer(t, cfg, deps{store: st, logger: slog.New(slog.NewTextHandler(logs, nil))})
			// The process hears of alice from the store first: the fail-open
			// bucket starts from that (4999 left), never from a fresh burst.
			require.Equal(t, http.StatusOK, ts.do(alice, http.MethodGet, "/api/users/octocat", nil).Code)
			ran := ts.res.Calls()
			require.NoError(t, rs.Stop())

			w := ts.do(alice, http.MethodGet, "/api/users/octocat", nil)
			gw, body := ts.graphql(alice, readmeQuery)
			if mode == "open" {
				assert.Equal(t, http.StatusOK, w.Code)
				assert.Equal(t, "4998", w.Header().Get(middleware.HeaderXRateLimitRemaining), "the local bucket meters from the last known")
				assert.Equal(t, http.StatusOK, gw.Code)
				assert.Empty(t, body.Errors)
				assert.Contains(t, logs.String(), "rate-limit store failed")
				return
			}
			assert.Equal(t, http.StatusServiceUnavailable, w.Code)
			assert.JSONEq(t, `{"error":"rate_limiter_unavailable","retry_after_seconds":1}`, w.Body.String())
			assert.Equal(t, "1", w.Header().Get(middleware.HeaderRetryAfter))
			assert.Equal(t, http.StatusServiceUnavailable, gw.Code)
			assert.Equal(t, budget.CodeRateLimiterUnavailable, body.code())
			assert.Equal(t, "rate limiter unavailable; retry in 1 second", body.Errors[0].Message, "singular")
			assert.Equal(t, ran, ts.res.Calls(), "nothing runs when the limiter cannot decide")
		})
	}
}

func withKey(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+demoAPIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var discard json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&discard)
	resp.Body.Close()
	return resp
}

// TestDataLossMetric restarts the server's Redis empty: the store detects
// the loss, and /metrics counts it (and the log says it).
func TestDataLossMetric(t *testing.T) {
	rs := redistest.StartServer(t)
	srv := startRun(t, "-addr", "127.0.0.1:0", "-redis", rs.Addr())
	lost := func() string {
		resp, err := http.Get(srv.admin + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		for line := range strings.SplitSeq(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "costguard_store_data_loss_total "); ok {
				return v
			}
		}
		return "absent"
	}
	require.Equal(t, "0", lost())
	require.NoError(t, rs.Restart())
	require.Eventually(t, func() bool { return lost() == "1" }, waitLimit, 50*time.Millisecond,
		"no data loss counted; stderr: %s", srv.stderr)
	assert.Contains(t, srv.stderr.String(), "Redis lost its data")
}
