package complexity_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/costguard/costguard/complexity"
)

// fuzzSDL exercises every rule with non-negative weights, so every report
// must have cost ≥ 0.
const fuzzSDL = `
scalar Money @cost(weight: "2")
enum Level @cost(weight: "0.5") { LOW HIGH }
input Filter { min: Int @cost(weight: "1") level: Level next: Filter tags: [String!] }

type Query {
  node(id: ID): Node
  search(first: Int, filter: Filter): [Result]
  items(first: Int, last: Int): [Item] @listSize(slicingArguments: ["first", "last"])
  page(size: Int = 5): ItemPage @listSize(slicingArguments: ["size"], sizedFields: ["items", "meta.tags"], requireOneSlicingArgument: false)
  featured: [Item] @listSize(assumedSize: 3)
  conn(first: Int, last: Int): ItemConnection
  money: [Money]
  paged(input: PageIn): [Item] @listSize(slicingArguments: ["input.window.first"], assumedSize: 4, requireOneSlicingArgument: false)
  scenes(filter: PageFilter): SceneList
}
input PageIn { window: Window }
input Window { first: Int = 3 }
input PageFilter { per_page: Int = 6 and: PageFilter }
type SceneList { scenes: [Item] count: Int }
type Mutation { buy(ids: [ID!]!): [Item] @listSize(slicingArguments: ["ids"]) @cost(weight: "3.5") }
interface Node { id: ID! }
union Result = Item | User
type Item implements Node @cost(weight: "1.5") { id: ID! price: Money level: Level related(first: Int): [Item] owner: User }
type User implements Node { id: ID! name: String items(first: Int): [Item] friends: [User] }
type ItemPage { items(first: Int): [Item] meta: Meta }
type Meta { tags: [Tag] }
type Tag { label: String }
type ItemConnection { edges: [ItemEdge] nodes: [Item] total: Int }
type ItemEdge { node: Item cursor: String }
`

var fuzzSeeds = []struct{ query, vars string }{
	{`{ node(id: 1) { id ... on Item { price owner { name } } ... on User { items(first: 3) { id } } } }`, ``},
	{`query Q($f: Filter, $n: Int) { search(first: $n, filter: $f) { ... on Item { related(first: 2) { id } } ... on User { friends { name } } } }`, `{"n": 4, "f": {"min": 1, "tags": ["a"], "next": {"level": "HIGH"}}}`},
	{`{ items(first: 5) { id level } a: items(last: 2) { price } }`, ``},
	{`{ page { items { id } meta { tags { label } } } }`, ``},
	{`{ conn(first: 10) { edges { node { id } cursor } nodes { owner { items(first: 2) { id } } } total } }`, ``},
	{`query($skip: Boolean!) { featured @skip(if: $skip) { id } money ...F } fragment F on Query { node { __typename } }`, `{"skip": false}`},
	{`mutation { buy(ids: ["1", "2"]) { id } }`, ``},
	{`{ node { ...A } } fragment A on Node { ... on User { friends { ...B } } } fragment B on User { items { owner { ...B2 } } } fragment B2 on User { name }`, ``},
	{`{ __schema { types { name } } __typename }`, ``},
	{`{ items(first: -1) { id } }`, ``},
	// Values the executor coerces: numeric strings, single values for lists,
	// a null condition, and literals only an unvalidated document holds.
	{`query($n: Int, $f: Filter) { search(first: $n, filter: $f) { ... on Item { id } } }`, `{"n": "7", "f": {"min": "-3", "tags": "x", "next": {"min": 1.5}}}`},
	// Slicing arguments inside input objects: a path, the conventions, a
	// negative size (every item), defaults at each level.
	{`query($p: PageIn) { paged(input: $p) { id } b: paged(input: {window: {}}) { id } }`, `{"p": {"window": {"first": 2}}}`},
	{`query($n: Int) { scenes(filter: {per_page: $n, and: {per_page: 9}}) { scenes { id } count } paged(input: {window: {first: -1}}) { id } }`, `{"n": -1}`},
	{`query($n: Int) { scenes(filter: {per_page: $n}) { scenes { owner { name } } } }`, `{"n": "40"}`},
	{`query($ids: [ID!]!, $c: Boolean = true) { ...M @include(if: $c) } fragment M on Query { page(size: "2") { items(first: "1e3") { id } } }`, `{"ids": "1", "c": null}`},
}

func FuzzAnalyze(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s.query, s.vars)
	}
	schema, err := complexity.LoadSchema(&ast.Source{Name: "fuzz.graphql", Input: fuzzSDL})
	if err != nil {
		f.Fatal(err)
	}
	a, err := complexity.New(schema, complexity.WithBreakdownLimit(50))
	if err != nil {
		f.Fatal(err)
	}
	// plain prices with the defaults, an interface's or union's members by
	// class (see memberClasses); a prices every member for its breakdown.
	plain, err := complexity.New(schema)
	if err != nil {
		f.Fatal(err)
	}
	capped, err := complexity.New(schema, complexity.WithMaxDepth(6), complexity.WithMaxBreadth(50),
		complexity.WithMaxNodes(1000), complexity.WithMaxCost(500), complexity.WithMaxAliases(5), complexity.WithMaxRootFields(3))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query, vars string) {
		if len(query) > 4096 || len(vars) > 4096 {
			return
		}
		doc, err := parser.ParseQuery(&ast.Source{Input: query})
		if err != nil || len(doc.Operations) == 0 {
			return
		}
		var raw map[string]any
		if vars != "" {
			_ = json.Unmarshal([]byte(vars), &raw) // garbage variables must not panic either
		}
		op := doc.Operations[0]
		if errs := validator.Validate(schema, doc); len(errs) > 0 {
			// Unvalidated input: any answer but a panic is acceptable, as
			// long as the breakdown does not change it.
			r1, err1 := a.AnalyzeOperation(doc, op, raw)
			r2, err2 := plain.AnalyzeOperation(doc, op, raw)
			if d := priceDiff(totalsOf(r1), err1, totalsOf(r2), err2); d != "" {
				t.Fatalf("the breakdown changes the price: %s", d)
			}
			_, _ = capped.AnalyzeOperation(doc, op, raw)
			return
		}
		coerced, err := validator.VariableValues(schema, op, raw)
		if err != nil {
			return
		}
		r1, err1 := a.AnalyzeOperation(doc, op, coerced)
		r2, err2 := a.AnalyzeOperation(doc, op, coerced)
		if !reflect.DeepEqual(r1, r2) || !reflect.DeepEqual(err1, err2) {
			t.Fatalf("not deterministic:\n%+v %v\n%+v %v", r1, err1, r2, err2)
		}
		rp, errp := plain.AnalyzeOperation(doc, op, coerced)
		if d := priceDiff(totalsOf(r1), err1, totalsOf(rp), errp); d != "" {
			t.Fatalf("the breakdown changes the price: %s", d)
		}
		if err1 == nil {
			if r1.Cost < 0 || r1.Nodes < 0 || r1.Depth < 0 || r1.Points < 0 || len(r1.Fields) > 50 {
				t.Fatalf("impossible report %+v", r1)
			}
			for _, fc := range r1.Fields {
				if fc.Cost < 0 || fc.Multiplier < 0 {
					t.Fatalf("impossible field %+v", fc)
				}
			}
		}
		// A capped analyzer rejects or agrees with the uncapped one.
		r3, err3 := capped.AnalyzeOperation(doc, op, coerced)
		if err3 == nil && err1 == nil && (r3.Cost != r1.Cost || r3.Nodes != r1.Nodes || r3.Depth != r1.Depth) {
			t.Fatalf("capped %+v vs uncapped %+v", r3.Totals, r1.Totals)
		}
		if err3 == nil && err1 != nil {
			t.Fatalf("capped analyzer admitted what the uncapped rejected: %v", err1)
		}
	})
}
