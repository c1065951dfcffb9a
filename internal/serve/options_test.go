package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/middleware"
)

// helloSchema is a schema other than the demo's, as another binary
// supplies one: { hello } answers greeting.
func helloSchema(greeting string) graphql.ExecutableSchema {
	schema := gqlparser.MustLoadSchema(&ast.Source{Name: "hello.graphql", Input: "type Query { hello: String }"})
	data, _ := json.Marshal(map[string]string{"hello": greeting})
	return &graphql.ExecutableSchemaMock{
		SchemaFunc: func() *ast.Schema { return schema },
		ComplexityFunc: func(context.Context, string, string, int, map[string]any) (int, bool) {
			return 0, false
		},
		ExecFunc: func(context.Context) graphql.ResponseHandler {
			return graphql.OneShot(&graphql.Response{Data: data})
		},
	}
}

// seen is what a WrapGraphQL wrapper saw of the answers.
type seen struct {
	mu        sync.Mutex
	statuses  []int
	rateLimit []string // the RateLimit header of each answer
}

func (s *seen) wrap(h http.Handler, _ *middleware.Limiter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.statuses = append(s.statuses, rec.status)
		s.rateLimit = append(s.rateLimit, w.Header().Get(middleware.HeaderRateLimit))
	})
}

func (s *seen) get() ([]int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.statuses...), append([]string(nil), s.rateLimit...)
}

// statusRecorder remembers the status written through it.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// helloOptions are the Options of a binary other than the example server:
// its own name, banner, flag (-greeting, required) and schema, no demo
// parts, and a wrapper around /graphql that records into answers.
func helloOptions(answers *seen) Options {
	greeting := ""
	return Options{
		Program: "hello-proxy",
		Banner:  "costguard hello proxy",
		Flags: func(fs *flag.FlagSet) func() error {
			g := fs.String("greeting", "", "what { hello } answers")
			return func() error {
				if *g == "" {
					return errors.New("-greeting is required")
				}
				greeting = *g
				return nil
			}
		},
		Schema: func(context.Context, *slog.Logger) (graphql.ExecutableSchema, error) {
			return helloSchema(greeting), nil
		},
		NoDemo:      true,
		WrapGraphQL: answers.wrap,
	}
}

// A binary built with Options serves its own schema under its own name,
// with its flag, without the demo parts, and its wrapper sees what the
// limiter answers.
func TestOptionsMakeAnotherBinary(t *testing.T) {
	var answers seen
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	writeConfig(t, path, "")
	reload := make(chan os.Signal)
	srv := startRunWith(t, reload, helloOptions(&answers), "-addr", "127.0.0.1:0", "-greeting", "hi", "-config", path)

	resp, body := call(t, "POST", srv.url+"/graphql", "", `{"query":"{ hello }"}`)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"hello":"hi"}`, string(gqlData(t, body)))
	resp, _ = call(t, "POST", srv.url+"/graphql", "no-such-key", `{"query":"{ hello }"}`)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the limiter refuses an unknown key")
	statuses, rateLimit := answers.get()
	assert.Equal(t, []int{http.StatusOK, http.StatusUnauthorized}, statuses, "the wrapper sees the limiter's statuses")
	assert.NotEmpty(t, rateLimit[0], "the wrapper sees the limiter's headers")

	// No demo parts: no GraphiQL page, no REST routes; the probes stay.
	for path, status := range map[string]int{"/": http.StatusNotFound, "/api/users/octocat": http.StatusNotFound, "/healthz": http.StatusOK} {
		resp := get(t, srv.url+path)
		assert.Equal(t, status, resp.StatusCode, path)
	}

	// demo_latency has nothing to slow: a reload that sets it is refused.
	writeConfig(t, path, "demo_latency: 1s\n")
	reload <- syscall.SIGHUP
	logs := srv.stderr.waitFor(t, "hello-proxy: reload refused", 1)
	assert.Contains(t, logs, "line 1: demo_latency: this server has no demo resolvers to slow: remove the key")
	// Every log line carries the program's name.
	assert.Contains(t, logs, `msg="hello-proxy: challenge.secret is unset`)
	assert.Contains(t, logs, `msg="hello-proxy: the admin API (/admin/principals/…) is served WITHOUT a token`)
	assert.NotContains(t, logs, `msg="server:`)
}

// gqlData is the data of a GraphQL answer.
func gqlData(t *testing.T, body []byte) json.RawMessage {
	t.Helper()
	var r struct {
		Data json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &r), "%s", body)
	return r.Data
}

// What a binary's Options ask for is checked before it listens.
func TestOptionsRefuseToStart(t *testing.T) {
	latency := filepath.Join(t.TempDir(), "latency.yaml")
	writeConfig(t, latency, "demo_latency: 1s\n")
	hello := helloOptions(&seen{})
	failing := hello
	failing.Schema = func(context.Context, *slog.Logger) (graphql.ExecutableSchema, error) {
		return nil, errors.New("the upstream does not answer")
	}
	withDemo := hello
	withDemo.NoDemo = false

	tests := []struct {
		name   string
		opts   Options
		args   []string
		is     error // nil: neither errUsage nor errConfig
		errMsg string
	}{
		{"flag check", hello, nil, errUsage, "usage: -greeting is required"},
		{"own flag unknown to the example", Options{}, []string{"-greeting", "hi"}, errUsage, "flag provided but not defined: -greeting"},
		{"schema fails", failing, []string{"-greeting", "hi"}, nil, "the upstream does not answer"},
		{"schema with the demo parts", withDemo, []string{"-greeting", "hi"}, nil, "a schema of its own needs the demo parts left out"},
		{"demo_latency without the demo", hello, []string{"-greeting", "hi", "-config", latency}, errConfig,
			"invalid configuration: " + latency + ": line 1: demo_latency: this server has no demo resolvers to slow: remove the key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := Run(context.Background(), append([]string{"-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"}, tt.args...), &stdout, io.Discard, nil, tt.opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.errMsg)
			if tt.is != nil {
				assert.ErrorIs(t, err, tt.is)
			} else {
				assert.False(t, errors.Is(err, errUsage) || errors.Is(err, errConfig), "%v", err)
			}
			assert.Empty(t, stdout.String(), "nothing may listen")
		})
	}
}

// Main prints an error after the program's name and exits 2 for a usage
// or configuration error, 1 for any other; the flag set bears the name
// too. The test binary is re-executed as Main (TestMain).
func TestMainExitStatus(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	tests := []struct {
		program, wantName string
		args              []string
		status            int
		last              string // stderr's last line, after the name
	}{
		{"", "server", []string{"-port", "1"}, 2, "usage: flag provided but not defined: -port"},
		{"hello-proxy", "hello-proxy", []string{"-port", "1"}, 2, "usage: flag provided but not defined: -port"},
		{"hello-proxy", "hello-proxy", []string{"-addr", busy.Addr().String(), "-admin-addr", ""}, 1, "address already in use"},
	}
	for _, tt := range tests {
		cmd := exec.Command(os.Args[0], tt.args...)
		cmd.Env = append(os.Environ(), envServeMain+"=1", envServeProgram+"="+tt.program)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%q", tt.args)
		assert.Equal(t, tt.status, exit.ExitCode(), "%q", tt.args)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		last := lines[len(lines)-1]
		assert.True(t, strings.HasPrefix(last, tt.wantName+": "), "%q does not start with the program's name", last)
		assert.Contains(t, last, tt.last)
		if tt.status == 2 {
			assert.Equal(t, "Usage of "+tt.wantName+":", lines[1], "the flag set's usage")
		}
	}
}

// A reload builds the binary's schema again, with or without a -config
// file, and serves it from the next request on; a schema that fails to
// build keeps the one running.
func TestReloadBuildsTheSchemaAgain(t *testing.T) {
	var builds atomic.Int64
	fail := errors.New("the upstream is away")
	opts := Options{
		Program: "hello-proxy",
		Banner:  "costguard hello proxy",
		NoDemo:  true,
		Schema: func(context.Context, *slog.Logger) (graphql.ExecutableSchema, error) {
			switch builds.Add(1) {
			case 1:
				return helloSchema("one"), nil
			case 2:
				return nil, fail
			}
			return helloSchema("three"), nil
		},
	}
	reload := make(chan os.Signal)
	srv := startRunWith(t, reload, opts, "-addr", "127.0.0.1:0")
	hello := func() string {
		_, body := call(t, "POST", srv.url+"/graphql", "", `{"query":"{ hello }"}`)
		return string(gqlData(t, body))
	}
	assert.JSONEq(t, `{"hello":"one"}`, hello())
	reload <- syscall.SIGHUP
	require.Eventually(t, func() bool { return strings.Contains(srv.stderr.String(), "schema reload refused") }, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, srv.stderr.String(), fail.Error())
	assert.JSONEq(t, `{"hello":"one"}`, hello(), "a schema that failed to build replaced the running one")
	reload <- syscall.SIGHUP
	require.Eventually(t, func() bool { return strings.Contains(srv.stderr.String(), "schema reloaded") }, 5*time.Second, 10*time.Millisecond)
	assert.JSONEq(t, `{"hello":"three"}`, hello())
	assert.NotContains(t, srv.stderr.String(), "no -config file", "a binary with a schema to reload has something to re-read")
}

// Without the demo parts, the defaults hold nothing of the demo: its API
// key (which every reader of the README knows) is unknown, with or without
// a file, and no lane names the demo's mutation.
func TestNoDemoDefaultsHoldNoDemoKey(t *testing.T) {
	var answers seen
	for _, file := range []string{"", "graphql: {max_depth: 10}\n"} {
		args := []string{"-addr", "127.0.0.1:0", "-greeting", "hi"}
		if file != "" {
			path := filepath.Join(t.TempDir(), "costguard.yaml")
			writeConfig(t, path, file)
			args = append(args, "-config", path)
		}
		srv := startRunWith(t, nil, helloOptions(&answers), args...)
		resp, _ := call(t, "POST", srv.url+"/graphql", demoAPIKey, `{"query":"{ hello }"}`)
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the demo key, file %q", file)
		resp, _ = call(t, "POST", srv.url+"/graphql", "", `{"query":"{ hello }"}`)
		assert.Equal(t, http.StatusOK, resp.StatusCode, "anonymous, file %q", file)
	}
	for _, l := range noDemoConfig().Lanes {
		assert.Empty(t, l.Match.GraphQL, "lane %s names fields of the demo schema", l.Name)
	}
	// The example server keeps its demo key.
	srv := startRun(t, "-addr", "127.0.0.1:0")
	resp, _ := call(t, "POST", srv.url+"/graphql", demoAPIKey, `{"query":"{ __typename }"}`)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
