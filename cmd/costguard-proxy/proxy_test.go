package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/cmd/costguard-proxy/internal/upstream"
	"github.com/costguard/costguard/internal/serve"
	"github.com/costguard/costguard/internal/wstest"
	"github.com/costguard/costguard/middleware"
)

// upstreamSchema is the SDL both test upstreams serve, with its costs.
const upstreamSchema = "testdata/upstreams/schema.graphql"

// The operations the tests send, with what the schema prices them at.
const (
	deepQuery   = `{ user(login: "alice") { repos(first: 5) { name issues(first: 10) { title } } } }` // 56; alice's data: 7
	labelsQuery = `{ labels { name } }`                                                               // 10, assumed; 25 returned
	createIssue = `mutation { createIssue(repo: "Repo:alpha", title: "from the proxy") { id title } }`
	searchQuery = `query($t: String!) { search(term: $t, first: 3) { id ... on Repo { name } } }`
	subscribe   = `subscription { issueAdded(repo: "Repo:alpha", count: 2, intervalMs: 5) { title } }`
)

// Each server from the npm registry behind the proxy: every operation on
// every transport is priced and debited as the gqlgen adapter prices and
// debits the same schema, refused ones never reach the upstream, and the
// upstream's failures are answered as such.
func TestProxyInFrontOfServers(t *testing.T) {
	for _, script := range []string{"yoga.js", "apollo.js"} {
		t.Run(strings.TrimSuffix(script, ".js"), func(t *testing.T) {
			up := startUpstream(t, script)
			cfg := writeFile(t, "costguard.yaml", testConfig)
			p := startProxy(t, "-upstream", up.URL, "-schema", upstreamSchema, "-config", cfg)
			ref := startReference(t, up.URL, cfg)

			t.Run("priced as gqlgen prices it", func(t *testing.T) { pricedAsGqlgen(t, up, p, ref) })
			t.Run("refused before the upstream", func(t *testing.T) { refusedBeforeUpstream(t, up, p) })
			t.Run("GET", func(t *testing.T) { overGET(t, p) })
			t.Run("SSE", func(t *testing.T) { overSSE(t, up, p) })
			for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
				t.Run(proto, func(t *testing.T) { overWebSocket(t, up, p, proto) })
			}
		})
	}
}

// pricedAsGqlgen sends the same operations, in the same order, through the
// proxy and through the reference (gqlgen serving the same schema behind
// the same limiter configuration), and compares what each client sees of
// the cost: status, extensions.cost and the rate-limit headers.
func pricedAsGqlgen(t *testing.T, up nodeUpstream, p *proxy, ref string) {
	up.reset(t)
	alice := []string{"Authorization", "Bearer alice-key"}
	ops := []struct{ name, body string }{
		{"deep query, refunded", query(deepQuery, nil)},
		{"overrun, debited", query(labelsQuery, nil)},
		{"variables and an interface", query(searchQuery, map[string]any{"t": "a"})},
		{"mutation", query(createIssue, nil)},
		{"deep query after it", query(deepQuery, nil)},
	}
	for _, op := range ops {
		got := postGraphQL(t, p.URL+"/graphql", op.body, alice...)
		want := postGraphQL(t, ref+"/graphql", op.body, alice...)
		// The mutation's new issue is numbered by the upstream, which
		// both asked: its data differs by that number.
		if got.status != want.status || (op.name != "mutation" && !bytes.Equal(got.Data, want.Data)) {
			t.Errorf("%s: proxy %d %s, gqlgen %d %s", op.name, got.status, got.body, want.status, want.body)
			continue
		}
		g, w := costOf(t, got), costOf(t, want)
		if g != w {
			t.Errorf("%s: proxy's cost %s, gqlgen's %s", op.name, g, w)
		}
		for _, h := range []string{middleware.HeaderRateLimit, middleware.HeaderXRateLimitRemaining, middleware.HeaderXRateLimitLimit} {
			if got.header.Get(h) != want.header.Get(h) {
				t.Errorf("%s: %s %q from the proxy, %q from gqlgen", op.name, h, got.header.Get(h), want.header.Get(h))
			}
		}
	}
	// Spot-check the reference itself, so that two wrong answers cannot agree.
	a := postGraphQL(t, p.URL+"/graphql", query(labelsQuery, nil), alice...)
	if c := a.Extensions.Cost; c == nil || c.RequestedQueryCost != 10 || c.ActualQueryCost == nil || *c.ActualQueryCost != 25 {
		t.Errorf("labels: %s, want 10 requested (the assumed size) and 25 actual (the labels returned)", a.body)
	}
	// The proxy forwarded each operation once; the reference's own calls
	// count too.
	if hits := up.hits(t); hits != 2*len(ops)+1 {
		t.Errorf("the upstream executed %d operations, want %d", hits, 2*len(ops)+1)
	}
}

// costOf is extensions.cost as text, for comparing.
func costOf(t *testing.T, a *gqlAnswer) string {
	t.Helper()
	if a.Extensions.Cost == nil {
		t.Fatalf("no extensions.cost: %s", a.body)
	}
	b, _ := json.Marshal(a.Extensions.Cost)
	return string(b)
}

// refusedBeforeUpstream: an anonymous client's budget (100) cannot pay
// for an operation priced over it, ever, and is spent by the labels, 25
// each (their overrun debited), after four; the upstream never sees the
// refused ones.
func refusedBeforeUpstream(t *testing.T, up nodeUpstream, p *proxy) {
	up.reset(t)
	tooDear := `{ user(login: "alice") { repos(first: 50) { issues(first: 50) { title } } } }`
	a := postGraphQL(t, p.URL+"/graphql", query(tooDear, nil), "X-Forwarded-For", "203.0.113.9")
	if a.status == http.StatusOK || a.code() != budget.CodeMaxCostExceeded {
		t.Errorf("an operation over the plan: %d %s", a.status, a.body)
	}
	admitted := 0
	var refused *gqlAnswer
	for i := 0; i < 10 && refused == nil; i++ {
		switch a := postGraphQL(t, p.URL+"/graphql", query(labelsQuery, nil)); a.status {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
			refused = a
		default:
			t.Fatalf("labels: %d %s", a.status, a.body)
		}
	}
	if admitted != 4 || refused == nil || refused.code() != budget.CodeRateLimited || refused.header.Get("Retry-After") == "" {
		t.Fatalf("%d admitted, then refused: %+v", admitted, refused)
	}
	if hits := up.hits(t); hits != admitted {
		t.Errorf("the upstream executed %d operations, %d were admitted: refused ones reached it", hits, admitted)
	}
}

// overGET: a query in the URL is priced and forwarded.
func overGET(t *testing.T, p *proxy) {
	req, _ := http.NewRequest(http.MethodGet, p.URL+"/graphql?query="+url.QueryEscape(labelsQuery), nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	a := doGraphQL(t, req)
	if a.status != http.StatusOK || a.Extensions.Cost == nil || a.Extensions.Cost.RequestedQueryCost != 10 || !strings.Contains(string(a.Data), `"labels"`) {
		t.Errorf("GET: %d %s", a.status, a.body)
	}
}

// overSSE: a subscription over Server-Sent Events; each event is forwarded
// from the upstream's socket and carries its cost.
func overSSE(t *testing.T, up nodeUpstream, p *proxy) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/graphql", strings.NewReader(query(subscribe, nil)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer alice-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []gqlAnswer
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && data != "" {
			var a gqlAnswer
			if err := json.Unmarshal([]byte(data), &a); err != nil {
				t.Fatalf("event %q: %v", data, err)
			}
			events = append(events, a)
		}
	}
	if resp.StatusCode != http.StatusOK || len(events) != 2 {
		t.Fatalf("SSE: status %d, %d events: %+v", resp.StatusCode, len(events), events)
	}
	for i, e := range events {
		if !strings.Contains(string(e.Data), `"issueAdded"`) || e.Extensions.Cost == nil {
			t.Errorf("event %d: %s, cost %v", i, e.Data, e.Extensions.Cost)
		}
	}
}

// overWebSocket: a subscription over the proxy's socket in either
// subprotocol; the upstream is reached over graphql-transport-ws.
func overWebSocket(t *testing.T, up nodeUpstream, p *proxy, proto string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := wstest.Dial(ctx, "ws"+strings.TrimPrefix(p.URL, "http")+"/graphql", wstest.DialOptions{Subprotocols: []string{proto}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(v map[string]any) {
		if err := c.WriteJSON(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	send(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer alice-key"}})
	start, next := "subscribe", "next"
	if proto == "graphql-ws" {
		start, next = "start", "data"
	}
	var events []json.RawMessage
	for done := false; !done; {
		var m struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := c.ReadJSON(ctx, &m); err != nil {
			t.Fatalf("after %d events: %v", len(events), err)
		}
		switch m.Type {
		case "connection_ack":
			send(map[string]any{"id": "1", "type": start, "payload": map[string]any{"query": subscribe}})
		case next:
			events = append(events, m.Payload)
		case "complete":
			done = true
		case "ka", "ping", "pong":
		default:
			t.Fatalf("%s message: %s", m.Type, m.Payload)
		}
	}
	if len(events) != 2 {
		t.Fatalf("%d events, want 2", len(events))
	}
	// Each event pays its own actual cost: the budget goes down with each.
	left := int64(-1)
	for i, e := range events {
		var a gqlAnswer
		if err := json.Unmarshal(e, &a); err != nil || !strings.Contains(string(a.Data), `"issueAdded"`) || a.Extensions.Cost == nil {
			t.Errorf("event %d: %s (%v)", i, e, err)
			continue
		}
		now := *a.Extensions.Cost.ThrottleStatus.CurrentlyAvailable
		if left >= 0 && now >= left {
			t.Errorf("event %d: %d points left, %d after the event before: the event was not charged", i, now, left)
		}
		left = now
	}
}

// The upstream's own answers come back: its status (a 401 with a GraphQL
// body) with the limiter's headers; when it is down, 502 with a clear
// body, and the budget given back but the refusal's price.
func TestUpstreamFailuresAnswered(t *testing.T) {
	up := startUpstream(t, "yoga.js", "FAIL_STATUS=401")
	cfg := writeFile(t, "costguard.yaml", testConfig)
	p := startProxy(t, "-upstream", up.URL, "-schema", upstreamSchema, "-config", cfg)
	a := postGraphQL(t, p.URL+"/graphql", query(labelsQuery, nil), "Authorization", "Bearer alice-key")
	if a.status != http.StatusUnauthorized || a.code() != "UNAUTHENTICATED" || a.header.Get(middleware.HeaderXRateLimitRemaining) == "" {
		t.Errorf("upstream 401: %d %v %s", a.status, a.header, a.body)
	}

	// Nothing listens where the upstream was.
	down := startProxy(t, "-upstream", "http://127.0.0.1:1/graphql", "-schema", upstreamSchema, "-config", cfg)
	a = postGraphQL(t, down.URL+"/graphql", query(deepQuery, nil), "Authorization", "Bearer alice-key")
	if a.status != http.StatusBadGateway || a.code() != upstream.CodeUnavailable || string(a.Data) != "null" {
		t.Fatalf("upstream down: %d %s", a.status, a.body)
	}
	if c := a.Extensions.Cost; c == nil || c.RequestedQueryCost != 56 || *c.ThrottleStatus.CurrentlyAvailable != 999 {
		t.Errorf("upstream down: %s, want 56 priced and all but 1 of 1,000 left", a.body)
	}
	if !strings.Contains(a.Errors[0].Message, "upstream unavailable") || strings.Contains(string(a.body), "127.0.0.1") {
		t.Errorf("upstream down: message %q", a.Errors[0].Message)
	}

	// A subscription that cannot open its upstream socket gets its price
	// (22) back but 1 too, and so does a query after it: 999 − 1 − 1 left.
	dear := `subscription { issueAdded(repo: "Repo:alpha") { title repo { issues(first: 20) { title } } } }`
	req, _ := http.NewRequest(http.MethodPost, down.URL+"/graphql", strings.NewReader(query(dear, nil)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer alice-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	stream, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(stream), upstream.CodeUnavailable) {
		t.Errorf("subscription, upstream down: %s", stream)
	}
	a = postGraphQL(t, down.URL+"/graphql", query(labelsQuery, nil), "Authorization", "Bearer alice-key")
	if got := a.header.Get(middleware.HeaderXRateLimitRemaining); got != "997" {
		t.Errorf("after the subscription and a query: %s left, want 997", got)
	}
}

// -introspect reads the schema from the upstream, and an upstream with
// introspection off stops the start with a clear error.
func TestIntrospect(t *testing.T) {
	up := startUpstream(t, "apollo.js")
	p := startProxy(t, "-upstream", up.URL, "-introspect")
	a := postGraphQL(t, p.URL+"/graphql", query(deepQuery, nil))
	if a.status != http.StatusOK || !strings.Contains(string(a.Data), `"alpha"`) || a.Extensions.Cost == nil {
		t.Errorf("introspected: %d %s", a.status, a.body)
	}

	closed := startUpstream(t, "yoga.js", "INTROSPECTION=off")
	_, err := runProxy(t, "-upstream", closed.URL, "-introspect")
	if err == nil || !strings.Contains(err.Error(), "-schema") || !strings.Contains(err.Error(), closed.URL) {
		t.Errorf("introspection off: %v", err)
	}
}

// startReference serves the upstream's schema with gqlgen behind the same
// limiter configuration as the proxy, each operation resolved by asking
// the upstream for its data directly: what an app serving that schema in
// Go answers, the mirror the proxy's answers are held against.
func startReference(t *testing.T, upstreamURL, cfg string) string {
	t.Helper()
	sdl, err := readSDL()
	if err != nil {
		t.Fatal(err)
	}
	schema, err := upstream.LoadSDL(sdl)
	if err != nil {
		t.Fatal(err)
	}
	es := &graphql.ExecutableSchemaMock{
		SchemaFunc: func() *ast.Schema { return schema },
		ComplexityFunc: func(context.Context, string, string, int, map[string]any) (int, bool) {
			return 0, false
		},
		ExecFunc: func(ctx context.Context) graphql.ResponseHandler {
			return graphql.OneShot(resolveUpstream(ctx, upstreamURL))
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	opts := serve.Options{Program: "reference", Banner: "reference", NoDemo: true,
		Schema: func(context.Context, *slog.Logger) (graphql.ExecutableSchema, error) { return es, nil }}
	go func() {
		done <- serve.Run(ctx, []string{"-addr", "127.0.0.1:0", "-admin-addr", "", "-config", cfg}, outW, io.Discard, nil, opts)
		outW.Close()
	}()
	t.Cleanup(func() { cancel(); <-done })
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatalf("the reference did not start: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	var addr string
	if _, err := fmt.Sscanf(line, "reference on %s", &addr); err != nil {
		t.Fatalf("reference: %q", line)
	}
	return addr
}

// resolveUpstream asks the upstream for the operation of ctx's data, as a
// resolver of the reference would compute it.
func resolveUpstream(ctx context.Context, upstreamURL string) *graphql.Response {
	opCtx := graphql.GetOperationContext(ctx)
	body, _ := json.Marshal(map[string]any{"query": opCtx.RawQuery, "variables": opCtx.Variables})
	resp, err := http.Post(upstreamURL, "application/json", bytes.NewReader(body))
	if err != nil {
		return graphql.ErrorResponse(ctx, "%v", err)
	}
	defer resp.Body.Close()
	var out struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return graphql.ErrorResponse(ctx, "%v", err)
	}
	return &graphql.Response{Data: out.Data}
}

// readSDL is the test upstreams' schema.
func readSDL() (string, error) {
	b, err := os.ReadFile(upstreamSchema)
	return string(b), err
}

// The admin listener serves what the example server's does: the metrics
// count the proxy's decisions, the admin API knows its principals.
func TestAdminListener(t *testing.T) {
	up := startUpstream(t, "yoga.js")
	p := startProxy(t, "-upstream", up.URL, "-schema", upstreamSchema, "-config", writeFile(t, "costguard.yaml", testConfig),
		"-admin-addr", "127.0.0.1:0")
	if p.Admin == "" {
		t.Fatal("no admin listener line")
	}
	postGraphQL(t, p.URL+"/graphql", query(labelsQuery, nil), "Authorization", "Bearer alice-key")
	get := func(path string) string {
		resp, err := http.Get(p.Admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	if m := get("/metrics"); !strings.Contains(m, `costguard_decisions_total{`) {
		t.Errorf("/metrics counts no decision")
	}
	if a := get("/admin/principals/alice"); !strings.Contains(a, `"free"`) {
		t.Errorf("/admin/principals/alice: %s", a)
	}
	if d := get("/admin/"); !strings.Contains(d, "<html") {
		t.Errorf("/admin/ is no dashboard")
	}
}
