package serve

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/internal/redistest"
)

// The admin listener's /admin/top names who spent: an API key that paid
// for ten searches (10 points each) above an anonymous client that paid
// for three user lookups (1 each).
func TestAdminTopSpenders(t *testing.T) {
	srv := startRun(t, "-addr", "127.0.0.1:0")
	get := func(path, key string) {
		req, _ := http.NewRequest(http.MethodGet, srv.url+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}
	for range 10 {
		get("/api/search?q=octo", demoAPIKey)
	}
	for range 3 {
		get("/api/users/octocat", "")
	}
	resp, err := http.Get(srv.admin + "/admin/top?window=1m")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var top struct {
		Window  string `json:"window"`
		Reports []struct {
			Plan     string `json:"plan"`
			Total    int64  `json:"total_points"`
			Spenders []struct {
				Principal string `json:"principal"`
				Points    int64  `json:"points"`
			} `json:"spenders"`
		} `json:"reports"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&top))
	byPlan := map[string]int64{}
	for _, r := range top.Reports {
		require.NotEmpty(t, r.Spenders, r.Plan)
		byPlan[r.Plan] = r.Spenders[0].Points
		assert.Equal(t, r.Total, r.Spenders[0].Points, "%s: one spender holds the plan's total", r.Plan)
	}
	assert.Equal(t, map[string]int64{"free": 100, "anon": 3}, byPlan)
}

// -log-level debug logs each decision, naming the principal by a hash of
// its key; the default (info) does not; a level that is not one of the
// four is a usage error.
func TestLogLevel(t *testing.T) {
	request := func(srv *running) {
		req, _ := http.NewRequest(http.MethodGet, srv.url+"/api/users/octocat", nil)
		req.Header.Set("Authorization", "Bearer "+demoAPIKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	debug := startRun(t, "-addr", "127.0.0.1:0", "-log-level", "debug")
	request(debug)
	line := regexp.MustCompile(`msg="middleware: decision" principal=[0-9a-f]{16} plan=free `)
	require.Eventually(t, func() bool { return line.MatchString(debug.stderr.String()) },
		5*time.Second, 10*time.Millisecond, "no decision line in %s", debug.stderr.String())
	assert.NotContains(t, debug.stderr.String(), demoAPIKey)

	info := startRun(t, "-addr", "127.0.0.1:0")
	request(info)
	assert.NotContains(t, info.stderr.String(), "middleware: decision")

	err := Run(context.Background(), []string{"-addr", "127.0.0.1:0", "-log-level", "verbose"}, io.Discard, io.Discard, nil, Options{})
	assert.ErrorIs(t, err, errUsage)
	assert.ErrorContains(t, err, `-log-level "verbose"`)
}

// Every costguard_ metric /metrics serves is in docs/operations.md's
// table, and the table names none that is not served (the key cache's
// with -keys-postgres only: TestRunWithPostgresKeys serves them).
func TestMetricsTableMatchesServed(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	documented := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `costguard_") {
			continue
		}
		cell := strings.SplitN(line, "|", 3)[1]
		for _, m := range regexp.MustCompile("`(costguard_[a-z_]+)`").FindAllStringSubmatch(cell, -1) {
			documented[m[1]] = true
		}
	}
	srv := startRun(t, "-addr", "127.0.0.1:0")
	// One request makes the per-plan series; one near the limit would too,
	// but series exist from the first decision of a plan.
	resp, err := http.Get(srv.url + "/api/users/octocat")
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = http.Post(srv.url+"/graphql", "application/json", strings.NewReader(`{"query":"query Q { user(login: \"octocat\") { name } }"}`))
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = http.Get(srv.admin + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	served := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (costguard_[a-z_]+) `).FindAllStringSubmatch(string(body), -1) {
		served[m[1]] = true
	}
	for name := range served {
		assert.True(t, documented[name], "%s is served but not in docs/operations.md", name)
	}
	for name := range documented {
		if strings.HasPrefix(name, "costguard_key_cache_") || name == "costguard_store_breaker_open" || name == "costguard_store_data_loss_total" {
			continue // with -keys-postgres; on a shared store; with Redis
		}
		assert.True(t, served[name], "%s is documented but not served", name)
	}
}

// GET /admin/principals/{principal} shows the principal's recent
// decisions, and needs no ?plan= once the principal has made one.
func TestAdminPrincipalTimeline(t *testing.T) {
	srv := startRun(t, "-addr", "127.0.0.1:0")
	query := `{"query":"query Repos { user(login: \"octocat\") { repos(first: 10) { name } } }"}`
	req, _ := http.NewRequest(http.MethodPost, srv.url+"/graphql", strings.NewReader(query))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+demoAPIKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	var state struct {
		Principal string `json:"principal"`
		Plan      string `json:"plan"`
		Recent    []struct {
			Kind      string `json:"kind"`
			Operation string `json:"operation"`
			Requested int64  `json:"requested"`
			Actual    int64  `json:"actual"`
			HasActual bool   `json:"has_actual"`
			Charged   int64  `json:"charged"`
			Refunded  int64  `json:"refunded"`
			Net       int64  `json:"net"`
			Outcome   string `json:"outcome"`
		} `json:"recent"`
	}
	awaitAdminJSON(t, srv.admin+"/admin/principals/alice", &state, func() bool { return len(state.Recent) == 1 })
	assert.Equal(t, "user:alice", state.Principal)
	assert.Equal(t, "free", state.Plan)
	r := state.Recent[0]
	assert.Equal(t, "graphql", r.Kind)
	assert.Equal(t, "Repos", r.Operation)
	assert.Equal(t, int64(11), r.Requested)
	assert.True(t, r.HasActual)
	assert.Less(t, r.Actual, r.Requested)
	assert.Equal(t, "admitted", r.Outcome)
	// Admitted at its price, settled at its actual cost: the refund is
	// the difference, and what stays debited is the actual cost.
	assert.Equal(t, r.Requested, r.Charged, "the admission's charge")
	assert.Equal(t, r.Requested-r.Actual, r.Refunded, "the refund")
	assert.Equal(t, r.Actual, r.Net, "the net points")
}

// awaitAdminJSON reads url's JSON into v until done holds of it (the
// observers feed the admin routes after each response), for 5 s at most.
func awaitAdminJSON(t *testing.T, url string, v any, done func() bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(v) == nil && done()
	}, 5*time.Second, 10*time.Millisecond, "%s: %+v", url, v)
}

// GET /admin/operations reports what each named operation cost.
func TestAdminOperations(t *testing.T) {
	srv := startRun(t, "-addr", "127.0.0.1:0")
	for _, q := range []string{
		`query Repos { user(login: \"octocat\") { repos(first: 10) { name } } }`,
		`query Repos { user(login: \"octocat\") { repos(first: 10) { name } } }`,
		`{ user(login: \"octocat\") { name } }`,
	} {
		resp, err := http.Post(srv.url+"/graphql", "application/json", strings.NewReader(`{"query":"`+q+`"}`))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	var rep struct {
		Operations []struct {
			Operation       string `json:"operation"`
			Runs            int64  `json:"runs"`
			RequestedPoints int64  `json:"requested_points"`
			ActualPoints    int64  `json:"actual_points"`
		} `json:"operations"`
	}
	awaitAdminJSON(t, srv.admin+"/admin/operations", &rep, func() bool { return len(rep.Operations) == 2 && rep.Operations[0].Runs == 2 })
	assert.Equal(t, "Repos", rep.Operations[0].Operation)
	assert.Equal(t, int64(22), rep.Operations[0].RequestedPoints)
	assert.Less(t, rep.Operations[0].ActualPoints, int64(22))
	assert.Equal(t, "(anonymous)", rep.Operations[1].Operation)
}

// With Redis, /admin/top answers for every process: two servers on one
// Redis, each spent on by another client, and either one's /admin/top
// lists both (within the 5 s publishing interval).
func TestAdminTopAcrossProcesses(t *testing.T) {
	srv := redistest.StartServer(t)
	a := runServerProcess(t, "-redis", srv.Addr())
	b := runServerProcess(t, "-redis", srv.Addr())
	spend := func(p *serverProcess, key string, n int) {
		for range n {
			req, _ := http.NewRequest(http.MethodGet, p.url+"/api/search?q=octo", nil)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	spend(a, demoAPIKey, 3) // alice, on a: 30 points
	spend(b, "", 2)         // an address, on b: 20 points
	type report struct {
		Plan     string `json:"plan"`
		Spenders []struct {
			Principal string `json:"principal"`
			Points    int64  `json:"points"`
		} `json:"spenders"`
	}
	var top struct{ Reports []report }
	points := map[string]int64{}
	require.Eventually(t, func() bool {
		resp, err := http.Get(a.admin + "/admin/top")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&top) != nil {
			return false
		}
		clear(points)
		for _, r := range top.Reports {
			for _, s := range r.Spenders {
				points[r.Plan+" "+strings.SplitN(s.Principal, ":", 2)[0]] = s.Points
			}
		}
		return points["free user"] == 30 && points["anon ip"] == 20
	}, 15*time.Second, 200*time.Millisecond, "a's /admin/top never listed both processes' spenders: %v", points)
}
