package complexity_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/costguard/costguard/complexity"
)

// membersSDL has abstract types whose members price alike and apart: the
// same interface fields, fields with their own @cost, slicing arguments, a
// type weight, a …Connection, members of several interfaces and unions,
// many members no condition names (T0 … T69), and more weights than a
// field keeps classes for (U0 … U39).
var membersSDL = func() string {
	var b strings.Builder
	b.WriteString(`
type Query { node(id: ID): Node nodes(ids: [ID!]): [Node] things(first: Int): [Thing] named: [Named] pets: [Pet] }
interface Node { id: ID! }
interface Named { name: String }
interface Pet { name: String legs: Int }
interface Owner { pets: [Pet] }
union Thing = A | B | C | D | E | W | Cat
type A implements Node & Named { id: ID! name: String tags(first: Int): [String] }
type B implements Node & Named & Owner { id: ID! name: String tags(first: Int): [String] pets: [Pet] }
type C implements Node { id: ID! @cost(weight: "3") more: [A] }
type D implements Node @cost(weight: "2") { id: ID! }
type E implements Node & Named { id: ID! name: String @cost(weight: "5") kids: [A] }
interface Lister { list(first: Int, last: Int): [A] }
type F implements Node & Lister { id: ID! list(first: Int, last: Int): [A] }
type G implements Node & Lister { id: ID! list(first: Int, last: Int): [A] @listSize(slicingArguments: ["last"], requireOneSlicingArgument: false) }
type W implements Node & Named & Owner { id: ID! name: String page(first: Int): WConnection pets: [Pet] }
type WConnection { nodes: [A] edges: [WEdge] }
type WEdge { node: A }
type Cat implements Node & Named & Pet { id: ID! name: String legs: Int lives: [Int] }
type Dog implements Node & Named & Pet { id: ID! name: String legs: Int friends: [Pet] }
`)
	for i := range 70 {
		fmt.Fprintf(&b, "type T%d implements Node { id: ID! x: Int n: [Node] }\n", i)
	}
	// More classes than an abstract field keeps (maxClassReps): each its
	// own weight.
	for i := range 40 {
		fmt.Fprintf(&b, "type U%d implements Node @cost(weight: \"%d\") { id: ID! }\n", i, i%37)
	}
	return b.String()
}()

// manyConditions is a selection with more type conditions than a mask
// tracks, which is priced member by member.
var manyConditions = func() string {
	var b strings.Builder
	b.WriteString("{ nodes { id ")
	for i := range 70 {
		fmt.Fprintf(&b, "... on T%d { x } ", i)
	}
	b.WriteString("} }")
	return b.String()
}()

var membersQueries = []string{
	`{ nodes { id } }`,
	`{ node { id __typename } }`,
	`{ node { __typename } }`,
	`{ nodes { ... on Owner { pets { name } } } }`,
	`{ nodes { id ... on Named { name } ... on C { more { name } } ... on F { list(first: 3) { id } } ... on G { list(last: 7) { id } } } }`,
	`{ nodes { ... on Lister { list(first: 3) { id } } } }`,
	`{ nodes { ...N } things(first: 4) { ...N ... on W { page(first: 5) { nodes { ...N } edges { node { id } } } } } } fragment N on Node { id ... on Named { name } ... on E { kids { id } } }`,
	`{ nodes { ... on T3 { n { id ... on T4 { n { ... on Named { name } } } } } ... on A { tags(first: 2) } } }`,
	`{ named { name ... on Node { id ... on Pet { legs } } ... on Dog { friends { name ... on Cat { lives } } } } }`,
	`{ pets { ...P } } fragment P on Pet { name ... on Dog { friends { ...Q } } } fragment Q on Pet { legs ... on Cat { lives } }`,
	`query($t: Boolean!) { nodes { id ... on Named @include(if: $t) { name } ... on D @skip(if: $t) { id } } }`,
	`{ things(first: 3) { __typename ... on Node { id } ... on Cat { lives } } }`,
	`{ a: nodes { ...X } b: nodes { ...X } } fragment X on Node { id ... on T1 { n { ...Y } } } fragment Y on Node { ... on T2 { x } ... on Named { name } }`,
	manyConditions,
}

// An Analyzer with its defaults prices an interface or union by classes of
// members that price alike (see memberClasses); Explain, and any Analyzer
// with a breakdown, prices every member. Both must give the same totals,
// and the same errors, under every limit.
func TestDefaultsPriceAsTheBreakdown(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "members.graphql", Input: membersSDL})
	if err != nil {
		t.Fatal(err)
	}
	limits := [][]complexity.Option{
		nil,
		{complexity.WithMaxDepth(3)},
		{complexity.WithMaxDepth(4)},
		{complexity.WithMaxBreadth(4)},
		{complexity.WithMaxNodes(60)},
		{complexity.WithMaxCost(40)},
		{complexity.WithFreeIntrospection(false)},
	}
	for _, q := range membersQueries {
		for _, vars := range []map[string]any{{"t": true}, {"t": false}} {
			p := prepare(t, schema, q, vars)
			for li, opts := range limits {
				checkDefaultsPriceAsTheBreakdown(t, fmt.Sprintf("%.60s %v limits %d", q, vars, li), schema, p.doc, p.op, p.vars, opts)
			}
		}
	}
}

// The same without validation: fields an interface does not declare, and
// a fragment spreading itself.
func TestDefaultsPriceAsTheBreakdownUnvalidated(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "members.graphql", Input: membersSDL})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`{ nodes { name } }`,
		`{ nodes { x } }`,
		`{ nodes { tags(first: 2) } }`,
		`{ nodes { ...L } } fragment L on Node { id ... on Named { ...L name } }`,
		`{ nodes { ...Missing } }`,
		`{ nodes { ... on Nope { id } id } }`,
	} {
		doc, err := parser.ParseQuery(&ast.Source{Input: q})
		if err != nil {
			t.Fatal(err)
		}
		checkDefaultsPriceAsTheBreakdown(t, q, schema, doc, doc.Operations[0], nil, nil)
	}
}

func checkDefaultsPriceAsTheBreakdown(t *testing.T, name string, schema *ast.Schema, doc *ast.QueryDocument, op *ast.OperationDefinition, vars map[string]any, opts []complexity.Option) {
	t.Helper()
	plain, err := complexity.New(schema, opts...)
	if err != nil {
		t.Fatal(err)
	}
	explaining, err := complexity.New(schema, append(opts, complexity.WithBreakdownLimit(complexity.DefaultBreakdownLimit))...)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time from the pooled walker
		r, err := plain.AnalyzeOperation(doc, op, vars)
		e, eerr := plain.Explain(doc, op, vars)
		if d := priceDiff(totalsOf(r), err, totalsOf(e), eerr); d != "" {
			t.Errorf("%s: AnalyzeOperation and Explain differ: %s", name, d)
		}
		w, werr := explaining.AnalyzeOperation(doc, op, vars)
		if d := priceDiff(totalsOf(r), err, totalsOf(w), werr); d != "" {
			t.Errorf("%s: the defaults and WithBreakdownLimit differ: %s", name, d)
		}
	}
}

// GitHub's queries on GitHub's public schema (-github-schema): its nodes
// field has 250 possible types.
func TestDefaultsPriceAsTheBreakdownOnGitHub(t *testing.T) {
	if *githubSchema == "" {
		t.Skip("no -github-schema given")
	}
	sdl, err := os.ReadFile(*githubSchema)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := complexity.LoadSchema(&ast.Source{Name: filepath.Base(*githubSchema), Input: string(sdl)})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range githubQueries {
		src, err := os.ReadFile(filepath.Join("..", q.file))
		if err != nil {
			t.Fatal(err)
		}
		doc, errs := gqlparser.LoadQuery(schema, string(src))
		if errs != nil {
			t.Fatal(errs)
		}
		coerced, err := validator.VariableValues(schema, doc.Operations[0], nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, opts := range [][]complexity.Option{nil, {complexity.WithMaxDepth(4)}, {complexity.WithMaxNodes(5000)}} {
			checkDefaultsPriceAsTheBreakdown(t, q.name, schema, doc, doc.Operations[0], coerced, opts)
		}
	}
}

// New prices each argument's default once; a default the executor would
// refuse is still refused on every call that relies on it, and a field
// given its argument does not pay for the default.
func TestArgumentDefaultsPricedOnce(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "s.graphql", Input: `input I { a: Int }
		type Query { f(n: Int = "x"): Int g(i: I = {a: "y"}): Int h(i: I = {a: 3}): Int @cost(weight: "2") k(i: I = null): Int }`})
	if err != nil {
		t.Fatal(err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		query string
		cost  complexity.Cost
		err   string
	}{
		{`{ h }`, 3, ""},
		{`{ h(i: {a: 1}) }`, 3, ""},
		{`{ h(i: null) }`, 2, ""},
		{`{ k }`, 0, ""},
		{`{ f h }`, 3, ""},
		{`{ h g }`, 0, `field g: argument i.a: "y" is not a valid Int`},
		{`{ g(i: {a: 1}) }`, 1, ""},
	} {
		doc, err := parser.ParseQuery(&ast.Source{Input: c.query})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			r, err := a.AnalyzeOperation(doc, doc.Operations[0], nil)
			switch {
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("%s: error %v, want %q", c.query, err, c.err)
				}
			case err != nil:
				t.Errorf("%s: %v", c.query, err)
			case r.Cost != c.cost*complexity.CostScale:
				t.Errorf("%s: cost %d, want %d", c.query, r.Cost, c.cost*complexity.CostScale)
			}
		}
	}
}
