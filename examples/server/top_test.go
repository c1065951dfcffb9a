package main

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

	err := run(context.Background(), []string{"-addr", "127.0.0.1:0", "-log-level", "verbose"}, io.Discard, io.Discard, nil)
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
