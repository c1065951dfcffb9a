package upstream

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/middleware"
)

func TestQueryForwarded(t *testing.T) {
	up := newFakeUpstream(t)
	// Whitespace and key order as the upstream wrote them; a number past
	// float64's precision in an extension and in an error's extensions.
	const data = `{"user":{"login":"a", "repos":[{"name":"x"}]}}`
	up.answer = func(request) (int, string) {
		return http.StatusOK, `{"data":` + data + `,"errors":[{"message":"partial","path":["user","repos",0],` +
			`"locations":[{"line":1,"column":3}],"extensions":{"code":"PARTIAL","big":12345678901234567891}}],` +
			`"extensions":{"trace":{"id":98765432109876543210}}}`
	}
	proxy := newProxy(t, up.URL, proxyOptions{})
	query := `query Q($login: String!) { user(login: $login) { login repos(first: 3) { name } } }`
	a := post(t, proxy.URL, query, map[string]any{"login": "a"},
		"Authorization", "Bearer "+aliceKey, "Cookie", "session=1",
		"X-API-Key", aliceKey, "X-Forwarded-For", "203.0.113.9", "X-Other", "x")

	if a.status != http.StatusOK {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	// gqlgen writes data as Go's encoder does: compacted.
	if want := strings.ReplaceAll(data, " ", ""); string(a.Data) != want {
		t.Errorf("data %s, want %s", a.Data, want)
	}
	if !strings.Contains(string(a.body), `"big":12345678901234567891`) || !strings.Contains(string(a.body), `"trace":{"id":98765432109876543210}`) {
		t.Errorf("numbers changed on the way: %s", a.body)
	}
	if len(a.Errors) != 1 || a.Errors[0].Message != "partial" || a.code() != "PARTIAL" ||
		len(a.Errors[0].Path) != 3 || string(a.Errors[0].Locations) != `[{"line":1,"column":3}]` {
		t.Errorf("errors %+v", a.Errors)
	}
	if c := a.cost(t); c.RequestedQueryCost != 4 || c.ActualQueryCost == nil || *c.ActualQueryCost != 2 {
		t.Errorf("cost %+v, want requested 4 (1 + 3 repos), actual 2 (1 + 1 repo)", c)
	}

	r, body := up.last()
	if up.hits.Load() != 1 || body.Query != query || body.Variables["login"] != "a" {
		t.Fatalf("upstream saw %d requests, the last %+v", up.hits.Load(), body)
	}
	for name, want := range map[string]string{
		"Authorization":   "Bearer " + aliceKey,
		"Cookie":          "session=1",
		"X-Api-Key":       "",
		"X-Forwarded-For": "",
		"X-Other":         "",
		"Content-Type":    "application/json",
		"Accept":          acceptGraphQL,
	} {
		if got := r.Header.Get(name); got != want {
			t.Errorf("upstream header %s: %q, want %q", name, got, want)
		}
	}
}

// The limiter charges the proxy what it charges a gqlgen server of the
// same schema: the upstream here is the example API itself, so the data,
// and so the actual cost and the refund, are the same too.
func TestCostMatchesGqlgen(t *testing.T) {
	direct, proxied, hits := exampleAPIs(t)
	for _, query := range []string{
		`{ user(login: "octocat") { login repos(first: 100) { name issues(first: 50) { title } } } }`,
		`{ user(login: "octocat") { recentIssues { title bodyHTML } followers(first: 5) { totalCount nodes { login } } } }`,
		`{ search(query: "o", first: 20) { ... on User { login } ... on Repository { name topics } ... on Issue { title } } }`,
		`mutation { createIssue(repo: "hello-world", title: "t") { id title } }`,
	} {
		want := post(t, direct.URL, query, nil, "Authorization", "Bearer "+aliceKey)
		before := hits.Load()
		got := post(t, proxied.URL, query, nil, "Authorization", "Bearer "+aliceKey)
		if want.status != http.StatusOK || got.status != want.status {
			t.Fatalf("%s: status %d through the proxy, %d direct: %s", query, got.status, want.status, got.body)
		}
		if hits.Load() != before+1 {
			t.Errorf("%s: the upstream ran %d requests", query, hits.Load()-before)
		}
		if string(got.Data) != string(want.Data) {
			t.Errorf("%s: data %s, direct %s", query, got.Data, want.Data)
		}
		if g, w := string(got.Extensions["cost"]), string(want.Extensions["cost"]); g != w {
			t.Errorf("%s: extensions.cost %s, direct %s", query, g, w)
		}
	}
}

func TestRefusedOperationNeverReachesUpstream(t *testing.T) {
	up := newFakeUpstream(t)
	proxy := newProxy(t, up.URL, proxyOptions{policy: func(p *middleware.Policy) {
		p.GraphQL.MaxCost = 500
		anon := p.Plans["anon"]
		anon.DisableRefund = true // the upstream's nulls would give most of a price back
		p.Plans["anon"] = anon
	}})
	// 1 + 100 × (1 + 50): far over MaxCost.
	a := post(t, proxy.URL, `{ user(login: "a") { repos(first: 100) { issues(first: 50) { title } } } }`, nil)
	if a.status == http.StatusOK || a.code() != "MAX_COST_EXCEEDED" {
		t.Errorf("status %d, %s", a.status, a.body)
	}
	// The anonymous budget is 100: the first 60 fit, the second do not.
	query := `{ user(login: "a") { repos(first: 59) { name } } }`
	if a := post(t, proxy.URL, query, nil); a.status != http.StatusOK {
		t.Fatalf("first: status %d, %s", a.status, a.body)
	}
	if a := post(t, proxy.URL, query, nil); a.status != http.StatusTooManyRequests || a.code() != "RATE_LIMITED" {
		t.Errorf("second: status %d, %s", a.status, a.body)
	}
	if n := up.hits.Load(); n != 1 {
		t.Errorf("the upstream ran %d operations, want only the admitted one", n)
	}
}

func TestActualCostRefunds(t *testing.T) {
	up := newFakeUpstream(t)
	up.answer = func(request) (int, string) {
		return http.StatusOK, `{"data":{"user":{"repos":[{"name":"a"},{"name":"b"}]}}}`
	}
	proxy := newProxy(t, up.URL, proxyOptions{})
	a := post(t, proxy.URL, `{ user(login: "a") { repos(first: 10) { name } } }`, nil, "Authorization", "Bearer "+aliceKey)
	c := a.cost(t)
	if c.RequestedQueryCost != 11 || c.ActualQueryCost == nil || *c.ActualQueryCost != 3 ||
		c.ThrottleStatus.CurrentlyAvailable == nil || *c.ThrottleStatus.CurrentlyAvailable != 10000-3 {
		t.Errorf("cost %s, want 11 requested, 3 actual and 9997 left", a.Extensions["cost"])
	}
}

func TestUpstreamStatusPassesThrough(t *testing.T) {
	up := newFakeUpstream(t)
	up.answer = func(request) (int, string) {
		return http.StatusUnauthorized, `{"errors":[{"message":"sign in","extensions":{"code":"UNAUTHENTICATED"}}]}`
	}
	proxy := newProxy(t, up.URL, proxyOptions{})
	a := post(t, proxy.URL, `{ user(login: "a") { login } }`, nil, "Authorization", "Bearer "+aliceKey)
	if a.status != http.StatusUnauthorized || a.code() != "UNAUTHENTICATED" || a.Errors[0].Message != "sign in" {
		t.Errorf("status %d, %s", a.status, a.body)
	}
	if a.header.Get(middleware.HeaderXRateLimitRemaining) == "" || a.Extensions["cost"] == nil {
		t.Errorf("the limiter's headers or extensions.cost are missing: %v %s", a.header, a.body)
	}
	// The challenge comes with it; the upstream's other headers do not.
	if got := a.header.Get("WWW-Authenticate"); got != `Bearer realm="upstream"` || a.header.Get("X-Upstream-Internal") != "" {
		t.Errorf("WWW-Authenticate %q, X-Upstream-Internal %q", got, a.header.Get("X-Upstream-Internal"))
	}
	// A 200 stays a 200.
	up.answer = func(request) (int, string) { return http.StatusOK, `{"data":{"user":null}}` }
	if a := post(t, proxy.URL, `{ user(login: "a") { login } }`, nil); a.status != http.StatusOK {
		t.Errorf("status %d after a 200", a.status)
	}
}

func TestUpstreamUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name        string
		upstream    func(t *testing.T) string // its URL
		config      func(*Config)
		reason      string
		notExecuted bool
	}{
		{
			name: "down",
			upstream: func(t *testing.T) string {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				must(t, err)
				url := "http://" + l.Addr().String()
				must(t, l.Close())
				return url
			},
			reason:      "cannot connect",
			notExecuted: true,
		},
		{
			name: "not GraphQL",
			upstream: func(t *testing.T) string {
				up := newFakeUpstream(t)
				up.answer = func(request) (int, string) { return http.StatusBadGateway, "<html>bad gateway</html>" }
				return up.URL
			},
			reason: "status 502 without a GraphQL response",
		},
		{
			name: "too large",
			upstream: func(t *testing.T) string {
				up := newFakeUpstream(t)
				up.answer = func(request) (int, string) {
					return http.StatusOK, `{"data":{"user":{"login":"` + strings.Repeat("a", 200) + `"}}}`
				}
				return up.URL
			},
			config: func(c *Config) { c.MaxResponseBytes = 100 },
			reason: "the response is too large",
		},
		{
			name: "timeout",
			upstream: func(t *testing.T) string {
				up := newFakeUpstream(t)
				hang := make(chan struct{})
				t.Cleanup(func() { close(hang) }) // before the server's Close, which waits for the handler
				up.answer = func(request) (int, string) {
					<-hang
					return http.StatusOK, `{"data":null}`
				}
				return up.URL
			},
			config: func(c *Config) { c.Client = &http.Client{Timeout: 100 * time.Millisecond} },
			reason: "timed out",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.upstream(t)
			var seen notExecuted
			proxy := newProxy(t, url, proxyOptions{config: tc.config, observe: seen.observe})
			a := post(t, proxy.URL, `{ user(login: "a") { repos(first: 20) { name } } }`, nil)
			if a.status != http.StatusBadGateway || a.code() != CodeUnavailable || string(a.Data) != "null" {
				t.Fatalf("status %d, %s", a.status, a.body)
			}
			// An operation that never reached the upstream pays the
			// limiter's InvalidCost (1) of its price of 21, through
			// ErrNotExecuted; one the upstream may have run keeps it
			// whole (no data to price it by).
			c := a.cost(t)
			switch {
			case tc.notExecuted && (c.ActualQueryCost == nil || *c.ActualQueryCost != 1 || *c.ThrottleStatus.CurrentlyAvailable != 100-1):
				t.Errorf("cost %s, want the price given back but 1", a.Extensions["cost"])
			case !tc.notExecuted && (c.ActualQueryCost != nil || *c.ThrottleStatus.CurrentlyAvailable != 100-21):
				t.Errorf("cost %s, want the price of 21 kept", a.Extensions["cost"])
			}
			if msg := a.Errors[0].Message; msg != "upstream unavailable: "+tc.reason {
				t.Errorf("message %q", msg)
			}
			if strings.Contains(string(a.body), "127.0.0.1") {
				t.Errorf("the answer names the upstream's address: %s", a.body)
			}
			if seen.seen.Load() != tc.notExecuted {
				t.Errorf("ErrNotExecuted wrapped: %v, want %v", seen.seen.Load(), tc.notExecuted)
			}
		})
	}
}

// Status reads what the forwarder recorded, and Capture keeps a status
// that is not gqlgen's 200.
func TestStatusOutsideCapture(t *testing.T) {
	if s := Status(context.Background()); s != 0 {
		t.Errorf("Status outside Capture: %d", s)
	}
	var seen int
	h := Capture(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setStatus(r.Context(), http.StatusForbidden)
		seen = Status(r.Context())
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", nil))
	if seen != http.StatusForbidden || w.Code != http.StatusTooManyRequests {
		t.Errorf("Status %d, written %d", seen, w.Code)
	}
}

// exampleAPIs serves the example API (package graph) behind a limiter,
// and the proxy of another instance of it behind the same policy; hits
// counts the requests that instance runs.
func exampleAPIs(t *testing.T) (direct, proxied *httptest.Server, hits *atomic.Int64) {
	t.Helper()
	direct = serveLimited(t, graph.NewResolver().Schema(), proxyOptions{})
	hits = new(atomic.Int64)
	gql := handler.New(graph.NewResolver().Schema())
	gql.AddTransport(transport.POST{})
	gql.AddTransport(transport.Websocket{})
	gql.Use(extension.Introspection{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		gql.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	proxied = newProxy(t, up.URL, proxyOptions{sdl: readFile(t, exampleSchemaFile)})
	return direct, proxied, hits
}

// exampleSchemaFile is the example API's schema, with its cost directives.
const exampleSchemaFile = "../../../../graph/schema.graphqls"
