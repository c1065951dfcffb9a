package complexity_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/complexity"
)

// pagedSDL sizes items by a path into an input object, with defaults at
// both levels: a page of items costs 1 each, the input objects 1 each.
const pagedSDL = `
type Query {
  items(input: Search): [Item] @listSize(slicingArguments: ["input.page.size"], requireOneSlicingArgument: false)
  defaulted(input: Search = {page: {size: 4}}): [Item] @listSize(slicingArguments: ["input.page.size"], requireOneSlicingArgument: false)
}
input Search { q: String page: Page }
input Page { size: Int = 7 after: ID }
type Item { id: ID }
`

func TestSlicingPathsReadEveryForm(t *testing.T) {
	tests := []struct {
		name, query string
		vars        map[string]any
		want        string
	}{
		// input 2 (Search + Page) + 3 items
		{"literal", `{ items(input: {page: {size: 3}}) { id } }`, nil, "5"},
		{"whole input a variable", `query($s: Search) { items(input: $s) { id } }`, map[string]any{"s": map[string]any{"page": map[string]any{"size": 3}}}, "5"},
		{"variable inside a literal", `query($n: Int) { items(input: {page: {size: $n}}) { id } }`, map[string]any{"n": 3}, "5"},
		{"a string Int coerced", `query($n: Int) { items(input: {page: {size: $n}}) { id } }`, map[string]any{"n": "3"}, "5"},
		// the input field's default, 7: 2 + 7
		{"input field default", `{ items(input: {page: {after: "x"}}) { id } }`, nil, "9"},
		{"unset variable takes the field default", `query($n: Int) { items(input: {page: {size: $n}}) { id } }`, nil, "9"},
		// the argument's default {page: {size: 4}}: 2 + 4
		{"argument default", `{ defaulted { id } }`, nil, "6"},
		// no page at all: not sized, the default list size 10, input 1
		{"no page", `{ items(input: {q: "x"}) { id } }`, nil, "11"},
		{"explicit null size", `{ items(input: {page: {size: null}}) { id } }`, nil, "12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, run := range []func(testing.TB, string, string, map[string]any, ...complexity.Option) (*complexity.Report, error){analyze, explain} {
				r, err := run(t, pagedSDL, tt.query, tt.vars)
				if err != nil {
					t.Fatal(err)
				}
				if r.Cost.String() != tt.want {
					t.Fatalf("cost = %s, want %s", r.Cost, tt.want)
				}
			}
		})
	}
}

func TestSlicingPathValuesRefused(t *testing.T) {
	tests := []struct {
		name, query string
		vars        map[string]any
		code, want  string
	}{
		{"not an Int", `query($s: Search) { items(input: $s) { id } }`, map[string]any{"s": map[string]any{"page": map[string]any{"size": "many"}}},
			complexity.CodeInvalidArgumentValue, "argument input.page.size"},
		{"a step not an object", `query($s: Search) { items(input: $s) { id } }`, map[string]any{"s": map[string]any{"page": 3}},
			complexity.CodeInvalidArgumentValue, "argument input.page: 3 is not a valid Page"},
		{"above the breadth cap", `{ items(input: {page: {size: 50}}) { id } }`, nil, complexity.CodeMaxBreadthExceeded, "input.page.size=50 exceeds the maximum of 20"},
		{"negative without a maximum", `{ items(input: {page: {size: -1}}) { id } }`, nil, complexity.CodeMaxBreadthExceeded, "input.page.size=-1 asks for every item"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := analyze(t, pagedSDL, tt.query, tt.vars, complexity.WithMaxBreadth(20))
			var ce *complexity.Error
			if !errors.As(err, &ce) || ce.Code != tt.code || !strings.Contains(ce.Message, tt.want) {
				t.Fatalf("err = %v, want %s mentioning %q", err, tt.code, tt.want)
			}
		})
	}
}

// A negative page size asks for every item: the assumed size when the
// field declares one (held to the breadth cap), else refused.
func TestNegativeSizeIsEveryItem(t *testing.T) {
	const sdl = `type Query {
	  all(first: Int): [Item] @listSize(slicingArguments: ["first"], assumedSize: 50, requireOneSlicingArgument: false)
	  bare(first: Int): [Item]
	} type Item { id: ID }`
	r, err := analyze(t, sdl, `{ all(first: -1) { id } }`, nil)
	if err != nil || r.Cost.String() != "50" {
		t.Fatalf("all(first: -1) = %v, %v; want 50 (the assumed size)", r, err)
	}
	_, err = analyze(t, sdl, `{ all(first: -1) { id } }`, nil, complexity.WithMaxBreadth(49))
	if !errors.Is(err, complexity.ErrMaxBreadth) {
		t.Fatalf("all(first: -1) under a cap of 49: err = %v, want MAX_BREADTH_EXCEEDED", err)
	}
	for _, opts := range [][]complexity.Option{nil, {complexity.WithMaxBreadth(1000)}} {
		if _, err := analyze(t, sdl, `{ bare(first: -1) { id } }`, nil, opts...); !errors.Is(err, complexity.ErrMaxBreadth) {
			t.Fatalf("bare(first: -1): err = %v, want MAX_BREADTH_EXCEEDED, never the default size", err)
		}
	}
}

func TestConventionsLookIntoInputObjects(t *testing.T) {
	const sdl = `
	type Query {
	  scenes(filter: Filter, where: Where): [Item]
	  deep(input: L1): [Item]
	  page(input: L1): ItemConnection
	  priced(filter: Bounds): [Item]
	  tree(filter: Tree): [Item]
	  people(who: Person): [Item]
	}
	input Person { first: String last: String }
	input Filter { per_page: Int = 25 page: Int }
	input Where { limit: Int }
	input L1 { l2: L2 }
	input L2 { first: Int l3: L3 }
	input L3 { limit: Int }
	input Bounds { maxPrice: Int }
	input Tree { AND: Tree OR: Tree per_page: Int }
	type ItemConnection { edges: [Edge] }
	type Edge { node: Item }
	type Item { id: ID }
	`
	tests := []struct {
		name, query string
		opts        []complexity.Option
		want        string
	}{
		// filter 1 + 40 items
		{"filter.per_page", `{ scenes(filter: {per_page: 40}) { id } }`, nil, "41"},
		// the input default, 25
		{"the input's default", `{ scenes(filter: {page: 3}) { id } }`, nil, "26"},
		// the largest of filter.per_page and where.limit: 2 + 60
		{"the largest of two", `{ scenes(filter: {per_page: 5}, where: {limit: 60}) { id } }`, nil, "62"},
		// two levels down: input.l2.first; L1 + L2 = 2, plus 6
		{"two levels", `{ deep(input: {l2: {first: 6}}) { id } }`, nil, "8"},
		// three levels down is past the bound: L1 + L2 + L3 = 3, plus the default 10
		{"three levels are not read", `{ deep(input: {l2: {l3: {limit: 6}}}) { id } }`, nil, "13"},
		// a …Connection's edges sized by input.l2.first: L1 + L2 + Connection 1 + 6 edges × (1 + 1)
		{"a connection", `{ page(input: {l2: {first: 6}}) { edges { node { id } } } }`, nil, "15"},
		// a max… input field is a filter, not a size: 1 + 10
		{"max prefixes are filters", `{ priced(filter: {maxPrice: 3}) { id } }`, nil, "11"},
		// a recursive input is searched two levels down and no further
		{"recursive input", `{ tree(filter: {AND: {per_page: 4}}) { id } }`, nil, "6"},
		// a first: String is a name, not a size, even holding a number: 1 + 10
		{"first of a String is a name", `{ people(who: {first: "5"}) { id } }`, nil, "11"},
		{"convention off", `{ scenes(filter: {per_page: 40}) { id } }`, []complexity.Option{complexity.WithCountArgumentConvention(false)}, "11"},
		{"first/last off", `{ deep(input: {l2: {first: 6}}) { id } }`, []complexity.Option{complexity.WithFirstLastConvention(false)}, "12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := analyze(t, sdl, tt.query, nil, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if r.Cost.String() != tt.want {
				t.Fatalf("cost = %s, want %s", r.Cost, tt.want)
			}
		})
	}
}

func TestSizedFieldsSelectionSyntax(t *testing.T) {
	const sdl = `
	type Query {
	  dotted(first: Int): Box @listSize(slicingArguments: ["first"], sizedFields: ["a.items", "b"])
	  selection(first: Int): Box @listSize(slicingArguments: ["first"], sizedFields: ["a { items } b"])
	  commas(first: Int): Box @listSize(slicingArguments: ["first"], sizedFields: ["a { items, more }, b"])
	}
	type Box { a: Inner b: [Item] }
	type Inner { items: [Item] more: [Item] }
	type Item { id: ID }
	`
	tests := []struct{ name, query, want string }{
		// Box 1 + Inner 1 + 3 items + 3 b
		{"dotted paths", `{ dotted(first: 3) { a { items { id } } b { id } } }`, "8"},
		{"selection syntax, several fields", `{ selection(first: 3) { a { items { id } } b { id } } }`, "8"},
		// more is sized as well: 1 + 1 + 3 + 3 + 3
		{"commas and siblings", `{ commas(first: 3) { a { items { id } more { id } } b { id } } }`, "11"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := analyze(t, sdl, tt.query, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Cost.String() != tt.want {
				t.Fatalf("cost = %s, want %s", r.Cost, tt.want)
			}
		})
	}
}

func TestSeveralListSizeTheLargestWins(t *testing.T) {
	const sdl = `type Query {
	  items(first: Int, ids: [ID!]): [Item]
	    @listSize(slicingArguments: ["first"])
	    @listSize(slicingArguments: ["ids"], requireOneSlicingArgument: false)
	    @listSize(assumedSize: 8)
	} type Item { id: ID }`
	tests := []struct{ name, query, want string }{
		{"first over the assumed size", `{ items(first: 30, ids: ["a"]) { id } }`, "30"},
		{"ids over the rest", `{ items(first: 2, ids: ["a", "b", "c", "d", "e", "f", "g", "h", "i"]) { id } }`, "9"},
		{"the assumed size over first", `{ items(first: 2) { id } }`, "8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := analyze(t, sdl, tt.query, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Cost.String() != tt.want {
				t.Fatalf("cost = %s, want %s", r.Cost, tt.want)
			}
		})
	}
	// Each directive keeps its own requirement: the first needs first.
	if _, err := analyze(t, sdl, `{ items(ids: ["a"]) { id } }`, nil); !errors.Is(err, complexity.ErrSlicingArgument) {
		t.Fatalf("without first: err = %v, want SLICING_ARGUMENT_REQUIRED", err)
	}
}

func TestLinkedDirectiveNames(t *testing.T) {
	tests := []struct{ name, sdl, query, want string }{
		{"cost spec imported and renamed",
			`extend schema @link(url: "https://specs.apollo.dev/cost/v0.1", import: [{name: "@cost", as: "@price"}, {name: "@listSize", as: "@size"}])
			type Query { items: [T] @size(assumedSize: 3) } type T @price(weight: 4) { id: ID }`,
			`{ items { id } }`, "12"},
		{"cost spec namespaced under as:",
			`extend schema @link(url: "https://specs.apollo.dev/cost/v0.1", as: "pricing")
			type Query { items: [T] @pricing__listSize(assumedSize: 3) } type T @pricing(weight: 4) { id: ID }`,
			`{ items { id } }`, "12"},
		{"federation namespaced",
			`extend schema @link(url: "https://specs.apollo.dev/federation/v2.9", import: ["@key"])
			directive @key(fields: String!) repeatable on OBJECT
			type Query { items: [T] @federation__listSize(assumedSize: 3) } type T @key(fields: "id") @federation__cost(weight: 4) { id: ID }`,
			`{ items { id } }`, "12"},
		{"federation under as:",
			`extend schema @link(url: "https://specs.apollo.dev/federation/v2.12", as: "fed", import: [{name: "@cost", as: "@weight"}])
			type Query { items: [T] @fed__listSize(assumedSize: 3) } type T @weight(weight: 4) { id: ID }`,
			`{ items { id } }`, "12"},
		{"the larger of two names on one type",
			`extend schema @link(url: "https://specs.apollo.dev/federation/v2.9", import: ["@cost"])
			type Query { t: T } type T @cost(weight: 2) @federation__cost(weight: 5) { id: ID }`,
			`{ t { id } }`, "5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := analyze(t, tt.sdl, tt.query, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Cost.String() != tt.want {
				t.Fatalf("cost = %s, want %s", r.Cost, tt.want)
			}
		})
	}
	// A rename frees @cost: the schema's own @cost, declared with its own
	// arguments, is not the cost directive and prices nothing.
	const freed = `extend schema @link(url: "https://specs.apollo.dev/cost/v0.1", import: [{name: "@cost", as: "@price"}])
	directive @cost(reason: String) on OBJECT
	type Query { t: T } type T @cost(reason: "audit") @price(weight: 3) { id: ID }`
	if r, err := analyze(t, freed, `{ t { id } }`, nil); err != nil || r.Cost.String() != "3" {
		t.Fatalf("freed @cost: %v, %v; want 3", r, err)
	}
}

// Schemas whose cost directives cannot be read as written are refused
// with ErrInvalidSchema, naming what is wrong, never priced without them.
func TestUnreadableCostSchemasRefused(t *testing.T) {
	const types = ` input Search { page: Page pages: [Page] kind: Kind on: Boolean } input Page { first: Int } enum Kind { A }
	type Box { items: [Item] } type Item { id: ID }`
	tests := []struct{ name, sdl, want string }{
		{"unknown argument", `type Query { a(input: Search): [Item] @listSize(slicingArguments: ["inptu.page.first"]) }` + types,
			`slicingArguments names "inptu.page.first": "inptu" is not an argument`},
		{"unknown input field", `type Query { a(input: Search): [Item] @listSize(slicingArguments: ["input.page.frist"]) }` + types,
			`input Page has no field "frist"`},
		{"through a list", `type Query { a(input: Search): [Item] @listSize(slicingArguments: ["input.pages.first"]) }` + types,
			`"pages" is a list, which a path cannot go through`},
		{"through a scalar", `type Query { a(first: Int): [Item] @listSize(slicingArguments: ["first.value"]) }` + types,
			`"first" is not an input object, so it has no field "value"`},
		{"leaf an input object", `type Query { a(input: Search): [Item] @listSize(slicingArguments: ["input.page"]) }` + types,
			`"page" is a Page, which cannot give a size`},
		{"leaf an enum", `type Query { a(input: Search): [Item] @listSize(slicingArguments: ["input.kind"]) }` + types,
			`"kind" is a Kind, which cannot give a size`},
		{"leaf a Boolean", `type Query { a(input: Search): [Item] @listSize(slicingArguments: ["input.on"]) }` + types,
			`"on" is a Boolean, which cannot give a size`},
		{"sizedFields unclosed", `type Query { a(first: Int): Box @listSize(slicingArguments: ["first"], sizedFields: ["items {"]) }` + types,
			`sizedFields "items {": a brace is not closed`},
		{"sizedFields arguments", `type Query { a(first: Int): Box @listSize(slicingArguments: ["first"], sizedFields: ["items(first: 2)"]) }` + types,
			`'(' at offset 5 is not part of a field selection`},
		{"sizedFields empty selection", `type Query { a(first: Int): Box @listSize(slicingArguments: ["first"], sizedFields: ["items { }"]) }` + types,
			`an empty selection`},
		{"sizedFields unknown field in a selection", `type Query { a(first: Int): Box @listSize(slicingArguments: ["first"], sizedFields: ["items { nope }"]) }` + types,
			`sizedFields "items { nope }": type Item has no field "nope"`},
		{"@listSize argument not read", `directive @listSize(assumedSize: Int, maxSize: Int) on FIELD_DEFINITION
			type Query { a: [Item] @listSize(maxSize: 5) }` + types,
			`@listSize has an argument maxSize, which this library does not read`},
		{"@cost argument not read", `directive @cost(weight: Int, multipliers: [String]) on FIELD_DEFINITION
			type Query { a(first: Int): [Item] @cost(weight: 1, multipliers: ["first"]) }` + types,
			`@cost has an argument multipliers, which this library does not read`},
		{"@cost on an enum value", `directive @cost(weight: Int!) on ENUM | ENUM_VALUE
			enum Kind { A @cost(weight: 3) } type Query { a: Kind }`,
			`enum value Kind.A: @cost is read on the enum type, not on its values`},
		{"@cost without weight", `directive @cost(complexity: Int) on FIELD_DEFINITION
			type Query { a: Int @cost(complexity: 3) }` + types,
			`@cost has an argument complexity`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			schema, err := complexity.LoadSchema(&ast.Source{Input: tt.sdl})
			if err != nil {
				t.Fatal(err)
			}
			_, err = complexity.New(schema)
			if !errors.Is(err, complexity.ErrInvalidSchema) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidSchema mentioning %q", err, tt.want)
			}
		})
	}
}

// Links whose cost directives this library cannot read are refused by
// LoadSchema, and by New for a schema loaded another way.
func TestUnknownLinksRefused(t *testing.T) {
	const rest = ` type Query { a: Int }`
	tests := []struct{ name, sdl, want string }{
		{"cost spec, unknown version", `extend schema @link(url: "https://specs.apollo.dev/cost/v0.2", import: ["@cost"])` + rest,
			`reads the cost directives of https://specs.apollo.dev/cost/v0.1 only, not https://specs.apollo.dev/cost at v0.2`},
		{"cost spec elsewhere", `extend schema @link(url: "https://example.com/cost/v1.0")` + rest,
			`not https://example.com/cost at v1.0`},
		{"federation before cost", `extend schema @link(url: "https://specs.apollo.dev/federation/v2.3", import: ["@key", "@cost"])` + rest,
			`federation v2.3 has no @cost this library can read`},
		{"another spec's @cost", `extend schema @link(url: "https://example.com/pricing/v1.0", import: ["@cost"])` + rest,
			`imports @cost as @cost, a directive this library cannot read`},
		{"another spec bound to @listSize", `extend schema @link(url: "https://example.com/paging/v1.0", import: [{name: "@pageSize", as: "@listSize"}])` + rest,
			`imports @pageSize as @listSize`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := complexity.LoadSchema(&ast.Source{Input: tt.sdl})
			if !errors.Is(err, complexity.ErrInvalidSchema) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadSchema: err = %v, want ErrInvalidSchema mentioning %q", err, tt.want)
			}
		})
	}
	// Federation links that bring in no cost directive are left alone.
	for _, sdl := range []string{
		`extend schema @link(url: "https://specs.apollo.dev/federation/v2.3", import: ["@key"]) directive @key(fields: String!) repeatable on OBJECT` + rest,
		`extend schema @link(url: "https://specs.apollo.dev/tag/v0.3")` + rest,
	} {
		if _, err := complexity.LoadSchema(&ast.Source{Input: sdl}); err != nil {
			t.Fatalf("%s: %v", sdl, err)
		}
	}
}
