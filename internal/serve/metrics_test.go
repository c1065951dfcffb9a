package serve

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/costguard/costguard/budget"
	"github.com/stretchr/testify/require"
)

// A scripted mix of requests through real HTTP, then a scrape of /metrics:
// the decision counters are exact, and /metrics itself is neither limited
// nor counted.
func TestMetricsCountEveryDecision(t *testing.T) {
	cfg := defaultConfig()
	cfg.Plans["anon"] = planConfig{Plan: budget.Plan{Burst: 20, Rate: 20, Per: cfg.Plans["anon"].Per}}
	ts := newTestServer(t, cfg, deps{})
	srv := httptest.NewServer(ts.h)
	t.Cleanup(srv.Close)

	send := func(method, path, body, key string) int {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	gql := func(q string) string { return `{"query":` + strings.ReplaceAll(`"`+q+`"`, "\n", " ") + `}` }

	// alice (free, 5000): 3 admitted GraphQL operations, 1 breadth refusal,
	// 2 admitted REST searches.
	for range 3 {
		require.Equal(t, 200, send("POST", "/graphql", gql(`{ user(login: \"octocat\") { login } }`), demoAPIKey))
	}
	require.Equal(t, 422, send("POST", "/graphql", gql(`{ user(login: \"octocat\") { repos(first: 1000) { name } } }`), demoAPIKey))
	for range 2 {
		require.Equal(t, 200, send("GET", "/api/search?q=a", "", demoAPIKey))
	}
	// anonymous (anon, 20): two searches of 10 admitted, the third refused.
	require.Equal(t, 200, send("GET", "/api/search?q=a", "", ""))
	require.Equal(t, 200, send("GET", "/api/search?q=a", "", ""))
	require.Equal(t, 429, send("GET", "/api/search?q=a", "", ""))
	// Probes and scrapes are not decisions.
	require.Equal(t, 200, send("GET", "/healthz", "", ""))
	// /metrics is served on the admin listener only: the public port
	// answers 404 there.
	require.Equal(t, 404, send("GET", "/metrics", "", ""))
	admin := httptest.NewServer(ts.admin)
	defer admin.Close()
	for _, probe := range []string{"/healthz", "/readyz"} {
		r, err := http.Get(admin.URL + probe)
		require.NoError(t, err)
		r.Body.Close()
		require.Equal(t, 200, r.StatusCode, "admin %s", probe)
	}

	resp, err := http.Get(admin.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Empty(t, resp.Header.Get("RateLimit"), "/metrics is not limited")
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var decisions []string
	for line := range strings.Lines(string(b)) {
		counter := strings.HasPrefix(line, "costguard_decisions_total{") || strings.HasPrefix(line, "costguard_fallback_decisions_total{")
		if counter && !strings.HasSuffix(strings.TrimSpace(line), " 0") {
			decisions = append(decisions, strings.TrimSpace(line))
		}
	}
	require.ElementsMatch(t, []string{
		`costguard_decisions_total{kind="graphql",lane="authenticated",outcome="admitted",plan="free"} 3`,
		`costguard_decisions_total{kind="graphql",lane="authenticated",outcome="cost_exceeded",plan="free"} 1`,
		`costguard_decisions_total{kind="rest",lane="authenticated",outcome="admitted",plan="free"} 2`,
		`costguard_decisions_total{kind="rest",lane="anonymous",outcome="admitted",plan="anon"} 2`,
		`costguard_decisions_total{kind="rest",lane="anonymous",outcome="rate_limited",plan="anon"} 1`,
	}, decisions)
	body := string(b)
	for _, want := range []string{
		`costguard_operation_cost_points_count{kind="graphql",plan="free"} 3`,
		`costguard_operation_cost_points_sum{kind="rest",plan="anon"} 30`,
		`costguard_store_duration_seconds_count{result="ok"} 9`,
		"go_goroutines ",
	} {
		require.Contains(t, body, want)
	}
}
