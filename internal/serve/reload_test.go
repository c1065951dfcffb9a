package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/99designs/gqlgen/graphql/errcode"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/overload"
)

// The log lines a reload ends with, one or the other.
const (
	reloadedLine = "server: configuration reloaded"
	refusedLine  = "server: reload refused"
)

// reloadFirst is the file a reloading server starts with; reloadSecond
// changes a burst, the API keys, a route's cost, graphql.max_depth and a
// key that takes a restart.
const (
	reloadFirst = `
plans:
  free: {burst: 5000, rate: 5000, per: 1h}
  anon: {burst: 500, rate: 500, per: 1h}
api_keys:
  old-key: {principal: alice, plan: free}
  kept-key: {principal: carol, plan: free}
rest: {routes: {"GET /api/search": 10}}
`
	reloadSecond = `
plans:
  free: {burst: 50, rate: 50, per: 1h}
  anon: {burst: 500, rate: 500, per: 1h}
api_keys:
  new-key: {principal: bob, plan: free}
  kept-key: {principal: carol, plan: free}
rest: {routes: {"GET /api/search": 3}}
graphql: {max_depth: 3}
max_body_bytes: 2048
`
)

// depth4 is four fields deep: admitted at the default max_depth, refused
// at 3.
const depth4 = `{ user(login: "octocat") { repos(first: 1) { owner { login } } } }`

// call sends one request to a running server and reads the whole answer.
func call(t *testing.T, method, url, apiKey, body string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func graphQLBody(t *testing.T, query string) string {
	t.Helper()
	b, err := json.Marshal(map[string]string{"query": query})
	require.NoError(t, err)
	return string(b)
}

// writeConfig replaces the file at path. The server reads it only when
// told to, so a plain write is enough here; an operator would rename.
func writeConfig(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
}

// SIGHUP (here, its stand-in on run's reload channel) swaps the plans, the
// API keys, the route costs and the GraphQL limits of a serving process,
// keeps the budgets spent, and keeps the running value of a key that takes
// a restart, naming it in a warning.
func TestReloadSwapsConfiguration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	writeConfig(t, path, reloadFirst)
	reload := make(chan os.Signal)
	srv := startRunReloading(t, reload, "-addr", "127.0.0.1:0", "-config", path)

	resp, _ := call(t, "GET", srv.url+"/api/users/octocat", "old-key", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "5000", resp.Header.Get(middleware.HeaderXRateLimitLimit))
	resp, _ = call(t, "GET", srv.url+"/api/users/octocat", "new-key", "")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = call(t, "GET", srv.url+"/api/search?q=octo", "", "")
	assert.Equal(t, "490", resp.Header.Get(middleware.HeaderXRateLimitRemaining))
	resp, body := call(t, "POST", srv.url+"/graphql", "kept-key", graphQLBody(t, depth4))
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)

	writeConfig(t, path, reloadSecond)
	reload <- syscall.SIGHUP
	logs := srv.stderr.waitFor(t, reloadedLine, 1)
	assert.Regexp(t, `level=WARN msg="server: reload: these keys take a restart to change; their running values stay" file=\S+ keys=max_body_bytes\n`, logs)
	assert.Regexp(t, `level=INFO msg="`+reloadedLine+`" file=`+regexp.QuoteMeta(path)+`\n`, logs)

	// The plan's new burst, the new key, the removed key.
	resp, _ = call(t, "GET", srv.url+"/api/users/octocat", "new-key", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "50", resp.Header.Get(middleware.HeaderXRateLimitLimit))
	resp, _ = call(t, "GET", srv.url+"/api/users/octocat", "old-key", "")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = call(t, "GET", srv.url+"/api/users/octocat", "kept-key", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	// The route's new cost, from the budget already spent: 490 - 3.
	resp, _ = call(t, "GET", srv.url+"/api/search?q=octo", "", "")
	assert.Equal(t, "487", resp.Header.Get(middleware.HeaderXRateLimitRemaining))
	// The new max_depth.
	resp, body = call(t, "POST", srv.url+"/graphql", "kept-key", graphQLBody(t, depth4))
	assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	assert.Equal(t, complexity.CodeMaxDepthExceeded, decodeGraphQL(t, body).code())
	// max_body_bytes takes a restart: a 4 KiB body is still read.
	padded := graphQLBody(t, `{ user(login: "octocat") { login } }`+strings.Repeat(" ", 4096))
	resp, body = call(t, "POST", srv.url+"/graphql", "kept-key", padded)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
}

// A file that does not load keeps the running configuration, and the
// warning names the file, the line and the key path.
func TestReloadBadFileKeepsConfiguration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	writeConfig(t, path, reloadFirst)
	reload := make(chan os.Signal)
	srv := startRunReloading(t, reload, "-addr", "127.0.0.1:0", "-config", path)

	writeConfig(t, path, "plans:\n  free: {burst: 50, rate: 50, per: 3600}\n")
	reload <- syscall.SIGHUP
	logs := srv.stderr.waitFor(t, refusedLine, 1)
	assert.Contains(t, logs, "level=WARN")
	assert.Contains(t, logs, path+": line 2: plans.free.per: 3600 is not a duration")
	assert.NotContains(t, logs, reloadedLine)

	resp, _ := call(t, "GET", srv.url+"/api/users/octocat", "old-key", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "5000", resp.Header.Get(middleware.HeaderXRateLimitLimit), "the running plan stays")

	// A file the middleware refuses is kept out the same way; a good file
	// afterwards is taken.
	writeConfig(t, path, strings.Replace(reloadFirst, `"GET /api/search": 10`, `"GET /api/search": 501`, 1))
	reload <- syscall.SIGHUP
	logs = srv.stderr.waitFor(t, refusedLine, 2)
	assert.Contains(t, logs, "costs 501, more than the burst 500")
	writeConfig(t, path, reloadSecond)
	reload <- syscall.SIGHUP
	srv.stderr.waitFor(t, reloadedLine, 1)
	resp, _ = call(t, "GET", srv.url+"/api/users/octocat", "new-key", "")
	assert.Equal(t, "50", resp.Header.Get(middleware.HeaderXRateLimitLimit))
}

// Without -config there is nothing to re-read: the server says so and
// keeps serving.
func TestReloadWithoutConfigFile(t *testing.T) {
	reload := make(chan os.Signal)
	srv := startRunReloading(t, reload, "-addr", "127.0.0.1:0")
	reload <- syscall.SIGHUP
	srv.stderr.waitFor(t, "there is no -config file to re-read", 1)
	resp, _ := call(t, "GET", srv.url+"/healthz", "", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// Requests running during reloads all get an answer from one
// configuration or the other: 200 or 429, never a connection error or a
// 5xx. The two files differ in a burst, a key's plan, a route's cost, the
// GraphQL limits and graphql.max_tokens (which rebuilds the gqlgen
// server).
func TestReloadUnderLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	files := [2]string{reloadFirst, `
plans:
  free: {burst: 50, rate: 50, per: 1h}
  anon: {burst: 40, rate: 40, per: 1h}
api_keys:
  kept-key: {principal: carol, plan: anon}
rest: {routes: {"GET /api/search": 3}}
graphql: {max_depth: 3, max_tokens: 1000}
`}
	writeConfig(t, path, files[0])
	reload := make(chan os.Signal)
	srv := startRunReloading(t, reload, "-addr", "127.0.0.1:0", "-config", path)

	type request struct{ method, target, key, body string }
	query := graphQLBody(t, `{ user(login: "octocat") { login repos(first: 2) { name } } }`)
	requests := []request{
		{"POST", "/graphql", "kept-key", query},
		{"POST", "/graphql", "", query},
		{"GET", "/api/search?q=octo", "kept-key", ""},
		{"GET", "/api/users/octocat", "", ""},
	}
	const clients = 4
	var (
		stop     = make(chan struct{})
		answered = make(chan struct{}, 1024) // a request was answered (or failed)
		started  sync.WaitGroup
		done     sync.WaitGroup
		mu       sync.Mutex
		bad      []string
		counts   = map[int]int{}
	)
	started.Add(clients)
	for i := range clients {
		done.Go(func() {
			client := &http.Client{}
			first := true
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				rq := requests[(i+n)%len(requests)]
				var body io.Reader
				if rq.body != "" {
					body = strings.NewReader(rq.body)
				}
				req, _ := http.NewRequest(rq.method, srv.url+rq.target, body)
				req.Header.Set("Content-Type", "application/json")
				if rq.key != "" {
					req.Header.Set(identity.HeaderAPIKey, rq.key)
				}
				resp, err := client.Do(req)
				var status int
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mu.Lock()
				counts[status]++
				if err != nil || (status != http.StatusOK && status != http.StatusTooManyRequests) {
					bad = append(bad, fmt.Sprintf("%s %s: %d %v", rq.method, rq.target, status, err))
				}
				mu.Unlock()
				select {
				case answered <- struct{}{}:
				default:
				}
				if first {
					first = false
					started.Done()
				}
			}
		})
	}
	started.Wait() // every client is sending before the first reload

	// Each reload is followed by more requests before the next one.
	const reloads = 24
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for i := 1; i <= reloads; i++ {
		for len(answered) > 0 {
			<-answered
		}
		writeConfig(t, path, files[i%2])
		reload <- syscall.SIGHUP
		srv.stderr.waitFor(t, reloadedLine, i)
		for range clients {
			select {
			case <-answered:
			case <-limit.C:
				t.Fatal("the clients stopped sending")
			}
		}
	}
	close(stop)
	done.Wait()

	assert.Empty(t, bad)
	assert.NotContains(t, srv.stderr.String(), refusedLine)
	t.Logf("answers during %d reloads: %v", reloads, counts)
}

// A raised graphql.max_tokens reaches gqlgen's parser, whose limit is
// fixed when its server is built, and a lowered one reaches the
// Extension.
func TestReloadMaxTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	cfg := defaultConfig()
	cfg.GraphQL.MaxTokens = 1000
	s := newTestServer(t, cfg, deps{logger: slog.New(slog.DiscardHandler)})
	srv := s.h.(*server)

	// 2,000 tokens, almost all in an unused variable's default: over the
	// bound of 1,000, and, once that is raised, a document that parses and
	// fails validation.
	long := "query($a: [Int] = [" + strings.Repeat("1 ", 2000) + "]) { __typename }"
	_, r := s.graphql(anonymous, long)
	assert.Equal(t, complexity.CodeMaxTokensExceeded, r.code())

	writeConfig(t, path, "graphql: {max_tokens: 3000}\n")
	require.NoError(t, srv.reload(path))
	_, r = s.graphql(anonymous, long)
	assert.Equal(t, errcode.ValidationFailed, r.code(), "parsed: the parser's limit was raised too")

	writeConfig(t, path, "graphql: {max_tokens: 5}\n")
	require.NoError(t, srv.reload(path))
	_, r = s.graphql(anonymous, `{ user(login: "octocat") { login } }`)
	assert.Equal(t, complexity.CodeMaxTokensExceeded, r.code())
}

// What a reload refuses leaves everything as it was, in-process: a file
// that does not load, a file the middleware refuses, and a change the
// running Limiter cannot take (split-budget leases it was built without).
func TestReloadRefusals(t *testing.T) {
	dir := t.TempDir()
	logs := &syncBuffer{}
	s := newTestServer(t, defaultConfig(), deps{logger: slog.New(slog.NewTextHandler(logs, nil))})
	srv := s.h.(*server)

	for _, tt := range []struct{ name, body, want string }{
		{"missing file", "", "no such file"},
		{"unknown key", "failure_mod: closed\n", "line 1: failure_mod: unknown key"},
		{"bad mode", "plans:\n  anon: {burst: 1, rate: 1, per: 1h, mode: loud}\n", `line 2: plans.anon.mode: plan "anon": mode "loud" is neither "enforce" nor "shadow"`},
		{"route dearer than a burst", `rest: {routes: {"GET /api/search": 501}}`, `REST route "GET /api/search" costs 501`},
		{"split budget added", "plans: {anon: {burst: 500, rate: 500, per: 1h, split_budget: true}}\n", "restart to add them"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			if tt.body != "" {
				writeConfig(t, path, tt.body)
			}
			err := srv.reload(path)
			require.Error(t, err)
			assert.ErrorIs(t, err, errConfig)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "middleware:", "the file's error, not the library's prefix")
			// The log quotes the error; its text is the same.
			assert.Contains(t, logs.String(), "level=WARN msg=\""+refusedLine)
			assert.Contains(t, logs.String(), "file="+path+" err=")

			w := s.do(alice, http.MethodGet, "/api/users/octocat", nil)
			assert.Equal(t, "5000", w.Header().Get(middleware.HeaderXRateLimitLimit), "the running configuration stays")
			assert.Equal(t, defaultConfig(), srv.cfg)
		})
	}
	assert.NotContains(t, logs.String(), reloadedLine)
}

// A reload can change the modes, which the middleware takes with the
// plans.
func TestReloadModes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	s := newTestServer(t, defaultConfig(), deps{logger: slog.New(slog.DiscardHandler)})
	srv := s.h.(*server)
	writeConfig(t, path, "mode: shadow\nplans:\n  anon: {burst: 500, rate: 500, per: 1h, mode: enforce}\n")
	require.NoError(t, srv.reload(path))
	assert.Equal(t, budget.Shadow, srv.cfg.Mode)
	assert.Equal(t, budget.Enforce, srv.cfg.Plans["anon"].Mode)
}

// Every key keepRestartKeys holds is named when it changes, its running
// value stays, and docs/server.md lists it under "Reloading".
func TestKeepRestartKeys(t *testing.T) {
	running := defaultConfig()
	next := defaultConfig()
	next.MaxBodyBytes = 2048
	next.MaxBodyBytesInFlight = 4 << 20
	next.MemoryStore.MaxKeys = 10
	next.GraphQL.QueryCacheEntries = 7
	next.GraphQL.QueryCacheBytes = 7 << 20
	next.OverLimitCache = "off"
	next.SplitBudget = middleware.SplitBudgetOptions{LeaseFraction: 0.5, SettleInterval: time.Second}
	next.RetryAfterJitter = 0.5
	next.StoreTimeout = time.Second
	next.Breaker = breaker.Config{Failures: 9, CoolDown: time.Minute}
	next.Overload.MaxInFlight = 8
	next.Overload.ShedAt = map[overload.Priority]float64{overload.Sheddable: 0.25}
	next.Overload.Adaptive = true
	next.Degradation = next.Degradation[:1]
	next.Challenge = challengeConfig{Secret: testSecret, Bits: 20}
	next.DemoLatency = 50 * time.Millisecond
	next.Admin.TokenSHA256 = sha256Hex("another token")
	next.GraphQL.MaxDepth = 3 // reloadable: not held
	next.Concurrency.PerPrincipal = 7
	next.Lanes[0].Queue = time.Second
	changed := next.keepRestartKeys(running)

	want := defaultConfig()
	want.GraphQL.MaxDepth = 3
	want.Concurrency.PerPrincipal = 7
	want.Lanes[0].Queue = time.Second
	assert.Equal(t, want, next)
	assert.Equal(t, []string{
		"max_body_bytes", "max_body_bytes_in_flight", "memory_store.max_keys",
		"graphql.query_cache_entries", "graphql.query_cache_bytes", "over_limit_cache",
		"split_budget.lease_fraction", "split_budget.settle_interval", "retry_after_jitter",
		"store_timeout", "breaker.failures", "breaker.cool_down", "overload.max_in_flight", "overload.shed_at", "overload.adaptive", "degradation",
		"challenge.secret", "challenge.bits", "demo_latency", "admin.token_sha256",
	}, changed)
	same := defaultConfig()
	assert.Empty(t, same.keepRestartKeys(running))

	doc, err := os.ReadFile(docsPath)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?s)\n## Reloading\n(.*?)\n## `).FindSubmatch(doc)
	require.NotNil(t, m, "docs/server.md has no Reloading section")
	for _, key := range changed {
		assert.Contains(t, string(m[1]), "`"+key+"`", "docs/server.md's Reloading section does not name %s", key)
	}
}

// Lanes and concurrency caps reload; a lane that asks for a challenge the
// server was started without is refused, naming the key, since the
// challenger is built at start.
func TestReloadLanesAndChallenge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	noChallenge := `
lanes:
  - {name: checkout, priority: critical, match: {graphql: ["Mutation.createIssue"]}, queue: 1s}
  - {name: anonymous, priority: sheddable, match: {anonymous: true}}
concurrency: {per_principal: 10}
`
	writeConfig(t, path, noChallenge)
	cfg, err := loadConfig(path)
	require.NoError(t, err)
	s := newTestServer(t, cfg, deps{logger: slog.New(slog.DiscardHandler)})
	srv := s.h.(*server)
	require.Nil(t, srv.challenger)

	writeConfig(t, path, noChallenge+"plans:\n  anon: {burst: 500, rate: 500, per: 1h, concurrency: {per_principal: -1}}\n")
	require.NoError(t, srv.reload(path))
	assert.Equal(t, middleware.None, limiterPolicy(srv.cfg).Plans["anon"].MaxConcurrent)

	writeConfig(t, path, strings.Replace(noChallenge, "anonymous: true}}", "anonymous: true}, challenge: pow}", 1))
	err = srv.reload(path)
	require.Error(t, err)
	assert.ErrorIs(t, err, errConfig)
	assert.Contains(t, err.Error(), `lanes[1].challenge is "pow", but the server started with no lane asking for a challenge`)
	assert.Empty(t, srv.cfg.Lanes[1].Challenge, "the running configuration stays")
}
