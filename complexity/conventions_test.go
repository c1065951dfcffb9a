package complexity_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/costguard/costguard/complexity"
)

// conventionsSDL has a list of each kind the list-size conventions read,
// and the shapes they must leave alone. Product weighs 1 and its fields
// nothing, so a list of products costs its size.
const conventionsSDL = `
scalar _Any
scalar PositiveInt
union _Entity = User | Product
interface Node { id: ID! }
type User implements Node { id: ID! name: String reviews: [Review] }
type Product implements Node { id: ID! name: String reviews(limit: Int): [Review] }
type Review { body: String }

type Query {
  _entities(representations: [_Any!]!): [_Entity]!
  nodes(ids: [ID!]!): [Node]!
  byKeys(keys: [ID!]): [Product]
  byOneId(ids: ID): [Product]
  products(limit: Int, offset: Int): [Product]
  top(limit: PositiveInt = 100): [Product]
  recent(max_results: Int = 25): [Product]
  both(maxItems: Int, first: Int): [Product]
  named(limit: String): [Product]
  listLimit(limit: [Int]): [Product]
  declared(limit: Int, ids: [ID!]): [Product] @listSize(assumedSize: 3)
  pinned(ids: [ID!]!): [Product] @listSize(slicingArguments: ["ids"])
  product_stream(batch_size: Int!): [Product!]!
  product_aggregate(limit: Int): product_aggregate!
  paged(first: Int): product_aggregate
  twoLists(limit: Int): TwoLists
  slicedWrapper(limit: Int): SlicedWrapper
  declaredWrapper(limit: Int): product_aggregate @listSize(assumedSize: 2)
  conn(limit: Int): ProductConnection
  product(id: ID!): Product
}

type product_aggregate { aggregate: product_aggregate_fields nodes: [Product!]! }
type product_aggregate_fields { count: Int }
type TwoLists { a: [Product] b: [Product] }
type SlicedWrapper { items(first: Int): [Product] total: Int }
type ProductConnection { edges: [ProductEdge] nodes: [Product] }
type ProductEdge { node: Product }

input product_insert_input { name: String }
type product_mutation_response { affected_rows: Int! returning: [Product!]! }
type Mutation {
  insert_product(objects: [product_insert_input!]!): product_mutation_response
  update_product(input: product_insert_input!): product_mutation_response
  delete_products(ids: [ID!]!): [Product]
  tag_products(tags: [String!]!): [Product]
}
`

// The conventions, one case each: the price with every convention on and
// the price with the one the case is about turned off (the default size,
// 10, where the convention sized a list). Every case is priced from
// scratch and through a compiled plan, with the variables as decoded and
// as coerced.
func TestListSizeConventions(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "conventions.graphql", Input: conventionsSDL})
	if err != nil {
		t.Fatal(err)
	}
	countOff := complexity.WithCountArgumentConvention(false)
	keysOff := complexity.WithKeyListConvention(false)
	mutationOff := complexity.WithMutationListConvention(false)
	tests := []struct {
		name  string
		query string
		vars  string
		off   complexity.Option
		cost  float64 // all conventions on
		was   float64 // with off
	}{
		// Key lists: one item per key; a single value is a list of one.
		{name: "_entities", query: `query($r: [_Any!]!) { _entities(representations: $r) { ... on User { name reviews { body } } } }`,
			vars: `{"r": [{"__typename": "User", "id": "1"}, {"__typename": "User", "id": "2"}, {"__typename": "Product", "id": "3"}]}`,
			off:  keysOff, cost: 3 * (1 + 10), was: 10 * (1 + 10)},
		{name: "nodes(ids:)", query: `{ nodes(ids: ["1", "2"]) { id } }`, off: keysOff, cost: 2, was: 10},
		{name: "keys as a variable", query: `query($k: [ID!]) { byKeys(keys: $k) { id } }`, vars: `{"k": ["1", "2", "3", "4"]}`, off: keysOff, cost: 4, was: 10},
		{name: "one key for a list", query: `query($k: [ID!]) { byKeys(keys: $k) { id } }`, vars: `{"k": "1"}`, off: keysOff, cost: 1, was: 10},
		{name: "ids not a list", query: `{ byOneId(ids: "1") { id } }`, off: keysOff, cost: 10, was: 10},

		// Count-named arguments: Int or a custom …Int… scalar, absent ones
		// at their schema default, the largest of several.
		{name: "limit", query: `{ products(limit: 50, offset: 1000) { name } }`, off: countOff, cost: 50, was: 10},
		{name: "limit as a variable", query: `query($n: Int) { products(limit: $n) { name } }`, vars: `{"n": 42}`, off: countOff, cost: 42, was: 10},
		{name: "limit absent", query: `{ products { name } }`, off: countOff, cost: 10, was: 10},
		{name: "limit null", query: `{ products(limit: null) { name } }`, off: countOff, cost: 10, was: 10},
		{name: "PositiveInt", query: `{ top(limit: 7) { name } }`, off: countOff, cost: 7, was: 10},
		{name: "PositiveInt default", query: `{ top { name } }`, off: countOff, cost: 100, was: 10},
		{name: "max_results default", query: `{ recent { name } }`, off: countOff, cost: 25, was: 10},
		{name: "maxItems and first", query: `{ both(maxItems: 40, first: 5) { name } }`, off: countOff, cost: 40, was: 5},
		{name: "batch_size", query: `{ product_stream(batch_size: 20) { name } }`, off: countOff, cost: 20, was: 10},
		{name: "a String limit", query: `{ named(limit: "5") { name } }`, off: countOff, cost: 10, was: 10},
		{name: "a list of Int limit", query: `{ listLimit(limit: [5]) { name } }`, off: countOff, cost: 10, was: 10},

		// Single-list wrappers take the size of the field that returns them.
		{name: "aggregate wrapper", query: `{ product_aggregate(limit: 5) { aggregate { count } nodes { name } } }`,
			off: countOff, cost: 1 + 1 + 5, was: 1 + 1 + 10},
		{name: "aggregate wrapper, limit absent", query: `{ product_aggregate { nodes { name } } }`, off: countOff, cost: 1 + 10, was: 1 + 10},
		{name: "wrapper paged by first", query: `{ paged(first: 4) { nodes { name } } }`, off: countOff, cost: 1 + 4, was: 1 + 10},
		{name: "two lists: no wrapper", query: `{ twoLists(limit: 5) { a { name } } }`, off: countOff, cost: 1 + 10, was: 1 + 10},
		{name: "a list with its own slicing: no wrapper", query: `{ slicedWrapper(limit: 5) { items { name } } }`, off: countOff, cost: 1 + 10, was: 1 + 10},
		{name: "limit on a Connection", query: `{ conn(limit: 5) { edges { node { name } } nodes { name } } }`,
			off: countOff, cost: 1 + 5*(1+1) + 5, was: 1 + 10*(1+1) + 10},

		// Mutations: list arguments size what they write.
		{name: "insert returning", query: `mutation($o: [product_insert_input!]!) { insert_product(objects: $o) { affected_rows returning { id } } }`,
			vars: `{"o": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}`, off: mutationOff, cost: 10 + 3 + 1 + 3, was: 10 + 3 + 1 + 10},
		{name: "a single row for the list", query: `mutation($o: [product_insert_input!]!) { insert_product(objects: $o) { returning { id } } }`,
			vars: `{"o": {"name": "a"}}`, off: mutationOff, cost: 10 + 1 + 1 + 1, was: 10 + 1 + 1 + 10},
		{name: "mutation list result", query: `mutation { tag_products(tags: ["a", "b"]) { id } }`, off: mutationOff, cost: 10 + 2, was: 10 + 10},
		{name: "mutation ids, mutation convention off", query: `mutation { delete_products(ids: ["1"]) { id } }`, off: mutationOff, cost: 10 + 1, was: 10 + 1},
		{name: "mutation ids, key lists off", query: `mutation { delete_products(ids: ["1"]) { id } }`, off: keysOff, cost: 10 + 1, was: 10 + 1},
		{name: "a mutation's input object", query: `mutation { update_product(input: {name: "a"}) { returning { id } } }`,
			off: mutationOff, cost: 10 + 1 + 1 + 10, was: 10 + 1 + 1 + 10},

		// @listSize replaces every convention.
		{name: "@listSize assumedSize", query: `{ declared(limit: 50, ids: ["1", "2", "3", "4"]) { name } }`, off: countOff, cost: 3, was: 3},
		{name: "@listSize on a wrapper", query: `{ declaredWrapper(limit: 5) { nodes { name } } }`, off: countOff, cost: 1 + 10, was: 1 + 10},
		{name: "@listSize slicingArguments ids", query: `query($ids: [ID!]!) { pinned(ids: $ids) { name } }`, vars: `{"ids": ["1", "2", "3", "4"]}`,
			off: keysOff, cost: 4, was: 4},
		{name: "@listSize one id", query: `query($ids: [ID!]!) { pinned(ids: $ids) { name } }`, vars: `{"ids": "1"}`, off: keysOff, cost: 1, was: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := parser.ParseQuery(&ast.Source{Name: "query.graphql", Input: tt.query})
			if err != nil {
				t.Fatal(err)
			}
			if errs := validator.Validate(schema, doc); len(errs) > 0 {
				t.Fatal(errs)
			}
			op := doc.Operations[0]
			raw := decodeJSON(t, tt.vars)
			coerced, err := validator.VariableValues(schema, op, raw)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				opts []complexity.Option
				cost float64
			}{{nil, tt.cost}, {[]complexity.Option{tt.off}, tt.was}} {
				a, err := complexity.New(schema, c.opts...)
				if err != nil {
					t.Fatal(err)
				}
				r, err := a.AnalyzeOperation(doc, op, coerced)
				if err != nil {
					t.Fatal(err) // never SLICING_ARGUMENT_REQUIRED, nor anything else
				}
				if got := r.Cost.Float64(); got != c.cost {
					t.Errorf("with %d options: cost %v, want %v", len(c.opts), got, c.cost)
				}
				p, err := a.Compile(doc, op)
				if err != nil {
					t.Fatal(err)
				}
				checkPlan(t, a, p, doc, op, coerced)
				checkPlan(t, a, p, doc, op, raw)
			}
		})
	}
}

// decodeJSON decodes variables as gqlgen's POST transport does: numbers
// as json.Number, lists as []any.
func decodeJSON(t testing.TB, s string) map[string]any {
	t.Helper()
	if s == "" {
		return nil
	}
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// A federation router's entity fetch of 1,000 representations returns
// 1,000 entities: _entities is priced for them, the breadth cap refuses
// them, from scratch and through a plan.
func TestEntitiesPricedPerRepresentation(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "conventions.graphql", Input: conventionsSDL})
	if err != nil {
		t.Fatal(err)
	}
	reps := make([]string, 1000)
	for i := range reps {
		reps[i] = fmt.Sprintf(`{"__typename": "User", "id": "%d"}`, i)
	}
	vars := decodeJSON(t, `{"reps": [`+strings.Join(reps, ",")+`]}`)
	doc, err := parser.ParseQuery(&ast.Source{Input: `query($reps: [_Any!]!) { _entities(representations: $reps) { ... on User { name reviews { body } } } }`})
	if err != nil {
		t.Fatal(err)
	}
	op := doc.Operations[0]
	for _, tt := range []struct {
		name  string
		opts  []complexity.Option
		cost  float64
		nodes int64
		code  string
	}{
		{name: "priced per representation", cost: 1000 * (1 + 10), nodes: 1000 + 1000*10},
		{name: "held to the breadth cap", opts: []complexity.Option{complexity.WithMaxBreadth(100)}, code: complexity.CodeMaxBreadthExceeded},
		{name: "key lists off", opts: []complexity.Option{complexity.WithKeyListConvention(false)}, cost: 10 * (1 + 10), nodes: 10 + 10*10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := complexity.New(schema, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			p, err := a.Compile(doc, op)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, a, p, doc, op, vars)
			r, err := p.Evaluate(vars)
			if tt.code != "" {
				var ce *complexity.Error
				if !errors.As(err, &ce) || ce.Code != tt.code || ce.Value != 1000 || ce.Limit != 100 ||
					ce.Message != "field _entities: representations (1000 elements) exceeds the maximum of 100" {
					t.Fatalf("err = %v, want %s for 1000 elements", err, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Cost.Float64() != tt.cost || r.Nodes != tt.nodes {
				t.Errorf("cost %v, nodes %d; want %v, %d", r.Cost, r.Nodes, tt.cost, tt.nodes)
			}
		})
	}
}

// TestCountArgumentNames pins which arguments are count-named: the names
// and types WithCountArgumentConvention documents, and their near misses.
func TestCountArgumentNames(t *testing.T) {
	tests := []struct {
		arg   string // name: Type
		sizes bool
	}{
		{"limit: Int", true},
		{"count: Int", true},
		{"top: Int", true},
		{"take: Int", true},
		{"size: Int", true},
		{"batch_size: Int", true},
		{"batchSize: Int", true},
		{"page_size: Int", true},
		{"pageSize: Int", true},
		{"perPage: Int", true},
		{"per_page: Int", true},
		{"Limit: Int", true},
		{"max: Int", true},
		{"maxRepositories: Int", true},
		{"max_results: Int", true},
		{"limit: Int!", true},
		{"limit: PositiveInt", true},
		{"limit: NonNegativeInt", true},
		{"limit: Int64", true},
		{"limit: BigInt", true},
		{"offset: Int", false},
		{"skip: Int", false},
		{"n: Int", false},
		{"length: Int", false},
		{"minimum: Int", false},
		{"limits: Int", false},
		{"limit: Float", false},
		{"limit: String", false},
		{"limit: ID", false},
		{"limit: bigint", false},
		{"limit: [Int]", false},
	}
	var sdl strings.Builder
	sdl.WriteString("scalar PositiveInt scalar NonNegativeInt scalar Int64 scalar BigInt scalar bigint\ntype X { id: ID }\ntype Query {\n")
	for i, tt := range tests {
		fmt.Fprintf(&sdl, "  f%d(%s): [X]\n", i, tt.arg)
	}
	sdl.WriteString("}\n")
	schema, err := complexity.LoadSchema(&ast.Source{Input: sdl.String()})
	if err != nil {
		t.Fatal(err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	for i, tt := range tests {
		t.Run(tt.arg, func(t *testing.T) {
			name, typ, _ := strings.Cut(tt.arg, ": ")
			value := "7"
			switch typ {
			case "String", "ID", "bigint":
				value = `"7"`
			case "[Int]":
				value = "[7]"
			}
			doc, err := parser.ParseQuery(&ast.Source{Input: fmt.Sprintf("{ f%d(%s: %s) { id } }", i, name, value)})
			if err != nil {
				t.Fatal(err)
			}
			r, err := a.AnalyzeOperation(doc, doc.Operations[0], nil)
			if err != nil {
				t.Fatal(err)
			}
			want := int64(complexity.DefaultListSize)
			if tt.sizes {
				want = 7
			}
			if r.Nodes != want {
				t.Errorf("priced %d items, want %d", r.Nodes, want)
			}
		})
	}
}
