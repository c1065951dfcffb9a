package upstream

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

func TestNewRefusesBadConfig(t *testing.T) {
	schema, err := LoadSDL(testSDL)
	must(t, err)
	for name, cfg := range map[string]Config{
		"no schema":           {URL: "http://upstream/graphql"},
		"no URL":              {Schema: schema},
		"relative URL":        {Schema: schema, URL: "/graphql"},
		"ws URL for HTTP":     {Schema: schema, URL: "ws://upstream/graphql"},
		"http URL for socket": {Schema: schema, URL: "http://upstream/graphql", WebSocketURL: "http://upstream/graphql"},
		"negative size":       {Schema: schema, URL: "http://upstream/graphql", MaxResponseBytes: -1},
		"reserved header":     {Schema: schema, URL: "http://upstream/graphql", ForwardHeaders: []string{"Authorization", "content-type"}},
		"socket header":       {Schema: schema, URL: "http://upstream/graphql", ForwardHeaders: []string{"Sec-WebSocket-Key"}},
		"empty header name":   {Schema: schema, URL: "http://upstream/graphql", ForwardHeaders: []string{""}},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestNewDefaults(t *testing.T) {
	schema, err := LoadSDL(testSDL)
	must(t, err)
	for in, want := range map[string]string{
		"http://upstream:4000/graphql?x=1": "ws://upstream:4000/graphql?x=1",
		"https://upstream/graphql":         "wss://upstream/graphql",
	} {
		f, err := New(Config{Schema: schema, URL: in})
		must(t, err)
		if f.wsURL != want {
			t.Errorf("WebSocketURL for %s: %s, want %s", in, f.wsURL, want)
		}
		if f.maxBytes != DefaultMaxResponseBytes || f.handshake != DefaultHandshakeTimeout || f.client.Timeout != DefaultTimeout {
			t.Errorf("defaults: %d bytes, handshake %v, client timeout %v", f.maxBytes, f.handshake, f.client.Timeout)
		}
		if !slices.Equal(f.forward, []string{"Authorization", "Cookie"}) || !slices.Equal(DefaultForwardHeaders(), f.forward) {
			t.Errorf("forwarded headers %v", f.forward)
		}
	}
	if f, err := New(Config{Schema: schema, URL: "http://u/", ForwardHeaders: []string{}}); err != nil || len(f.forward) != 0 {
		t.Errorf("an empty list forwards %v (%v)", f.forward, err)
	}
	// The default client does not follow a redirect: its 3xx is no GraphQL response.
	f, err := New(Config{Schema: schema, URL: "http://u/"})
	must(t, err)
	if err := f.client.CheckRedirect(&http.Request{URL: &url.URL{}}, nil); !errors.Is(err, http.ErrUseLastResponse) {
		t.Errorf("CheckRedirect: %v", err)
	}
}

func TestHeadersAddedPerOperation(t *testing.T) {
	up := newFakeUpstream(t)
	proxy := newProxy(t, up.URL, proxyOptions{config: func(c *Config) {
		c.ForwardHeaders = []string{"Authorization", "X-Tenant"}
		c.Headers = func(ctx context.Context) http.Header {
			op := graphql.GetOperationContext(ctx).Operation.Operation
			return http.Header{
				"X-Principal": {"alice"}, "X-Operation": {string(op)},
				"x-tenant": {"from-proxy"}, // replaces the client's
				"Host":     {"evil"},       // reserved: not sent
			}
		}
	}})
	post(t, proxy.URL, `{ user(login: "a") { login } }`, nil,
		"Authorization", "Bearer "+aliceKey, "X-Tenant", "from-client", "Cookie", "c=1")
	r, _ := up.last()
	for name, want := range map[string]string{
		"Authorization": "Bearer " + aliceKey,
		"X-Tenant":      "from-proxy",
		"X-Principal":   "alice",
		"X-Operation":   string(ast.Query),
		"Cookie":        "", // not in this list
	} {
		if got := r.Header.Get(name); got != want {
			t.Errorf("upstream header %s: %q, want %q", name, got, want)
		}
	}
	if r.Host == "evil" {
		t.Error("Config.Headers set Host")
	}
}

func TestQueryOverGET(t *testing.T) {
	up := newFakeUpstream(t)
	up.answer = func(request) (int, string) { return http.StatusOK, `{"data":{"user":{"login":"a"}}}` }
	proxy := newProxy(t, up.URL, proxyOptions{})
	resp, err := http.Get(proxy.URL + "?query=" + url.QueryEscape(`{ user(login: "a") { login } }`))
	must(t, err)
	resp.Body.Close()
	if _, body := up.last(); resp.StatusCode != http.StatusOK || body.Query != `{ user(login: "a") { login } }` {
		t.Errorf("status %d, upstream got %+v", resp.StatusCode, body)
	}
}

// A dry run (rateLimit(dryRun: true)) debits nothing, so its operation
// must not run upstream: the limiter keeps every other root field from
// running, and the forwarder sends nothing.
func TestDryRunNotForwarded(t *testing.T) {
	up := newFakeUpstream(t)
	proxy := newProxy(t, up.URL, proxyOptions{sdl: readFile(t, exampleSchemaFile)})
	a := post(t, proxy.URL, `{ rateLimit(dryRun: true) { cost } user(login: "octocat") { login } }`, nil,
		"Authorization", "Bearer "+aliceKey)
	if n := up.hits.Load(); n != 0 {
		t.Errorf("the upstream ran %d operations of a dry run: %s", n, a.body)
	}
	if c := a.cost(t); c.RequestedQueryCost == 0 || *c.ThrottleStatus.CurrentlyAvailable != 10000 {
		t.Errorf("dry run cost %s, want a price and nothing debited", a.Extensions["cost"])
	}
	// Without dryRun the same operation runs.
	post(t, proxy.URL, `{ user(login: "octocat") { login } }`, nil, "Authorization", "Bearer "+aliceKey)
	if n := up.hits.Load(); n != 1 {
		t.Errorf("the upstream ran %d operations, want 1", n)
	}
}

// Introspection the server disabled is not asked of the upstream either.
func TestDisabledIntrospectionNotForwarded(t *testing.T) {
	up := newFakeUpstream(t)
	proxy := newProxy(t, up.URL, proxyOptions{noIntrospection: true})
	a := post(t, proxy.URL, `{ __schema { queryType { name } } }`, nil, "Authorization", "Bearer "+aliceKey)
	if up.hits.Load() != 0 || len(a.Errors) == 0 || a.Errors[0].Message != "introspection disabled" {
		t.Errorf("%d upstream requests; answer %s", up.hits.Load(), a.body)
	}
}
