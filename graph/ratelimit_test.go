package graph_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vektah/gqlparser/v2"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/middleware"
)

// Selecting rateLimit adds nothing to a price: the field and its type
// weigh 0.
func TestRateLimitIsFree(t *testing.T) {
	schema := graph.NewResolver().Schema().Schema()
	a, err := complexity.New(schema)
	require.NoError(t, err)
	for q, want := range map[string]int64{
		`{ rateLimit { cost } }`: 0,
		`{ rateLimit(dryRun: true) { limit cost remaining used resetAt nodeCount } }`:      0,
		`{ rateLimit { cost } user(login: "octocat") { login } }`:                          1,
		`{ user(login: "octocat") { login } }`:                                             1,
		`mutation { rateLimit { cost } }`:                                                  10,
		`mutation { rateLimit { cost } createIssue(repo: "linguist", title: "x") { id } }`: 11,
	} {
		doc, errs := gqlparser.LoadQuery(schema, q)
		require.Nil(t, errs, q)
		rep, err := a.Analyze(doc, "", nil)
		require.NoError(t, err, q)
		assert.Equal(t, want, rep.Points, q)
	}
}

// Served without costguard, rateLimit is null with an error saying why.
func TestRateLimitWithoutLimiter(t *testing.T) {
	data, errs := do(t, newClient(graph.NewResolver()), `{ rateLimit { cost } user(login: "bob") { login } }`)
	assert.JSONEq(t, `{"rateLimit":null,"user":{"login":"bob"}}`, data)
	assert.Contains(t, errs, graph.ErrRateLimitUnavailable.Error())
}

// limitedServer serves the example schema behind costguard over real HTTP,
// on a stopped clock, and records the resolvers that run.
func limitedServer(t *testing.T) (url string, clock *limitertest.FakeClock, resolved func() []string) {
	t.Helper()
	var mu sync.Mutex
	var fields []string
	r := graph.NewResolver(graph.WithOnResolve(func(_ context.Context, field string) {
		mu.Lock()
		defer mu.Unlock()
		fields = append(fields, field)
	}))
	clock = limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	lim, err := middleware.New(middleware.Dependencies{
		Clock: clock,
	}, middleware.Policy{
		Plans:         map[string]budget.Plan{"anon": {Burst: 500, Rate: 500, Per: time.Hour}},
		AnonymousPlan: "anon",
	})
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	srv := handler.New(r.Schema())
	srv.AddTransport(transport.POST{})
	ts := httptest.NewServer(lim.Handler(srv))
	t.Cleanup(ts.Close)
	return ts.URL, clock, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := fields
		fields = nil
		return out
	}
}

type limitedResponse struct {
	status    int
	remaining string
	Data      json.RawMessage
	Errors    []struct {
		Message    string
		Path       []any
		Extensions map[string]any
	}
	Extensions struct{ Cost middleware.Cost }
}

func post(t *testing.T, url, query string, vars map[string]any) limitedResponse {
	t.Helper()
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	require.NoError(t, err)
	resp, err := http.Post(url, "application/json", strings.NewReader(string(body)))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out limitedResponse
	require.NoError(t, json.Unmarshal(b, &out), "%s", b)
	out.status, out.remaining = resp.StatusCode, resp.Header.Get(middleware.HeaderXRateLimitRemaining)
	return out
}

// The generated resolver serves what the limiter decided, and a dry run
// runs no other resolver, of a query or of a mutation.
func TestRateLimitBehindLimiter(t *testing.T) {
	url, clock, resolved := limitedServer(t)
	const q = `query($d: Boolean) { rateLimit(dryRun: $d) { limit cost remaining used resetAt nodeCount }
		user(login: "octocat") { repos(first: 10) { issues(first: 5) { title } } } }`

	dry := post(t, url, q, map[string]any{"d": true})
	require.Equal(t, http.StatusOK, dry.status)
	require.Empty(t, dry.Errors)
	assert.JSONEq(t, `{"rateLimit":{"limit":500,"cost":61,"remaining":500,"used":0,"resetAt":"2027-01-15T08:00:00Z","nodeCount":60},"user":null}`, string(dry.Data))
	assert.Equal(t, "500", dry.remaining)
	assert.Equal(t, []string{"Query.rateLimit"}, resolved())

	run := post(t, url, q, map[string]any{"d": false})
	require.Empty(t, run.Errors)
	// 61 points at 500 an hour come back in 439.2 s: 440, rounded up.
	reset := clock.Now().Add(440 * time.Second).UTC().Format(time.RFC3339)
	var d struct {
		RateLimit json.RawMessage
		User      *struct{ Repos []any }
	}
	require.NoError(t, json.Unmarshal(run.Data, &d))
	// The field resolves after the debit and before the refund of the 47
	// points the response did not use (4 repositories, 9 issues: 14).
	assert.JSONEq(t, `{"limit":500,"cost":61,"remaining":439,"used":61,"resetAt":"`+reset+`","nodeCount":60}`, string(d.RateLimit))
	require.NotNil(t, d.User)
	assert.Len(t, d.User.Repos, 4)
	assert.Equal(t, "486", run.remaining)

	// A mutation's dry run creates nothing; createIssue is non-null, so the
	// data is null and an error explains it.
	resolved()
	mut := post(t, url, `mutation { rateLimit(dryRun: true) { cost remaining } createIssue(repo: "linguist", title: "Dry") { id } }`, nil)
	require.Equal(t, http.StatusOK, mut.status)
	assert.JSONEq(t, `null`, string(mut.Data))
	require.Len(t, mut.Errors, 1)
	assert.Equal(t, middleware.CodeDryRun, mut.Errors[0].Extensions["code"])
	assert.Equal(t, []any{"createIssue"}, mut.Errors[0].Path)
	assert.EqualValues(t, 11, mut.Extensions.Cost.RequestedQueryCost)
	assert.Equal(t, "486", mut.remaining)
	assert.Equal(t, []string{"Mutation.rateLimit"}, resolved())
	issues := post(t, url, `{ repository(name: "linguist") { issues { title } } }`, nil)
	assert.NotContains(t, string(issues.Data), "Dry")
}
