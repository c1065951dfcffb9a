package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/middleware"
)

// The proxy's test schema: the example API's shape, small.
const testSDL = `
type Query {
  user(login: String!): User
}
type Mutation {
  createIssue(repo: String!, title: String!): Issue!
}
type Subscription {
  issueCreated(repo: String!): Issue!
}
type User {
  login: String!
  repos(first: Int): [Repository!]!
}
type Repository {
  name: String!
  issues(first: Int): [Issue!]!
}
type Issue {
  id: ID!
  title: String!
}
`

// aliceKey identifies alice, on the plan "free", to the limiter.
const aliceKey = "alice-key"

// fixedClock never moves: budgets stay where the debits leave them.
type fixedClock struct{}

func (fixedClock) Now() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC) }

// fakeUpstream is a GraphQL server in the test: POST answers with answer,
// a graphql-transport-ws socket runs script.
type fakeUpstream struct {
	*httptest.Server
	hits    atomic.Int64 // POST requests
	sockets atomic.Int64 // sockets accepted

	mu          sync.Mutex
	requests    []*http.Request // each POST, its body read into bodies
	bodies      []request
	initPayload map[string]any
	subscribe   request
	gotComplete chan struct{} // closed when the client unsubscribes

	// answer gives the status and body of a POST.
	answer func(r request) (int, string)
	// events are the payloads of the subscription's next messages; then
	// the socket sends end (complete, or an error message), or, when end
	// is "", waits for the client to unsubscribe or leave.
	events []string
	end    string
}

func newFakeUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{
		gotComplete: make(chan struct{}),
		answer: func(request) (int, string) {
			return http.StatusOK, `{"data":{"user":null}}`
		},
		end: `{"id":"1","type":"complete"}`,
	}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *fakeUpstream) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "" {
		u.socket(w, r)
		return
	}
	u.hits.Add(1)
	var req request
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &req)
	u.mu.Lock()
	u.requests = append(u.requests, r)
	u.bodies = append(u.bodies, req)
	answer := u.answer
	u.mu.Unlock()
	status, out := answer(req)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="upstream"`)
	}
	w.Header().Set("X-Upstream-Internal", "not for clients")
	w.Header().Set("Content-Type", "application/graphql-response+json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, out)
}

func (u *fakeUpstream) last() (*http.Request, request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.requests) == 0 {
		return nil, request{}
	}
	return u.requests[len(u.requests)-1], u.bodies[len(u.bodies)-1]
}

var upstreamUpgrader = websocket.Upgrader{Subprotocols: []string{"graphql-transport-ws"}}

// socket speaks graphql-transport-ws: it pings before its ack (the client
// must answer pong), then sends the events and the end.
func (u *fakeUpstream) socket(w http.ResponseWriter, r *http.Request) {
	c, err := upstreamUpgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	u.sockets.Add(1)
	var init struct {
		Type    string         `json:"type"`
		Payload map[string]any `json:"payload"`
	}
	if c.ReadJSON(&init) != nil || init.Type != "connection_init" {
		return
	}
	u.mu.Lock()
	u.requests = append(u.requests, r)
	u.initPayload = init.Payload
	u.mu.Unlock()
	_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`))
	var pong struct{ Type string }
	if c.ReadJSON(&pong) != nil || pong.Type != "pong" {
		return
	}
	_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"connection_ack"}`))
	var sub struct {
		ID      string  `json:"id"`
		Type    string  `json:"type"`
		Payload request `json:"payload"`
	}
	if c.ReadJSON(&sub) != nil || sub.Type != "subscribe" {
		return
	}
	u.mu.Lock()
	u.subscribe = sub.Payload
	u.mu.Unlock()
	// The client's messages from now on: its complete when it unsubscribes.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			var m struct{ Type string }
			if c.ReadJSON(&m) != nil {
				return
			}
			if m.Type == "complete" {
				close(u.gotComplete)
				return
			}
		}
	}()
	for _, e := range u.events {
		_ = c.WriteMessage(websocket.TextMessage, []byte(`{"id":"`+sub.ID+`","type":"next","payload":`+e+`}`))
	}
	if u.end == "" {
		<-gone // the client unsubscribed or closed the socket
		return
	}
	_ = c.WriteMessage(websocket.TextMessage, []byte(u.end))
}

// proxyOptions change the proxy newProxy builds.
type proxyOptions struct {
	sdl     string
	policy  func(*middleware.Policy)
	config  func(*Config)
	observe func(*graphql.Response) // sees every response, before the limiter's extension
	// noIntrospection leaves out extension.Introspection, so gqlgen
	// disables introspection.
	noIntrospection bool
}

// newProxy serves the forwarder to upstreamURL behind a costguard limiter
// on every gqlgen transport, as the proxy does.
func newProxy(t *testing.T, upstreamURL string, o proxyOptions) *httptest.Server {
	t.Helper()
	if o.sdl == "" {
		o.sdl = testSDL
	}
	schema, err := LoadSDL(o.sdl)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Schema: schema, URL: upstreamURL}
	if o.config != nil {
		o.config(&cfg)
	}
	fwd, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serveLimited(t, fwd.ExecutableSchema(), o)
}

// serveLimited serves es behind a limiter as examples/server does, inside
// Capture.
func serveLimited(t *testing.T, es graphql.ExecutableSchema, o proxyOptions) *httptest.Server {
	t.Helper()
	store, err := memorystore.New(memorystore.Config{Clock: fixedClock{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	policy := middleware.Policy{
		Plans: map[string]budget.Plan{
			"free": {Burst: 10000, Rate: 10000, Per: time.Hour},
			"anon": {Burst: 100, Rate: 100, Per: time.Hour},
		},
		AnonymousPlan: "anon",
		APIKeys:       map[string]identity.APIKey{aliceKey: {Principal: "alice", Plan: "free"}},
	}
	if o.policy != nil {
		o.policy(&policy)
	}
	lim, err := middleware.New(middleware.Dependencies{
		Store:  store,
		Clock:  fixedClock{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, policy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	srv := handler.New(es)
	srv.AddTransport(transport.Websocket{
		InitFunc:    lim.WebsocketInit(nil),
		InitTimeout: 10 * time.Second,
	})
	srv.AddTransport(transport.SSE{})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})
	if !o.noIntrospection {
		srv.Use(extension.Introspection{})
	}
	if o.observe != nil {
		srv.AroundResponses(func(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
			resp := next(ctx)
			if resp != nil {
				o.observe(resp)
			}
			return resp
		})
	}
	s := httptest.NewServer(Capture(lim.Handler(srv)))
	t.Cleanup(s.Close)
	return s
}

// answer is a client's view of a GraphQL response over HTTP.
type answer struct {
	status int
	header http.Header
	body   []byte
	// The members of the body: data kept as it came.
	Data       json.RawMessage            `json:"data"`
	Errors     []answerError              `json:"errors"`
	Extensions map[string]json.RawMessage `json:"extensions"`
}

// cost is the answer's extensions.cost.
func (a *answer) cost(t *testing.T) middleware.Cost {
	t.Helper()
	var c middleware.Cost
	if err := json.Unmarshal(a.Extensions["cost"], &c); err != nil {
		t.Fatalf("extensions.cost of %s: %v", a.body, err)
	}
	return c
}

type answerError struct {
	Message    string          `json:"message"`
	Path       []any           `json:"path"`
	Locations  json.RawMessage `json:"locations"`
	Extensions map[string]any  `json:"extensions"`
}

func (a *answer) code() string {
	if len(a.Errors) == 0 {
		return ""
	}
	c, _ := a.Errors[0].Extensions["code"].(string)
	return c
}

// post sends a GraphQL POST to url with the headers given as name, value
// pairs.
func post(t *testing.T, url, query string, variables map[string]any, header ...string) *answer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": variables})
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := &answer{status: resp.StatusCode, header: resp.Header}
	if a.body, err = io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(a.body, a); err != nil {
		t.Fatalf("body %s: %v", a.body, err)
	}
	return a
}

// readFile reads a file of the repository, relative to this package.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// notExecuted records whether some response error wraps ErrNotExecuted.
type notExecuted struct{ seen atomic.Bool }

func (n *notExecuted) observe(resp *graphql.Response) {
	for _, e := range resp.Errors {
		if errors.Is(e, ErrNotExecuted) {
			n.seen.Store(true)
		}
	}
}

// must fails the test on an error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
