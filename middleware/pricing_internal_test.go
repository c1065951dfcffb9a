package middleware

import (
	"testing"
	"time"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
)

// The pricing rules GraphQLOptions chooses reach the analyzer: a negative
// argument weight discounts the list below it only with SubtreeDiscounts,
// and an explicit null costs its weight only with NullArgumentsCharged.
func TestPricingRulesReachTheAnalyzer(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "schema.graphql", Input: `
type Query { items(approximate: Boolean @cost(weight: "-50"), term: String @cost(weight: "3")): [Item] @listSize(assumedSize: 100) }
type Item { id: ID }`})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := parser.ParseQuery(&ast.Source{Input: `{ a: items(approximate: true) { id } b: items(term: null) { id } }`})
	if err != nil {
		t.Fatal(err)
	}
	plans := map[string]budget.Plan{"free": {Burst: 100, Rate: 100, Per: time.Minute}}
	for _, tt := range []struct {
		gql  GraphQLOptions
		cost float64
	}{
		{GraphQLOptions{}, 100 + 100},
		{GraphQLOptions{SubtreeDiscounts: true}, 50 + 100},
		{GraphQLOptions{NullArgumentsCharged: true}, 100 + 103},
	} {
		l, err := New(Dependencies{}, Policy{Plans: plans, AnonymousPlan: "free", GraphQL: tt.gql})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		a, err := complexity.New(schema, l.settings.Load().complexityOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		r, err := a.Analyze(doc, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Cost.Float64(); got != tt.cost {
			t.Errorf("%+v: cost %v, want %v", tt.gql, got, tt.cost)
		}
	}
}
