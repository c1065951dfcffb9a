package serve

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/middleware"
)

// The shared Redis Cluster of redis_test.go is removed after the last test.
// TestMain also lets the test binary serve as the example server itself
// (Main, with the arguments it was started with) when envServeMain is set:
// TestSIGTERM signals that process as an orchestrator would.
func TestMain(m *testing.M) {
	if os.Getenv(envServeMain) == "1" {
		Main(Options{Program: os.Getenv(envServeProgram)})
		return
	}
	redistest.Main(m)
}

const (
	envServeMain = "COSTGUARD_SERVE_MAIN"
	// envServeProgram is the Options.Program of that process; unset: the
	// zero Options, the example server's.
	envServeProgram = "COSTGUARD_SERVE_PROGRAM"
)

// lines collects what run prints, line by line, for a test to wait on.
type lines struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	next chan string
}

func newLines() *lines { return &lines{next: make(chan string, 16)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadString('\n')
		if err != nil {
			// An incomplete line waits for the rest.
			l.buf.Reset()
			l.buf.WriteString(line)
			return len(p), nil
		}
		select {
		case l.next <- strings.TrimSuffix(line, "\n"):
		default: // nobody is listening any more
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the server's concurrent logging,
// which a test can wait on.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // signalled after a write; made by the first
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.b.Write(p)
	select {
	case s.wake() <- struct{}{}:
	default: // a signal is pending already
	}
	return n, err
}

func (s *syncBuffer) wake() chan struct{} {
	if s.written == nil {
		s.written = make(chan struct{}, 1)
	}
	return s.written
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until text occurs n times in what was written, and returns
// all of it. It fails the test after waitLimit, which only guards against
// a hang: nothing is timed.
func (s *syncBuffer) waitFor(t *testing.T, text string, n int) string {
	t.Helper()
	s.mu.Lock()
	wake := s.wake()
	s.mu.Unlock()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for {
		if got := s.String(); strings.Count(got, text) >= n {
			return got
		}
		select {
		case <-wake:
		case <-limit.C:
			t.Fatalf("%q was not written %d times; got:\n%s", text, n, s.String())
		}
	}
}

// waitLimit bounds a wait for something the server does in the background.
const waitLimit = 30 * time.Second

var adminLine = regexp.MustCompile(`^admin endpoints \(/metrics, /healthz, /readyz\) on (http://\S+)$`)

var startLine = regexp.MustCompile(`^costguard example server on (http://\S+) \(budgets: (.*)\)$`)

var dashboardLine = regexp.MustCompile(`^dashboard on (http://\S+/admin/)$`)

var pidLine = regexp.MustCompile(`^pid (\d+): kill -HUP (\d+) re-reads -config, kill -TERM (\d+) \(or Ctrl-C\) stops the server$`)

// running is a run call serving in the background.
type running struct {
	url, budgets string
	admin        string // the admin listener's URL ("" without one)
	dashboard    string // the dashboard's URL ("" without an admin listener)
	pid          string // the process to signal, as the banner names it
	stderr       *syncBuffer
	stop         func() error
}

// startRun calls Run with args and waits until it listens. It fails the
// test if Run returns first.
func startRun(t *testing.T, args ...string) *running {
	t.Helper()
	return startRunReloading(t, nil, args...)
}

// startRunReloading is startRun with reload as Run's reload trigger.
func startRunReloading(t *testing.T, reload <-chan os.Signal, args ...string) *running {
	t.Helper()
	return startRunWith(t, reload, Options{}, args...)
}

// startRunWith is startRunReloading with opts, whose banner opens the
// start-up line.
func startRunWith(t *testing.T, reload <-chan os.Signal, opts Options, args ...string) *running {
	t.Helper()
	startLine := startLine
	if opts.Banner != "" {
		startLine = regexp.MustCompile("^" + regexp.QuoteMeta(opts.Banner) + ` on (http://\S+) \(budgets: (.*)\)$`)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out, errs := newLines(), &syncBuffer{}
	done := make(chan error, 1)
	if !slices.Contains(args, "-admin-addr") {
		args = append([]string{"-admin-addr", "127.0.0.1:0"}, args...) // never the fixed default port in tests
	}
	go func() { done <- Run(ctx, args, out, errs, reload, opts) }()

	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { _ = stop() })

	select {
	case line := <-out.next:
		m := startLine.FindStringSubmatch(line)
		require.NotNil(t, m, "unexpected first line %q", line)
		r := &running{url: m[1], budgets: m[2], stderr: errs, stop: stop}
		if i := slices.Index(args, "-admin-addr"); i >= 0 && i+1 < len(args) && args[i+1] != "" {
			a := adminLine.FindStringSubmatch(<-out.next)
			require.NotNil(t, a, "no admin listener line")
			r.admin = a[1]
			d := dashboardLine.FindStringSubmatch(<-out.next)
			require.NotNil(t, d, "no dashboard line")
			r.dashboard = d[1]
		}
		p := pidLine.FindStringSubmatch(<-out.next)
		require.NotNil(t, p, "no pid line")
		require.True(t, p[1] == p[2] && p[2] == p[3], "the pid line names two pids: %q", p[0])
		r.pid = p[1]
		return r
	case err := <-done:
		done <- err // for stop, run by Cleanup
		t.Fatalf("Run returned before serving: %v\nstderr: %s", err, errs.String())
		return nil
	}
}

func get(t *testing.T, url string) *http.Response {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp
}

func TestRunServesAndShutsDown(t *testing.T) {
	srv := startRun(t, "-addr", "127.0.0.1:0")
	assert.Equal(t, "in memory", srv.budgets)
	// The banner names the process to signal and the dashboard it serves.
	assert.Equal(t, strconv.Itoa(os.Getpid()), srv.pid)
	assert.Equal(t, srv.admin+"/admin/", srv.dashboard)
	assert.Equal(t, http.StatusOK, get(t, srv.dashboard).StatusCode)

	resp := get(t, srv.url+"/api/users/octocat")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "499", resp.Header.Get(middleware.HeaderXRateLimitRemaining))

	resp, err := http.Post(srv.url+"/graphql", "application/json", strings.NewReader(`{"query":"{ user(login: \"octocat\") { login } }"}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), `"requestedQueryCost":1`)

	require.NoError(t, srv.stop(), "a graceful shutdown returns nil")
	_, err = http.Get(srv.url + "/")
	assert.Error(t, err, "the listener is closed after shutdown")
}

func TestRunWithConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	// Only plans, as a new user writes it: the demo key's plan is gone, so
	// is the demo key, and the server starts.
	require.NoError(t, os.WriteFile(path, []byte("plans: {anon: {burst: 10, rate: 10, per: 1m}}\n"), 0o600))
	srv := startRun(t, "-addr", "127.0.0.1:0", "-config", path)

	resp := get(t, srv.url+"/api/users/octocat")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"anon";q=10;w=60`, resp.Header.Get(middleware.HeaderRateLimitPolicy))
	// The demo key is gone with the default plans.
	req, _ := http.NewRequest(http.MethodGet, srv.url+"/api/users/octocat", nil)
	req.Header.Set("Authorization", "Bearer "+demoAPIKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// Bad command lines and configurations fail before listening, with an error
// main maps to exit status 2.
func TestRunRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	badRoute := filepath.Join(dir, "route.yaml")
	require.NoError(t, os.WriteFile(badRoute, []byte(`rest: {routes: {"GET /api/search": 100000}}`), 0o600))
	typo := filepath.Join(dir, "typo.yaml")
	require.NoError(t, os.WriteFile(typo, []byte("failure_mod: closed\n"), 0o600))
	seconds := filepath.Join(dir, "seconds.yaml")
	require.NoError(t, os.WriteFile(seconds, []byte("plans:\n  anon: {burst: 10, rate: 10, per: 3600}\n"), 0o600))

	tests := []struct {
		name   string
		env    string // REDIS_URL
		args   []string
		is     error
		errMsg string
	}{
		{"unknown flag", "", []string{"-port", "1"}, errUsage, "flag provided but not defined: -port"},
		{"stray argument", "", []string{"serve"}, errUsage, `unexpected arguments ["serve"]`},
		{"help", "", []string{"-h"}, flag.ErrHelp, ""},
		{"missing config", "", []string{"-config", filepath.Join(dir, "absent.yaml")}, errConfig, "absent.yaml"},
		{"unknown key", "", []string{"-config", typo}, errConfig,
			"invalid configuration: " + typo + ": line 1: failure_mod: unknown key"},
		{"duration without unit", "", []string{"-config", seconds}, errConfig, "invalid configuration: " + seconds +
			": line 2: plans.anon.per: 3600 is not a duration; write a Go duration with a unit, such as 1h or 90s"},
		{"route dearer than a burst", "", []string{"-config", badRoute}, errConfig,
			"invalid configuration: " + badRoute + `: line 1: rest.routes["GET /api/search"]: REST route "GET /api/search" costs 100000`},
		{"both stores", "", []string{"-redis", "redis://127.0.0.1:1", "-redis-cluster", "127.0.0.1:2"}, errUsage, "exclude each other"},
		{"bad redis URL", "", []string{"-redis", "http://127.0.0.1:1"}, errUsage, "-redis:"},
		{"bad REDIS_URL", "mongodb://127.0.0.1:1", nil, errUsage, "$REDIS_URL: redis: invalid URL scheme: mongodb"},
		{"redis garbage", "", []string{"-redis", "garbage"}, errUsage, `-redis: "garbage" is not host:port`},
		{"bad cluster address", "", []string{"-redis-cluster", "127.0.0.1:7000,nohost"}, errUsage, `"nohost" is not host:port`},
		{"empty cluster list", "", []string{"-redis-cluster", " , "}, errUsage, "no addresses"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("REDIS_URL", tt.env)
			var stdout, stderr bytes.Buffer
			err := Run(context.Background(), append([]string{"-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"}, tt.args...), &stdout, &stderr, nil, Options{})
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.is)
			assert.Contains(t, err.Error(), tt.errMsg)
			for _, prefix := range []string{"server:", "middleware:", "invalid config:"} {
				assert.NotContains(t, err.Error(), prefix, "main adds the only prefix")
			}
			assert.Empty(t, stdout.String(), "nothing may listen")
		})
	}
}

func TestRunListenFailure(t *testing.T) {
	srv := startRun(t, "-addr", "127.0.0.1:0")
	addr := strings.TrimPrefix(srv.url, "http://")
	err := Run(context.Background(), []string{"-addr", addr, "-admin-addr", "127.0.0.1:0"}, io.Discard, io.Discard, nil, Options{})
	require.Error(t, err)
	assert.False(t, errors.Is(err, errUsage) || errors.Is(err, errConfig), "a busy port is not a usage error: %v", err)
	assert.Contains(t, err.Error(), "address already in use")
	assert.NotContains(t, err.Error(), "server:", "main adds the only prefix")
}

// /metrics is served on the admin listener, off the public port, which
// answers 404 there; the probes answer on both.
func TestAdminListener(t *testing.T) {
	srv := startRun(t, "-addr", "127.0.0.1:0")
	require.NotEmpty(t, srv.admin)
	for _, c := range []struct {
		base, path string
		status     int
	}{
		{srv.url, "/metrics", http.StatusNotFound},
		{srv.admin, "/metrics", http.StatusOK},
		{srv.url, "/healthz", http.StatusOK},
		{srv.admin, "/healthz", http.StatusOK},
		{srv.admin, "/readyz", http.StatusOK},
		{srv.admin, "/graphql", http.StatusNotFound},
	} {
		resp := get(t, c.base+c.path)
		resp.Body.Close()
		assert.Equal(t, c.status, resp.StatusCode, "%s%s", c.base, c.path)
	}
	// -admin-addr "" serves none.
	none := startRun(t, "-addr", "127.0.0.1:0", "-admin-addr", "")
	assert.Empty(t, none.admin)
}
