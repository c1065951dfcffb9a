package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
)

var errTest = errors.New("store down")

// 1 + 10 × (1 + 5 × 1) = 61 points.
const query61 = `{ user(login: "octocat") { repos(first: 10) { issues(first: 5) { title } } } }`

// 10 (mutation base) + 1 (the Issue) = 11 points.
const mutation11 = `mutation { createIssue(repo: "hello", title: "bug") { id } }`

func TestGraphQLAdmitted(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	schema := newTestSchema()
	h := graphQLServer(lim, schema)

	w, resp := query(t, h, query61, bearer(aliceKey))
	if w.Code != http.StatusOK || len(resp.Errors) != 0 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var raw struct {
		Extensions struct {
			Cost json.RawMessage `json:"cost"`
		} `json:"extensions"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	const wantCost = `{"requestedQueryCost":61,"actualQueryCost":1,"throttleStatus":{"maximumAvailable":100,"currentlyAvailable":39,"restoreRate":1}}`
	if string(raw.Extensions.Cost) != wantCost {
		t.Errorf("extensions.cost\n got %s\nwant %s", raw.Extensions.Cost, wantCost)
	}
	for name, v := range map[string]string{
		middleware.HeaderRateLimitPolicy:     `"free";q=100;w=100`,
		middleware.HeaderRateLimit:           `"free";r=39;t=61`,
		middleware.HeaderXRateLimitLimit:     "100",
		middleware.HeaderXRateLimitRemaining: "39",
		middleware.HeaderXRateLimitUsed:      "61",
		middleware.HeaderXRateLimitReset:     strconv.FormatInt(clock.Now().Unix()+61, 10),
		middleware.HeaderRetryAfter:          "",
	} {
		if got := w.Header().Get(name); got != v {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
	if n := schema.resolvers.Load(); n != 1 {
		t.Errorf("resolvers %d, want 1", n)
	}
}

func TestGraphQLRateLimited(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	schema := newTestSchema()
	h := graphQLServer(lim, schema)

	if w, _ := query(t, h, query61, bearer(aliceKey)); w.Code != http.StatusOK {
		t.Fatalf("first query: %d", w.Code)
	}
	clock.Advance(1500 * time.Millisecond) // 40.5 points: still short of 61
	w, resp := query(t, h, query61, bearer(aliceKey))
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429: %s", w.Code, w.Body)
	}
	if resp.code() != budget.CodeRateLimited {
		t.Fatalf("errors %+v", resp.Errors)
	}
	// 20.5 points missing at 1 point/s: 20.5 s, rounded up.
	ext := resp.Errors[0].Extensions
	if ext["cost"] != float64(61) || ext["retryAfterSeconds"] != float64(21) {
		t.Errorf("error extensions %v", ext)
	}
	if got := w.Header().Get(middleware.HeaderRetryAfter); got != "21" {
		t.Errorf("Retry-After %q, want 21", got)
	}
	if got := w.Header().Get(middleware.HeaderRateLimit); got != `"free";r=40;t=60` {
		t.Errorf("RateLimit %q", got)
	}
	if c := resp.Extensions.Cost; c == nil || c.RequestedQueryCost != 61 || *c.ThrottleStatus.CurrentlyAvailable != 40 {
		t.Errorf("extensions.cost %+v", c)
	}
	if resp.Data != nil && string(resp.Data) != "null" {
		t.Errorf("data %s on a rejected operation", resp.Data)
	}
	if n := schema.resolvers.Load(); n != 1 {
		t.Errorf("resolvers %d, want 1 (the rejected operation ran)", n)
	}
	// On time, it passes.
	clock.Advance(21 * time.Second)
	if w, _ := query(t, h, query61, bearer(aliceKey)); w.Code != http.StatusOK {
		t.Errorf("at Retry-After: status %d", w.Code)
	}
}

func TestGraphQLRejectedMutationChangesNothing(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	schema := newTestSchema()
	h := graphQLServer(lim, schema)
	// anon: 20 points; each mutation costs 11.
	if w, _ := query(t, h, mutation11, nil); w.Code != http.StatusOK {
		t.Fatalf("first mutation: %d", w.Code)
	}
	w, resp := query(t, h, mutation11, nil)
	if w.Code != http.StatusTooManyRequests || resp.code() != budget.CodeRateLimited {
		t.Fatalf("second mutation: %d %+v", w.Code, resp.Errors)
	}
	if schema.issueCount() != 1 || schema.resolvers.Load() != 1 {
		t.Errorf("issues %d, resolvers %d: the rejected mutation ran", schema.issueCount(), schema.resolvers.Load())
	}
}

// An operation costing more than the whole burst is refused as
// MAX_COST_EXCEEDED (it could never pass); it pays InvalidCost, never its
// price.
func TestGraphQLCostAboveBurst(t *testing.T) {
	for _, accept := range []string{"", "application/json", "application/graphql-response+json"} {
		t.Run("accept="+accept, func(t *testing.T) {
			clock := newClock()
			lim := newLimiter(t, testConfig(t, clock))
			schema := newTestSchema()
			h := graphQLServer(lim, schema)
			header := http.Header{}
			if accept != "" {
				header.Set("Accept", accept)
			}
			w, resp := query(t, h, query61, header) // anon: burst 20
			want := http.StatusUnprocessableEntity
			if accept == "application/graphql-response+json" {
				want = http.StatusBadRequest
			}
			if w.Code != want {
				t.Fatalf("status %d, want %d: %s", w.Code, want, w.Body)
			}
			if resp.code() != complexity.CodeMaxCostExceeded || resp.Errors[0].Extensions["cost"] != float64(61) {
				t.Errorf("errors %+v", resp.Errors)
			}
			if _, ok := resp.Errors[0].Extensions["retryAfterSeconds"]; ok {
				t.Errorf("retryAfterSeconds on an operation that can never pass")
			}
			if w.Header().Get(middleware.HeaderRetryAfter) != "" {
				t.Errorf("Retry-After on an operation that can never pass")
			}
			if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "19" {
				t.Errorf("remaining %q, want 19 (InvalidCost debited)", got)
			}
			if c := resp.Extensions.Cost; c == nil || c.RequestedQueryCost != 61 || *c.ThrottleStatus.CurrentlyAvailable != 19 {
				t.Errorf("extensions.cost %+v", c)
			}
			if schema.resolvers.Load() != 0 {
				t.Errorf("resolvers ran")
			}
		})
	}
}

func deepQuery(levels int) string {
	var b strings.Builder
	b.WriteString(`{ user(login: "a") { `)
	for range levels {
		b.WriteString("repos(first: 1) { owner { ")
	}
	b.WriteString("login")
	for range levels {
		b.WriteString(" } }")
	}
	b.WriteString(" } }")
	return b.String()
}

// The static caps answer 422 (400 for graphql-response+json) with their
// code; the request pays InvalidCost (1 point), never its price.
func TestGraphQLStaticCaps(t *testing.T) {
	tests := []struct {
		name  string
		opts  middleware.GraphQLOptions
		query string
		code  string
	}{
		{"depth", middleware.GraphQLOptions{}, deepQuery(7), complexity.CodeMaxDepthExceeded},                                              // depth 16 > 15
		{"breadth", middleware.GraphQLOptions{}, `{ user(login: "a") { repos(first: 101) { name } } }`, complexity.CodeMaxBreadthExceeded}, // > 100
		{"negative breadth", middleware.GraphQLOptions{}, `{ user(login: "a") { repos(last: -1) { name } } }`, complexity.CodeMaxBreadthExceeded},
		{"nodes", middleware.GraphQLOptions{MaxNodes: 50}, query61, complexity.CodeMaxNodesExceeded},  // 60 nodes
		{"max cost", middleware.GraphQLOptions{MaxCost: 50}, query61, complexity.CodeMaxCostExceeded}, // 61 > 50
		{"custom depth", middleware.GraphQLOptions{MaxDepth: 2}, `{ user(login: "a") { repos { name } } }`, complexity.CodeMaxDepthExceeded},
	}
	for _, tc := range tests {
		for _, gqlResponse := range []bool{false, true} {
			t.Run(tc.name+"/graphql-response="+strconv.FormatBool(gqlResponse), func(t *testing.T) {
				clock := newClock()
				cfg := testConfig(t, clock)
				cfg.GraphQL = tc.opts
				lim := newLimiter(t, cfg)
				schema := newTestSchema()
				h := graphQLServer(lim, schema)
				header := bearer(aliceKey)
				want := http.StatusUnprocessableEntity
				if gqlResponse {
					header.Set("Accept", "application/graphql-response+json")
					want = http.StatusBadRequest
				}
				w, resp := query(t, h, tc.query, header)
				if w.Code != want || resp.code() != tc.code {
					t.Fatalf("status %d code %q, want %d %s: %s", w.Code, resp.code(), want, tc.code, w.Body)
				}
				if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "99" {
					t.Errorf("remaining %q, want 99 (InvalidCost debited)", got)
				}
				if w.Header().Get(middleware.HeaderRetryAfter) != "" {
					t.Errorf("Retry-After on a static rejection")
				}
				if c := resp.Extensions.Cost; c == nil || c.ThrottleStatus.CurrentlyAvailable == nil || *c.ThrottleStatus.CurrentlyAvailable != 99 {
					t.Errorf("extensions.cost %+v", c)
				}
				if schema.resolvers.Load() != 0 {
					t.Errorf("resolvers ran")
				}
			})
		}
	}
}

// Every code has its status, whatever the client accepts.
func TestGraphQLStatusTable(t *testing.T) {
	type scenario struct {
		code  string
		setup func(*config)
		query string
		auth  http.Header
	}
	scenarios := []scenario{
		{code: budget.CodeRateLimited, query: mutation11 + " ", setup: func(c *config) {
			c.Plans["anon"] = budget.Plan{Burst: 20, Rate: 1, Per: time.Hour}
		}},
		{code: budget.CodeRateLimiterUnavailable, query: query61, auth: bearer(aliceKey), setup: func(c *config) {
			c.Store = &failingStore{err: errTest}
			c.FailureMode = budget.FailClosed
		}},
		{code: middleware.CodeUnknownAPIKey, query: query61, auth: bearer("nope")},
		{code: complexity.CodeMaxCostExceeded, query: query61},
		{code: complexity.CodeMaxDepthExceeded, query: deepQuery(7), auth: bearer(aliceKey)},
	}
	want := map[string][2]int{ // [application/json, application/graphql-response+json]
		budget.CodeRateLimited:            {429, 429},
		budget.CodeRateLimiterUnavailable: {503, 503},
		middleware.CodeUnknownAPIKey:      {401, 401},
		complexity.CodeMaxCostExceeded:    {422, 400},
		complexity.CodeMaxDepthExceeded:   {422, 400},
	}
	for _, sc := range scenarios {
		for i, accept := range []string{"application/json", "application/graphql-response+json"} {
			t.Run(sc.code+"/"+accept, func(t *testing.T) {
				clock := newClock()
				cfg := testConfig(t, clock)
				if sc.setup != nil {
					sc.setup(&cfg)
				}
				lim := newLimiter(t, cfg)
				h := graphQLServer(lim, newTestSchema())
				header := http.Header{"Accept": {accept}}
				for k, v := range sc.auth {
					header[k] = v
				}
				var w *httptest.ResponseRecorder
				var resp gqlResponse
				for range 3 { // the 429 scenario needs its budget spent first
					w, resp = query(t, h, sc.query, header)
				}
				if resp.code() != sc.code || w.Code != want[sc.code][i] {
					t.Errorf("code %q status %d, want %s %d: %s", resp.code(), w.Code, sc.code, want[sc.code][i], w.Body)
				}
				if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, accept) {
					t.Errorf("Content-Type %q, want %s", ct, accept)
				}
			})
		}
	}
}

func TestGraphQLUnknownAPIKey(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	schema := newTestSchema()
	h := graphQLServer(lim, schema)
	w, resp := query(t, h, query61, http.Header{"X-Api-Key": {"forged"}})
	if w.Code != http.StatusUnauthorized || resp.code() != middleware.CodeUnknownAPIKey {
		t.Fatalf("status %d errors %+v", w.Code, resp.Errors)
	}
	if strings.Contains(w.Body.String(), "forged") {
		t.Errorf("the key is echoed: %s", w.Body)
	}
	if schema.resolvers.Load() != 0 {
		t.Errorf("resolvers ran")
	}
}

// REST requests and GraphQL operations of one principal share one bucket.
func TestOneBudgetForGraphQLAndREST(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	h := graphQLServer(lim, newTestSchema())

	if w := do(t, h, request{method: "GET", path: "/api/search", header: bearer(aliceKey)}); w.Code != 200 {
		t.Fatal(w.Code)
	}
	w, resp := query(t, h, query61, http.Header{"X-Api-Key": {aliceKey}})
	if w.Code != 200 || *resp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != 29 {
		t.Fatalf("GraphQL after REST: %d %s", w.Code, w.Body)
	}
	w = do(t, h, request{method: "GET", path: "/api/search", header: bearer(aliceKey)})
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "19" {
		t.Errorf("REST after GraphQL: remaining %q, want 19", got)
	}
	// Three searches fit in 19; the fourth does not, and GraphQL is starved too.
	do(t, h, request{method: "GET", path: "/api/search", header: bearer(aliceKey)})
	if w := do(t, h, request{method: "GET", path: "/api/search", header: bearer(aliceKey)}); w.Code != http.StatusTooManyRequests {
		t.Errorf("REST: %d, want 429", w.Code)
	}
	if w, _ := query(t, h, `{ viewer { login } }`, bearer(aliceKey)); w.Code != http.StatusOK {
		t.Errorf("a 1-point query with 9 left: %d", w.Code)
	}
	if w, _ := query(t, h, query61, bearer(aliceKey)); w.Code != http.StatusTooManyRequests {
		t.Errorf("GraphQL: %d, want 429", w.Code)
	}
	// Another principal is untouched.
	if w, _ := query(t, h, query61, bearer(bobKey)); w.Code != http.StatusOK {
		t.Errorf("bob: %d", w.Code)
	}
}

// A principal the application authenticated (WithPrincipal) pays from its
// own bucket, ahead of any API key.
func TestGraphQLWithPrincipal(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	inner := graphQLServer(lim, newTestSchema())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r.WithContext(identity.WithPrincipal(r.Context(), "alice", "free")))
	})
	// The application says alice; the unknown key is not consulted.
	w, resp := query(t, h, query61, bearer("stale-key"))
	if w.Code != 200 || *resp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != 39 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	// The same bucket as alice's API key.
	if w, resp := query(t, inner, query61, bearer(aliceKey)); w.Code != http.StatusTooManyRequests {
		t.Errorf("alice by key after alice by session: %d %+v", w.Code, resp.Extensions.Cost)
	}
}

// Documents gqlgen refuses before pricing pay InvalidCost and carry the
// budget; once the budget cannot pay even that, they are refused 429.
func TestGraphQLInvalidDocument(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.GraphQL.InvalidCost = 30
	cfg.Plans["anon"] = budget.Plan{Burst: 30, Rate: 30, Per: time.Minute}
	lim := newLimiter(t, cfg)
	schema := newTestSchema()
	h := graphQLServer(lim, schema)
	left := 100
	for _, q := range []string{`{ user(login: "a") { nope } }`, `{ user(`} {
		left -= 30
		w, resp := query(t, h, q, bearer(aliceKey))
		if w.Code != http.StatusUnprocessableEntity {
			t.Errorf("%s: status %d", q, w.Code)
		}
		if c := resp.Extensions.Cost; c == nil || c.RequestedQueryCost != 0 || *c.ThrottleStatus.CurrentlyAvailable != int64(left) {
			t.Errorf("%s: extensions.cost %+v", q, c)
		}
		if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != strconv.Itoa(left) {
			t.Errorf("%s: remaining %s, want %d", q, got, left)
		}
	}
	// A body that is not JSON at all: refused before gqlgen, charged too,
	// and the body is not echoed.
	w := do(t, h, request{path: "/graphql", body: "{\"query\": \"secret", header: bearer(aliceKey)})
	left -= 30
	if w.Code != http.StatusBadRequest || w.Header().Get(middleware.HeaderXRateLimitRemaining) != strconv.Itoa(left) {
		t.Errorf("bad JSON: %d %v", w.Code, w.Header())
	}
	if strings.Contains(w.Body.String(), "secret") {
		t.Errorf("the body is echoed: %s", w.Body)
	}
	// 10 points left, 30 needed: 429, whatever was wrong with the request.
	w, resp := query(t, h, `{ nope }`, bearer(aliceKey))
	if w.Code != http.StatusTooManyRequests || resp.code() != budget.CodeRateLimited || w.Header().Get(middleware.HeaderRetryAfter) != "20" || len(resp.Errors) != 2 {
		t.Errorf("empty budget: %d %s %v", w.Code, w.Body, w.Header())
	}
	if schema.resolvers.Load() != 0 {
		t.Errorf("resolvers ran")
	}
}

func TestGraphQLGET(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	h := graphQLServer(lim, newTestSchema())
	w := do(t, h, request{method: "GET", path: "/graphql?query=" + url.QueryEscape(query61), header: bearer(aliceKey)})
	if w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "39" {
		t.Errorf("GET: %d %v %s", w.Code, w.Header(), w.Body)
	}
}

// otherExtensions adds an entry of its own to every response's extensions,
// as a tracing extension does.
type otherExtensions struct{}

func (otherExtensions) ExtensionName() string                   { return "other" }
func (otherExtensions) Validate(graphql.ExecutableSchema) error { return nil }
func (otherExtensions) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	resp := next(ctx)
	if resp.Extensions == nil {
		resp.Extensions = map[string]any{}
	}
	resp.Extensions["other"] = true
	return resp
}

// extensions.cost sits beside another extension's entries in one
// extensions object. An extension added before Handler sees the response
// after the limiter's: a limiter writing extensions.cost into the body
// itself, past gqlgen's encoding, would give such a response two
// "extensions" members.
func TestCostBesideOtherExtensions(t *testing.T) {
	lim := newLimiter(t, testConfig(t, newClock()))
	for _, other := range []bool{false, true} {
		srv := handler.New(newTestSchema().executable())
		srv.AddTransport(transport.POST{})
		if other {
			srv.Use(otherExtensions{})
		}
		w, resp := query(t, lim.Handler(srv), `{ viewer { login } }`, bearer(aliceKey))
		want := `"extensions":{"cost":{"requestedQueryCost":1,"actualQueryCost":1,"throttleStatus":{"maximumAvailable":100,"currentlyAvailable":`
		body := w.Body.String()
		if w.Code != http.StatusOK || resp.Extensions.Cost == nil || !strings.Contains(body, want) || strings.Count(body, `"extensions":`) != 1 {
			t.Errorf("other extensions %v: %d %s", other, w.Code, body)
		}
		if other && !strings.Contains(body, `,"other":true}}`) {
			t.Errorf("the other extension's entry is lost: %s", body)
		}
		var m map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
			t.Errorf("other extensions %v: not JSON: %v: %s", other, err, body)
		}
	}
}
