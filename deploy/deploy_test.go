package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/internal/tailbuf"
	"github.com/costguard/costguard/internal/testenv"
)

const (
	rulesFile     = "prometheus/alerts.yml"
	rulesTestFile = "prometheus/alerts_test.yml"
	dashboardFile = "grafana/costguard.json"
)

// The example server's start-up lines (internal/serve/main.go).
var (
	startLine = regexp.MustCompile(`^costguard example server on (http://\S+) `)
	adminLine = regexp.MustCompile(`^admin endpoints \(/metrics, /healthz, /readyz\) on (http://\S+)$`)
)

// dashboard is what the test reads of the Grafana JSON.
type dashboard struct {
	SchemaVersion int `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a row's
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	return d
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// grafanaVars stand for the dashboard's variables in a query sent to
// Prometheus directly: every plan, a one-minute rate window (four scrapes
// of the test's 1 s interval at least) and a five-minute range.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m",
	"$__range", "5m",
	"$plan", ".*",
)

// TestDashboard checks the dashboard's shape: a recent schema, the
// Prometheus data source as a variable every panel uses, unique panel ids,
// and a PromQL query in every target.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	assert.GreaterOrEqual(t, d.SchemaVersion, 36)
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	assert.Equal(t, "datasource", vars["DS_PROMETHEUS"])
	ids := map[int]bool{}
	ps := allPanels(d.Panels)
	require.NotEmpty(t, ps)
	for _, p := range ps {
		assert.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		assert.Equal(t, "${DS_PROMETHEUS}", p.Datasource.UID, p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			expr := grafanaVars.Replace(tg.Expr)
			assert.NotContains(t, expr, "$", "%s %s: a variable the test does not know", p.Title, tg.RefID)
			assert.Contains(t, expr, "costguard_", "%s %s", p.Title, tg.RefID)
		}
	}
}

// tool returns the path of a program the test needs, or ends the test.
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		testenv.Missing(t, name+" not on PATH (Debian: apt-get install prometheus): the Prometheus checks")
	}
	return path
}

// TestAlertRules runs promtool over the rules: syntax, and the unit tests
// with synthetic series.
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestPrometheus runs the example server on a throwaway Redis, scraped
// every second by a real Prometheus with the alert rules loaded. Under a
// scripted load (admissions, refunds, refusals for budget and for cost, a
// principal driven near its limit) every query of every dashboard panel
// returns data; then Redis is stopped and the breaker and fallback alerts
// fire, and once it is back, empty, the data-loss alert fires.
func TestPrometheus(t *testing.T) {
	testenv.Long(t) // about 45 s, most of it waiting for the breaker alert
	prometheus := tool(t, "prometheus")
	rules, err := filepath.Abs(rulesFile)
	require.NoError(t, err)
	rdb := redistest.StartServer(t)
	dir := t.TempDir()

	server := filepath.Join(dir, "server")
	build := exec.Command("go", "build", "-o", server, ".")
	build.Dir = filepath.Join("..", "examples", "server") // a module of its own
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)

	// Small buckets, so that a few requests bring a principal near its
	// limit and refusals come quickly; pro never runs out, for the
	// background load.
	cfg := filepath.Join(dir, "costguard.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`plans:
  free: {burst: 300, rate: 1, per: 1s}
  anon: {burst: 50, rate: 1, per: 1s}
  pro: {burst: 1000000, rate: 1000000, per: 1s}
anonymous_plan: anon
api_keys:
  key-alice: {principal: alice, plan: free}
  key-bob: {principal: bob, plan: pro}
`), 0o600))
	app, admin := startServer(t, server, "-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0",
		"-redis", rdb.Addr(), "-config", cfg)

	target, err := url.Parse(admin)
	require.NoError(t, err)
	promCfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(promCfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: costguard
    static_configs:
      - targets: [%q]
`, rules, target.Host)), 0o600))
	prom := startPrometheus(t, prometheus, promCfg, filepath.Join(dir, "data"))

	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	send := func(method, path, key, body string) int {
		req, err := http.NewRequest(method, app+path, strings.NewReader(body))
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	gql := func(key, query string) int {
		b, _ := json.Marshal(map[string]string{"query": query})
		return send(http.MethodPost, "/graphql", key, string(b))
	}

	// In the background, until the end: bob's cheap requests, so that
	// every scrape sees decisions, and the breaker sees failures once
	// Redis is gone.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, app+"/api/users/octocat", nil)
			req.Header.Set("Authorization", "Bearer key-bob")
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()

	// A first decision of each plan makes its series; Prometheus must
	// scrape them before the load, since rate() counts nothing for the
	// samples a series is born with.
	require.Equal(t, http.StatusOK, send(http.MethodGet, "/api/users/octocat", "key-alice", ""))
	require.Equal(t, http.StatusOK, send(http.MethodGet, "/api/users/octocat", "", ""))
	waitFor(t, 10*time.Second, func() bool {
		return len(prom.query(t, `costguard_operation_actual_cost_points_count{plan="free"}`)) > 0 &&
			len(prom.query(t, `costguard_decisions_total{plan="anon"}`)) > 0
	}, func() string { return "the example server's series never scraped" })

	// The scripted load. alice's GraphQL queries are priced for ten
	// repositories of five issues and return fewer: refunds, and actual
	// costs below the requested ones; she spends until refused, passing
	// under a fifth of her bucket on the way.
	const aliceQuery = `{ user(login: "octocat") { repos(first: 10) { issues(first: 5) { title } } } }`
	codes := map[int]int{}
	for i := 0; i < 500 && codes[http.StatusTooManyRequests] == 0; i++ {
		codes[gql("key-alice", aliceQuery)]++
	}
	require.Positive(t, codes[http.StatusOK], "alice's queries: %v", codes)
	require.Positive(t, codes[http.StatusTooManyRequests], "alice's queries: %v", codes)
	// Anonymous: a query priced above the whole 50-point bucket, then
	// searches (10 points each) until the bucket refuses.
	assert.Equal(t, http.StatusUnprocessableEntity,
		gql("", `{ user(login: "octocat") { repos(first: 100) { issues(first: 100) { title } } } }`))
	clear(codes)
	for range 8 {
		codes[send(http.MethodGet, "/api/search?q=go", "", "")]++
	}
	assert.Positive(t, codes[http.StatusTooManyRequests], "anonymous searches: %v", codes)

	// Every panel's every query returns data: a sample that is a number.
	d := readDashboard(t)
	type query struct{ panel, ref, expr string }
	var queries []query
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			queries = append(queries, query{p.Title, tg.RefID, grafanaVars.Replace(tg.Expr)})
		}
	}
	var empty []string
	waitFor(t, 20*time.Second, func() bool {
		empty = empty[:0]
		for _, q := range queries {
			if len(prom.query(t, q.expr)) == 0 {
				empty = append(empty, fmt.Sprintf("%s (%s): %s", q.panel, q.ref, q.expr))
			}
		}
		return len(empty) == 0
	}, func() string { return "panel queries without data:\n" + strings.Join(empty, "\n") })
	near := prom.query(t, `sum(costguard_near_limit_decisions_total)`)
	require.NotEmpty(t, near)
	assert.Positive(t, near[0], "no near-limit decision")

	// The store goes away: the breaker opens and fail-open plans decide
	// from local buckets; both alerts fire once they have held for their
	// 30 s.
	require.NoError(t, rdb.Stop())
	stopped := time.Now()
	waitFor(t, 60*time.Second, func() bool {
		f := prom.firing(t)
		return f["CostguardStoreBreakerOpen"] && f["CostguardFallbackDeciding"]
	}, func() string { return fmt.Sprintf("firing: %v", prom.firing(t)) })
	t.Logf("breaker and fallback alerts firing %v after Redis stopped", time.Since(stopped).Round(time.Second))
	fallback := prom.query(t, grafanaVars.Replace(`sum(rate(costguard_fallback_decisions_total[$__rate_interval]))`))
	require.NotEmpty(t, fallback)
	assert.Positive(t, fallback[0], "no fallback decisions on the dashboard's panel")

	// Redis comes back empty: the store detects the loss.
	require.NoError(t, rdb.Restart())
	restarted := time.Now()
	waitFor(t, 20*time.Second, func() bool { return prom.firing(t)["CostguardStoreDataLoss"] },
		func() string { return fmt.Sprintf("firing: %v", prom.firing(t)) })
	t.Logf("data-loss alert firing %v after Redis restarted", time.Since(restarted).Round(time.Second))
}

// startServer runs the example server binary with args and returns its
// public and admin URLs. The process is killed when the test ends.
func startServer(t *testing.T, bin string, args ...string) (app, admin string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &tailbuf.Buffer{Max: 16 << 10}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("example server's log:\n%s", stderr.String())
		}
	})
	lines := bufio.NewScanner(stdout)
	for (app == "" || admin == "") && lines.Scan() {
		if m := startLine.FindStringSubmatch(lines.Text()); m != nil {
			app = m[1]
		} else if m := adminLine.FindStringSubmatch(lines.Text()); m != nil {
			admin = m[1]
		}
	}
	require.True(t, app != "" && admin != "", "the example server did not start:\n%s", stderr.String())
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return app, admin
}

// promServer is a Prometheus the test started.
type promServer struct {
	url    string
	client *http.Client
}

// startPrometheus runs prometheus with config on a free loopback port and
// waits until it is ready. The process is killed when the test ends.
func startPrometheus(t *testing.T, bin, config, data string) *promServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+data,
		"--web.listen-address="+addr, "--log.level=warn")
	log := &tailbuf.Buffer{Max: 16 << 10}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus's log:\n%s", log.String())
		}
	})
	p := &promServer{url: "http://" + addr, client: &http.Client{Timeout: 5 * time.Second}}
	t.Cleanup(p.client.CloseIdleConnections)
	waitFor(t, 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", log.String())
		default:
		}
		resp, err := p.client.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, func() string { return "prometheus not ready:\n" + log.String() })
	return p
}

// get decodes the data of a successful API answer into v.
func (p *promServer) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := p.client.Get(p.url + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, "success", body.Status, "%s: %s", path, body.Error)
	require.NoError(t, json.Unmarshal(body.Data, v))
}

// query evaluates expr now and returns the values of its samples that are
// numbers (a histogram quantile over no observations is NaN: no data).
func (p *promServer) query(t *testing.T, expr string) []float64 {
	t.Helper()
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	p.get(t, "/api/v1/query?query="+url.QueryEscape(expr), &data)
	require.Equal(t, "vector", data.ResultType, expr)
	var vals []float64
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		if v, err := strconv.ParseFloat(s, 64); err == nil && v == v {
			vals = append(vals, v)
		}
	}
	return vals
}

// firing returns the names of the alerts firing now.
func (p *promServer) firing(t *testing.T) map[string]bool {
	t.Helper()
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	p.get(t, "/api/v1/alerts", &data)
	names := map[string]bool{}
	for _, a := range data.Alerts {
		if a.State == "firing" {
			names[a.Labels["alertname"]] = true
		}
	}
	return names
}

// waitFor polls cond every 200 ms until it holds, and fails the test with
// why() after within.
func waitFor(t *testing.T, within time.Duration, cond func() bool, why func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, why())
		}
		<-tick.C
	}
}
