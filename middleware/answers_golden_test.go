package middleware_test

import (
	"bytes"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
)

var updateAnswers = flag.Bool("update", false, "rewrite testdata/answers.golden")

// answerHeaders are the headers TestAnswersGolden records, in order.
var answerHeaders = []string{
	middleware.HeaderRateLimitPolicy, middleware.HeaderRateLimit,
	middleware.HeaderXRateLimitLimit, middleware.HeaderXRateLimitRemaining,
	middleware.HeaderXRateLimitUsed, middleware.HeaderXRateLimitReset,
	middleware.HeaderRetryAfter,
}

// The status, rate-limit headers and body of a sequence of GraphQL
// requests with every default answer on (refunds, the six headers,
// extensions.cost), byte for byte: admitted with a refund, with a quota or
// a field limit closer to empty than the bucket, refused by a field limit,
// invalid, validate and report. Any change to these bytes is a change of
// behaviour; regenerate with -update and review the diff.
func TestAnswersGolden(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Plans = map[string]budget.Plan{
		"free": {Burst: 100, Rate: 100, Per: 100 * time.Second,
			Quota: &budget.Quota{Limit: 400, Per: time.Hour}},
		"anon": {Burst: 100, Rate: 100, Per: time.Second,
			Quota: &budget.Quota{Limit: 120, Per: 24 * time.Hour}},
	}
	cfg.FieldLimits = map[string]budget.FieldLimit{
		"Mutation.createIssue": {Limit: 5, Per: time.Minute},
		"Repository.issues":    {Limit: 100, Per: time.Second},
	}
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())

	steps := []struct {
		name    string
		q       string
		header  http.Header
		advance time.Duration
	}{
		{"anon one field", `{ user(login: "octocat") { login } }`, nil, 0},
		{"anon readme", query61, nil, 0},
		{"anon readme again", query61, nil, 0},
		{"anon field limit closest", query61, nil, 0},
		{"anon readme after a second", query61, nil, time.Second},
		{"alice readme", query61, bearer(aliceKey), 0},
		{"alice readme twice", query61, bearer(aliceKey), 0},
		{"alice after the bucket refills", query61, bearer(aliceKey), 100 * time.Second},
		{"alice again", query61, bearer(aliceKey), 100 * time.Second},
		{"alice quota closest", query61, bearer(aliceKey), 100 * time.Second},
		{"alice readme a fifth time", query61, bearer(aliceKey), 100 * time.Second},
		{"alice mutation", aliasedIssues(3), bearer(aliceKey), time.Hour},
		{"alice mutation field limited", aliasedIssues(3), bearer(aliceKey), 0},
		{"alice invalid", `{ nope }`, bearer(aliceKey), 0},
		{"alice validate", query61, withCost(bearer(aliceKey), "validate"), 0},
		{"alice report", `{ user(login: "octocat") { login } }`, withCost(bearer(aliceKey), "report"), 0},
		{"anon quota closest", `{ user(login: "octocat") { login } }`, nil, 0},
		{"anon mutation", aliasedIssues(3), nil, 0},
		{"anon mutation a minute later", aliasedIssues(3), nil, time.Minute},
		{"anon mutation two minutes later", aliasedIssues(3), nil, time.Minute},
		{"anon readme, the quota closest of three", query61, nil, time.Minute},
	}
	var got bytes.Buffer
	for _, s := range steps {
		clock.Advance(s.advance)
		w, _ := query(t, h, s.q, s.header)
		fmt.Fprintf(&got, "== %s\nstatus %d\n", s.name, w.Code)
		for _, k := range answerHeaders {
			if v, ok := w.Header()[http.CanonicalHeaderKey(k)]; ok {
				fmt.Fprintf(&got, "%s: %q\n", k, v)
			}
		}
		fmt.Fprintf(&got, "%s\n", bytes.TrimSpace(w.Body.Bytes()))
	}
	path := filepath.Join("testdata", "answers.golden")
	if *updateAnswers {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("answers differ from %s (run with -update and review the diff):\n%s", path, got.String())
	}
}
