package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/serve"
	"github.com/costguard/costguard/internal/testenv"
	"github.com/costguard/costguard/middleware"
)

// upstreamsDir holds the Node servers the proxy is tested in front of.
const upstreamsDir = "testdata/upstreams"

// nodeUpstream is a GraphQL server from the npm registry the test started.
type nodeUpstream struct {
	URL string // http://127.0.0.1:PORT/graphql
}

// startUpstream starts script (yoga.js or apollo.js) under node with env,
// on a free loopback port, and stops it when the test ends. Without node
// or the packages (npm ci in testdata/upstreams) the test is skipped, and
// fails under CI=true.
func startUpstream(t testing.TB, script string, env ...string) nodeUpstream {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "the proxy's upstream tests run graphql-yoga and Apollo Server under node, and there is no node on PATH")
		return nodeUpstream{}
	}
	if _, err := os.Stat(filepath.Join(upstreamsDir, "node_modules")); err != nil {
		testenv.Missing(t, "the proxy's upstream tests need their npm packages: run npm ci in cmd/costguard-proxy/"+upstreamsDir)
		return nodeUpstream{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = upstreamsDir
	cmd.Env = append(os.Environ(), append([]string{"PORT=0"}, env...)...)
	cmd.Stderr = &testWriter{t: t, prefix: script + ": "}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting node %s: %v", script, err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				ready <- url
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case url := <-ready:
		return nodeUpstream{URL: url}
	case <-time.After(30 * time.Second):
		t.Fatalf("node %s did not say it was listening within 30 s", script)
	}
	return nodeUpstream{}
}

// upstreamHits is the upstream's /hits report.
type upstreamHits struct {
	// Operations is what the upstream executed, over HTTP and WebSocket.
	Operations int `json:"operations"`
	// LastHeaders and LastUpgradeHeaders are the headers of the last HTTP
	// request and of the last WebSocket upgrade it got (lower-case names).
	LastHeaders        map[string]string `json:"lastHeaders"`
	LastUpgradeHeaders map[string]string `json:"lastUpgradeHeaders"`
}

// report is the upstream's /hits.
func (u nodeUpstream) report(t *testing.T) upstreamHits {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(u.URL, "/graphql") + "/hits")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h upstreamHits
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// hits is what the upstream counted: the operations it executed.
func (u nodeUpstream) hits(t *testing.T) int { return u.report(t).Operations }

// lastHeaders are the headers of the last HTTP request the upstream got.
func (u nodeUpstream) lastHeaders(t *testing.T) map[string]string { return u.report(t).LastHeaders }

// testWriter logs what a child process writes, line by line.
type testWriter struct {
	t      testing.TB
	prefix string
}

func (w *testWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + line)
	}
	return len(p), nil
}

// reset zeroes what the upstream counted.
func (u nodeUpstream) reset(t *testing.T) {
	t.Helper()
	resp, err := http.Post(strings.TrimSuffix(u.URL, "/graphql")+"/hits/reset", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// proxy is a costguard-proxy the test runs in its own process's body
// (serve.Run, as main runs it).
type proxy struct {
	URL    string // http://127.0.0.1:PORT
	Admin  string // the admin listener's URL; "" without one
	stderr *lockedBuffer
	reload chan os.Signal
	stop   func() error
}

// adminLine names the admin listener, when there is one.
var adminLine = regexp.MustCompile(`^admin endpoints \(.*\) on (http://\S+)$`)

// proxyBanner is the proxy's start-up line.
var proxyBanner = regexp.MustCompile(`^costguard-proxy on (http://\S+) \(budgets: .*\)$`)

// startProxy runs costguard-proxy with args (a loopback -addr and no admin
// listener are added) until the test ends.
func startProxy(t testing.TB, args ...string) *proxy {
	t.Helper()
	p, err := runProxy(t, args...)
	if err != nil {
		t.Fatalf("costguard-proxy %s: %v\n%s", strings.Join(args, " "), err, p.stderr.String())
	}
	return p
}

// runProxy is startProxy returning Run's error when it stops before
// listening.
func runProxy(t testing.TB, args ...string) (*proxy, error) {
	t.Helper()
	return runProxyWith(t, options(&proxyFlags{}), args...)
}

// runProxyWith is runProxy with opts in place of the proxy's options.
func runProxyWith(t testing.TB, opts serve.Options, args ...string) (*proxy, error) {
	t.Helper()
	args = append([]string{"-addr", "127.0.0.1:0", "-admin-addr", ""}, args...)
	ctx, cancel := context.WithCancel(context.Background())
	outR, outW := io.Pipe()
	p := &proxy{stderr: &lockedBuffer{}, reload: make(chan os.Signal, 1)}
	done := make(chan error, 1)
	go func() {
		err := serve.Run(ctx, args, outW, p.stderr, p.reload, opts)
		outW.CloseWithError(io.EOF)
		done <- err
	}()
	var once sync.Once
	var runErr error
	p.stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { _ = p.stop() })
	lines := bufio.NewScanner(outR)
	if !lines.Scan() {
		return p, p.stop()
	}
	m := proxyBanner.FindStringSubmatch(lines.Text())
	if m == nil {
		t.Fatalf("unexpected first line %q", lines.Text())
	}
	p.URL = m[1]
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "pid ") {
		if a := adminLine.FindStringSubmatch(lines.Text()); a != nil {
			p.Admin = a[1]
		}
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	return p, nil
}

// lockedBuffer is a bytes.Buffer safe for a writer and readers at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// writeFile writes content to name in a temporary directory and returns
// its path.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testConfig is the proxy's configuration in the tests: alice's key on a
// plan of 1,000 points, anonymous clients on 100, refunds on.
const testConfig = `
plans:
  free: {burst: 1000, rate: 1000, per: 1h}
  anon: {burst: 100, rate: 100, per: 1h}
anonymous_plan: anon
api_keys:
  alice-key: {principal: alice, plan: free}
`

// gqlAnswer is a GraphQL answer over HTTP.
type gqlAnswer struct {
	status int
	header http.Header
	body   []byte

	Data   json.RawMessage `json:"data"`
	Errors []struct {
		Message    string         `json:"message"`
		Extensions map[string]any `json:"extensions"`
	} `json:"errors"`
	Extensions struct {
		Cost *middleware.Cost `json:"cost"`
	} `json:"extensions"`
}

// code is the first error's extensions.code.
func (a *gqlAnswer) code() string {
	if len(a.Errors) == 0 {
		return ""
	}
	c, _ := a.Errors[0].Extensions["code"].(string)
	return c
}

// postGraphQL posts body (a JSON request) to url with header pairs.
func postGraphQL(t *testing.T, url, body string, header ...string) *gqlAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return doGraphQL(t, req)
}

// doGraphQL sends req and decodes its answer.
func doGraphQL(t *testing.T, req *http.Request) *gqlAnswer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := &gqlAnswer{status: resp.StatusCode, header: resp.Header, body: b}
	if len(b) > 0 && b[0] == '{' {
		if err := json.Unmarshal(b, a); err != nil {
			t.Fatalf("answer %s: %v", b, err)
		}
	}
	return a
}

// query is a JSON request body for q and its variables.
func query(q string, variables map[string]any) string {
	b, _ := json.Marshal(map[string]any{"query": q, "variables": variables})
	return string(b)
}
