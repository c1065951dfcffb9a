package middleware

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter"
)

// BenchmarkExtensionHooks times the Extension's own work per operation —
// identity already resolved by the wrapper, pricing, one in-memory Take,
// extensions.cost — without HTTP or execution, next to gqlgen's
// ComplexityLimit extension (pricing only, no budget) on the same operation.
//
//	go test -run '^$' -bench ExtensionHooks -benchmem ./middleware/
func BenchmarkExtensionHooks(b *testing.B) {
	schema := gqlparser.MustLoadSchema(&ast.Source{Input: `
		type Query { user(login: String!): User }
		type User { login: String! repos(first: Int): [Repository!]! }
		type Repository { name: String! issues(first: Int): [Issue!]! }
		type Issue { title: String! }`})
	doc := gqlparser.MustLoadQuery(schema, `{ user(login: "octocat") { repos(first: 10) { issues(first: 5) { title } } } }`)
	es := &graphql.ExecutableSchemaMock{
		SchemaFunc: func() *ast.Schema { return schema },
		ComplexityFunc: func(context.Context, string, string, int, map[string]any) (int, bool) {
			return 0, false
		},
	}
	resp := &graphql.Response{Data: []byte(`{}`)}
	next := func(context.Context) *graphql.Response { resp.Extensions = nil; return resp }
	newOp := func() (*graphql.OperationContext, context.Context) {
		op := &graphql.OperationContext{Doc: doc, Operation: doc.Operations[0]}
		return op, graphql.WithOperationContext(context.Background(), op)
	}

	b.Run("costguard", func(b *testing.B) {
		lim, err := New(Dependencies{
			Clock: limiter.SystemClock{},
		}, Policy{
			Plans:         map[string]budget.Plan{"big": {Burst: 1e9, Rate: 1e9, Per: time.Second}},
			AnonymousPlan: "big",
		})
		if err != nil {
			b.Fatal(err)
		}
		defer lim.Close()
		ext := &costExtension{l: lim}
		if err := ext.Validate(es); err != nil {
			b.Fatal(err)
		}
		id := identity.Identity{Key: "user:alice", Plan: "big"}
		b.ReportAllocs()
		for b.Loop() {
			op, ctx := newOp()
			set := lim.current()
			ctx = context.WithValue(ctx, stateKey{}, &requestState{set: set, id: id, plan: set.plans["big"]})
			if err := ext.MutateOperationContext(ctx, op); err != nil {
				b.Fatal(err)
			}
			if ext.InterceptResponse(ctx, next).Extensions[CostExtensionKey] == nil {
				b.Fatal("no extensions.cost")
			}
		}
	})

	b.Run("gqlgen-ComplexityLimit", func(b *testing.B) {
		ext := extension.FixedComplexityLimit(1_000_000)
		if err := ext.Validate(es); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			op, ctx := newOp()
			if err := ext.MutateOperationContext(ctx, op); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkResponseReport measures what telling the client the truth adds
// to every admitted response, apart from deciding: the rate-limit headers
// of a plan with a quota (written, then copied once as a ResponseRecorder
// or the wire copies them) and extensions.cost in gqlgen's JSON encoding
// of the response, each next to the same work without it. The overhead
// group of bench/ serves the same plan end to end.
//
//	go test -run '^$' -bench ResponseReport -benchmem ./middleware/
func BenchmarkResponseReport(b *testing.B) {
	lim, err := New(Dependencies{
		Clock: limiter.SystemClock{},
	}, Policy{
		Plans: map[string]budget.Plan{"anon": {Burst: 1e12, Rate: 1e12, Per: time.Second,
			Quota: &budget.Quota{Limit: 1e15, Per: 24 * time.Hour}}},
		AnonymousPlan: "anon",
	})
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	set := lim.current()
	p := set.plans["anon"]
	q := p.QuotaRule()
	o := budget.Outcome{Known: true, Decision: limiter.Decision{Allowed: true, Limit: p.Burst, Remaining: p.Burst - 1, ResetAfter: time.Microsecond},
		Limits: []budget.Use{{Quota: q, Capacity: q.Limit.Rate,
			Decision: limiter.Decision{Allowed: true, Limit: q.Limit.Rate, Remaining: q.Limit.Rate - 1, ResetAfter: 11 * time.Hour}}}}
	now := time.Now()
	newHeader := func() http.Header { return http.Header{"Content-Type": {"application/json"}} }
	b.Run("headers", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h := newHeader()
			set.setOutcomeHeaders(h, p, &o, now)
			_ = h.Clone()
		}
	})
	b.Run("headers/none", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = newHeader().Clone()
		}
	})
	data := json.RawMessage(`{"user":{"login":"octocat"}}`)
	left, actual := p.Burst-1, int64(1)
	cost := Cost{RequestedQueryCost: 1, ActualQueryCost: &actual,
		ThrottleStatus: ThrottleStatus{MaximumAvailable: p.Burst, CurrentlyAvailable: &left, RestoreRate: p.restoreRate}}
	b.Run("extensions.cost", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resp := &graphql.Response{Data: data, Extensions: map[string]any{CostExtensionKey: cost}}
			if _, err := json.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("extensions.cost/none", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&graphql.Response{Data: data}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
