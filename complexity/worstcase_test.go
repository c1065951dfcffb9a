package complexity_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/costguard/costguard/complexity"
)

// worstCase prices the only operation of query on sdl without variables.
func worstCase(t *testing.T, sdl, query string, opts ...complexity.Option) (*complexity.WorstCase, error) {
	t.Helper()
	a, doc := parseWith(t, sdl, query, opts...)
	if errs := validator.Validate(a.Schema(), doc); len(errs) > 0 {
		t.Fatalf("invalid query: %v", errs)
	}
	return a.WorstCase(doc, doc.Operations[0])
}

// gapSDL is the worked example of the GraphQL Foundation's GAP-61
// ("Algebraic Static Analysis for Queries"): featured costs 1, title 2,
// pageCount 4, duration 9, objects nothing of their own.
const gapSDL = `
interface Media { title: String @cost(weight: "2") }
type Book implements Media @cost(weight: "0") { title: String @cost(weight: "2") pageCount: Int @cost(weight: "4") }
type Film implements Media @cost(weight: "0") { title: String @cost(weight: "2") duration: Int @cost(weight: "9") }
type Query { featured: Media @cost(weight: "1") }
`

func TestWorstCaseGAP61(t *testing.T) {
	// 1 + max(2 + 4, 2 + 9): title merges within Book, and runs beside
	// duration within Film; Book and Film are alternatives.
	const query = `query Featured { featured { ... on Media { title } ... on Book { title pageCount } ... on Film { duration } } }`
	wc, err := worstCase(t, gapSDL, query)
	if err != nil {
		t.Fatal(err)
	}
	if wc.Report.Cost.String() != "12" || len(wc.Unbounded) != 0 || len(wc.Conditions) != 0 {
		t.Errorf("GAP-61's example: %s, unbounded %v, conditions %v; want 12, none, none", wc.Report.Cost, wc.Unbounded, wc.Conditions)
	}
	// With Film's selection behind a condition, the worst case takes the
	// branch that selects it.
	const conditional = `query Featured($film: Boolean!) { featured { ... on Media { title } ... on Book { title pageCount } ... on Film @include(if: $film) { duration } } }`
	wc, err = worstCase(t, gapSDL, conditional)
	if err != nil {
		t.Fatal(err)
	}
	if wc.Report.Cost.String() != "12" || !wc.Conditions["film"] {
		t.Errorf("conditional: %s with %v; want 12 with $film true", wc.Report.Cost, wc.Conditions)
	}
	const skipped = `query Featured($film: Boolean!) { featured { ... on Media { title } ... on Book { title pageCount } ... on Film @skip(if: $film) { duration } } }`
	wc, err = worstCase(t, gapSDL, skipped)
	if err != nil {
		t.Fatal(err)
	}
	if wc.Report.Cost.String() != "12" || wc.Conditions["film"] {
		t.Errorf("@skip: %s with %v; want 12 with $film false", wc.Report.Cost, wc.Conditions)
	}
}

const worstSDL = `
input Page { size: Int offset: Int }
input Filter { name: String @cost(weight: "3") and: [Filter!] }
input Tag { label: String }
type Query {
  users(first: Int): [User]
  paged(page: Page): [User] @listSize(slicingArguments: ["page.size"])
  assumed(first: Int): [User] @listSize(slicingArguments: ["first"], assumedSize: 40, requireOneSlicingArgument: false)
  search(filter: Filter): [User] @listSize(assumedSize: 2)
  tagged(tags: [Tag!]): [User] @listSize(assumedSize: 2)
  named(name: String @cost(weight: "5")): User
  byIds(ids: [ID!]!): [User] @listSize(slicingArguments: ["ids"])
  byNumbers(ns: [Int!]!): [User] @listSize(slicingArguments: ["ns"])
}
type User { id: ID! }
type Mutation { insert(objects: [Tag!]!): [User] @listSize(slicingArguments: ["objects"]) }
`

func TestWorstCaseSlicingVariables(t *testing.T) {
	cases := []struct {
		name, query string
		opts        []complexity.Option
		cost        string // "" when unbounded
		bound       string // a Bounds or Unbounded entry expected
	}{
		{"at the maximum breadth", `query($n: Int!) { users(first: $n) { id } }`,
			[]complexity.Option{complexity.WithMaxBreadth(50)}, "50", "$n ≤ 50 (max breadth)"},
		{"no maximum breadth", `query($n: Int!) { users(first: $n) { id } }`,
			nil, "", "$n (argument first at users: no maximum breadth)"},
		{"a nullable variable may leave the default size", `query($n: Int) { users(first: $n) { id } }`,
			[]complexity.Option{complexity.WithMaxBreadth(5)}, "10", "$n null: Query.users sized 10 (default list size)"},
		{"a non-null one may not", `query($n: Int!) { users(first: $n) { id } }`,
			[]complexity.Option{complexity.WithMaxBreadth(5)}, "5", "$n ≤ 5 (max breadth)"},
		{"nor a literal beside it", `query($n: Int) { assumed(first: $n) { id } u: users(first: 3) { id } }`,
			[]complexity.Option{complexity.WithMaxBreadth(50)}, "53", "$n ≤ 50 (max breadth)"},
		{"the assumed size when larger", `query($n: Int) { assumed(first: $n) { id } }`,
			[]complexity.Option{complexity.WithMaxBreadth(5)}, "40", "$n null: Query.assumed sized 40 (@listSize(assumedSize))"},
		{"a path into an input object", `query($p: Page!) { paged(page: $p) { id } }`,
			[]complexity.Option{complexity.WithMaxBreadth(30)}, "31", "$p.size ≤ 30 (max breadth)"}, // Page 1 + 30 users
		{"a variable inside a path", `query($n: Int!) { paged(page: {size: $n}) { id } }`,
			[]complexity.Option{complexity.WithMaxBreadth(30)}, "31", "$n ≤ 30 (max breadth)"},
		{"a list-valued slicing variable", `query($ids: [ID!]!) { byIds(ids: $ids) { id } }`,
			[]complexity.Option{complexity.WithMaxBreadth(30)}, "30", "$ids ≤ 30 (max breadth)"},
		{"a literal list of variables counts its elements", `query($a: Int!) { byNumbers(ns: [$a, 2]) { id } }`,
			[]complexity.Option{complexity.WithMaxBreadth(30)}, "2", ""},
		{"a variable inside an input object", `query($s: String) { search(filter: {name: $s}) { id } }`,
			nil, "6", ""},
		{"a scalar argument's cost", `query($s: String!) { named(name: $s) { id } }`,
			nil, "6", ""},
		{"a recursive input object", `query($f: Filter) { search(filter: $f) { id } }`,
			nil, "", "$f.and (argument at search: input Filter nests itself)"},
		{"a list of input objects", `query($t: [Tag!]) { tagged(tags: $t) { id } }`,
			nil, "", "$t (argument at tagged: a list priced per element)"},
		{"a list of input objects sized by its length", `mutation($o: [Tag!]!) { insert(objects: $o) { id } }`,
			[]complexity.Option{complexity.WithMaxBreadth(20)}, "50", "$o ≤ 20 elements (max breadth)"}, // 10 + 20 tags + 20 users
		{"unbounded without a maximum breadth", `mutation($o: [Tag!]!) { insert(objects: $o) { id } }`,
			nil, "", "$o (argument at insert: a list priced per element)"},
		{"a literal list of variables is counted", `query($a: String, $b: String) { tagged(tags: [{label: $a}, {label: $b}]) { id } }`,
			nil, "4", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wc, err := worstCase(t, worstSDL, tc.query, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if tc.cost == "" {
				if !slices.Contains(wc.Unbounded, tc.bound) {
					t.Errorf("unbounded %q; want %q among them", wc.Unbounded, tc.bound)
				}
				return
			}
			if len(wc.Unbounded) != 0 || wc.Report.Cost.String() != tc.cost {
				t.Errorf("cost %s, unbounded %q; want %s, none", wc.Report.Cost, wc.Unbounded, tc.cost)
			}
			if tc.bound != "" && !slices.Contains(wc.Bounds, tc.bound) {
				t.Errorf("bounds %q; want %q among them", wc.Bounds, tc.bound)
			}
		})
	}
}

func TestWorstCaseRefusals(t *testing.T) {
	// A refusal under one assignment is the answer, naming it.
	_, err := worstCase(t, worstSDL, `query($deep: Boolean!) { users(first: 1) { id } named @include(if: $deep) { id } }`,
		complexity.WithMaxRootFields(1))
	var ce *complexity.Error
	if !errors.As(err, &ce) || ce.Code != complexity.CodeMaxRootFieldsExceeded || !strings.HasPrefix(ce.Message, "with $deep=true: ") {
		t.Errorf("err = %v; want MAX_ROOT_FIELDS_EXCEEDED with $deep=true", err)
	}
	var b strings.Builder
	b.WriteString("query(")
	for i := range 11 {
		b.WriteString("$c" + string(rune('a'+i)) + ": Boolean! ")
	}
	b.WriteString(") { ")
	for i := range 11 {
		b.WriteString("u" + string(rune('a'+i)) + ": users(first: 1) @include(if: $c" + string(rune('a'+i)) + ") { id } ")
	}
	b.WriteString("}")
	if _, err := worstCase(t, worstSDL, b.String()); !errors.Is(err, complexity.ErrInvalidDocument) {
		t.Errorf("eleven conditions: %v; want ErrInvalidDocument", err)
	}
}

// worstQueries read every kind of variable fuzzSDL prices: conditions,
// slicing arguments (nullable or not, handed down, of a convention, a
// list's length, a path into an input object) and argument costs.
var worstQueries = []string{
	`query($n: Int, $m: Int!, $a: Boolean!, $b: Boolean!) { items(first: $m) @include(if: $a) { id related(first: $n) { id } } featured @skip(if: $b) { id } page(size: $n) { items(first: $m) { id } meta { tags { label } } } }`,
	`query($n: Int, $l: Int, $c: Boolean!) { conn(first: $n, last: $l) { edges { node { id owner @include(if: $c) { items(first: $n) { id } } } } nodes { id } } }`,
	`query($x: Boolean!, $y: Boolean!) { node(id: "1") { ... on User @include(if: $x) { items(first: 3) { id } } ... on Item @skip(if: $y) { related { id } } } }`,
	`mutation($ids: [ID!]!, $k: Boolean!) { buy(ids: $ids) { id owner @skip(if: $k) { name } } }`,
	`query($n: Int, $s: Boolean!, $min: Int) { search(first: $n, filter: {min: $min, level: HIGH}) { ... on Item @skip(if: $s) { price level } ... on User { friends { name } } } }`,
	`query($n: Int!, $p: Int, $i: Boolean!) { page(size: $p) @include(if: $i) { items(first: $n) { related(first: $n) { id } } } money }`,
	`query($n: Int, $pp: Int) { paged(input: {window: {first: $n}}) { id } scenes(filter: {per_page: $pp}) { scenes { id } } }`,
}

// TestWorstCaseBoundsConcretePrices holds the worst case against concrete
// pricing: for random variable values within the bounds (random
// conditions, slicing values from 0 to the maximum breadth, -1 for every
// item, or null where the type allows), the concrete price is never above
// the worst case.
func TestWorstCaseBoundsConcretePrices(t *testing.T) {
	schema := loadSchema(t, fuzzSDL)
	rng := rand.New(rand.NewPCG(7, 61))
	for _, breadth := range []int{3, 25} { // below and above the default list size
		a, err := complexity.New(schema, complexity.WithMaxBreadth(breadth))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range worstQueries {
			doc := mustParse(t, q)
			if errs := validator.Validate(schema, doc); len(errs) > 0 {
				t.Fatalf("%s: %v", q, errs)
			}
			op := doc.Operations[0]
			wc, err := a.WorstCase(doc, op)
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if len(wc.Unbounded) > 0 {
				t.Fatalf("%s: unbounded %q", q, wc.Unbounded)
			}
			priced := 0
			for range 300 {
				vars := randomValues(rng, op, breadth)
				r, err := a.AnalyzeOperation(doc, op, vars)
				if err != nil {
					continue // refused for these values (a required slicing argument missing)
				}
				priced++
				if r.Cost > wc.Report.Cost {
					t.Fatalf("max breadth %d, %s\nwith %v: %s, above the worst case %s (%v)", breadth, q, vars, r.Cost, wc.Report.Cost, wc.Conditions)
				}
			}
			if priced < 100 {
				t.Errorf("%s: only %d of 300 random assignments priced", q, priced)
			}
		}
	}
}

// randomValues gives each variable of op a random value: a Boolean, an
// Int from 0 to bound or now and then -1 (a page size asking for every
// item), a list of up to bound IDs; a nullable one is sometimes null or
// absent.
func randomValues(rng *rand.Rand, op *ast.OperationDefinition, bound int) map[string]any {
	vars := map[string]any{}
	for _, def := range op.VariableDefinitions {
		if !def.Type.NonNull {
			switch rng.IntN(4) {
			case 0:
				continue
			case 1:
				vars[def.Variable] = nil
				continue
			}
		}
		switch {
		case def.Type.Elem != nil:
			ids := make([]any, rng.IntN(bound+1))
			for i := range ids {
				ids[i] = "id"
			}
			vars[def.Variable] = ids
		case def.Type.NamedType == "Boolean":
			vars[def.Variable] = rng.IntN(2) == 1
		case rng.IntN(8) == 0:
			vars[def.Variable] = int64(-1)
		default:
			vars[def.Variable] = int64(rng.IntN(bound + 1))
		}
	}
	return vars
}

// FuzzWorstCase holds the worst case above concrete prices for any
// document: for random values of its variables within the maximum
// breadth, a bounded worst case is never below their price.
func FuzzWorstCase(f *testing.F) {
	for i, q := range worstQueries {
		f.Add(q, uint64(i))
	}
	for i, s := range fuzzSeeds {
		f.Add(s.query, uint64(i))
	}
	schema := loadSchema(f, fuzzSDL)
	const breadth = 8
	a, err := complexity.New(schema, complexity.WithMaxBreadth(breadth))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query string, seed uint64) {
		if len(query) > 2048 {
			return
		}
		doc, err := parser.ParseQuery(&ast.Source{Input: query})
		if err != nil || len(doc.Operations) == 0 || len(validator.Validate(schema, doc)) > 0 {
			return
		}
		op := doc.Operations[0]
		wc, err := a.WorstCase(doc, op)
		if err != nil || len(wc.Unbounded) > 0 {
			return
		}
		rng := rand.New(rand.NewPCG(seed, 61))
		for range 20 {
			vars := randomValues(rng, op, breadth)
			r, err := a.AnalyzeOperation(doc, op, vars)
			if err == nil && r.Cost > wc.Report.Cost {
				t.Fatalf("with %v: %s, above the worst case %s (%v)", vars, r.Cost, wc.Report.Cost, wc.Conditions)
			}
		}
	})
}
