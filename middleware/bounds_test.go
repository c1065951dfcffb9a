package middleware_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/middleware"
)

// bodyEcho answers with the body it was given: what gqlgen would decode.
var bodyEcho = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Write(b)
})

// chunked is a body of unknown length: ContentLength -1, as a chunked
// request arrives.
type chunked struct{ io.Reader }

func TestGraphQLRequestScreen(t *testing.T) {
	many := func(n int, format string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = strings.ReplaceAll(format, "#", strconv.Itoa(i))
		}
		return strings.Join(parts, ",")
	}
	tests := []struct {
		name   string
		body   string
		status int
		code   string
		want   string // the body passed on, when admitted
	}{
		{"plain", `{"query":"{ viewer { login } }"}`, 200, "", `{"query":"{ viewer { login } }"}`},
		{"declared variables kept", `{"query":"query($a: Int) { viewer { login } }","variables":{"a":"5"}}`, 200, "",
			`{"query":"query($a: Int) { viewer { login } }","variables":{"a":"5"}}`},
		{"undeclared variables dropped", `{"query":"query($a: Int) { x }", "variables": {"z": {}, "a": 1 ,"b":[1,2]}, "operationName": null}`, 200, "",
			`{"query":"query($a: Int) { x }", "variables": {"a": 1}, "operationName": null}`},
		{"all undeclared", `{"variables":{"z":1},"query":"{ x }"}`, 200, "", `{"variables":{},"query":"{ x }"}`},
		{"escaped names", `{"query":"query($\u0061: Int) { x }","variables":{"\u0061":1,"b\"":2}}`, 200, "",
			`{"query":"query($\u0061: Int) { x }","variables":{"\u0061":1}}`},
		{"null variables", `{"query":"{ x }","variables":null}`, 200, "", `{"query":"{ x }","variables":null}`},
		{"not JSON", `{"query": "{ x }"`, 400, middleware.CodeInvalidRequest, ""},
		{"trailing garbage", `{"query": "{ x }"} {}`, 400, middleware.CodeInvalidRequest, ""},
		{"not an object", `["query"]`, 400, middleware.CodeInvalidRequest, ""},
		{"query not a string", `{"query": 5}`, 400, middleware.CodeInvalidRequest, ""},
		{"variables not an object", `{"query": "{ x }", "variables": [1]}`, 400, middleware.CodeInvalidRequest, ""},
		{"other spelling", `{"query": "{ x }", "Variables": {}}`, 400, middleware.CodeInvalidRequest, ""},
		{"unicode folding", `{"query": "{ x }", "variableſ": {}}`, 400, middleware.CodeInvalidRequest, ""},
		{"twice", `{"query": "{ x }", "query": "{ y }"}`, 400, middleware.CodeInvalidRequest, ""},
		{"unknown members pass", `{"query": "{ x }", "other": [1,2,3]}`, 200, "", `{"query": "{ x }", "other": [1,2,3]}`},
		{"too many variables", `{"query":"{ x }","variables":{` + many(300, `"v#":{}`) + `}}`, 400, middleware.CodeVariablesTooLarge, ""},
		{"too many values in one", `{"query":"query($a:[Int]) { x }","variables":{"a":[` + many(300, "#") + `]}}`, 400, middleware.CodeVariablesTooLarge, ""},
		{"extensions count too", `{"query":"{ x }","extensions":{"a":[` + many(300, "#") + `]}}`, 400, middleware.CodeVariablesTooLarge, ""},
		{"too deep", `{"query":"query($a: In) { x }","variables":{"a":` + strings.Repeat(`{"a":`, 8) + `1` + strings.Repeat(`}`, 8) + `}}`, 400, middleware.CodeVariablesTooLarge, ""},
		{"at the bounds", `{"query":"query($a: In) { x }","variables":{"a":` + strings.Repeat(`{"a":`, 6) + `[` + many(192, "#") + `]` + strings.Repeat(`}`, 6) + `}}`, 200, "", ""},
		{"too large", `{"query":"` + strings.Repeat(" ", 5000) + `{ x }"}`, 413, middleware.CodeRequestTooLarge, ""},
	}
	for _, tc := range tests {
		for _, unknownLength := range []bool{false, true} {
			t.Run(tc.name+"/chunked="+strconv.FormatBool(unknownLength), func(t *testing.T) {
				clock := newClock()
				cfg := testConfig(t, clock)
				cfg.MaxBodyBytes = 4096
				cfg.GraphQL.MaxVariableValues = 200
				cfg.GraphQL.MaxVariablesDepth = 8
				lim := newLimiter(t, cfg)
				// Twice: the second finds the query in the screen cache and
				// must be screened the same.
				for pass := range 2 {
					r := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(tc.body))
					if unknownLength {
						r = httptest.NewRequest(http.MethodPost, "/graphql", chunked{strings.NewReader(tc.body)})
						r.ContentLength = -1
					}
					r.Header = bearer(aliceKey)
					r.Header.Set("Content-Type", "application/json")
					w := httptest.NewRecorder()
					middleware.Wrap(lim, bodyEcho).ServeHTTP(w, r)
					if w.Code != tc.status {
						t.Fatalf("pass %d: status %d, want %d: %s", pass, w.Code, tc.status, w.Body)
					}
					if tc.status != 200 {
						var resp gqlResponse
						if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp.code() != tc.code {
							t.Fatalf("pass %d: code %q, want %s: %s", pass, resp.code(), tc.code, w.Body)
						}
						// Refused before gqlgen, and charged InvalidCost.
						if got, want := w.Header().Get(middleware.HeaderXRateLimitRemaining), strconv.Itoa(99-pass); got != want {
							t.Errorf("pass %d: remaining %q, want %s", pass, got, want)
						}
						if len(w.Body.String()) > 300 {
							t.Errorf("the answer is %d bytes: does it echo the request?", w.Body.Len())
						}
						continue
					}
					if tc.want != "" && w.Body.String() != tc.want {
						t.Errorf("pass %d: passed on\n%s\nwant\n%s", pass, w.Body, tc.want)
					}
					if !json.Valid(w.Body.Bytes()) {
						t.Errorf("pass %d: passed on invalid JSON: %s", pass, w.Body)
					}
				}
			})
		}
	}
}

func TestGraphQLGETScreen(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.GraphQL.MaxVariableValues = 10
	lim := newLimiter(t, cfg)
	var seen url.Values
	h := middleware.Wrap(lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = r.URL.Query() }))

	get := func(vars string) *httptest.ResponseRecorder {
		q := url.Values{"query": {"query($a: Int) { x }"}, "variables": {vars}}
		r := httptest.NewRequest(http.MethodGet, "/graphql?"+q.Encode(), nil)
		r.Header = bearer(aliceKey)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := get(`{"a": 1, "zz": {"b": 2}}`); w.Code != 200 || seen.Get("variables") != `{"a": 1}` {
		t.Errorf("undeclared variables: %d, passed on %q", w.Code, seen.Get("variables"))
	}
	if w := get(`{"a": [1,2,3,4,5,6,7,8,9,10,11]}`); w.Code != 400 || !strings.Contains(w.Body.String(), middleware.CodeVariablesTooLarge) {
		t.Errorf("too many values: %d %s", w.Code, w.Body)
	}
	if w := get(`{"a": `); w.Code != 400 || !strings.Contains(w.Body.String(), middleware.CodeInvalidRequest) {
		t.Errorf("bad JSON: %d %s", w.Code, w.Body)
	}
}

// Documents past MaxTokens or MaxSelections are refused before gqlgen
// parses them, and pay InvalidCost.
func TestGraphQLDocumentBounds(t *testing.T) {
	tests := []struct {
		name  string
		opts  middleware.GraphQLOptions
		query string
		code  string
	}{
		{"tokens", middleware.GraphQLOptions{MaxTokens: 100}, "{" + strings.Repeat(" viewer { login }", 30) + " }", complexity.CodeMaxTokensExceeded},
		{"selections", middleware.GraphQLOptions{MaxSelections: 50}, "{" + strings.Repeat(" __typename", 51) + " }", complexity.CodeMaxSelectionsExceeded},
		{"aliases", middleware.GraphQLOptions{MaxAliases: 5}, "{" + strings.Repeat(" a: viewer { login }", 6) + " }", complexity.CodeMaxAliasesExceeded},
		{"root fields", middleware.GraphQLOptions{MaxRootFields: 1}, "{ viewer { login } user(login: \"a\") { login } }", complexity.CodeMaxRootFieldsExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			cfg := testConfig(t, clock)
			cfg.GraphQL = tc.opts
			lim := newLimiter(t, cfg)
			schema := newTestSchema()
			h := graphQLServer(lim, schema)
			w, resp := query(t, h, tc.query, bearer(aliceKey))
			if w.Code != http.StatusUnprocessableEntity || resp.code() != tc.code {
				t.Fatalf("status %d code %q, want 422 %s: %s", w.Code, resp.code(), tc.code, w.Body)
			}
			if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "99" {
				t.Errorf("remaining %q, want 99 (InvalidCost)", got)
			}
			if schema.resolvers.Load() != 0 {
				t.Errorf("resolvers ran")
			}
		})
	}
}

// An operation priced at 0 still pays MinCost.
func TestGraphQLMinCost(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.GraphQL.MinCost = 3
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	w, resp := query(t, h, `{ __typename }`, bearer(aliceKey))
	if w.Code != 200 || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "97" || resp.Extensions.Cost.RequestedQueryCost != 3 {
		t.Errorf("%d %v %s", w.Code, w.Header(), w.Body)
	}
}

// gqlgen's GET transport refuses mutations after the Extension ran: they
// must not be charged.
func TestGraphQLGETMutationIsFree(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	schema := newTestSchema()
	h := graphQLServer(lim, schema)
	q := url.QueryEscape(`mutation { createIssue(repo: "a", title: "t") { id } }`)
	w := do(t, h, request{method: http.MethodGet, path: "/graphql?query=" + q, header: bearer(aliceKey)})
	if w.Code != http.StatusNotAcceptable || schema.issueCount() != 0 {
		t.Fatalf("GET mutation: %d %s", w.Code, w.Body)
	}
	w, _ = query(t, h, `{ viewer { login } }`, bearer(aliceKey))
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "99" {
		t.Errorf("remaining %q after a refused GET mutation and a 1-point query, want 99", got)
	}
}

func TestRESTBodyLimit(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.MaxBodyBytes = 100
	lim := newLimiter(t, cfg)
	var got string
	h := lim.REST(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read failed", http.StatusInternalServerError)
			return
		}
		got = string(b)
	}))
	for _, tc := range []struct {
		name          string
		body          string
		unknownLength bool
		status        int
	}{
		{"declared, small", strings.Repeat("a", 100), false, 200},
		{"declared, large", strings.Repeat("a", 101), false, 413},
		{"chunked, small", strings.Repeat("b", 100), true, 200},
		{"chunked, large", strings.Repeat("b", 101), true, 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = ""
			r := httptest.NewRequest(http.MethodPost, "/api/x", strings.NewReader(tc.body))
			if tc.unknownLength {
				r = httptest.NewRequest(http.MethodPost, "/api/x", chunked{strings.NewReader(tc.body)})
				r.ContentLength = -1
			}
			r.Header = bearer(aliceKey)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if tc.status == 413 && w.Body.String() != `{"error":"request_too_large"}`+"\n" {
				t.Errorf("body %s", w.Body)
			}
			if tc.status == 200 && got != tc.body {
				t.Errorf("the handler read %d bytes, want %d", len(got), len(tc.body))
			}
		})
	}
}

// Identities a full memory store cannot hold share their plan's overflow
// bucket, even on a fail-closed plan: a full store is not an outage.
func TestFullMemoryStoreOverflows(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Store = nil // the Limiter's own store, sized by MemoryStore
	cfg.MemoryStore.MaxKeys = 4
	cfg.FailureMode = budget.FailClosed
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	statuses := map[int]int{}
	for i := range 100 {
		w := do(t, h, request{method: http.MethodGet, path: "/api/x", remoteAddr: "192.0.2." + strconv.Itoa(i) + ":1"})
		statuses[w.Code]++
	}
	// Each request costs 1: at most 4 identities of their own, then one
	// shared anon bucket of 20 points.
	if statuses[http.StatusOK] > 4+20 || statuses[http.StatusOK] < 20 || statuses[http.StatusServiceUnavailable] != 0 {
		t.Errorf("statuses %v", statuses)
	}
	if statuses[http.StatusTooManyRequests] == 0 {
		t.Errorf("the overflow bucket never ran out: %v", statuses)
	}
}

// The wrapper's writer does no store I/O: what the Extension did not
// decide is the handler's to answer, with its own status.
func TestWrapperWriterDoesNoStoreIO(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	store := &countingStore{Store: cfg.Store.(limiter.Store)}
	cfg.Store = store
	lim := newLimiter(t, cfg)
	h := middleware.Wrap(lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, "short and stout")
	}))
	w := do(t, h, request{path: "/graphql", body: `{"query":"{ viewer { login } }"}`, header: bearer(aliceKey)})
	if w.Code != http.StatusTeapot || w.Body.String() != "short and stout" || store.takes.Load() != 0 {
		t.Errorf("%d %q, %d store calls", w.Code, w.Body, store.takes.Load())
	}
	// A status without a body still goes out when the handler returns.
	h = middleware.Wrap(lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	if w := do(t, h, request{path: "/graphql", body: `{"query":"{ x }"}`, header: bearer(aliceKey)}); w.Code != http.StatusNoContent {
		t.Errorf("status %d, want 204", w.Code)
	}
}

// Zero takes the default; None lifts a cap or makes a cost 0, so a
// mutation can be made free and a cap removed without a magic number.
func TestGraphQLNone(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.GraphQL = middleware.GraphQLOptions{
		MutationCost: middleware.None, MinCost: middleware.None, InvalidCost: middleware.None,
		MaxDepth: middleware.None, MaxSelections: middleware.None, MaxVariableValues: middleware.None,
	}
	lim := newLimiter(t, cfg)
	schema := newTestSchema()
	h := graphQLServer(lim, schema)
	// A mutation priced 0 + 1 (the Issue object) pays 1 without a base cost.
	w, resp := query(t, h, `mutation { createIssue(repo: "a", title: "t") { id } }`, bearer(aliceKey))
	if w.Code != 200 || resp.Extensions.Cost.RequestedQueryCost != 1 {
		t.Errorf("mutation: %d %s", w.Code, w.Body)
	}
	// No depth cap, no selection cap: 600 selections 16 deep pass.
	w, _ = query(t, h, deepQuery(7), bearer(aliceKey))
	if w.Code != 200 {
		t.Errorf("deep query without a depth cap: %d %s", w.Code, w.Body)
	}
	w, _ = query(t, h, "{"+strings.Repeat(" __typename", 600)+" }", bearer(aliceKey))
	if w.Code != 200 {
		t.Errorf("600 selections without a cap: %d %.200s", w.Code, w.Body)
	}
	// No invalid cost: a validation error is free.
	before := w.Header().Get(middleware.HeaderXRateLimitRemaining)
	w, _ = query(t, h, `{ nope }`, bearer(aliceKey))
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != before {
		t.Errorf("an invalid document with InvalidCost None cost %s → %s", before, got)
	}
}
