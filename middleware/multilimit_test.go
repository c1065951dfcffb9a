package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/middleware"
)

// aliasedIssues is a mutation creating n issues under n aliases.
func aliasedIssues(n int) string {
	var b strings.Builder
	b.WriteString("mutation {")
	for i := range n {
		fmt.Fprintf(&b, ` i%d: createIssue(repo: "r", title: "t%d") { id }`, i, i)
	}
	b.WriteString(" }")
	return b.String()
}

// errorPath is the path of a response's first error.
func errorPath(t *testing.T, body []byte) []any {
	t.Helper()
	var resp struct {
		Errors []struct {
			Path []any `json:"path"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || len(resp.Errors) == 0 {
		t.Fatalf("no error in %s", body)
	}
	return resp.Errors[0].Path
}

func fieldLimitConfig(t *testing.T, clock *fakeClock, limits map[string]budget.FieldLimit) config {
	cfg := testConfig(t, clock)
	cfg.FieldLimits = limits
	return cfg
}

// A field limit counts every alias: 5 createIssue a minute admits one
// mutation with three aliases, refuses a second with three (429,
// FIELD_RATE_LIMITED naming the first selection, Retry-After for the one
// missing token), runs nothing and debits nothing for it.
func TestFieldLimitCountsAliases(t *testing.T) {
	clock := newClock()
	s := newTestSchema()
	h := graphQLServer(newLimiter(t, fieldLimitConfig(t, clock, map[string]budget.FieldLimit{
		"Mutation.createIssue": {Limit: 5, Per: time.Minute},
	})), s)

	w, resp := query(t, h, aliasedIssues(3), bearer(aliceKey))
	if w.Code != http.StatusOK || resp.code() != "" {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	if got := s.issueCount(); got != 3 {
		t.Fatalf("issues after the first = %d, want 3", got)
	}
	before := w.Header().Get(middleware.HeaderXRateLimitRemaining)

	w, resp = query(t, h, aliasedIssues(3), bearer(aliceKey))
	if w.Code != http.StatusTooManyRequests || resp.code() != budget.CodeFieldRateLimited {
		t.Fatalf("second: %d %s", w.Code, w.Body)
	}
	if got := w.Header().Get(middleware.HeaderRetryAfter); got != "12" { // 1 token at 5 a minute
		t.Errorf("Retry-After = %q, want 12", got)
	}
	if got := errorPath(t, w.Body.Bytes()); len(got) != 1 || got[0] != "i0" {
		t.Errorf("error path = %v, want [i0]", got)
	}
	if f := resp.Errors[0].Extensions["field"]; f != "Mutation.createIssue" {
		t.Errorf("extensions.field = %v", f)
	}
	if got := s.issueCount(); got != 3 {
		t.Errorf("issues after the refusal = %d, want 3: nothing may run", got)
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != before {
		t.Errorf("bucket after the refusal = %s, want %s untouched", got, before)
	}

	clock.Advance(12 * time.Second)
	if w, _ := query(t, h, aliasedIssues(3), bearer(aliceKey)); w.Code != http.StatusOK {
		t.Errorf("after Retry-After: %d %s", w.Code, w.Body)
	}
}

// An operation selecting a field more often than its limit can never run:
// 429 without Retry-After, and it pays InvalidCost like any other request
// that can never run.
func TestFieldLimitNeverFits(t *testing.T) {
	clock := newClock()
	s := newTestSchema()
	h := graphQLServer(newLimiter(t, fieldLimitConfig(t, clock, map[string]budget.FieldLimit{
		"Mutation.createIssue": {Limit: 5, Per: time.Minute},
	})), s)
	w, resp := query(t, h, aliasedIssues(6), bearer(aliceKey))
	if w.Code != http.StatusTooManyRequests || resp.code() != budget.CodeFieldRateLimited {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if got := w.Header().Get(middleware.HeaderRetryAfter); got != "" {
		t.Errorf("Retry-After = %q for a request that can never run", got)
	}
	if !strings.Contains(resp.Errors[0].Message, "never") {
		t.Errorf("message %q does not say it can never run", resp.Errors[0].Message)
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "99" {
		t.Errorf("bucket = %s, want 99 (InvalidCost paid)", got)
	}
	if s.issueCount() != 0 {
		t.Error("an issue was created")
	}
}

// Selections count as the executor runs them: fields merged into one
// response key once, each alias and each item of an enclosing list by its
// priced size.
func TestFieldLimitCounting(t *testing.T) {
	for _, tc := range []struct {
		name, coord, query string
		limit              int64
		admitted           int // how many times in a row the query is admitted
	}{
		{"merged through fragments", "Mutation.createIssue",
			`mutation { ...A ...B } fragment A on Mutation { x: createIssue(repo: "r", title: "t") { id } } fragment B on Mutation { x: createIssue(repo: "r", title: "t") { id } }`,
			2, 2},
		{"aliased through fragments", "Mutation.createIssue",
			`mutation { ...A ...B } fragment A on Mutation { x: createIssue(repo: "r", title: "t") { id } } fragment B on Mutation { y: createIssue(repo: "r", title: "t") { id } }`,
			4, 2},
		{"under a list", "Repository.issues",
			`{ user(login: "a") { repos(first: 10) { issues(first: 2) { id } } } }`,
			25, 2},
		{"nested lists", "Issue.title",
			`{ user(login: "a") { repos(first: 3) { issues(first: 4) { title } } } }`,
			36, 3},
		{"skipped", "Mutation.createIssue",
			`mutation { a: createIssue(repo: "r", title: "t") @skip(if: true) { id } b: createIssue(repo: "r", title: "t") { id } }`,
			3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			cfg := fieldLimitConfig(t, clock, map[string]budget.FieldLimit{tc.coord: {Limit: tc.limit, Per: time.Hour}})
			cfg.Plans = map[string]budget.Plan{
				"free": {Burst: 10000, Rate: 10000, Per: time.Second, DisableRefund: true},
				"anon": {Burst: 20, Rate: 20, Per: 100 * time.Second, DisableRefund: true},
			}
			h := graphQLServer(newLimiter(t, cfg), newTestSchema())
			for i := range tc.admitted {
				if w, _ := query(t, h, tc.query, bearer(aliceKey)); w.Code != http.StatusOK {
					t.Fatalf("request %d: %d %s", i+1, w.Code, w.Body)
				}
			}
			w, resp := query(t, h, tc.query, bearer(aliceKey))
			if w.Code != http.StatusTooManyRequests || resp.code() != budget.CodeFieldRateLimited {
				t.Fatalf("request %d: %d %s, want FIELD_RATE_LIMITED", tc.admitted+1, w.Code, w.Body)
			}
		})
	}
}

// A quota is a second budget drawn by the same cost in windows aligned to
// UTC: once it is spent, requests are refused with QUOTA_EXCEEDED and a
// Retry-After at midnight, however full the bucket is, and the refusal
// debits neither.
func TestQuota(t *testing.T) {
	clock := newClock() // 2030-01-02 03:04:05 UTC: 75,355 s to midnight
	cfg := testConfig(t, clock)
	cfg.Plans["free"] = budget.Plan{Burst: 100, Rate: 100, Per: 100 * time.Second, DisableRefund: true,
		Quota: &budget.Quota{Limit: 120, Per: 24 * time.Hour}}
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())

	// 9 mutations of 11 points: 99 from the bucket and the quota.
	for i := range 9 {
		if w, _ := query(t, h, mutation11, bearer(aliceKey)); w.Code != http.StatusOK {
			t.Fatalf("mutation %d: %d %s", i+1, w.Code, w.Body)
		}
	}
	clock.Advance(100 * time.Second) // the bucket is full again; the quota has 21 left
	w, _ := query(t, h, mutation11, bearer(aliceKey))
	if w.Code != http.StatusOK {
		t.Fatalf("10th: %d %s", w.Code, w.Body)
	}
	if got, want := w.Header().Get(middleware.HeaderRateLimitPolicy), `"free";q=100;w=100, "free-daily";q=120;w=86400`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	// The quota (10 of 120 left) is closer to refusing than the bucket (89 of 100).
	if got, want := w.Header().Get(middleware.HeaderRateLimit), `"free-daily";r=10;t=75255`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "89" {
		t.Errorf("X-RateLimit-Remaining = %s, want 89: it describes the bucket", got)
	}

	w, resp := query(t, h, mutation11, bearer(aliceKey))
	if w.Code != http.StatusTooManyRequests || resp.code() != budget.CodeQuotaExceeded {
		t.Fatalf("11th: %d %s", w.Code, w.Body)
	}
	if got := w.Header().Get(middleware.HeaderRetryAfter); got != "75255" {
		t.Errorf("Retry-After = %s, want 75255 (midnight UTC)", got)
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "89" {
		t.Errorf("bucket after the refusal = %s, want 89 untouched", got)
	}

	// REST draws from the same quota.
	rw := do(t, h, request{method: http.MethodGet, path: "/api/search", header: bearer(aliceKey)})
	if rw.Code != http.StatusOK { // 10 points: the quota has 10
		t.Fatalf("REST: %d %s", rw.Code, rw.Body)
	}
	rw = do(t, h, request{method: http.MethodGet, path: "/api/things", header: bearer(aliceKey)})
	if rw.Code != http.StatusTooManyRequests || !strings.Contains(rw.Body.String(), `"quota_exceeded"`) {
		t.Fatalf("REST over quota: %d %s", rw.Code, rw.Body)
	}

	clock.Advance(75255 * time.Second) // midnight: a new window
	if w, _ := query(t, h, mutation11, bearer(aliceKey)); w.Code != http.StatusOK {
		t.Errorf("after midnight: %d %s", w.Code, w.Body)
	}
}

// All or nothing: a refusal by the bucket leaves the quota and the field
// limit as they were, and a refusal by the field limit leaves the bucket
// and the quota.
func TestMultiLimitAllOrNothing(t *testing.T) {
	clock := newClock()
	cfg := fieldLimitConfig(t, clock, map[string]budget.FieldLimit{"Mutation.createIssue": {Limit: 20, Per: time.Hour}})
	cfg.Plans["free"] = budget.Plan{Burst: 100, Rate: 100, Per: 100 * time.Second, DisableRefund: true,
		Quota: &budget.Quota{Limit: 1000, Per: 24 * time.Hour, Name: "free-day"}}
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())

	policies := func(w interface{ Header() http.Header }) string {
		return w.Header().Get(middleware.HeaderRateLimitPolicy)
	}
	w, _ := query(t, h, aliasedIssues(8), bearer(aliceKey)) // 18 points, 8 selections
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	want := `"free";q=100;w=100, "free-day";q=1000;w=86400, "Mutation.createIssue";q=20;w=3600`
	if got := policies(w); got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	// The field limit (12 of 20) is the closest to refusing.
	if got := w.Header().Get(middleware.HeaderRateLimit); !strings.HasPrefix(got, `"Mutation.createIssue";r=12;`) {
		t.Errorf("RateLimit = %q", got)
	}
	// Drain the bucket to 19 (three queries of 21 points), then ask for 20
	// points and 10 selections: the bucket refuses.
	for range 3 {
		if w, _ := query(t, h, `{ user(login: "a") { repos(first: 10) { issues(first: 1) { id } } } }`, bearer(aliceKey)); w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	w, resp := query(t, h, aliasedIssues(10), bearer(aliceKey))
	if resp.code() != budget.CodeRateLimited {
		t.Fatalf("want RATE_LIMITED, got %d %s", w.Code, w.Body)
	}
	// Nothing of it reached the field limit or the quota: after the
	// bucket refills, 12 selections are still there.
	clock.Advance(100 * time.Second)
	w, _ = query(t, h, aliasedIssues(12), bearer(aliceKey))
	if w.Code != http.StatusOK {
		t.Fatalf("12 selections after the bucket's refusal: %d %s", w.Code, w.Body)
	}
	// Now the field limit refuses; the bucket and quota stay as they are.
	bucket := w.Header().Get(middleware.HeaderXRateLimitRemaining)
	w, resp = query(t, h, aliasedIssues(1), bearer(aliceKey))
	if resp.code() != budget.CodeFieldRateLimited {
		t.Fatalf("want FIELD_RATE_LIMITED, got %d %s", w.Code, w.Body)
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != bucket {
		t.Errorf("bucket after the field's refusal = %s, want %s", got, bucket)
	}
}

// A field limit by address counts every principal behind one address
// together, and each address apart.
func TestFieldLimitByIP(t *testing.T) {
	clock := newClock()
	h := graphQLServer(newLimiter(t, fieldLimitConfig(t, clock, map[string]budget.FieldLimit{
		"Mutation.createIssue": {Limit: 2, Per: time.Hour, By: budget.ByIP},
	})), newTestSchema())
	post := func(key, addr string) int {
		body, _ := json.Marshal(map[string]any{"query": mutation11})
		return do(t, h, request{path: "/graphql", body: string(body), header: bearer(key), remoteAddr: addr}).Code
	}
	if post(aliceKey, "192.0.2.1:1") != 200 || post(bobKey, "192.0.2.1:2") != 200 {
		t.Fatal("the first two from one address were refused")
	}
	if got := post(aliceKey, "192.0.2.1:3"); got != http.StatusTooManyRequests {
		t.Errorf("third from the address: %d, want 429", got)
	}
	if got := post(aliceKey, "192.0.2.2:1"); got != http.StatusOK {
		t.Errorf("another address: %d, want 200", got)
	}
	// Anonymous requests are keyed by address already: one group.
	if got := post("", "192.0.2.2:2"); got != http.StatusOK {
		t.Errorf("anonymous from the second address: %d, want 200", got)
	}
}

// Shadow mode lets what a quota or field limit would refuse run.
func TestMultiLimitShadow(t *testing.T) {
	clock := newClock()
	s := newTestSchema()
	cfg := fieldLimitConfig(t, clock, map[string]budget.FieldLimit{"Mutation.createIssue": {Limit: 1, Per: time.Hour}})
	cfg.Mode = budget.Shadow
	rec := &recorder{}
	cfg.Observer = rec
	h := graphQLServer(newLimiter(t, cfg), s)
	for range 2 {
		if w, _ := query(t, h, mutation11, bearer(aliceKey)); w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	if s.issueCount() != 2 {
		t.Errorf("issues = %d, want 2", s.issueCount())
	}
	ev := rec.take()
	if last := ev[len(ev)-1]; last.Outcome != budget.ClassShadowRejected || last.Code != budget.CodeFieldRateLimited {
		t.Errorf("event = %+v", last)
	}
}

// Unused cost is given back to the quota as to the bucket.
func TestQuotaRefund(t *testing.T) {
	clock := newClock()
	cfg := withRefunds(testConfig(t, clock))
	cfg.Plans["free"] = budget.Plan{Burst: 100, Rate: 100, Per: 100 * time.Second,
		Quota: &budget.Quota{Limit: 100, Per: time.Hour}}
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	// Priced 1 + 10 × 1 = 11; the schema answers null, so it costs 1.
	w, resp := query(t, h, `{ user(login: "a") { repos { name } } }`, bearer(aliceKey))
	if w.Code != http.StatusOK || resp.Extensions.Cost == nil || *resp.Extensions.Cost.ActualQueryCost != 1 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if got, want := w.Header().Get(middleware.HeaderRateLimitPolicy), `"free";q=100;w=100, "free-hourly";q=100;w=3600`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	// Were the quota not refunded it would have 89 of 100 left and be the
	// closest to refusing; refunded, it ties with the bucket at 99.
	if got := w.Header().Get(middleware.HeaderRateLimit); got != `"free";r=99;t=1` {
		t.Errorf("RateLimit = %q, want the bucket's, the quota refunded as well", got)
	}
}

// Configuration errors name what is wrong.
func TestMultiLimitConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*config)
		wants string
	}{
		{"quota below the burst", func(c *config) {
			c.Plans["free"] = budget.Plan{Burst: 100, Rate: 100, Per: time.Minute, Quota: &budget.Quota{Limit: 50, Per: time.Hour}}
		}, "below the burst"},
		{"quota without a window", func(c *config) {
			c.Plans["free"] = budget.Plan{Burst: 100, Rate: 100, Per: time.Minute, Quota: &budget.Quota{Limit: 500}}
		}, "must be positive"},
		{"quota with split budget", func(c *config) {
			c.Plans["free"] = budget.Plan{Burst: 100, Rate: 100, Per: time.Minute, SplitBudget: true, Quota: &budget.Quota{Limit: 500, Per: time.Hour}}
		}, "SplitBudget"},
		{"coordinate without a field", func(c *config) {
			c.FieldLimits = map[string]budget.FieldLimit{"Mutation": {Limit: 1, Per: time.Minute}}
		}, "Type.field"},
		{"field limit of zero", func(c *config) {
			c.FieldLimits = map[string]budget.FieldLimit{"Mutation.createIssue": {Per: time.Minute}}
		}, "must be positive"},
		{"more field limits than one decision holds", func(c *config) {
			c.FieldLimits = map[string]budget.FieldLimit{}
			for i := range 63 {
				c.FieldLimits[fmt.Sprintf("Query.f%d", i)] = budget.FieldLimit{Limit: 1, Per: time.Minute}
			}
		}, "at most 62"},
		{"field limit by whom", func(c *config) {
			c.FieldLimits = map[string]budget.FieldLimit{"Mutation.createIssue": {Limit: 1, Per: time.Minute, By: "user"}}
		}, `by "user"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, newClock())
			tc.edit(&cfg)
			_, err := middleware.New(cfg.Dependencies, cfg.Policy)
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.wants)
			}
		})
	}
}

// A field limit on a coordinate the schema lacks is refused before it can
// refuse every operation: by CheckSchema, and by a Reload once an
// Extension prices the schema.
func TestFieldLimitUnknownCoordinate(t *testing.T) {
	cfg := testConfig(t, newClock())
	lim := newLimiter(t, cfg)
	s := newTestSchema()
	h := graphQLServer(lim, s)

	bad := cfg
	bad.FieldLimits = map[string]budget.FieldLimit{"Mutation.deleteEverything": {Limit: 1, Per: time.Minute}}
	err := lim.Reload(bad.Policy)
	if !errors.Is(err, middleware.ErrInvalidConfig) || !strings.Contains(err.Error(), "Mutation.deleteEverything") {
		t.Fatalf("Reload: %v", err)
	}
	if w, _ := query(t, h, mutation11, bearer(aliceKey)); w.Code != http.StatusOK {
		t.Errorf("after the refused reload: %d %s", w.Code, w.Body)
	}
	if err := newLimiter(t, bad).CheckSchema(s.schema); !errors.Is(err, middleware.ErrInvalidConfig) {
		t.Errorf("CheckSchema: %v", err)
	}
	good := cfg
	good.FieldLimits = map[string]budget.FieldLimit{"Mutation.createIssue": {Limit: 1, Per: time.Minute}}
	if err := lim.Reload(good.Policy); err != nil {
		t.Fatal(err)
	}
	query(t, h, mutation11, bearer(aliceKey))
	if w, resp := query(t, h, mutation11, bearer(aliceKey)); resp.code() != budget.CodeFieldRateLimited {
		t.Errorf("after reloading a field limit: %d %s", w.Code, w.Body)
	}
}

// With the over-limit cache on, a repeat of a refused operation is
// answered from the cache: still FIELD_RATE_LIMITED with Retry-After, and
// it debits nothing (the budgets it did not ask about are not mistaken for
// refusals).
func TestMultiLimitOverLimitCache(t *testing.T) {
	clock := newClock()
	cfg := fieldLimitConfig(t, clock, map[string]budget.FieldLimit{"Mutation.createIssue": {Limit: 2, Per: time.Hour}})
	cfg.OverLimitCache = stack.OverLimitCacheOn
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	for range 2 {
		if w, _ := query(t, h, mutation11, bearer(aliceKey)); w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	for i := range 3 { // the store refuses, then the cache
		w, resp := query(t, h, mutation11, bearer(aliceKey))
		if w.Code != http.StatusTooManyRequests || resp.code() != budget.CodeFieldRateLimited || w.Header().Get(middleware.HeaderRetryAfter) != "1800" {
			t.Fatalf("refusal %d: %d %v %s", i, w.Code, w.Header(), w.Body)
		}
	}
	// 77 = 100 − 2 × 11 − 1: the refusals took nothing.
	if w, _ := query(t, h, `{ viewer { login } }`, bearer(aliceKey)); w.Header().Get(middleware.HeaderXRateLimitRemaining) != "77" {
		t.Errorf("bucket after the refusals: %s, want 77", w.Header().Get(middleware.HeaderXRateLimitRemaining))
	}
}

// Limits by address and by principal in one request are told apart: the
// refusal names the field whose limit refused, and the headers list both.
func TestFieldLimitsByIPAndPrincipal(t *testing.T) {
	clock := newClock()
	h := graphQLServer(newLimiter(t, fieldLimitConfig(t, clock, map[string]budget.FieldLimit{
		"Issue.id":             {Limit: 100, Per: time.Hour, By: budget.ByIP}, // sorts first
		"Mutation.createIssue": {Limit: 2, Per: time.Hour},
	})), newTestSchema())
	post := func() (*httptest.ResponseRecorder, gqlResponse) {
		body, _ := json.Marshal(map[string]any{"query": mutation11})
		w := do(t, h, request{path: "/graphql", body: string(body), header: bearer(aliceKey), remoteAddr: "192.0.2.9:1"})
		var resp gqlResponse
		_ = json.Unmarshal(w.Body.Bytes(), &resp)
		return w, resp
	}
	for range 2 {
		if w, _ := post(); w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	w, resp := post()
	if resp.code() != budget.CodeFieldRateLimited || resp.Errors[0].Extensions["field"] != "Mutation.createIssue" {
		t.Fatalf("third: %d %s", w.Code, w.Body)
	}
	want := `"free";q=100;w=100, "Mutation.createIssue";q=2;w=3600, "Issue.id";q=100;w=3600`
	if got := w.Header().Get(middleware.HeaderRateLimitPolicy); got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got := w.Header().Get(middleware.HeaderRateLimit); !strings.HasPrefix(got, `"Mutation.createIssue";r=0;`) {
		t.Errorf("RateLimit = %q", got)
	}
}

// A request refused before it is priced pays InvalidCost from the quota
// as from the bucket: the same cost draws from both.
func TestQuotaPaysInvalidCost(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Plans["free"] = budget.Plan{Burst: 100, Rate: 100, Per: 100 * time.Second, DisableRefund: true,
		Quota: &budget.Quota{Limit: 500, Per: time.Hour}}
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	if w, _ := query(t, h, `{ nope }`, bearer(aliceKey)); w.Code != http.StatusUnprocessableEntity {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	ds := make([]limiter.Decision, 1)
	err := cfg.Store.(limiter.MultiTaker).TakeAll(context.Background(), []limiter.Request{
		{Key: "user:alice", Name: "quota", Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 500, Period: time.Hour}},
	}, ds)
	if err != nil || ds[0].Remaining != 499 {
		t.Errorf("quota after an invalid request: %+v, %v; want 499 left", ds[0], err)
	}
}
