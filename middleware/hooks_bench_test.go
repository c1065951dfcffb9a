package middleware

import (
	"context"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

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
		lim, err := New(Config{
			Plans:         map[string]Plan{"big": {Burst: 1e9, Rate: 1e9, Per: time.Second}},
			AnonymousPlan: "big",
			Clock:         limiter.SystemClock{},
		})
		if err != nil {
			b.Fatal(err)
		}
		defer lim.Close()
		ext := lim.Extension()
		if err := ext.Validate(es); err != nil {
			b.Fatal(err)
		}
		id := Identity{Key: "user:alice", Plan: "big"}
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
