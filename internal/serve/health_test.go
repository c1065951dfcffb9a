package serve

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/middleware"
)

// rateLimitHeaders are every header the limiter sets on a metered answer.
var rateLimitHeaders = []string{
	middleware.HeaderRateLimit, middleware.HeaderRateLimitPolicy,
	middleware.HeaderXRateLimitLimit, middleware.HeaderXRateLimitRemaining, middleware.HeaderXRateLimitUsed,
	middleware.HeaderXRateLimitReset, middleware.HeaderRetryAfter,
}

// The probes draw on no budget: with alice's budget and the anonymous one
// spent, and with an unknown key, they still answer 200 without a
// RateLimit header, and asking them spends nothing.
func TestProbesAreUnlimited(t *testing.T) {
	cfg := defaultConfig()
	cfg.Plans = map[string]planConfig{
		"free": {Plan: budget.Plan{Burst: 3, Rate: 1, Per: time.Hour}},
		"anon": {Plan: budget.Plan{Burst: 2, Rate: 1, Per: time.Hour}},
	}
	cfg.REST.Routes = map[string]int64{}
	s := newTestServer(t, cfg, deps{ping: func(context.Context) error { return nil }})

	for _, c := range []client{alice, anonymous} {
		for {
			w := s.do(c, http.MethodGet, "/api/users/octocat", nil)
			if w.Code == http.StatusTooManyRequests {
				break
			}
			require.Equal(t, http.StatusOK, w.Code)
		}
	}
	stranger := client{remoteAddr: "192.0.2.9:40000", apiKey: "no-such-key"}
	require.Equal(t, http.StatusUnauthorized, s.do(stranger, http.MethodGet, "/api/users/octocat", nil).Code)

	for _, c := range []client{alice, anonymous, stranger} {
		for _, path := range []string{"/healthz", "/readyz"} {
			for range 5 {
				w := s.do(c, http.MethodGet, path, nil)
				assert.Equal(t, http.StatusOK, w.Code, "%s for %s", path, c.remoteAddr)
				assert.Equal(t, "ok\n", w.Body.String())
				assert.Equal(t, "text/plain; charset=utf-8", w.Header().Get("Content-Type"))
				for _, h := range rateLimitHeaders {
					assert.Empty(t, w.Header().Values(h), "%s answers with %s", path, h)
				}
			}
		}
	}
	// Still exhausted, still by the same amount: the probes spent nothing.
	for _, c := range []client{alice, anonymous} {
		w := s.do(c, http.MethodGet, "/api/users/octocat", nil)
		assert.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "0", w.Header().Get(middleware.HeaderXRateLimitRemaining))
	}
	// HEAD works too (a GET pattern serves it); other methods do not.
	assert.Equal(t, http.StatusOK, s.do(anonymous, http.MethodHead, "/healthz", nil).Code)
	assert.Equal(t, http.StatusMethodNotAllowed, s.do(anonymous, http.MethodPost, "/readyz", nil).Code)
}

// The in-memory store (no ping) is always ready.
func TestReadyzInMemory(t *testing.T) {
	s := newTestServer(t, defaultConfig(), deps{})
	w := s.do(anonymous, http.MethodGet, "/readyz", nil)
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "ok\n", w.Body.String())
}

// /readyz follows the ping, under the store timeout, reusing an answer
// for readyReuse by the injected clock; /healthz never asks the store.
func TestReadyzFollowsThePing(t *testing.T) {
	var (
		pings  atomic.Int64
		fail   atomic.Bool
		budget atomic.Int64 // the time the ping was given, in nanoseconds
	)
	ping := func(ctx context.Context) error {
		pings.Add(1)
		deadline, ok := ctx.Deadline()
		if !ok {
			return errors.New("the ping has no deadline")
		}
		budget.Store(int64(time.Until(deadline)))
		if fail.Load() {
			return errors.New("dial tcp 10.0.0.1:6379: connection refused")
		}
		return nil
	}
	logs := &syncBuffer{}
	s := newTestServer(t, defaultConfig(), deps{ping: ping, logger: slog.New(slog.NewTextHandler(logs, nil))})
	ready := func() (int, string) {
		w := s.do(anonymous, http.MethodGet, "/readyz", nil)
		return w.Code, w.Body.String()
	}

	code, _ := ready()
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, int64(1), pings.Load())
	assert.Positive(t, budget.Load())
	assert.LessOrEqual(t, budget.Load(), int64(stack.DefaultStoreTimeout), "the ping runs under the store timeout")

	// Within readyReuse the answer is reused: the store sees one ping.
	fail.Store(true)
	for range 10 {
		code, _ = ready()
		assert.Equal(t, http.StatusOK, code)
	}
	assert.Equal(t, int64(1), pings.Load())
	assert.Equal(t, http.StatusOK, s.do(anonymous, http.MethodGet, "/healthz", nil).Code)
	assert.Equal(t, int64(1), pings.Load(), "/healthz does not ping")

	s.clock.Advance(readyReuse)
	code, body := ready()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "budget store unavailable\n", body, "the reason is logged, not sent")
	assert.Equal(t, int64(2), pings.Load())
	assert.Equal(t, http.StatusOK, s.do(anonymous, http.MethodGet, "/healthz", nil).Code, "a live process stays live")
	assert.Contains(t, logs.String(), "the budget store does not answer")
	assert.Contains(t, logs.String(), "connection refused")

	// Failing again is not logged again; recovering is.
	s.clock.Advance(readyReuse)
	code, _ = ready()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, 1, strings.Count(logs.String(), "does not answer"))
	fail.Store(false)
	s.clock.Advance(readyReuse)
	code, _ = ready()
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, logs.String(), "the budget store answers again")
}

// store_timeout bounds each store call: the limiter's, and /readyz's
// ping; left out, the library's default. A test's deps.storeTimeout wins.
func TestStoreTimeoutKey(t *testing.T) {
	for _, tt := range []struct {
		file string
		deps time.Duration
		want time.Duration
	}{
		{"", 0, stack.DefaultStoreTimeout},
		{"store_timeout: 250ms\n", 0, 250 * time.Millisecond},
		{"store_timeout: 250ms\n", 2 * time.Second, 2 * time.Second},
	} {
		cfg, err := parseConfig([]byte(tt.file))
		require.NoError(t, err)
		var given atomic.Int64 // the time the ping was given
		ping := func(ctx context.Context) error {
			deadline, _ := ctx.Deadline()
			given.Store(int64(time.Until(deadline)))
			return nil
		}
		s := newTestServer(t, cfg, deps{ping: ping, storeTimeout: tt.deps, logger: slog.New(slog.DiscardHandler)})
		assert.Equal(t, tt.want, cmp.Or(firstOf(s.h.(*server).limiterConfig(cfg)).StoreTimeout, stack.DefaultStoreTimeout), "%q", tt.file)
		require.Equal(t, http.StatusOK, s.do(anonymous, http.MethodGet, "/readyz", nil).Code)
		assert.LessOrEqual(t, given.Load(), int64(tt.want), "%q: the ping runs under the store timeout", tt.file)
		assert.Greater(t, given.Load(), int64(tt.want)/2, "%q: the ping is given the store timeout", tt.file)
	}
}

// A ping that does not answer within the store timeout is a 503, not a
// probe that hangs.
func TestReadyzPingTimeout(t *testing.T) {
	hang := func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	s := newTestServer(t, defaultConfig(), deps{ping: hang, logger: slog.New(slog.DiscardHandler)})
	assert.Equal(t, http.StatusServiceUnavailable, s.do(anonymous, http.MethodGet, "/readyz", nil).Code)
}

// Against real Redis: ready while it answers, 503 once it is gone, through
// the ping openStore builds and the client it opens.
func TestReadyzWithRedis(t *testing.T) {
	rs := redistest.StartServer(t)
	st, err := openStore(t.Context(), "redis://"+rs.Addr()+"/0", "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.close() })
	s := newTestServer(t, defaultConfig(), deps{store: st.store, ping: st.ping, logger: slog.New(slog.DiscardHandler)})

	assert.Equal(t, http.StatusOK, s.do(anonymous, http.MethodGet, "/readyz", nil).Code)
	require.NoError(t, rs.Stop())
	s.clock.Advance(readyReuse)
	assert.Equal(t, http.StatusServiceUnavailable, s.do(anonymous, http.MethodGet, "/readyz", nil).Code)
	assert.Equal(t, http.StatusOK, s.do(anonymous, http.MethodGet, "/healthz", nil).Code)
	require.NoError(t, rs.Restart())
	// Ready again once a ping gets through: the first after the restart
	// dials anew within the 100 ms store timeout, which a loaded machine
	// (CI runs the Redis suites side by side under -race) can miss.
	code := 0
	for deadline := time.Now().Add(10 * time.Second); code != http.StatusOK && time.Now().Before(deadline); {
		s.clock.Advance(readyReuse)
		code = s.do(anonymous, http.MethodGet, "/readyz", nil).Code
	}
	assert.Equal(t, http.StatusOK, code, "never ready again after the restart")
}

// A Cluster is ready only when every master answers: each holds the
// budgets of its slots. A private Cluster, since one master is stopped.
func TestReadyzWithRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	st, err := openStore(t.Context(), "", strings.Join(cl.Addrs(), ","))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.close() })
	s := newTestServer(t, defaultConfig(), deps{store: st.store, ping: st.ping, logger: slog.New(slog.DiscardHandler)})

	assert.Equal(t, http.StatusOK, s.do(anonymous, http.MethodGet, "/readyz", nil).Code)
	require.NoError(t, cl.Nodes()[2].Stop())
	s.clock.Advance(readyReuse)
	assert.Equal(t, http.StatusServiceUnavailable, s.do(anonymous, http.MethodGet, "/readyz", nil).Code,
		"one master of three is down")
	assert.Error(t, st.ping(t.Context()))
}

// firstOf is the middleware.Dependencies of limiterConfig's answer.
func firstOf(d middleware.Dependencies, _ middleware.Policy) middleware.Dependencies { return d }
