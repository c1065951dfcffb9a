package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/middleware"
)

// fakeClock is a limiter.Clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// failingStore fails every call: err, or, when hang is set, blocks until
// ctx is done as a store with an unreachable server does. While healthy is
// set it hands calls to inner instead (learn).
type failingStore struct {
	err     error
	hang    bool
	calls   atomic.Int64
	inner   limiter.Store
	healthy atomic.Bool
}

func (s *failingStore) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	if s.healthy.Load() {
		// A healthy link answers whatever the deadline: the tests give the
		// store a few milliseconds so a hanging one fails fast, and a
		// scheduler stall that long on a loaded machine must not turn the
		// learning requests into store failures.
		return s.inner.Take(context.WithoutCancel(ctx), key, l, cost)
	}
	s.calls.Add(1)
	if s.hang {
		<-ctx.Done()
		return limiter.Decision{}, ctx.Err()
	}
	return limiter.Decision{}, s.err
}

// Refund gives back to the memory store while the link is healthy, and
// fails as Take does while it is not.
func (s *failingStore) Refund(ctx context.Context, key string, l limiter.Limit, amount int64) (limiter.Decision, error) {
	if s.healthy.Load() {
		return s.inner.Refund(context.WithoutCancel(ctx), key, l, amount)
	}
	if s.hang {
		<-ctx.Done()
		return limiter.Decision{}, ctx.Err()
	}
	return limiter.Decision{}, s.err
}

// learn puts store in front of cfg's memory store, lets h make the
// requests while the store answers, then breaks it. The fail-open fallback
// starts each budget from the store's last word on it, or empty: a test of
// fail open first lets the process learn its principals.
func learn(t *testing.T, store *failingStore, cfg *config, requests ...request) func(h http.Handler) {
	t.Helper()
	store.inner = cfg.Store.(limiter.Store)
	store.healthy.Store(true)
	cfg.Store = store
	return func(h http.Handler) {
		t.Helper()
		for _, r := range requests {
			if w := do(t, h, r); w.Code != http.StatusOK {
				t.Fatalf("learning %s %s: %d", r.method, r.path, w.Code)
			}
		}
		store.healthy.Store(false)
	}
}

// discardLogger drops everything.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// countingHandler counts log records by level.
type countingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) count(level slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		if r.Level == level {
			n++
		}
	}
	return n
}

// text joins every record's message and attributes.
func (h *countingHandler) text() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, r := range h.records {
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		b.WriteString("\n")
	}
	return b.String()
}

// Plans used across the tests: small numbers keep the arithmetic readable.
// The test schema answers with nulls, so an operation's actual cost is the
// minimum: refunds are off, and the tests of refunds turn them on
// (withRefunds).
func testPlans() map[string]budget.Plan {
	return map[string]budget.Plan{
		"free": {Burst: 100, Rate: 100, Per: 100 * time.Second, DisableRefund: true}, // 1 point per second
		"anon": {Burst: 20, Rate: 20, Per: 100 * time.Second, DisableRefund: true},   // 1 point per 5 seconds
	}
}

// config is a Limiter's dependencies and policy together, as the tests
// build them: newLimiter gives New both, Reload takes cfg.Policy.
type config struct {
	middleware.Dependencies
	middleware.Policy
}

// withRefunds turns refunds of unused cost back on for every plan of cfg.
func withRefunds(cfg config) config {
	plans := make(map[string]budget.Plan, len(cfg.Plans))
	for name, p := range cfg.Plans {
		p.DisableRefund = false
		plans[name] = p
	}
	cfg.Plans = plans
	return cfg
}

const (
	aliceKey = "alice-secret-key"
	bobKey   = "bob-secret-key"
)

// testConfig is a valid config on a memory store driven by clock.
func testConfig(t *testing.T, clock *fakeClock) config {
	t.Helper()
	store, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return config{Dependencies: middleware.Dependencies{
		Store:  store,
		Logger: discardLogger(),
		Clock:  clock,
	}, Policy: middleware.Policy{
		Plans:         testPlans(),
		AnonymousPlan: "anon",
		APIKeys: map[string]identity.APIKey{
			aliceKey: {Principal: "alice", Plan: "free"},
			bobKey:   {Principal: "", Plan: "free"},
		},
		REST: middleware.RESTOptions{Routes: map[string]int64{"GET /api/search": 10, "/api/free": 0}},
	}}
}

func newLimiter(t *testing.T, cfg config) *middleware.Limiter {
	t.Helper()
	lim, err := middleware.New(cfg.Dependencies, cfg.Policy)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

// testSDL is a small schema in the shape of the example API. No cost
// directives but the rate-limit field's, which is free: a list without a
// slicing argument is DefaultListSize long.
const testSDL = `
directive @cost(weight: String!) on FIELD_DEFINITION | OBJECT
type Query {
  user(login: String!): User
  viewer: User
  rateLimit(dryRun: Boolean = false): RateLimit
}
type Mutation {
  createIssue(repo: String!, title: String!): Issue!
  rateLimit(dryRun: Boolean = false): RateLimit
}
type RateLimit @cost(weight: "0") {
  limit: Int!
  cost: Int!
  remaining: Int!
  used: Int!
  resetAt: String!
  nodeCount: Int!
}
type User {
  login: String!
  name: String
  repos(first: Int, last: Int): [Repository!]!
}
type Repository {
  name: String!
  owner: User!
  issues(first: Int, last: Int): [Issue!]!
}
type Issue {
  id: ID!
  title: String!
}
`

// testSchema is an executable schema without generated code: "executing"
// an operation counts one resolver call per root field and, for
// createIssue, records the new issue; rateLimit answers from
// middleware.RateLimitFrom. Root fields go through the root-field
// middleware, as generated code does. The other data returned is a
// stand-in; the tests look at statuses, headers, extensions and the
// counters.
type testSchema struct {
	schema    *ast.Schema
	resolvers atomic.Int64
	mu        sync.Mutex
	issues    []string
}

func newTestSchema() *testSchema {
	return &testSchema{schema: gqlparser.MustLoadSchema(&ast.Source{Name: "test.graphqls", Input: testSDL})}
}

func (s *testSchema) executable() graphql.ExecutableSchema {
	return &graphql.ExecutableSchemaMock{
		SchemaFunc: func() *ast.Schema { return s.schema },
		ComplexityFunc: func(context.Context, string, string, int, map[string]any) (int, bool) {
			return 0, false
		},
		ExecFunc: func(ctx context.Context) graphql.ResponseHandler {
			done := false
			return func(ctx context.Context) *graphql.Response {
				if done {
					return nil
				}
				done = true
				return &graphql.Response{Data: s.exec(ctx)}
			}
		},
	}
}

// exec resolves the operation's root fields (in the response's context, as
// generated code does, so errors the middleware adds reach the response).
func (s *testSchema) exec(ctx context.Context) json.RawMessage {
	opCtx := graphql.GetOperationContext(ctx)
	root := "Query"
	if opCtx.Operation.Operation == ast.Mutation {
		root = "Mutation"
	}
	data := map[string]json.RawMessage{}
	for _, f := range graphql.CollectFields(opCtx, opCtx.Operation.SelectionSet, []string{root}) {
		fctx := graphql.WithRootFieldContext(ctx, &graphql.RootFieldContext{Object: f.Name, Field: f})
		m := opCtx.RootResolverMiddleware(fctx, func(ctx context.Context) graphql.Marshaler {
			s.resolvers.Add(1)
			return s.resolve(ctx, opCtx, f)
		})
		if m == graphql.Null && f.Definition.Type.NonNull {
			return json.RawMessage("null") // a null where the schema forbids one nulls the data
		}
		var b bytes.Buffer
		m.MarshalGQL(&b)
		data[f.Alias] = b.Bytes()
	}
	b, _ := json.Marshal(data)
	return b
}

func (s *testSchema) resolve(ctx context.Context, opCtx *graphql.OperationContext, f graphql.CollectedField) graphql.Marshaler {
	switch f.Name {
	case "createIssue":
		title, _ := f.ArgumentMap(opCtx.Variables)["title"].(string)
		s.mu.Lock()
		s.issues = append(s.issues, title)
		s.mu.Unlock()
		return jsonValue(map[string]any{"id": "1", "title": title})
	case "user":
		login, _ := f.ArgumentMap(opCtx.Variables)["login"].(string)
		if login == hoarder {
			// More repositories than the default list size prices.
			repos := make([]map[string]any, hoarderRepos)
			for i := range repos {
				repos[i] = map[string]any{"name": "r"}
			}
			return jsonValue(map[string]any{"login": login, "repos": repos})
		}
		return jsonValue(map[string]any{"login": login})
	case "rateLimit":
		rl, ok := middleware.RateLimitFrom(ctx)
		if !ok {
			return graphql.Null
		}
		return jsonValue(map[string]any{
			"limit": rl.Limit, "cost": rl.Cost, "remaining": rl.Remaining, "used": rl.Used,
			"resetAt": rl.ResetAt.UTC().Format(time.RFC3339), "nodeCount": rl.NodeCount,
		})
	}
	return graphql.Null
}

// jsonValue marshals v as a root field's value (every member, whatever
// the selection: the tests read what they selected).
func jsonValue(v any) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		b, _ := json.Marshal(v)
		w.Write(b)
	})
}

// hoarder is the user whose repositories overrun the size a list without
// a slicing argument is priced at: hoarderRepos of them.
const (
	hoarder      = "hoarder"
	hoarderRepos = 60
)

func (s *testSchema) issueCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.issues)
}

// graphQLServer is the wiring a user writes: a gqlgen server installed
// with Handler, and the REST middleware on /api/.
func graphQLServer(lim *middleware.Limiter, s *testSchema) http.Handler {
	return graphQLServerOf(lim, s.executable())
}

// graphQLServerOf is graphQLServer around es.
func graphQLServerOf(lim *middleware.Limiter, es graphql.ExecutableSchema) http.Handler {
	srv := handler.New(es)
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})

	api := http.NewServeMux()
	api.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"ok":true}`)
	})
	mux := http.NewServeMux()
	mux.Handle("/graphql", lim.Handler(srv))
	mux.Handle("/api/", lim.REST(api))
	return mux
}

// gqlResponse is a decoded GraphQL response.
type gqlResponse struct {
	Data   json.RawMessage `json:"data"`
	Errors []struct {
		Message    string         `json:"message"`
		Extensions map[string]any `json:"extensions"`
	} `json:"errors"`
	Extensions struct {
		Cost *middleware.Cost `json:"cost"`
	} `json:"extensions"`
}

func (r gqlResponse) code() string {
	if len(r.Errors) == 0 {
		return ""
	}
	c, _ := r.Errors[0].Extensions["code"].(string)
	return c
}

// request is one HTTP exchange, recorded.
type request struct {
	method, path, body string
	header             http.Header
	remoteAddr         string
	// ctx, when set, is the request's context: cancelling it is the client
	// leaving.
	ctx context.Context
}

func do(t *testing.T, h http.Handler, req request) *httptest.ResponseRecorder {
	t.Helper()
	if req.method == "" {
		req.method = http.MethodPost
	}
	r := httptest.NewRequest(req.method, req.path, strings.NewReader(req.body))
	if req.ctx != nil {
		r = r.WithContext(req.ctx)
	}
	if req.remoteAddr != "" {
		r.RemoteAddr = req.remoteAddr
	}
	for k, v := range req.header {
		r.Header[k] = v
	}
	if req.method == http.MethodPost && r.Header.Get("Content-Type") == "" {
		r.Header.Set("Content-Type", "application/json")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// query posts a GraphQL operation.
func query(t *testing.T, h http.Handler, q string, header http.Header) (*httptest.ResponseRecorder, gqlResponse) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": q})
	w := do(t, h, request{path: "/graphql", body: string(body), header: header})
	var resp gqlResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatalf("response is not JSON: %v\n%s", err, w.Body.String())
	}
	return w, resp
}

func bearer(key string) http.Header {
	return http.Header{"Authorization": {"Bearer " + key}}
}
