package serve

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
)

// mode: shadow through real HTTP: what enforce mode refuses for its budget
// or a static limit runs and answers 200 with the real bucket's headers,
// and /metrics counts it as shadow_rejected; a document bound stays on.
func TestShadowModeOverHTTP(t *testing.T) {
	cfg := defaultConfig()
	cfg.Mode = "shadow"
	cfg.Plans["anon"] = planConfig{Plan: budget.Plan{Burst: 20, Rate: 20, Per: cfg.Plans["anon"].Per}}
	ts := newTestServer(t, cfg, deps{})
	srv := httptest.NewServer(ts.h)
	t.Cleanup(srv.Close)

	get := func(path string) *http.Response {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := range 4 { // 10 points each from 20: the third and fourth would be 429
		resp := get("/api/search?q=octo")
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i+1)
		assert.Empty(t, resp.Header.Get(middleware.HeaderRetryAfter))
		if i >= 2 {
			assert.Equal(t, "0", resp.Header.Get(middleware.HeaderXRateLimitRemaining), "the headers describe the real bucket")
		}
	}
	calls := ts.res.Calls()
	w, body := ts.graphql(anonymous, `{ user(login: "octocat") { repos(first: 1000) { name } } }`) // max_breadth 100
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Empty(t, body.Errors)
	assert.Greater(t, ts.res.Calls(), calls, "the shadowed operation ran")
	w, body = ts.graphql(anonymous, "{"+strings.Repeat(" __typename", 501)+" }") // max_selections: stays on
	assert.Equal(t, http.StatusUnprocessableEntity, w.Code)
	assert.Equal(t, "MAX_SELECTIONS_EXCEEDED", body.code())

	admin := httptest.NewServer(ts.admin)
	defer admin.Close()
	resp, err := http.Get(admin.URL + "/metrics")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	for _, want := range []string{
		`costguard_decisions_total{kind="rest",lane="anonymous",outcome="admitted",plan="anon"} 2`,
		`costguard_decisions_total{kind="rest",lane="anonymous",outcome="shadow_rejected",plan="anon"} 2`,
		`costguard_decisions_total{kind="graphql",lane="anonymous",outcome="shadow_rejected",plan="anon"} 1`,
		`costguard_decisions_total{kind="graphql",lane="anonymous",outcome="cost_exceeded",plan="anon"} 1`,
	} {
		assert.Contains(t, string(b), want)
	}
}
