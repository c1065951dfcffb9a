package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
)

// askServer is the example server over a real TCP connection.
type askServer struct {
	*testServer
	url string
}

func newAskServer(t *testing.T, cfg config) *askServer {
	ts := newTestServer(t, cfg, deps{})
	srv := httptest.NewServer(ts.h)
	t.Cleanup(srv.Close)
	return &askServer{testServer: ts, url: srv.URL + "/graphql"}
}

// post sends one operation, with variables when vars is not nil and the
// GraphQL-Cost header when costHeader is not "".
func (s *askServer) post(apiKey, costHeader, query string, vars map[string]any) (*http.Response, []byte) {
	s.t.Helper()
	payload := map[string]any{"query": query}
	if vars != nil {
		payload["variables"] = vars
	}
	body, err := json.Marshal(payload)
	require.NoError(s.t, err)
	req, err := http.NewRequest(http.MethodPost, s.url, strings.NewReader(string(body)))
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if costHeader != "" {
		req.Header.Set(middleware.HeaderGraphQLCost, costHeader)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp, b
}

// issues counts hello-world's issues, from alice's budget (the tests
// watch the anonymous one).
func (s *askServer) issues() int {
	s.t.Helper()
	var out struct {
		Data struct {
			Repository struct{ Issues []struct{ ID string } }
		}
	}
	_, b := s.post(demoAPIKey, "", `{ repository(name: "hello-world") { issues(first: 100) { id } } }`, nil)
	require.NoError(s.t, json.Unmarshal(b, &out), "%s", b)
	return len(out.Data.Repository.Issues)
}

const askMutation = `mutation { createIssue(repo: "hello-world", title: "Asked") { id } }`

// "GraphQL-Cost: validate" on the example server: the price, the bucket as
// it stands, no data; a mutation creates nothing.
func TestCostHeaderValidateOverHTTP(t *testing.T) {
	s := newAskServer(t, defaultConfig())
	before := s.issues()
	calls := s.res.Calls()

	resp, b := s.post("", "validate", askMutation, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	assert.JSONEq(t, `{"data":null,"extensions":{"cost":{"requestedQueryCost":11,"actualQueryCost":null,`+
		`"throttleStatus":{"maximumAvailable":500,"currentlyAvailable":500,"restoreRate":0.1388888888888889}}}}`, string(b))
	assert.Equal(t, "500", resp.Header.Get(middleware.HeaderXRateLimitRemaining))
	assert.Equal(t, before, s.issues(), "a validated mutation created an issue")
	assert.Equal(t, calls+2, s.res.Calls(), "only the issue count ran resolvers (repository, issues)")

	// The README query, validated then run: only the run pays.
	resp, b = s.post("", "validate", readmeQuery, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body := decodeGraphQL(t, b)
	assert.EqualValues(t, 61, body.Extensions.Cost.RequestedQueryCost)
	assert.EqualValues(t, 500, *body.Extensions.Cost.ThrottleStatus.CurrentlyAvailable)
	resp, _ = s.post("", "", readmeQuery, nil)
	assert.Equal(t, "486", resp.Header.Get(middleware.HeaderXRateLimitRemaining), "61 debited, 47 unused refunded")

	// Above the burst: refused as if it were to run.
	resp, b = s.post("", "validate", seedQuery, nil)
	assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	assert.Equal(t, "MAX_COST_EXCEEDED", decodeGraphQL(t, b).code())
	assert.Equal(t, "485", resp.Header.Get(middleware.HeaderXRateLimitRemaining), "invalid_cost paid")
}

// "GraphQL-Cost: report": the answer and the cost CLI's breakdown; refused
// on a plan with cost_report: false, and for an unknown value.
func TestCostHeaderReportOverHTTP(t *testing.T) {
	cfg := defaultConfig()
	cfg.Plans["free"] = planConfig{Plan: budget.Plan{Burst: 5000, Rate: 5000, Per: time.Hour}, CostReport: new(false)}
	s := newAskServer(t, cfg)

	resp, b := s.post("", "report", `{ user(login: "octocat") { repos(first: 2) { name } } }`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	assert.JSONEq(t, `{"data":{"user":{"repos":[{"name":"hello-world"},{"name":"spoon-knife"}]}},"extensions":{"cost":{
		"requestedQueryCost":3,"actualQueryCost":3,
		"throttleStatus":{"maximumAvailable":500,"currentlyAvailable":497,"restoreRate":0.1388888888888889},
		"fields":[
			{"path":"user","field":"Query.user","depth":1,"multiplier":1,"cost":3},
			{"path":"user.repos","field":"User.repos","depth":2,"multiplier":2,"cost":2},
			{"path":"user.repos.name","field":"Repository.name","depth":3,"multiplier":1,"cost":0}]}}}`, string(b))

	resp, b = s.post(demoAPIKey, "report", readmeQuery, nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, middleware.CodeCostReportDisabled, decodeGraphQL(t, b).code())
	assert.Equal(t, "4999", resp.Header.Get(middleware.HeaderXRateLimitRemaining), "invalid_cost paid")

	resp, b = s.post("", "Validate", readmeQuery, nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	body := decodeGraphQL(t, b)
	assert.Equal(t, middleware.CodeInvalidCostHeader, body.code())
	assert.Equal(t, `the GraphQL-Cost header is "Validate"; the accepted values are "validate" (price the operation without running it) and "report" (run it and explain its price)`,
		body.Errors[0].Message)
	assert.Equal(t, "496", resp.Header.Get(middleware.HeaderXRateLimitRemaining))
}

// GitHub's rateLimit on the example server: a dry run (by variable) spends
// nothing and runs nothing else; a run reports the bucket after its debit;
// a mutation's dry run creates nothing.
func TestRateLimitFieldOverHTTP(t *testing.T) {
	s := newAskServer(t, defaultConfig())
	before := s.issues()
	const q = `query($dry: Boolean) {
		rateLimit(dryRun: $dry) { limit cost remaining used resetAt nodeCount }
		user(login: "octocat") { repos(first: 10) { issues(first: 5) { title } } } }`
	type rateLimit struct {
		Limit, Cost, Remaining, Used, NodeCount int64
		ResetAt                                 string
	}
	var out struct {
		Data struct {
			RateLimit rateLimit
			User      json.RawMessage
		}
		Errors []any
	}

	calls := s.res.Calls()
	resp, b := s.post("", "", q, map[string]any{"dry": true})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.Unmarshal(b, &out), "%s", b)
	assert.Empty(t, out.Errors)
	now := s.clock.Now().UTC().Format(time.RFC3339)
	assert.Equal(t, rateLimit{Limit: 500, Cost: 61, Remaining: 500, Used: 0, NodeCount: 60, ResetAt: now}, out.Data.RateLimit)
	assert.JSONEq(t, "null", string(out.Data.User))
	assert.Equal(t, calls+1, s.res.Calls(), "only rateLimit's resolver ran")
	assert.Equal(t, "500", resp.Header.Get(middleware.HeaderXRateLimitRemaining))

	resp, b = s.post("", "", q, map[string]any{"dry": false})
	require.NoError(t, json.Unmarshal(b, &out), "%s", b)
	// 61 points at 500 an hour: 439.2 s, 440 rounded up.
	reset := s.clock.Now().Add(440 * time.Second).UTC().Format(time.RFC3339)
	// The field resolves during execution: after the debit, before the
	// refund of the 47 unused points, which the headers include.
	assert.Equal(t, rateLimit{Limit: 500, Cost: 61, Remaining: 439, Used: 61, NodeCount: 60, ResetAt: reset}, out.Data.RateLimit)
	assert.NotEqual(t, "null", string(out.Data.User))
	assert.Equal(t, "486", resp.Header.Get(middleware.HeaderXRateLimitRemaining))

	resp, b = s.post("", "", `mutation { rateLimit(dryRun: true) { cost } createIssue(repo: "hello-world", title: "Dry") { id } }`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body := decodeGraphQL(t, b)
	assert.JSONEq(t, "null", string(body.Data))
	assert.Equal(t, middleware.CodeDryRun, body.code())
	assert.Equal(t, "createIssue was not executed: the operation is a dry run (rateLimit(dryRun: true)); nothing was debited", body.Errors[0].Message)
	assert.EqualValues(t, 11, body.Extensions.Cost.RequestedQueryCost)
	assert.Equal(t, "486", resp.Header.Get(middleware.HeaderXRateLimitRemaining))
	assert.Equal(t, before, s.issues(), "a dry-run mutation created an issue")
}
