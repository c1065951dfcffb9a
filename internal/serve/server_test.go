package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/middleware"
)

// The two queries the README prices.
const (
	// seedQuery is 1 + 100 × (1 + 50 × 1) = 5101 points: more than any
	// default plan's burst.
	seedQuery = `query { user(login: "octocat") { repos(first: 100) { issues(first: 50) { title } } } }`
	// readmeQuery is 1 + 10 × (1 + 5 × 1) = 61 points.
	readmeQuery = `{ user(login: "octocat") { repos(first: 10) { issues(first: 5) { title } } } }`
)

// testServer is newServer on a fake clock, called in-process.
type testServer struct {
	t     *testing.T
	h     http.Handler
	admin http.Handler // the admin listener's routes
	clock *limitertest.FakeClock
	res   *graph.Resolver
}

func newTestServer(t *testing.T, cfg config, d deps) *testServer {
	t.Helper()
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	if d.clock == nil {
		d.clock = clock
	}
	if d.resolver == nil {
		d.resolver = graph.NewResolver()
	}
	h, cleanup, err := newServer(cfg, d)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cleanup()) })
	return &testServer{t: t, h: h, admin: h.admin, clock: clock, res: d.resolver}
}

// client is one caller: an address and, optionally, an API key.
type client struct {
	remoteAddr string
	apiKey     string
	accept     string
}

var (
	anonymous = client{remoteAddr: "203.0.113.7:40000"}
	alice     = client{remoteAddr: "198.51.100.1:40000", apiKey: demoAPIKey}
)

func (s *testServer) do(c client, method, target string, body io.Reader) *httptest.ResponseRecorder {
	s.t.Helper()
	r := httptest.NewRequest(method, target, body)
	r.RemoteAddr = c.remoteAddr
	if c.apiKey != "" {
		r.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	if c.accept != "" {
		r.Header.Set("Accept", c.accept)
	}
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, r)
	return w
}

func (s *testServer) graphql(c client, query string) (*httptest.ResponseRecorder, gqlResponse) {
	s.t.Helper()
	body, err := json.Marshal(map[string]string{"query": query})
	require.NoError(s.t, err)
	w := s.do(c, http.MethodPost, "/graphql", strings.NewReader(string(body)))
	return w, decodeGraphQL(s.t, w.Body.Bytes())
}

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

func decodeGraphQL(t *testing.T, b []byte) gqlResponse {
	t.Helper()
	var r gqlResponse
	require.NoError(t, json.Unmarshal(b, &r), "%s", b)
	return r
}

// code returns the first error's extensions.code.
func (r gqlResponse) code() string {
	if len(r.Errors) == 0 {
		return ""
	}
	c, _ := r.Errors[0].Extensions["code"].(string)
	return c
}

func headerInt(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(h.Get(name), 10, 64)
	require.NoError(t, err, "%s: %q", name, h.Get(name))
	return v
}

// ceilDiv is ⌈a/b⌉ for positive integers.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// The README's newcomer flow, over a real TCP connection: 200s with
// extensions.cost and the rate-limit headers, then a 429 with Retry-After
// once the anonymous budget (500 points an hour) is spent, then a 200 again
// exactly when Retry-After says.
func TestNewcomerFlow(t *testing.T) {
	res := graph.NewResolver()
	ts := newTestServer(t, defaultConfig(), deps{resolver: res})
	srv := httptest.NewServer(ts.h)
	t.Cleanup(srv.Close)

	post := func() (*http.Response, gqlResponse) {
		body, _ := json.Marshal(map[string]string{"query": readmeQuery})
		resp, err := http.Post(srv.URL+"/graphql", "application/json", strings.NewReader(string(body)))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, decodeGraphQL(t, b)
	}

	// The query is priced 61; octocat's 4 repositories hold 3, 2, 2 and 2
	// issues, so it actually costs 1 + 4 + 9 = 14 and 47 points come back.
	const burst, cost, actual = 500, 61, 14
	// A point takes 3600/500 = 7.2 s to restore: 36/5 seconds.
	secondsFor := func(points int64) int64 { return ceilDiv(points*36, 5) }
	now := ts.clock.Now().Unix()

	admitted := int64(0) // points kept
	for burst-admitted >= cost {
		resp, body := post()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		admitted += actual
		left := int64(burst - admitted)

		require.Empty(t, body.Errors)
		require.NotNil(t, body.Extensions.Cost)
		c := body.Extensions.Cost
		assert.EqualValues(t, cost, c.RequestedQueryCost)
		require.NotNil(t, c.ActualQueryCost)
		assert.EqualValues(t, actual, *c.ActualQueryCost)
		assert.EqualValues(t, burst, c.ThrottleStatus.MaximumAvailable)
		require.NotNil(t, c.ThrottleStatus.CurrentlyAvailable)
		assert.Equal(t, left, *c.ThrottleStatus.CurrentlyAvailable)
		assert.InDelta(t, 500.0/3600, c.ThrottleStatus.RestoreRate, 1e-12)

		h := resp.Header
		assert.Equal(t, `"anon";q=500;w=3600`, h.Get(middleware.HeaderRateLimitPolicy))
		assert.Equal(t, fmt.Sprintf(`"anon";r=%d;t=%d`, left, secondsFor(admitted)), h.Get(middleware.HeaderRateLimit))
		assert.EqualValues(t, burst, headerInt(t, h, middleware.HeaderXRateLimitLimit))
		assert.Equal(t, left, headerInt(t, h, middleware.HeaderXRateLimitRemaining))
		assert.Equal(t, admitted, headerInt(t, h, middleware.HeaderXRateLimitUsed))
		assert.Equal(t, now+secondsFor(admitted), headerInt(t, h, middleware.HeaderXRateLimitReset))
		assert.Empty(t, h.Get(middleware.HeaderRetryAfter))
	}
	require.EqualValues(t, 32*actual, admitted)
	calls := res.Calls()

	// 52 points left, 61 needed: the 9 missing take 64.8 s, so 65.
	resp, body := post()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	wait := secondsFor(cost - (burst - admitted))
	require.EqualValues(t, 65, wait)
	assert.Equal(t, strconv.FormatInt(wait, 10), resp.Header.Get(middleware.HeaderRetryAfter))
	assert.Equal(t, budget.CodeRateLimited, body.code())
	assert.EqualValues(t, wait, body.Errors[0].Extensions["retryAfterSeconds"])
	assert.Equal(t, "rate limited: the operation costs 61 points and 52 are available; retry in 65 seconds",
		body.Errors[0].Message, "the README's transcript")
	assert.EqualValues(t, cost, body.Errors[0].Extensions["cost"])
	assert.JSONEq(t, "null", string(body.Data))
	require.NotNil(t, body.Extensions.Cost)
	assert.EqualValues(t, cost, body.Extensions.Cost.RequestedQueryCost)
	assert.Nil(t, body.Extensions.Cost.ActualQueryCost, "nothing ran")
	assert.EqualValues(t, burst-admitted, *body.Extensions.Cost.ThrottleStatus.CurrentlyAvailable)
	assert.EqualValues(t, burst-admitted, headerInt(t, resp.Header, middleware.HeaderXRateLimitRemaining))
	assert.Equal(t, calls, res.Calls(), "a rate-limited operation ran resolvers")

	// One second short of Retry-After is still too early; Retry-After is not.
	ts.clock.Advance(time.Duration(wait-1) * time.Second)
	resp, _ = post()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	ts.clock.Advance(time.Second)
	resp, body = post()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, body.Errors)
}

// The seed example prices to 5101: more than the free plan's 5000 and the
// anon plan's 500, so it is refused outright, nothing debited, nothing run.
func TestSeedQueryExceedsEveryPlan(t *testing.T) {
	for _, tt := range []struct {
		name   string
		c      client
		status int
		burst  int64
	}{
		{"anonymous", anonymous, http.StatusUnprocessableEntity, 500},
		{"free plan", alice, http.StatusUnprocessableEntity, 5000},
		{"graphql-response+json", client{remoteAddr: "192.0.2.9:1", accept: "application/graphql-response+json"}, http.StatusBadRequest, 500},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, defaultConfig(), deps{})
			w, body := ts.graphql(tt.c, seedQuery)
			require.Equal(t, tt.status, w.Code, w.Body.String())
			assert.Equal(t, complexity.CodeMaxCostExceeded, body.code())
			assert.EqualValues(t, 5101, body.Errors[0].Extensions["cost"])
			require.NotNil(t, body.Extensions.Cost)
			assert.EqualValues(t, 5101, body.Extensions.Cost.RequestedQueryCost)
			assert.Equal(t, tt.burst-1, *body.Extensions.Cost.ThrottleStatus.CurrentlyAvailable, "invalid_cost debited, not the price")
			assert.Equal(t, tt.burst-1, headerInt(t, w.Header(), middleware.HeaderXRateLimitRemaining))
			assert.Empty(t, w.Header().Get(middleware.HeaderRetryAfter), "retrying cannot help")
			assert.Zero(t, ts.res.Calls())
		})
	}
}

func TestQueryPrices(t *testing.T) {
	tests := []struct {
		name  string
		query string
		cost  int64
	}{
		{"README query", readmeQuery, 61},
		{"one object", `{ user(login: "octocat") { login name } }`, 1},
		{"list without a slicing argument assumes default_list_size", `{ user(login: "octocat") { repos { name } } }`, 1 + 10},
		{"@cost weight", `{ repository(name: "linguist") { issues(first: 2) { bodyHTML } } }`, 1 + 2*(1+5)},
		// A tool's one schema fetch pays min_cost; each further __schema
		// or __type selection introspection_cost.
		{"one introspection pays min_cost", `{ __schema { types { name } } }`, 1},
		{"GraphiQL's schema query fits max_depth and pays min_cost", graphiQLSchemaQuery, 1},
		{"each aliased __schema after the first pays", `{ a: __schema { queryType { name } } b: __schema { queryType { name } } c: __type(name: "User") { name } }`, 100},
		{"nothing is free: min_cost", `{ __typename }`, 1},
	}
	ts := newTestServer(t, defaultConfig(), deps{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, body := ts.graphql(alice, tt.query)
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			require.Empty(t, body.Errors)
			require.NotNil(t, body.Extensions.Cost)
			assert.Equal(t, tt.cost, body.Extensions.Cost.RequestedQueryCost)
		})
	}
}

// REST requests and GraphQL operations of one principal draw from one
// bucket, in both directions.
func TestRESTAndGraphQLShareABudget(t *testing.T) {
	cfg := defaultConfig()
	cfg.Plans["free"] = planConfig{Plan: budget.Plan{Burst: 30, Rate: 30, Per: time.Hour}}
	ts := newTestServer(t, cfg, deps{})

	w := ts.do(alice, http.MethodGet, "/api/search?q=octo", nil)
	require.Equal(t, http.StatusOK, w.Code)
	assert.EqualValues(t, 20, headerInt(t, w.Header(), middleware.HeaderXRateLimitRemaining))
	w = ts.do(alice, http.MethodGet, "/api/users/octocat", nil)
	require.Equal(t, http.StatusOK, w.Code)
	assert.EqualValues(t, 19, headerInt(t, w.Header(), middleware.HeaderXRateLimitRemaining))

	w, body := ts.graphql(alice, `{ user(login: "octocat") { repos(first: 3) { name } } }`) // 4 points
	require.Equal(t, http.StatusOK, w.Code)
	assert.EqualValues(t, 15, *body.Extensions.Cost.ThrottleStatus.CurrentlyAvailable)

	w = ts.do(alice, http.MethodGet, "/api/search?q=octo", nil)
	require.Equal(t, http.StatusOK, w.Code)
	// 5 left: a search (10) is refused...
	w = ts.do(alice, http.MethodGet, "/api/search?q=octo", nil)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	// 5 points missing at 30 an hour: 600 s.
	assert.JSONEq(t, `{"error":"rate_limited","retry_after_seconds":600}`, w.Body.String())
	assert.Equal(t, "600", w.Header().Get(middleware.HeaderRetryAfter))
	assert.EqualValues(t, 5, headerInt(t, w.Header(), middleware.HeaderXRateLimitRemaining))

	// ...and so is a GraphQL operation of 11 points, while one of 4 passes.
	w, body = ts.graphql(alice, `{ user(login: "octocat") { repos(first: 10) { name } } }`)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, budget.CodeRateLimited, body.code())
	w, body = ts.graphql(alice, `{ user(login: "octocat") { repos(first: 3) { name } } }`)
	require.Equal(t, http.StatusOK, w.Code)
	assert.EqualValues(t, 1, *body.Extensions.Cost.ThrottleStatus.CurrentlyAvailable)

	// Another principal is untouched.
	w = ts.do(anonymous, http.MethodGet, "/api/search?q=octo", nil)
	require.Equal(t, http.StatusOK, w.Code)
	assert.EqualValues(t, 490, headerInt(t, w.Header(), middleware.HeaderXRateLimitRemaining))
}

// A mutation refused for its cost runs no resolver and changes nothing.
func TestRejectedMutationChangesNothing(t *testing.T) {
	cfg := defaultConfig()
	cfg.Plans["anon"] = planConfig{Plan: budget.Plan{Burst: 12, Rate: 1, Per: time.Hour}}
	ts := newTestServer(t, cfg, deps{})
	const mutation = `mutation { createIssue(repo: "hello-world", title: "From a test") { id title } }`
	issues := func() int {
		var resp struct {
			Data struct {
				Repository struct{ Issues []struct{ ID string } }
			}
		}
		w, _ := ts.graphql(alice, `{ repository(name: "hello-world") { issues(first: 100) { id } } }`)
		require.Equal(t, http.StatusOK, w.Code)
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &resp))
		return len(resp.Data.Repository.Issues)
	}
	before := issues()

	w, body := ts.graphql(anonymous, mutation)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Empty(t, body.Errors)
	cost := body.Extensions.Cost.RequestedQueryCost
	assert.GreaterOrEqual(t, cost, int64(10), "mutation_cost is the base")
	require.Equal(t, before+1, issues())

	// What is left is less than a mutation costs.
	calls := ts.res.Calls()
	w, body = ts.graphql(anonymous, mutation)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, budget.CodeRateLimited, body.code())
	assert.JSONEq(t, "null", string(body.Data))
	assert.Equal(t, calls, ts.res.Calls(), "a refused mutation ran resolvers")
	assert.Equal(t, before+1, issues(), "a refused mutation changed the data")
}

func TestUnknownAPIKey(t *testing.T) {
	ts := newTestServer(t, defaultConfig(), deps{})
	mallory := client{remoteAddr: "192.0.2.66:1", apiKey: "not-a-key"}

	w := ts.do(mallory, http.MethodGet, "/api/users/octocat", nil)
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.JSONEq(t, `{"error":"unknown_api_key"}`, w.Body.String())

	w, body := ts.graphql(mallory, readmeQuery)
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Equal(t, middleware.CodeUnknownAPIKey, body.code())
	assert.Zero(t, ts.res.Calls())

	// X-API-Key works as well as Authorization: Bearer.
	r := httptest.NewRequest(http.MethodGet, "/api/users/octocat", nil)
	r.Header.Set(identity.HeaderAPIKey, demoAPIKey)
	rec := httptest.NewRecorder()
	ts.h.ServeHTTP(rec, r)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, `"free";q=5000;w=3600`, rec.Header().Get(middleware.HeaderRateLimitPolicy))
}

func TestRoutes(t *testing.T) {
	ts := newTestServer(t, defaultConfig(), deps{})
	get := func(target string) *httptest.ResponseRecorder {
		return ts.do(alice, http.MethodGet, target, nil)
	}

	w := get("/")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Contains(t, w.Header().Get("Content-Type"), "text/html")
	assert.Contains(t, w.Body.String(), "/graphql")
	assert.Empty(t, w.Header().Get(middleware.HeaderXRateLimitLimit), "the page is not metered")

	w = get("/graphql?query=" + url.QueryEscape(`{ user(login: "bob") { login name } }`))
	assert.Equal(t, http.StatusOK, w.Code)
	assert.JSONEq(t, `{"user":{"login":"bob","name":null}}`, string(decodeGraphQL(t, w.Body.Bytes()).Data))
	assert.NotEmpty(t, w.Header().Get(middleware.HeaderXRateLimitRemaining))

	w = get("/graphql?query=" + url.QueryEscape(`mutation { createIssue(repo: "wonderland", title: "via GET") { id } }`))
	assert.NotEqual(t, http.StatusOK, w.Code, "GET must not run mutations")

	w = get("/api/users/octocat")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.JSONEq(t, `{"login":"octocat","name":"The Octocat","repos":["hello-world","spoon-knife","linguist","octocat.github.io"]}`, w.Body.String())
	w = get("/api/users/bob")
	assert.JSONEq(t, `{"login":"bob","name":null,"repos":["build-tools"]}`, w.Body.String())
	w = get("/api/users/nobody")
	assert.Equal(t, http.StatusNotFound, w.Code)
	assert.JSONEq(t, `{"error":"not_found"}`, w.Body.String())

	w = get("/api/search?q=wonder")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.JSONEq(t, `{"results":[{"type":"Repository","name":"wonderland","owner":"alice"}]}`, w.Body.String())
	w = get("/api/search?q=danvers")
	assert.JSONEq(t, `{"results":[{"type":"User","login":"carol","name":"Carol Danvers"}]}`, w.Body.String())
	w = get("/api/search?q=flaky")
	assert.JSONEq(t, `{"results":[{"type":"Issue","id":"I_14","title":"Flaky test on slow machines"}]}`, w.Body.String())
	w = get("/api/search?q=")
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.JSONEq(t, `{"error":"missing_query"}`, w.Body.String())
	// More matches than searchResults: only the first searchResults come.
	for i := range searchResults + 1 {
		w, body := ts.graphql(alice, fmt.Sprintf(`mutation { createIssue(repo: "build-tools", title: "capped %d") { id } }`, i))
		require.Equal(t, http.StatusOK, w.Code)
		require.Empty(t, body.Errors)
	}
	w = get("/api/search?q=capped")
	var hits struct{ Results []struct{ Title string } }
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &hits))
	require.NotEmpty(t, hits.Results)
	assert.Equal(t, "capped 0", hits.Results[0].Title)
	assert.Len(t, hits.Results, searchResults, "search is capped")

	w = get("/api/nope")
	assert.Equal(t, http.StatusNotFound, w.Code)
	assert.NotEmpty(t, w.Header().Get(middleware.HeaderXRateLimitRemaining), "unknown API routes are metered at the default cost")
	w = get("/nope")
	assert.Equal(t, http.StatusNotFound, w.Code)
}

func TestRequestBodyIsBounded(t *testing.T) {
	ts := newTestServer(t, defaultConfig(), deps{})
	huge := `{"query":"{ user(login: \"` + strings.Repeat("a", 1<<20) + `\") { login } }"}`
	w := ts.do(alice, http.MethodPost, "/graphql", strings.NewReader(huge))
	assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	assert.Equal(t, middleware.CodeRequestTooLarge, decodeGraphQL(t, w.Body.Bytes()).code())
	assert.Less(t, w.Body.Len(), 300, "the request is not echoed")

	// Without a Content-Length the answer is the same 413, and no resolver
	// runs.
	r := httptest.NewRequest(http.MethodPost, "/graphql", io.MultiReader(strings.NewReader(huge)))
	r.ContentLength = -1
	r.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	ts.h.ServeHTTP(rec, r)
	assert.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	assert.Equal(t, middleware.CodeRequestTooLarge, decodeGraphQL(t, rec.Body.Bytes()).code())
	assert.Zero(t, ts.res.Calls())

	// The REST routes too.
	r = httptest.NewRequest(http.MethodPost, "/api/users/octocat", io.MultiReader(strings.NewReader(huge)))
	r.ContentLength = -1
	rec = httptest.NewRecorder()
	ts.h.ServeHTTP(rec, r)
	assert.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	assert.JSONEq(t, `{"error":"request_too_large"}`, rec.Body.String())
}

// graphiQLSchemaQuery is the schema query GraphiQL sends (graphql-js's
// getIntrospectionQuery, with one more ofType level than its default): 14
// deep, since introspection fields count toward max_depth.
const graphiQLSchemaQuery = `query IntrospectionQuery {
  __schema {
    queryType { name }
    mutationType { name }
    subscriptionType { name }
    types { ...FullType }
    directives { name description locations args { ...InputValue } }
  }
}
fragment FullType on __Type {
  kind name description
  fields(includeDeprecated: true) { name description args { ...InputValue } type { ...TypeRef } isDeprecated deprecationReason }
  inputFields { ...InputValue }
  interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) { name description isDeprecated deprecationReason }
  possibleTypes { ...TypeRef }
}
fragment InputValue on __InputValue { name description type { ...TypeRef } defaultValue }
fragment TypeRef on __Type {
  kind name
  ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name } } } } } } } }
}
`

// introspectionQuery writes the schema query graphql-js's
// getIntrospectionQuery sends (the one GraphiQL and Apollo Sandbox use),
// with each of its options on or off: descriptions, specifiedByUrl,
// directiveIsRepeatable, schemaDescription, inputValueDeprecation, oneOf.
func introspectionQuery(opts uint) string {
	on := func(bit uint, s string) string {
		if opts&(1<<bit) != 0 {
			return s
		}
		return ""
	}
	descriptions := on(0, " description")
	deprecated := on(4, "(includeDeprecated: true)")
	return `query IntrospectionQuery {
  __schema {` + on(3, " description") + `
    queryType { name kind }
    mutationType { name kind }
    subscriptionType { name kind }
    types { ...FullType }
    directives { name` + descriptions + on(2, " isRepeatable") + ` locations args` + deprecated + ` { ...InputValue } }
  }
}
fragment FullType on __Type {
  kind name` + descriptions + on(1, " specifiedByURL") + on(5, " isOneOf") + `
  fields(includeDeprecated: true) { name` + descriptions + ` args` + deprecated + ` { ...InputValue } type { ...TypeRef } isDeprecated deprecationReason }
  inputFields` + deprecated + ` { ...InputValue }
  interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) { name` + descriptions + ` isDeprecated deprecationReason }
  possibleTypes { ...TypeRef }
}
fragment InputValue on __InputValue { name` + descriptions + ` type { ...TypeRef } defaultValue` + on(4, " isDeprecated deprecationReason") + ` }
fragment TypeRef on __Type {
  kind name
  ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name } } } } } } } } }
}`
}

// A tool's schema fetch, in every option combination of graphql-js's
// getIntrospectionQuery, is within the default limits and costs at most 5
// points through HTTP, so an IDE on the anonymous plan (500 points) can
// load the schema a hundred times; a page of tools never locks an address
// out.
func TestSchemaFetchIsAffordable(t *testing.T) {
	ts := newTestServer(t, defaultConfig(), deps{})
	for opts := range uint(1 << 6) {
		w, body := ts.graphql(anonymous, introspectionQuery(opts))
		require.Equal(t, http.StatusOK, w.Code, "options %06b: %s", opts, w.Body.String())
		require.Empty(t, body.Errors, "options %06b", opts)
		require.NotNil(t, body.Extensions.Cost)
		assert.LessOrEqual(t, body.Extensions.Cost.RequestedQueryCost, int64(5), "options %06b", opts)
	}
	// Aliased, the same document pays introspection_cost for every
	// __schema after the first.
	var b strings.Builder
	b.WriteString("{")
	for i := range 5 {
		fmt.Fprintf(&b, " s%d: __schema { queryType { name } }", i)
	}
	b.WriteString(" }")
	w, body := ts.graphql(anonymous, b.String())
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.GreaterOrEqual(t, body.Extensions.Cost.RequestedQueryCost, int64(50*4))
}
