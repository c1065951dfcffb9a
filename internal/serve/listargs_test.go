package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/graph"
)

// Lists sized by an argument other than first/last, over real HTTP at
// sizes a static price would not bound: priced at the default list size,
// nodes(ids:) would answer 100 users with their repositories for the price
// of 10 (110 points, within the anonymous plan's 500), and a limit of
// 1,000 would pass max_breadth. The price follows the length of ids and the
// value of limit, and max_breadth (100) holds both, before any resolver
// runs.
func TestListArgumentsPriceWhatRuns(t *testing.T) {
	var nodes atomic.Int64
	res := graph.NewResolver(graph.WithOnResolve(func(_ context.Context, field string) {
		if field == "Query.nodes" || field == "User.recentIssues" {
			nodes.Add(1)
		}
	}))
	ts := newTestServer(t, defaultConfig(), deps{resolver: res})
	srv := httptest.NewServer(ts.h)
	t.Cleanup(srv.Close)

	ids := func(n int) string {
		q := make([]string, n)
		for i := range q {
			q[i] = `"U_octocat"`
		}
		return "[" + strings.Join(q, ",") + "]"
	}
	post := func(query string) (*http.Response, gqlResponse) {
		t.Helper()
		body, err := json.Marshal(map[string]string{"query": query})
		require.NoError(t, err)
		resp, err := http.Post(srv.URL+"/graphql", "application/json", strings.NewReader(string(body)))
		require.NoError(t, err)
		defer resp.Body.Close()
		var out gqlResponse
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp, out
	}

	for _, c := range []struct {
		name, query string
		status      int
		code        string
		requested   int64 // the price, when it ran
		actual      int64 // its actual cost, when checked
	}{
		// 100 users of 10 repositories: 100 × (1 + 10) = 1,100, above the
		// anonymous plan's burst of 500 (before: 10 × 11 = 110, admitted).
		{"100 ids", `{ nodes(ids: ` + ids(100) + `) { ... on User { login repos(first: 10) { name } } } }`,
			http.StatusUnprocessableEntity, "MAX_COST_EXCEEDED", 0, 0},
		{"101 ids", `{ nodes(ids: ` + ids(101) + `) { id } }`, http.StatusUnprocessableEntity, "MAX_BREADTH_EXCEEDED", 0, 0},
		{"limit 1000", `{ user(login: "octocat") { recentIssues(limit: 1000) { title } } }`,
			http.StatusUnprocessableEntity, "MAX_BREADTH_EXCEEDED", 0, 0},
		// Within the caps the price is what may run, 40 users of 10
		// repositories: 440 points; octocat's 4 repositories make 200 of
		// them. The default limit: 5 issues.
		{"40 ids", `{ nodes(ids: ` + ids(40) + `) { ... on User { login repos(first: 10) { name } } } }`, http.StatusOK, "", 40 * 11, 40 * (1 + 4)},
		{"default limit", `{ user(login: "octocat") { recentIssues { title } } }`, http.StatusOK, "", 1 + 5, 0},
	} {
		before := nodes.Load()
		resp, out := post(c.query)
		require.Equal(t, c.status, resp.StatusCode, "%s: %+v", c.name, out.Errors)
		assert.Equal(t, c.code, out.code(), c.name)
		if c.status != http.StatusOK {
			assert.Equal(t, before, nodes.Load(), "%s: a refused operation ran a resolver", c.name)
			continue
		}
		require.NotNil(t, out.Extensions.Cost, c.name)
		assert.Equal(t, c.requested, out.Extensions.Cost.RequestedQueryCost, c.name)
		if c.actual > 0 {
			require.NotNil(t, out.Extensions.Cost.ActualQueryCost, c.name)
			assert.Equal(t, c.actual, *out.Extensions.Cost.ActualQueryCost, c.name)
		}
	}
}
