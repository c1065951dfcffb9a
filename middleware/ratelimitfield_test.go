package middleware_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/middleware"
)

// queryVars posts a GraphQL operation with variables.
func queryVars(t *testing.T, h http.Handler, q string, vars map[string]any, header http.Header) (*httptest.ResponseRecorder, gqlResponse) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": q, "variables": vars})
	w := do(t, h, request{path: "/graphql", body: string(body), header: header})
	var resp gqlResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatalf("response is not JSON: %v\n%s", err, w.Body.String())
	}
	return w, resp
}

// rateLimitData is data.rateLimit, with the other root fields raw.
type rateLimitData struct {
	RateLimit *struct {
		Limit, Cost, Remaining, Used, NodeCount int64
		ResetAt                                 string
	}
	User json.RawMessage
}

func decodeRateLimit(t *testing.T, resp gqlResponse) rateLimitData {
	t.Helper()
	var d rateLimitData
	if err := json.Unmarshal(resp.Data, &d); err != nil || d.RateLimit == nil {
		t.Fatalf("data %s: %v", resp.Data, err)
	}
	return d
}

// The 61-point query (60 nodes) with the rate-limit field beside it.
const rateLimit61 = `{ rateLimit%s { limit cost remaining used resetAt nodeCount } user(login: "octocat") { repos(first: 10) { issues(first: 5) { title } } } }`

// rateLimit(dryRun: true): the operation is priced; the bucket is read,
// not spent; no other root field runs.
func TestRateLimitDryRun(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, withRefunds(testConfig(t, clock))) // nothing debited, nothing refunded
	schema := newTestSchema()
	h := graphQLServer(lim, schema)

	for range 2 { // twice: the first debited nothing
		w, resp := query(t, h, strings.Replace(rateLimit61, "%s", "(dryRun: true)", 1), bearer(aliceKey))
		if w.Code != http.StatusOK || len(resp.Errors) != 0 {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		d := decodeRateLimit(t, resp)
		rl := *d.RateLimit
		if rl.Limit != 100 || rl.Cost != 61 || rl.Remaining != 100 || rl.Used != 0 || rl.NodeCount != 60 ||
			rl.ResetAt != clock.Now().UTC().Format(time.RFC3339) {
			t.Errorf("rateLimit %+v", rl)
		}
		if string(d.User) != "null" {
			t.Errorf("user %s, want null", d.User)
		}
		if c := resp.Extensions.Cost; c.RequestedQueryCost != 61 || *c.ThrottleStatus.CurrentlyAvailable != 100 || c.ActualQueryCost != nil {
			t.Errorf("extensions.cost %+v", c)
		}
		if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "100" {
			t.Errorf("remaining %q, want 100", got)
		}
	}
	if n := schema.resolvers.Load(); n != 2 {
		t.Errorf("resolvers %d, want 2 (rateLimit twice, user never)", n)
	}
	// The next operation pays from a whole bucket: 61 debited, then all but
	// the minimum refunded (the test schema answers user with null).
	if w, _ := query(t, h, query61, bearer(aliceKey)); w.Header().Get(middleware.HeaderXRateLimitRemaining) != "99" {
		t.Errorf("after the dry runs: remaining %q, want 99", w.Header().Get(middleware.HeaderXRateLimitRemaining))
	}
}

// Without dryRun (or with false) the operation runs and pays, and the
// field reports the bucket after the debit.
func TestRateLimitField(t *testing.T) {
	for _, args := range []string{"", "(dryRun: false)"} {
		t.Run(args, func(t *testing.T) {
			clock := newClock()
			lim := newLimiter(t, testConfig(t, clock))
			schema := newTestSchema()
			h := graphQLServer(lim, schema)
			w, resp := query(t, h, strings.Replace(rateLimit61, "%s", args, 1), bearer(aliceKey))
			if w.Code != http.StatusOK || len(resp.Errors) != 0 {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			rl := *decodeRateLimit(t, resp).RateLimit
			// 61 points missing at 1 point/s: full again in 61 s.
			if rl.Limit != 100 || rl.Cost != 61 || rl.Remaining != 39 || rl.Used != 61 || rl.NodeCount != 60 ||
				rl.ResetAt != clock.Now().Add(61*time.Second).UTC().Format(time.RFC3339) {
				t.Errorf("rateLimit %+v", rl)
			}
			if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "39" {
				t.Errorf("remaining %q, want 39", got)
			}
			if n := schema.resolvers.Load(); n != 2 {
				t.Errorf("resolvers %d, want 2", n)
			}
		})
	}
}

// dryRun through a variable, a default, a fragment, @skip.
func TestRateLimitDryRunForms(t *testing.T) {
	const user = `user(login: "octocat") { repos(first: 10) { issues(first: 5) { title } } }`
	for _, tc := range []struct {
		name  string
		query string
		vars  map[string]any
		dry   bool
	}{
		{"variable true", `query($d: Boolean) { rateLimit(dryRun: $d) { cost } ` + user + ` }`, map[string]any{"d": true}, true},
		{"variable false", `query($d: Boolean) { rateLimit(dryRun: $d) { cost } ` + user + ` }`, map[string]any{"d": false}, false},
		{"variable null", `query($d: Boolean) { rateLimit(dryRun: $d) { cost } ` + user + ` }`, map[string]any{"d": nil}, false},
		{"variable absent", `query($d: Boolean) { rateLimit(dryRun: $d) { cost } ` + user + ` }`, nil, false},
		{"variable default", `query($d: Boolean = true) { rateLimit(dryRun: $d) { cost } ` + user + ` }`, nil, true},
		{"non-null variable", `query($d: Boolean!) { rateLimit(dryRun: $d) { cost } ` + user + ` }`, map[string]any{"d": true}, true},
		{"fragment", `{ ...F ` + user + ` } fragment F on Query { rateLimit(dryRun: true) { cost } }`, nil, true},
		{"inline fragment", `{ ... on Query { rateLimit(dryRun: true) { cost } } ` + user + ` }`, nil, true},
		{"aliases, one dry", `{ a: rateLimit { cost } b: rateLimit(dryRun: true) { cost } ` + user + ` }`, nil, true},
		{"skipped", `{ rateLimit(dryRun: true) @skip(if: true) { cost } ` + user + ` }`, nil, false},
		{"not included", `query($i: Boolean!) { rateLimit(dryRun: true) @include(if: $i) { cost } ` + user + ` }`, map[string]any{"i": false}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			lim := newLimiter(t, testConfig(t, clock))
			schema := newTestSchema()
			h := graphQLServer(lim, schema)
			w, resp := queryVars(t, h, tc.query, tc.vars, bearer(aliceKey))
			if w.Code != http.StatusOK || len(resp.Errors) != 0 {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			want, ran := "39", true
			if tc.dry {
				want, ran = "100", false
			}
			if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != want {
				t.Errorf("remaining %q, want %s", got, want)
			}
			var d struct{ User json.RawMessage }
			_ = json.Unmarshal(resp.Data, &d)
			if (string(d.User) != "null") != ran {
				t.Errorf("user %s; ran %v", d.User, ran)
			}
		})
	}
}

// A dry run of a mutation creates nothing: its non-null root field is null,
// which nulls the data, and an error says why; extensions.cost has the
// price.
func TestRateLimitDryRunMutation(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	schema := newTestSchema()
	h := graphQLServer(lim, schema)
	w, resp := query(t, h, `mutation { rateLimit(dryRun: true) { cost } createIssue(repo: "hello", title: "bug") { id } }`, nil)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if schema.issueCount() != 0 {
		t.Errorf("%d issues created", schema.issueCount())
	}
	if string(resp.Data) != "null" || len(resp.Errors) != 1 || resp.code() != middleware.CodeDryRun ||
		!strings.Contains(resp.Errors[0].Message, "createIssue was not executed") {
		t.Errorf("data %s errors %+v", resp.Data, resp.Errors)
	}
	if c := resp.Extensions.Cost; c.RequestedQueryCost != 11 || *c.ThrottleStatus.CurrentlyAvailable != 20 {
		t.Errorf("extensions.cost %+v", c)
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "20" {
		t.Errorf("remaining %q, want 20", got)
	}
}

// A dry run is refused where running would be: a price above the burst
// pays InvalidCost, and nothing runs.
func TestRateLimitDryRunAboveBurst(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	schema := newTestSchema()
	h := graphQLServer(lim, schema)
	w, resp := query(t, h, strings.Replace(rateLimit61, "%s", "(dryRun: true)", 1), nil) // anon: burst 20
	if w.Code != http.StatusUnprocessableEntity || resp.code() != complexity.CodeMaxCostExceeded {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "19" || schema.resolvers.Load() != 0 {
		t.Errorf("remaining %q, resolvers %d", got, schema.resolvers.Load())
	}
}

// The field is free: it adds nothing to the price, alone it costs 0 and
// pays MinCost.
func TestRateLimitFieldIsFree(t *testing.T) {
	schema := newTestSchema()
	a, err := complexity.New(schema.schema)
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]int64{
		`{ rateLimit { cost } }`: 0,
		`{ rateLimit(dryRun: true) { limit cost remaining used resetAt nodeCount } }`: 0,
		`{ rateLimit { cost } user(login: "octocat") { repos(first: 3) { name } } }`:  4,
		`{ user(login: "octocat") { repos(first: 3) { name } } }`:                     4,
	} {
		rep, err := a.Analyze(mustParse(t, schema, q), "", nil)
		if err != nil || rep.Points != want || rep.Nodes != map[bool]int64{true: 3, false: 0}[want == 4] {
			t.Errorf("%s: %+v %v, want %d points", q, rep, err, want)
		}
	}
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	h := graphQLServer(lim, schema)
	w, resp := query(t, h, `{ rateLimit { cost remaining } }`, bearer(aliceKey))
	rl := decodeRateLimit(t, resp).RateLimit
	if w.Code != http.StatusOK || resp.Extensions.Cost.RequestedQueryCost != 1 || rl.Cost != 1 || rl.Remaining != 99 {
		t.Errorf("%d %s", w.Code, w.Body)
	}
}

// A validate wins over a dry run; nothing runs at all.
func TestRateLimitDryRunValidate(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, testConfig(t, clock))
	schema := newTestSchema()
	h := graphQLServer(lim, schema)
	w, resp := query(t, h, strings.Replace(rateLimit61, "%s", "(dryRun: true)", 1), withCost(bearer(aliceKey), "validate"))
	if w.Code != http.StatusOK || string(resp.Data) != "null" || resp.Extensions.Cost.RequestedQueryCost != 61 || schema.resolvers.Load() != 0 {
		t.Errorf("%d %s, resolvers %d", w.Code, w.Body, schema.resolvers.Load())
	}
}

// A dry run reports no Event: nothing was debited or refused.
func TestRateLimitDryRunEvents(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	rec := &recorder{}
	cfg.Observer = rec
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	query(t, h, strings.Replace(rateLimit61, "%s", "(dryRun: true)", 1), bearer(aliceKey))
	if got := rec.take(); len(got) != 0 {
		t.Errorf("dry run reported %+v", got)
	}
	query(t, h, strings.Replace(rateLimit61, "%s", "", 1), bearer(aliceKey))
	if got := rec.take(); len(got) != 1 || got[0].Charged != 61 {
		t.Errorf("run: %+v", got)
	}
}

// RateLimitField names the field; a name the schema lacks fails CheckSchema
// (and Handler, which panics), while the default may be absent (no dry
// runs).
func TestRateLimitFieldOption(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.GraphQL.RateLimitField = "quota"
	lim := newLimiter(t, cfg)
	err := lim.CheckSchema(newTestSchema().executable().Schema())
	if err == nil || !strings.Contains(err.Error(), `"quota"`) {
		t.Errorf("CheckSchema: %v", err)
	}

	// The example schema has no rateLimit: nothing changes.
	lim = newLimiter(t, testConfig(t, clock))
	if err := lim.CheckSchema(exampleSchema().Schema()); err != nil {
		t.Errorf("Validate without the default field: %v", err)
	}

	// A field without a Boolean dryRun argument is no rate-limit field.
	schema := newTestSchema()
	cfg = testConfig(t, clock)
	cfg.GraphQL.RateLimitField = "viewer"
	if err := newLimiter(t, cfg).CheckSchema(schema.executable().Schema()); err == nil {
		t.Errorf("viewer has no dryRun argument, yet Validate passed")
	}
}

// RateLimitFrom outside an operation priced by an Extension.
func TestRateLimitFromNothing(t *testing.T) {
	if _, ok := middleware.RateLimitFrom(context.Background()); ok {
		t.Errorf("ok without an operation")
	}
}

// SetInt fills whichever integer type gqlgen generated for Int,
// saturating at its bounds.
func TestSetInt(t *testing.T) {
	type myInt int32
	var (
		i   int
		i32 int32
		i64 int64
		m   myInt
	)
	for _, c := range []struct {
		v        int64
		want32   int32
		wantWide int64
	}{
		{0, 0, 0},
		{5101, 5101, 5101},
		{-7, -7, -7},
		{1 << 40, math.MaxInt32, 1 << 40},
		{-(1 << 40), math.MinInt32, -(1 << 40)},
	} {
		middleware.SetInt(&i, c.v)
		middleware.SetInt(&i32, c.v)
		middleware.SetInt(&i64, c.v)
		middleware.SetInt(&m, c.v)
		if int64(i) != c.wantWide || i32 != c.want32 || i64 != c.wantWide || int32(m) != c.want32 {
			t.Errorf("SetInt(%d): int %d, int32 %d, int64 %d, ~int32 %d", c.v, i, i32, i64, m)
		}
	}
}

// An executor learns whose budget paid for the operation, as a proxy
// forwarding it upstream does: the bucket key (never a credential) and
// the plan, for a key's principal and for an anonymous client.
func TestRateLimitFromNamesTheBudget(t *testing.T) {
	schema := newTestSchema().schema
	var seen []middleware.RateLimitStatus
	es := &graphql.ExecutableSchemaMock{
		SchemaFunc: func() *ast.Schema { return schema },
		ExecFunc: func(ctx context.Context) graphql.ResponseHandler {
			done := false
			return func(ctx context.Context) *graphql.Response {
				if done {
					return nil
				}
				done = true
				rs, ok := middleware.RateLimitFrom(ctx)
				if !ok {
					t.Errorf("RateLimitFrom in the executor: not known")
				}
				seen = append(seen, rs)
				return &graphql.Response{Data: []byte(`{"user":null}`)}
			}
		},
	}
	h := graphQLServerOf(newLimiter(t, testConfig(t, newClock())), es)
	query(t, h, query61, bearer(aliceKey))
	query(t, h, `{ user(login: "a") { login } }`, nil) // the anon plan cannot pay 61
	if len(seen) != 2 || seen[0].Key != "user:alice" || seen[0].Plan != "free" || seen[0].Cost != 61 ||
		!strings.HasPrefix(seen[1].Key, "ip:") || seen[1].Plan != "anon" {
		t.Errorf("the executor saw %+v", seen)
	}
}
