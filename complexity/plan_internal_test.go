package complexity

import (
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
)

const planKindSDL = `
type Query { items(first: Int): [Item] user(login: String): User search(filter: Filter): [Item] }
input Filter { min: Int @cost(weight: "1") }
type Item { id: ID related(first: Int): [Item] }
type User { login: String items(first: Int): [Item] }
`

// planKinds says how each sub-plan of a compiled query prices: "constant",
// "compiled" or "scratch"; one "scratch" when the whole plan is.
func planKinds(p *Plan) []string {
	if len(p.subs) == 0 {
		return []string{"scratch"}
	}
	var kinds []string
	for i := range p.subs {
		s := p.sub(i)
		switch {
		case s.constant:
			kinds = append(kinds, "constant")
		case s.root != nil:
			kinds = append(kinds, "compiled")
		default:
			kinds = append(kinds, "scratch")
		}
	}
	return kinds
}

// TestPlanKinds pins which operations compile to what (see Compile).
func TestPlanKinds(t *testing.T) {
	schema, err := LoadSchema(&ast.Source{Name: "s.graphql", Input: planKindSDL})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(schema, WithBreakdownLimit(0), WithMaxDepth(4))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		query string
		want  []string
	}{
		{`{ items(first: 3) { id } }`, []string{"constant"}},
		{`query($l: String) { user(login: $l) { login } }`, []string{"constant"}},
		{`query($n: Int) { items(first: $n) { id } }`, []string{"compiled"}},
		{`query($f: Filter) { search(filter: $f) { id } }`, []string{"compiled"}},
		{`query($c: Boolean!) { items(first: 2) @include(if: $c) { id } }`, []string{"constant", "constant"}},
		{`query($c: Boolean!, $n: Int) { items(first: $n) @include(if: $c) { id } }`, []string{"constant", "compiled"}},
		{`query($l: String) { user(login: $l) { login } items(first: -1) { id } }`, []string{"constant"}},
		{`query($n: Int) { items(first: $n) { id } a: items(first: -1) { id } }`, []string{"scratch"}},
		{`query($n: Int) { items { related { related { related { related(first: $n) { id } } } } } }`, []string{"constant"}},
		{`query($n: Int) { a: items(first: $n) { id } items { related { related { related { related { id } } } } } }`, []string{"scratch"}},
		{`query($a: Boolean!, $b: Boolean!, $c: Boolean!, $d: Boolean!, $e: Boolean!) {
			items @skip(if: $a) @include(if: $b) { id @skip(if: $c) } user @skip(if: $d) @include(if: $e) { login } }`, []string{"scratch"}},
	}
	for _, tt := range tests {
		doc, errs := gqlparser.LoadQuery(schema, tt.query)
		if errs != nil {
			t.Fatal(errs)
		}
		p, err := a.Compile(doc, doc.Operations[0])
		if err != nil {
			t.Fatal(err)
		}
		got := planKinds(p)
		if len(got) != len(tt.want) {
			t.Errorf("%s: %v, want %v", tt.query, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: %v, want %v", tt.query, got, tt.want)
				break
			}
		}
	}
}

// TestPlanKeepsActualTree pins which sub-plans read a response against a
// kept priced tree (constant ones, within their budget, which Size
// charges) and which price from scratch for ActualCost.
func TestPlanKeepsActualTree(t *testing.T) {
	schema, err := LoadSchema(&ast.Source{Name: "s.graphql", Input: planKindSDL})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(schema, WithBreakdownLimit(0), WithMaxDepth(4))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		query string
		vars  map[string]any
		kept  bool
	}{
		{`{ items(first: 3) { id related(first: 2) { id } } user(login: "x") { login } }`, nil, true},
		{`query($c: Boolean!) { items(first: 2) @include(if: $c) { id } }`, map[string]any{"c": true}, true},
		{`query($n: Int) { items(first: $n) { id } }`, map[string]any{"n": int64(2)}, false},
		{`query($l: String) { user(login: $l) { login } items(first: -1) { id } }`, nil, false},
	}
	for _, tt := range tests {
		doc, errs := gqlparser.LoadQuery(schema, tt.query)
		if errs != nil {
			t.Fatal(errs)
		}
		p, err := a.Compile(doc, doc.Operations[0])
		if err != nil {
			t.Fatal(err)
		}
		_, _ = p.ActualCost(tt.vars, []byte(`{}`))
		idx, ok := p.assignment(tt.vars)
		kept := ok && p.sub(idx).actual != nil
		if kept != tt.kept {
			t.Errorf("%s: tree kept %v, want %v", tt.query, kept, tt.kept)
		}
		if kept {
			if b := p.sub(idx).actual.bytes(); b > p.actualBudget || p.Size() < int64(len(p.subs))*p.actualBudget {
				t.Errorf("%s: tree of %d bytes, budget %d, plan size %d", tt.query, b, p.actualBudget, p.Size())
			}
		}
	}
}
