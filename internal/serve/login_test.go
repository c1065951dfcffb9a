package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/middleware"
)

// The shipped configuration protects POST /api/login with a sliding log of
// 5 attempts in any 15 minutes per client address, over a real TCP
// connection: the sixth attempt from one address is 429
// route_rate_limited with Retry-After (right password or not, API key or
// not), another address still logs in, and the first one may try again
// exactly when Retry-After says.
func TestLoginRouteLimit(t *testing.T) {
	cfg := defaultConfig()
	cfg.TrustedProxies = []string{"127.0.0.1/32", "::1/128"} // the test is the proxy: X-Forwarded-For names the client
	ts := newTestServer(t, cfg, deps{})
	srv := httptest.NewServer(ts.h)
	t.Cleanup(srv.Close)

	login := func(addr, password, apiKey string) (*http.Response, map[string]any) {
		body, _ := json.Marshal(loginBody{Login: demoLogin, Password: password})
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/login", strings.NewReader(string(body)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", addr)
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m), "%s", b)
		return resp, m
	}

	const guesser, other = "203.0.113.50", "198.51.100.60"
	for i := range 5 {
		resp, body := login(guesser, "hunter2", "")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "attempt %d: %v", i+1, body)
		assert.Equal(t, "invalid_credentials", body["error"])
		assert.Contains(t, resp.Header.Get(middleware.HeaderRateLimitPolicy), `"POST /api/login";q=5;w=900`)
	}
	resp, body := login(guesser, demoPassword, "")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%v", body)
	assert.Equal(t, "route_rate_limited", body["error"])
	assert.Equal(t, "900", resp.Header.Get(middleware.HeaderRetryAfter), "the oldest attempt leaves the window in 15 minutes")
	// An API key changes nothing: the limit counts the address.
	resp, _ = login(guesser, demoPassword, demoAPIKey)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)

	resp, body = login(other, demoPassword, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%v", body)
	assert.Equal(t, demoLogin, body["login"])
	assert.Len(t, body["token"], 32)

	ts.clock.Advance(899 * time.Second)
	resp, _ = login(guesser, demoPassword, "")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "a second early")
	ts.clock.Advance(time.Second)
	resp, body = login(guesser, demoPassword, "")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "when Retry-After said: %v", body)
}

// A file naming rest.route_limits replaces the default map: the login
// route's limit is gone unless the file lists it.
func TestRouteLimitsMapReplacesDefault(t *testing.T) {
	cfg, err := parseConfig([]byte(`
rest:
  route_limits:
    "GET /api/search": {limit: 100, per: 1m, algorithm: sliding_counter, by: both}
`))
	require.NoError(t, err)
	rl := limiterPolicy(cfg).REST.RouteLimits
	assert.Len(t, rl, 1)
	assert.Equal(t, "sliding_counter", string(rl["GET /api/search"].Algorithm))
	assert.Equal(t, map[string]int64{"GET /api/search": 10}, limiterPolicy(cfg).REST.Routes, "rest.routes keeps its default")

	_, err = parseConfig([]byte(`
rest:
  route_limits:
    "POST /api/login": {limit: 5, per: 15m, algorithm: leaky_bucket_shaping, max_delay: 3600}
`))
	require.Error(t, err, "a duration without a unit")
}
