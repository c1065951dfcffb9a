package middleware_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/middleware"
)

// withCost adds a GraphQL-Cost header to h (a fresh header when nil).
func withCost(h http.Header, value string) http.Header {
	out := http.Header{}
	for k, v := range h {
		out[k] = v
	}
	out.Set(middleware.HeaderGraphQLCost, value)
	return out
}

// rawCost returns the response's extensions.cost as written.
func rawCost(t *testing.T, body []byte) string {
	t.Helper()
	var raw struct {
		Extensions struct {
			Cost json.RawMessage `json:"cost"`
		} `json:"extensions"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	return string(raw.Extensions.Cost)
}

// "GraphQL-Cost: validate" answers the price and the bucket as it stands:
// nothing runs, nothing is debited, and "data" is null (gqlgen always
// writes the member).
func TestCostValidate(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	schema := newTestSchema()
	h := graphQLServer(lim, schema)

	for range 2 { // twice: the first spent nothing
		w, resp := query(t, h, query61, withCost(bearer(aliceKey), "validate"))
		if w.Code != http.StatusOK || len(resp.Errors) != 0 {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		const want = `{"requestedQueryCost":61,"actualQueryCost":null,"throttleStatus":{"maximumAvailable":100,"currentlyAvailable":100,"restoreRate":1}}`
		if got := rawCost(t, w.Body.Bytes()); got != want {
			t.Errorf("extensions.cost\n got %s\nwant %s", got, want)
		}
		if !strings.Contains(w.Body.String(), `"data":null`) {
			t.Errorf("body %s: want \"data\":null", w.Body)
		}
		if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "100" {
			t.Errorf("remaining %q, want 100", got)
		}
		if got := w.Header().Get(middleware.HeaderRateLimit); got != `"free";r=100;t=0` {
			t.Errorf("RateLimit %q", got)
		}
	}
	if n := schema.resolvers.Load(); n != 0 {
		t.Errorf("resolvers %d, want 0", n)
	}
	// The price is then debited by running it, once.
	if w, resp := query(t, h, query61, bearer(aliceKey)); w.Code != http.StatusOK || *resp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != 39 {
		t.Fatalf("run after validate: %d %s", w.Code, w.Body)
	}
	// 39 points left: validate says so, and still answers 200 (the client
	// compares; nothing was refused).
	w, resp := query(t, h, query61, withCost(bearer(aliceKey), "validate"))
	if w.Code != http.StatusOK || resp.Extensions.Cost.RequestedQueryCost != 61 || *resp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != 39 {
		t.Errorf("validate with 39 left: %d %s", w.Code, w.Body)
	}
	if w.Header().Get(middleware.HeaderRetryAfter) != "" {
		t.Errorf("Retry-After on a validate")
	}
}

func TestCostValidateMutationCreatesNothing(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	schema := newTestSchema()
	h := graphQLServer(lim, schema)
	w, resp := query(t, h, mutation11, withCost(nil, "validate"))
	if w.Code != http.StatusOK || resp.Extensions.Cost.RequestedQueryCost != 11 || *resp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != 20 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if schema.issueCount() != 0 || schema.resolvers.Load() != 0 {
		t.Errorf("issues %d, resolvers %d: the validated mutation ran", schema.issueCount(), schema.resolvers.Load())
	}
}

// What a static cap refuses is refused as usual, paying InvalidCost; an
// operation above the plan's burst too.
func TestCostValidateRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		auth        http.Header
		code        string
		remaining   string
	}{
		{"depth", deepQuery(7), bearer(aliceKey), complexity.CodeMaxDepthExceeded, "99"},
		{"above the burst", query61, nil, complexity.CodeMaxCostExceeded, "19"},
		{"invalid document", `{ user(login: "a") { nope } }`, bearer(aliceKey), "GRAPHQL_VALIDATION_FAILED", "99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			lim := newLimiter(t, testConfig(t, clock))
			schema := newTestSchema()
			h := graphQLServer(lim, schema)
			w, resp := query(t, h, tc.query, withCost(tc.auth, "validate"))
			if w.Code != http.StatusUnprocessableEntity || resp.code() != tc.code {
				t.Fatalf("status %d code %q, want 422 %s: %s", w.Code, resp.code(), tc.code, w.Body)
			}
			if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != tc.remaining {
				t.Errorf("remaining %q, want %s", got, tc.remaining)
			}
			if schema.resolvers.Load() != 0 {
				t.Errorf("resolvers ran")
			}
		})
	}
}

// A store that cannot be read refuses nothing a validate asks: the plan
// failing closed answers 200 with currentlyAvailable null; failing open,
// the local bucket is read.
func TestCostValidateStoreDown(t *testing.T) {
	for _, mode := range []budget.FailureMode{budget.FailClosed, budget.FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			clock := newClock()
			cfg := testConfig(t, clock)
			broken := learn(t, &failingStore{err: errTest}, &cfg, request{method: "GET", path: "/api/free", header: bearer(aliceKey)})
			cfg.FailureMode = mode
			lim := newLimiter(t, cfg)
			h := graphQLServer(lim, newTestSchema())
			broken(h)
			w, resp := query(t, h, query61, withCost(bearer(aliceKey), "validate"))
			if w.Code != http.StatusOK || resp.Extensions.Cost.RequestedQueryCost != 61 || w.Header().Get(middleware.HeaderRetryAfter) != "" {
				t.Fatalf("%d %v %s", w.Code, w.Header(), w.Body)
			}
			avail := resp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable
			switch mode {
			case budget.FailClosed:
				if avail != nil || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "" {
					t.Errorf("currentlyAvailable %v, headers %v: want none", avail, w.Header())
				}
			case budget.FailOpen:
				if avail == nil || *avail != 100 {
					t.Errorf("currentlyAvailable %v, want the local bucket's 100", avail)
				}
			}
		})
	}
}

// Any value but the two tokens, exactly, is refused before gqlgen runs:
// 400, charged InvalidCost, the accepted values named.
func TestCostHeaderInvalid(t *testing.T) {
	for _, values := range [][]string{{"VALIDATE"}, {"Validate"}, {""}, {"explain"}, {"validate, report"}, {"validate", "validate"}} {
		t.Run(fmt.Sprintf("%q", values), func(t *testing.T) {
			clock := newClock()
			lim := newLimiter(t, testConfig(t, clock))
			schema := newTestSchema()
			h := graphQLServer(lim, schema)
			header := bearer(aliceKey)
			header[http.CanonicalHeaderKey(middleware.HeaderGraphQLCost)] = values
			w, resp := query(t, h, query61, header)
			if w.Code != http.StatusBadRequest || resp.code() != middleware.CodeInvalidCostHeader {
				t.Fatalf("status %d code %q: %s", w.Code, resp.code(), w.Body)
			}
			if msg := resp.Errors[0].Message; !strings.Contains(msg, `"validate"`) || !strings.Contains(msg, `"report"`) {
				t.Errorf("message %q does not name the accepted values", msg)
			}
			if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "99" {
				t.Errorf("remaining %q, want 99 (InvalidCost)", got)
			}
			if schema.resolvers.Load() != 0 {
				t.Errorf("resolvers ran")
			}
		})
	}
	// Spaces around a token are not part of it.
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	h := graphQLServer(lim, newTestSchema())
	if w, _ := query(t, h, query61, withCost(bearer(aliceKey), " validate ")); w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "100" {
		t.Errorf("padded validate: %d %v", w.Code, w.Header())
	}
}

// "GraphQL-Cost: report" runs the operation and explains its price in the
// cost CLI's JSON shape.
func TestCostReport(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	schema := newTestSchema()
	h := graphQLServer(lim, schema)
	w, resp := query(t, h, query61, withCost(bearer(aliceKey), "report"))
	if w.Code != http.StatusOK || len(resp.Errors) != 0 || schema.resolvers.Load() != 1 {
		t.Fatalf("status %d, resolvers %d: %s", w.Code, schema.resolvers.Load(), w.Body)
	}
	const want = `{"requestedQueryCost":61,"actualQueryCost":1,"throttleStatus":{"maximumAvailable":100,"currentlyAvailable":39,"restoreRate":1},"fields":[` +
		`{"path":"user","field":"Query.user","depth":1,"multiplier":1,"cost":61},` +
		`{"path":"user.repos","field":"User.repos","depth":2,"multiplier":10,"cost":60},` +
		`{"path":"user.repos.issues","field":"Repository.issues","depth":3,"multiplier":5,"cost":5},` +
		`{"path":"user.repos.issues.title","field":"Issue.title","depth":4,"multiplier":1,"cost":0}]}`
	if got := rawCost(t, w.Body.Bytes()); got != want {
		t.Errorf("extensions.cost\n got %s\nwant %s", got, want)
	}

	// The same entries, byte for byte, as the analyzer's report (what the
	// cost CLI prints with -json) under the middleware's options.
	_, def := middleware.Defaults()
	a, err := complexity.New(schema.schema, complexity.WithMaxDepth(def.GraphQL.MaxDepth))
	if err != nil {
		t.Fatal(err)
	}
	doc := mustParse(t, schema, query61)
	rep, err := a.Explain(doc, doc.Operations[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	cli, _ := json.Marshal(rep.Fields)
	if got, _ := json.Marshal(resp.Extensions.Cost.Fields); string(got) != string(cli) {
		t.Errorf("fields\n got %s\nthe analyzer's %s", got, cli)
	}
	if resp.Extensions.Cost.FieldsTruncated {
		t.Errorf("truncated")
	}
}

// The breakdown stops at complexity.DefaultBreakdownLimit entries and says
// so.
func TestCostReportTruncated(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.GraphQL.MaxAliases = middleware.None
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	var q strings.Builder
	q.WriteString("{")
	for i := range 40 {
		fmt.Fprintf(&q, ` u%d: user(login: "a") { ...F }`, i)
	}
	q.WriteString(" } fragment F on User {")
	for i := range 30 {
		fmt.Fprintf(&q, " l%d: login", i)
	}
	q.WriteString(" }")
	w, resp := query(t, h, q.String(), withCost(bearer(aliceKey), "report"))
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if c := resp.Extensions.Cost; len(c.Fields) != complexity.DefaultBreakdownLimit || !c.FieldsTruncated {
		t.Errorf("%d fields, truncated %v", len(c.Fields), c.FieldsTruncated)
	}
}

// A plan with DisableCostReport refuses reports (400, InvalidCost paid);
// validate stays open to it.
func TestCostReportDisabled(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	free := cfg.Plans["free"]
	free.DisableCostReport = true
	cfg.Plans["free"] = free
	lim := newLimiter(t, cfg)
	schema := newTestSchema()
	h := graphQLServer(lim, schema)
	w, resp := query(t, h, query61, withCost(bearer(aliceKey), "report"))
	if w.Code != http.StatusBadRequest || resp.code() != middleware.CodeCostReportDisabled || !strings.Contains(resp.Errors[0].Message, `"free"`) {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "99" || schema.resolvers.Load() != 0 {
		t.Errorf("remaining %q, resolvers %d", got, schema.resolvers.Load())
	}
	if w, _ := query(t, h, query61, withCost(bearer(aliceKey), "validate")); w.Code != http.StatusOK {
		t.Errorf("validate on the same plan: %d", w.Code)
	}
	// Another plan may.
	if w, resp := query(t, h, `{ viewer { login } }`, withCost(nil, "report")); w.Code != http.StatusOK || len(resp.Extensions.Cost.Fields) != 2 {
		t.Errorf("anon report: %d %s", w.Code, w.Body)
	}
}

// A validate decides nothing and debits nothing: no Event. A report is an
// admission like any other; a refused header is reported with its code.
func TestCostHeaderEvents(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	rec := &recorder{}
	cfg.Observer = rec
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())

	query(t, h, query61, withCost(bearer(aliceKey), "validate"))
	if got := rec.take(); len(got) != 0 {
		t.Errorf("validate reported %+v", got)
	}
	query(t, h, query61, withCost(bearer(aliceKey), "report"))
	if got := rec.take(); len(got) != 1 || view(got[0]) != (eventView{plan: "free", kind: "graphql", outcome: "admitted", requested: 61, charged: 61, store: guard.ResultOK, known: true, remaining: 39}) {
		t.Errorf("report: %+v", got)
	}
	query(t, h, query61, withCost(bearer(aliceKey), "nope"))
	if got := rec.take(); len(got) != 1 || view(got[0]) != (eventView{plan: "free", kind: "graphql", outcome: "cost_exceeded", code: middleware.CodeInvalidCostHeader, charged: 1, store: guard.ResultOK, known: true, remaining: 38}) {
		t.Errorf("invalid header: %+v", got)
	}
}

// mustParse parses and validates q against s's schema.
func mustParse(t *testing.T, s *testSchema, q string) *ast.QueryDocument {
	t.Helper()
	doc, errs := gqlparser.LoadQuery(s.schema, q)
	if errs != nil {
		t.Fatal(errs)
	}
	return doc
}

// A report's paths repeat every enclosing response key: one long alias
// above many fields would make the breakdown a thousand copies of it. The
// paths are capped in bytes (complexity.DefaultBreakdownBytes), so the
// response stays about the size of the request.
func TestCostReportLongAliases(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.MaxBodyBytes = 2 << 20
	cfg.MaxBodyBytesInFlight = 2 << 20
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	var q strings.Builder
	q.WriteString("{ " + strings.Repeat("a", 900<<10) + `: user(login: "a") {`)
	for i := range 33 {
		fmt.Fprintf(&q, " r%d: repos(first: 1) { ...R }", i)
	}
	q.WriteString(" } } fragment R on Repository {")
	for i := range 30 {
		fmt.Fprintf(&q, " n%d: name", i)
	}
	q.WriteString(" }")
	w, resp := query(t, h, q.String(), withCost(bearer(aliceKey), "report"))
	if w.Code != http.StatusOK {
		t.Fatalf("%d %.300s", w.Code, w.Body)
	}
	if c := resp.Extensions.Cost; !c.FieldsTruncated || len(c.Fields) == 0 || w.Body.Len() > 3<<20 {
		t.Errorf("%d fields, truncated %v, body %d bytes", len(c.Fields), c.FieldsTruncated, w.Body.Len())
	}
}
