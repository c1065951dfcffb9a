package complexity_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/costguard/costguard/complexity"
)

// TestAnchors pins the numbers the issue names, independently of the
// golden files: a wrong golden regenerated with -update cannot hide them.
func TestAnchors(t *testing.T) {
	tests := []struct {
		name  string
		cost  float64
		nodes int64
		depth int
		code  string
	}{
		// Seed: 1 + 100 × (1 + 50 × (1 + 0)).
		{name: "seed", cost: 1 + 100*(1+50), nodes: 100 + 100*50, depth: 4},
		{name: "seed-max-cost", code: complexity.CodeMaxCostExceeded, cost: 5101, nodes: 5100, depth: 4},
		// Apollo's books: Book, Author, Publisher, Address at 1 each…
		{name: "books-book", cost: 4, depth: 4},
		// …with Address weighing 5…
		{name: "books-address5-book", cost: 1 + 1 + 1 + 5, depth: 4},
		// …times assumedSize 5, limit 3 and limit 7.
		{name: "books-bestsellers", cost: 5 * 8, nodes: 5, depth: 4},
		{name: "books-newest-3", cost: 3 * 8, nodes: 3, depth: 4},
		{name: "books-newest-7", cost: 7 * 8, nodes: 7, depth: 4},
		{name: "books-mutation", cost: 10, depth: 1},
		// GitHub's node-limit examples.
		{name: "github-simple", nodes: 50 + 50*10, depth: 8,
			// viewer 1 + repositories (1 + 50 × (edge 1 + node (1 + issues (1 + 10 × (edge 1 + node 1)))))
			cost: 1 + (1 + 50*(1+(1+(1+10*(1+1)))))},
		{name: "github-complex", nodes: 50 + 50*20 + 50*20*10 + 50*20 + 50*20*10 + 10, depth: 11,
			cost: func() float64 {
				comments := 1.0 + 10*(1+1)         // comments(first: 10) { edges { node { bodyHTML } } }
				prs := 1 + 20*(1+(1+comments))     // pullRequests(first: 20) { edges { node { title comments } } }
				issues := 1 + 20*(1+(1+comments))  // issues(first: 20) { totalCount edges { node { … comments } } }
				repos := 1 + 50*(1+(1+prs+issues)) // repositories(first: 50) { edges { node { name prs issues } } }
				followers := 1.0 + 10*(1+1)        // followers(first: 10) { edges { node { login } } }
				return 1 + repos + followers       // viewer
			}()},
		// Lists sized by the conventions rather than the default 10.
		{name: "subgraph-entities", cost: 12 * (1 + 10), nodes: 12 + 12*10, depth: 3}, // 12 representations
		{name: "github-nodes-ids", cost: 3 * (1 + 10), nodes: 3 + 3*10, depth: 3},     // 3 ids, files(limit: Int = 10)
		{name: "github-gist-files-limit", cost: 1 + 1 + 300, nodes: 300, depth: 4},
		{name: "github-commit-contributions", cost: 1 + 1 + 25*(1+1+(1+5)), nodes: 25 + 25*5, depth: 6},
		{name: "hasura-limit-nested", cost: 20 * (1 + 5), nodes: 20 + 20*5, depth: 3},
		{name: "hasura-aggregate", cost: 1 + 1 + 5*(1+(1+2)), nodes: 5 + 5*2, depth: 5},
		// 10 + rows 1 + 1 + (1 + 1 + 1) + payload (1 + 3 × (1 + 2)).
		{name: "hasura-insert-returning", cost: 10 + 5 + 1 + 3*(1+2), nodes: 3 + 3*2, depth: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := loadCase(t, tt.name).run(t)
			var totals complexity.Totals
			if tt.code != "" {
				var ce *complexity.Error
				if !errors.As(err, &ce) || ce.Code != tt.code {
					t.Fatalf("err = %v, want code %s", err, tt.code)
				}
				if ce.Totals == nil {
					t.Fatal("Totals not reported with the error")
				}
				totals = *ce.Totals
			} else {
				if err != nil {
					t.Fatal(err)
				}
				totals = r.Totals
			}
			if totals.Cost.Float64() != tt.cost || totals.Nodes != tt.nodes || totals.Depth != tt.depth {
				t.Errorf("cost %s, nodes %d, depth %d; want %v, %d, %d", totals.Cost, totals.Nodes, totals.Depth, tt.cost, tt.nodes, tt.depth)
			}
		})
	}
}

// analyze loads sdl and prices query with opts.
func analyze(t testing.TB, sdl, query string, vars map[string]any, opts ...complexity.Option) (*complexity.Report, error) {
	t.Helper()
	a, doc := parseWith(t, sdl, query, opts...)
	return a.Analyze(doc, "", vars)
}

// explain is analyze through Explain: the same price, with the breakdown.
func explain(t testing.TB, sdl, query string, vars map[string]any, opts ...complexity.Option) (*complexity.Report, error) {
	t.Helper()
	a, doc := parseWith(t, sdl, query, opts...)
	return a.Explain(doc, doc.Operations[0], vars)
}

// parseWith loads sdl into an Analyzer with opts, and parses query.
func parseWith(t testing.TB, sdl, query string, opts ...complexity.Option) (*complexity.Analyzer, *ast.QueryDocument) {
	t.Helper()
	schema, err := complexity.LoadSchema(&ast.Source{Name: "schema.graphql", Input: sdl})
	if err != nil {
		t.Fatal(err)
	}
	a, err := complexity.New(schema, opts...)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := parser.ParseQuery(&ast.Source{Name: "query.graphql", Input: query})
	if err != nil {
		t.Fatal(err)
	}
	return a, doc
}

const nestSDL = `type Query { n: N } type N { n: N leaf: Int list(first: Int): [N] }`

func nested(levels int) string {
	return strings.Repeat("{ n ", levels) + "{ leaf }" + strings.Repeat(" }", levels)
}

func TestDeepNestingStopsAtTheCap(t *testing.T) {
	// 999 nested n plus leaf: 1,000 levels, the most gqlparser will parse.
	q := nested(999)
	_, err := analyze(t, nestSDL, q, nil, complexity.WithMaxDepth(20))
	var ce *complexity.Error
	if !errors.As(err, &ce) || ce.Code != complexity.CodeMaxDepthExceeded || !errors.Is(err, complexity.ErrMaxDepth) {
		t.Fatalf("err = %v, want MAX_DEPTH_EXCEEDED", err)
	}
	if ce.Value != 21 || ce.Limit != 20 || len(ce.Path) != 21 || ce.Locations[0].Column != 3+4*20 {
		t.Errorf("error = %+v, want the 21st n, at column 83", ce)
	}
	r, err := analyze(t, nestSDL, q, nil)
	if err != nil || r.Depth != 1000 || r.Cost.Points() != 999 {
		t.Fatalf("uncapped: %v, %+v", err, r)
	}
}

func TestAbsoluteMaxDepth(t *testing.T) {
	// Built by hand: no parser produces this, but an AST from elsewhere
	// could, and the walk must not follow it down.
	schema, err := complexity.LoadSchema(&ast.Source{Input: nestSDL})
	if err != nil {
		t.Fatal(err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &ast.Field{Name: "leaf", Position: &ast.Position{Line: 1, Column: 1}}
	sel := ast.SelectionSet{leaf}
	for range 3 * complexity.AbsoluteMaxDepth {
		sel = ast.SelectionSet{&ast.Field{Name: "n", SelectionSet: sel, Position: &ast.Position{Line: 1, Column: 1}}}
	}
	op := &ast.OperationDefinition{Operation: ast.Query, SelectionSet: sel}
	_, err = a.AnalyzeOperation(nil, op, nil)
	var ce *complexity.Error
	if !errors.As(err, &ce) || ce.Code != complexity.CodeMaxDepthExceeded || ce.Limit != complexity.AbsoluteMaxDepth {
		t.Fatalf("err = %v, want MAX_DEPTH_EXCEEDED at AbsoluteMaxDepth", err)
	}
}

func TestDepthCapAppliesToReusedFragments(t *testing.T) {
	// The fragment is first priced at a shallow position, then reused
	// deeper: the memoised price must still be held to the cap.
	q := `{ n { ...Deep } n2: n { n { n { ...Deep } } } }
	fragment Deep on N { n { n { leaf } } }`
	r, err := analyze(t, nestSDL, q, nil, complexity.WithMaxDepth(5))
	if err == nil {
		t.Fatalf("want MAX_DEPTH_EXCEEDED, got depth %d", r.Depth)
	}
	var ce *complexity.Error
	if !errors.As(err, &ce) || ce.Code != complexity.CodeMaxDepthExceeded || ce.Value != 6 ||
		strings.Join(ce.Path, ".") != "n2.n.n.n.n.leaf" || ce.Locations[0] != (complexity.Location{Line: 2, Column: 31}) {
		t.Fatalf("err = %+v", err)
	}
	if _, err := analyze(t, nestSDL, q, nil, complexity.WithMaxDepth(6)); err != nil {
		t.Fatalf("at the cap: %v", err)
	}
}

func TestTenThousandAliases(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 10000 {
		fmt.Fprintf(&b, " a%d: n { leaf }", i)
	}
	b.WriteString(" }")
	_, err := analyze(t, nestSDL, b.String(), nil, complexity.WithMaxAliases(100))
	var ce *complexity.Error
	if !errors.As(err, &ce) || ce.Code != complexity.CodeMaxAliasesExceeded || ce.Value != 101 {
		t.Fatalf("err = %v, want MAX_ALIASES_EXCEEDED at the 101st alias", err)
	}
	_, err = analyze(t, nestSDL, b.String(), nil, complexity.WithMaxRootFields(500))
	if !errors.As(err, &ce) || ce.Code != complexity.CodeMaxRootFieldsExceeded || ce.Value != 10000 {
		t.Fatalf("err = %v, want MAX_ROOT_FIELDS_EXCEEDED with 10000", err)
	}
	r, err := explain(t, nestSDL, b.String(), nil)
	if err != nil || r.Cost.Points() != 10000 || len(r.Fields) != complexity.DefaultBreakdownLimit || !r.FieldsTruncated {
		t.Fatalf("uncapped: err %v, cost %v, %d fields", err, r.Cost, len(r.Fields))
	}
}

// fanout returns a query whose fragments each spread the next one twice:
// 2^levels fields once expanded.
func fanout(levels int) string {
	var b strings.Builder
	b.WriteString("query { node { ...F1 } }\n")
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, "fragment F%d on Node { a { ...F%d } b { ...F%d } }\n", i, i+1, i+1)
	}
	fmt.Fprintf(&b, "fragment F%d on Node { a { leaf } b { leaf } }\n", levels)
	return b.String()
}

const fanoutSDL = `type Query { node: Node } type Node { a: Node b: Node leaf: Int }`

func TestFragmentFanOutIsLinear(t *testing.T) {
	// 40 levels expand to 2^41 fields: this only finishes because each
	// fragment is priced once. node = 1 + F1, F_k = 2 × (1 + F_k+1), F_40 = 2.
	r, err := explain(t, fanoutSDL, fanout(40), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(1)<<41 - 1; r.Cost.Points() != want || r.Depth != 42 {
		t.Fatalf("cost %v depth %d, want %d and 42", r.Cost, r.Depth, want)
	}
	if len(r.Fields) != complexity.DefaultBreakdownLimit || !r.FieldsTruncated {
		t.Errorf("breakdown has %d fields, truncated %v", len(r.Fields), r.FieldsTruncated)
	}
}

// Every path repeats its ancestors' keys: a long alias above a thousand
// fields is capped in bytes, not copied a thousand times.
func TestBreakdownBytes(t *testing.T) {
	long := strings.Repeat("k", 100_000)
	q := "{ " + long + ": node { ...F1 } }\n" + strings.SplitN(fanout(12), "\n", 2)[1]
	r, err := explain(t, fanoutSDL, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range r.Fields {
		total += len(f.Path)
	}
	// The default 1 MiB holds ten paths of 100,000-odd bytes.
	if len(r.Fields) != 10 || !r.FieldsTruncated || total > complexity.DefaultBreakdownBytes {
		t.Errorf("%d fields, %d bytes of paths, truncated %v", len(r.Fields), total, r.FieldsTruncated)
	}
	if r, err = explain(t, fanoutSDL, q, nil, complexity.WithBreakdownBytes(0)); err != nil || len(r.Fields) != complexity.DefaultBreakdownLimit {
		t.Errorf("no byte cap: %d fields, err %v", len(r.Fields), err)
	}
	if r, err = explain(t, fanoutSDL, `{ node { a { leaf } } }`, nil, complexity.WithBreakdownBytes(10)); err != nil || len(r.Fields) != 2 || !r.FieldsTruncated {
		t.Errorf("10 bytes: %+v, err %v", r.Fields, err) // node (4), node.a (6), node.a.leaf would pass
	}
}

// With the defaults AnalyzeOperation builds no breakdown; Explain builds
// the one an Analyzer with WithBreakdownLimit(DefaultBreakdownLimit)
// builds, at the same price, for every golden case.
func TestBreakdownOnlyWhenAsked(t *testing.T) {
	for _, name := range goldenNames(t) {
		t.Run(name, func(t *testing.T) {
			c := loadCase(t, name)
			if c.options.BreakdownLimit != nil {
				t.Skip("the case sets its own breakdown limit")
			}
			schema := c.schema(t)
			doc, op, vars := c.prepare(t, schema)
			plain, err := complexity.New(schema, c.options.list()...)
			if err != nil {
				t.Fatal(err)
			}
			explaining, err := complexity.New(schema, append(c.options.list(), complexity.WithBreakdownLimit(complexity.DefaultBreakdownLimit))...)
			if err != nil {
				t.Fatal(err)
			}
			r, err := plain.AnalyzeOperation(doc, op, vars)
			if err == nil && (len(r.Fields) != 0 || r.FieldsTruncated) {
				t.Errorf("AnalyzeOperation with the defaults: %d fields, truncated %v", len(r.Fields), r.FieldsTruncated)
			}
			e, eerr := plain.Explain(doc, op, vars)
			w, werr := explaining.AnalyzeOperation(doc, op, vars)
			if d := priceDiff(w, werr, e, eerr); d != "" {
				t.Errorf("Explain differs from WithBreakdownLimit(DefaultBreakdownLimit): %s", d)
			}
			if eerr == nil && len(e.Fields) == 0 {
				t.Error("Explain lists no field")
			}
			if d := priceDiff(totalsOf(w), werr, totalsOf(r), err); d != "" {
				t.Errorf("the breakdown changes the price: %s", d)
			}
			w2, werr2 := explaining.Explain(doc, op, vars)
			if d := priceDiff(w, werr, w2, werr2); d != "" {
				t.Errorf("Explain differs from AnalyzeOperation with the breakdown on: %s", d)
			}
		})
	}
}

// WithBreakdownLimit(n) caps the breakdown of every call, Explain's too;
// without it Explain caps at DefaultBreakdownLimit. New(schema) alone
// builds none.
func TestBreakdownLimitCapsExplain(t *testing.T) {
	q := fanout(12) // 2^13 - 1 fields expanded
	for _, c := range []struct {
		name          string
		opts          []complexity.Option
		analyze, want int
	}{
		{"defaults", nil, 0, complexity.DefaultBreakdownLimit},
		{"limit 0", []complexity.Option{complexity.WithBreakdownLimit(0)}, 0, complexity.DefaultBreakdownLimit},
		{"limit 5", []complexity.Option{complexity.WithBreakdownLimit(5)}, 5, 5},
		{"limit 5000", []complexity.Option{complexity.WithBreakdownLimit(5000)}, 5000, 5000},
	} {
		r, err := analyze(t, fanoutSDL, q, nil, c.opts...)
		if err != nil || len(r.Fields) != c.analyze || r.FieldsTruncated != (c.analyze > 0) {
			t.Errorf("%s: AnalyzeOperation lists %d fields (truncated %v), want %d; err %v", c.name, len(r.Fields), r.FieldsTruncated, c.analyze, err)
		}
		e, err := explain(t, fanoutSDL, q, nil, c.opts...)
		if err != nil || len(e.Fields) != c.want || !e.FieldsTruncated || e.Totals != r.Totals {
			t.Errorf("%s: Explain lists %d fields (truncated %v), want %d; totals %+v, want %+v; err %v", c.name, len(e.Fields), e.FieldsTruncated, c.want, e.Totals, r.Totals, err)
		}
	}
}

func TestManyFragmentSpreadsInOneSelection(t *testing.T) {
	// 30,000 distinct fragments in one cycle, each spread in the same
	// selection set as the one before it, in a document that was never
	// validated (spreads carry no Definition). Each fragment is collected
	// once, the cycle ends, and every aliased field is priced:
	// node = 1 + 30,000 × a (1). BenchmarkFragmentSpreads shows the
	// per-spread time staying flat from 1k to 30k.
	const n = 30_000
	var b strings.Builder
	b.WriteString("{ node { ...F0 ...F0 } }\n")
	for i := range n {
		fmt.Fprintf(&b, "fragment F%d on Node { l%d: a { leaf } ...F%d ...F0 }\n", i, i, (i+1)%n)
	}
	r, err := analyze(t, fanoutSDL, b.String(), nil, complexity.WithBreakdownLimit(0))
	if err != nil {
		t.Fatal(err)
	}
	if r.Cost.Points() != n+1 || r.Depth != 3 {
		t.Fatalf("cost %v depth %d, want %d and 3", r.Cost, r.Depth, n+1)
	}
}

func TestMergedFieldsThroughFragmentsStayBounded(t *testing.T) {
	// Every level merges the same response key from two fragments, so each
	// merged group reaches the same fields again: deduplication keeps the
	// groups from doubling per level.
	var b strings.Builder
	b.WriteString("query { node { ...A1 ...B1 } }\n")
	const levels = 30
	for i := 1; i <= levels; i++ {
		next := fmt.Sprintf("{ ...A%d ...B%d }", i+1, i+1)
		if i == levels {
			next = "{ leaf }"
		}
		fmt.Fprintf(&b, "fragment A%d on Node { a %s }\nfragment B%d on Node { a %s }\n", i, next, i, next)
	}
	r, err := analyze(t, fanoutSDL, b.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Cost.Points() != levels+1 || r.Depth != levels+2 {
		t.Fatalf("cost %v depth %d", r.Cost, r.Depth)
	}
}

// TestIntrospectionIsCharged: thousands of aliased __schema selections,
// each answered with a full response, must pay and count, or introspection
// is a free way to make the server work.
func TestIntrospectionIsCharged(t *testing.T) {
	const sdl = `type Query { x: Int qs: [Query] }`
	var b strings.Builder
	b.WriteString("{")
	for i := range 5000 {
		fmt.Fprintf(&b, " s%d: __schema { queryType { name } }", i)
	}
	b.WriteString(" }")
	attack := b.String()

	r, err := analyze(t, sdl, attack, nil, complexity.WithIntrospectionCost(2))
	if err != nil || r.Cost.Points() != 4999*2 || r.Depth != 3 || !r.Introspection {
		t.Fatalf("5,000 × __schema at 2 points: %+v, err %v", r, err)
	}
	var ce *complexity.Error
	_, err = analyze(t, sdl, attack, nil, complexity.WithMaxAliases(100))
	if !errors.As(err, &ce) || ce.Code != complexity.CodeMaxAliasesExceeded || ce.Value != 101 {
		t.Fatalf("max aliases: err = %v", err)
	}
	_, err = analyze(t, sdl, attack, nil, complexity.WithMaxRootFields(100))
	if !errors.As(err, &ce) || ce.Code != complexity.CodeMaxRootFieldsExceeded || ce.Value != 5000 {
		t.Fatalf("max root fields: err = %v", err)
	}
	_, err = analyze(t, sdl, attack, nil, complexity.WithMaxDepth(2))
	if !errors.As(err, &ce) || ce.Code != complexity.CodeMaxDepthExceeded || ce.Value != 3 {
		t.Fatalf("max depth: err = %v", err)
	}
	// The limits hold with free introspection off as well.
	_, err = analyze(t, sdl, attack, nil, complexity.WithFreeIntrospection(false), complexity.WithMaxAliases(100))
	if !errors.As(err, &ce) || ce.Code != complexity.CodeMaxAliasesExceeded {
		t.Fatalf("max aliases, priced introspection: err = %v", err)
	}

	tests := []struct {
		name          string
		query         string
		points        int64
		introspection bool
	}{
		{"__typename never pays", `{ __typename a: __typename x }`, 0, false},
		{"skipped", `{ __schema @skip(if: true) { queryType { name } } x }`, 0, false},
		// The first at the root is a tool's schema fetch: it does not pay.
		{"one __schema", `{ __schema { queryType { name } } }`, 0, true},
		{"merged key is one", `{ __schema { queryType { name } } __schema { types { name } } }`, 0, true},
		{"two keys pay once", `{ __schema { queryType { name } } again: __schema { types { name } } }`, 7, true},
		{"__type", `{ __type(name: "Query") { name } }`, 0, true},
		{"__schema and __type", `{ __type(name: "Query") { name } __schema { queryType { name } } }`, 7, true},
		// Reached through a field returning Query, multiplied like any
		// field and never the free one: qs = 10 × (Query 1 + 7).
		{"nested", `{ qs { __schema { queryType { name } } } }`, 80, true},
	}
	for _, tt := range tests {
		r, err := analyze(t, sdl, tt.query, nil, complexity.WithIntrospectionCost(7))
		if err != nil || r.Cost.Points() != tt.points || r.Introspection != tt.introspection {
			t.Errorf("%s: cost %v introspection %v, err %v; want %d and %v", tt.name, r.Cost, r.Introspection, err, tt.points, tt.introspection)
		}
	}
}

func TestOptionsValidated(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Input: nestSDL})
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]complexity.Option{
		"default list size": complexity.WithDefaultListSize(-1),
		"max depth":         complexity.WithMaxDepth(-1),
		"max breadth":       complexity.WithMaxBreadth(-1),
		"max nodes":         complexity.WithMaxNodes(-1),
		"max cost":          complexity.WithMaxCost(-0.5),
		"max cost NaN":      complexity.WithMaxCost(math.NaN()),
		"mutation base":     complexity.WithMutationBaseCost(-1),
		"mutation base Inf": complexity.WithMutationBaseCost(math.Inf(1)),
		"max aliases":       complexity.WithMaxAliases(-1),
		"max root fields":   complexity.WithMaxRootFields(-1),
		"breakdown limit":   complexity.WithBreakdownLimit(-1),
		"breakdown bytes":   complexity.WithBreakdownBytes(-1),
		"introspection":     complexity.WithIntrospectionCost(-1),
		"introspection NaN": complexity.WithIntrospectionCost(math.NaN()),
		"introspection Inf": complexity.WithIntrospectionCost(math.Inf(1)),
	}
	for name, opt := range bad {
		if _, err := complexity.New(schema, opt); !errors.Is(err, complexity.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := complexity.New(nil); !errors.Is(err, complexity.ErrInvalidSchema) {
		t.Errorf("nil schema: err = %v", err)
	}
}

func TestSchemaDirectivesValidated(t *testing.T) {
	tests := []struct{ name, sdl, want string }{
		{"weight not a number", `type Query { a: Int @cost(weight: "two") }`, `field Query.a: @cost weight`},
		{"weight exponent", `type Query { a: Int @cost(weight: "1e999999") }`, `exponent`},
		{"weight boolean", `type Query { a: Int @cost(weight: true) }`, `is not a number`},
		{"type weight", `type Query { a: T } type T @cost(weight: "x") { b: Int }`, `type T`},
		{"argument weight", `type Query { a(x: Int @cost(weight: "?")): Int }`, `argument Query.a(x:)`},
		{"input field weight", `type Query { a(x: I): Int } input I { y: Int @cost(weight: "-") }`, `input I.y`},
		{"unknown slicing argument", `type Query { a(first: Int): [Int] @listSize(slicingArguments: ["max"]) }`, `names "max"`},
		{"unknown sized field", `type Query { a(first: Int): P @listSize(slicingArguments: ["first"], sizedFields: ["items"]) } type P { item: [Int] }`, `no field "items"`},
		{"sized path through a scalar", `type Query { a(first: Int): P @listSize(slicingArguments: ["first"], sizedFields: ["n.x"]) } type P { n: Int }`, `has no fields`},
		{"negative assumed size", `type Query { a: [Int] @listSize(assumedSize: -1) }`, `assumedSize`},
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

func TestLoadSchemaDirectiveForms(t *testing.T) {
	tests := []struct{ name, sdl string }{
		{"undeclared", `type Query { a: [T] @listSize(assumedSize: 3) } type T @cost(weight: "2.5") { b: Int @cost(weight: 1) }`},
		{"IBM String form", `directive @cost(weight: String!) on OBJECT | FIELD_DEFINITION
			directive @listSize(assumedSize: Int, slicingArguments: [String!], sizedFields: [String!], requireOneSlicingArgument: Boolean = true) on FIELD_DEFINITION
			type Query { a: [T] @listSize(assumedSize: 3) } type T @cost(weight: "2.5") { b: Int @cost(weight: "1") }`},
		{"Apollo Int form, listSize undeclared", `directive @cost(weight: Int!) on OBJECT | FIELD_DEFINITION
			type Query { a: [T] @listSize(assumedSize: 3) } type T @cost(weight: 2.5) { b: Int @cost(weight: 1) }`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := analyze(t, tt.sdl, `{ a { b } }`, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Cost.String() != "10.5" { // 3 × (2.5 + 1)
				t.Fatalf("cost = %s, want 10.5", r.Cost)
			}
		})
	}
	if _, err := complexity.LoadSchema(&ast.Source{Input: `type Query { a: Int @nope }`}); err == nil {
		t.Fatal("an undefined directive must still fail")
	}
	if !strings.Contains(complexity.DirectiveDefinitions(), "directive @listSize(") {
		t.Fatal("DirectiveDefinitions lacks @listSize")
	}
}

func TestCostArithmetic(t *testing.T) {
	parse := []struct {
		in   string
		want string
	}{
		{"2", "2"}, {"2.0", "2"}, {"-12.0", "-12"}, {"0.1", "0.1"}, {"2.5", "2.5"},
		{".5", "0.5"}, {"+3", "3"}, {"1e3", "1000"}, {"1.5E-1", "0.15"},
		{"0.0001", "0.001"},              // finer digits round up…
		{"-0.0001", "0"},                 // …toward +∞
		{"1e40", "9223372036854775.807"}, // saturates
		{"-1e40", "-9223372036854775.807"},
	}
	for _, p := range parse {
		c, err := complexity.ParseCost(p.in)
		if err != nil || c.String() != p.want {
			t.Errorf("ParseCost(%q) = %s, %v; want %s", p.in, c, err, p.want)
		}
	}
	for _, in := range []string{"", "two", "1/3", "0x10", "inf", "NaN", "1e65", "1..2", "--1"} {
		if _, err := complexity.ParseCost(in); !errors.Is(err, complexity.ErrInvalidCost) {
			t.Errorf("ParseCost(%q) err = %v, want ErrInvalidCost", in, err)
		}
	}
	points := []struct {
		c    complexity.Cost
		want int64
	}{{0, 0}, {1, 1}, {1000, 1}, {1001, 2}, {-5000, 0}, {complexity.CostCeiling, math.MaxInt64/1000 + 1}}
	for _, p := range points {
		if got := p.c.Points(); got != p.want {
			t.Errorf("Cost(%d).Points() = %d, want %d", p.c, got, p.want)
		}
	}
	var c complexity.Cost
	if err := c.UnmarshalJSON([]byte("12.25")); err != nil || c != 12250 {
		t.Errorf("UnmarshalJSON = %d, %v", c, err)
	}
}

func TestErrorUnwrapsAndConverts(t *testing.T) {
	_, err := loadCase(t, "max-breadth").run(t)
	if !errors.Is(err, complexity.ErrMaxBreadth) || errors.Is(err, complexity.ErrMaxCost) {
		t.Fatalf("errors.Is mismatch for %v", err)
	}
	var ce *complexity.Error
	errors.As(err, &ce)
	if got := ce.Error(); got != "complexity: field repos: first=500 exceeds the maximum of 100 (line 4, column 16)" {
		t.Errorf("Error() = %q", got)
	}
	ge := ce.GQLError()
	if ge.Message != ce.Message || ge.Extensions["code"] != complexity.CodeMaxBreadthExceeded ||
		ge.Extensions["limit"] != float64(100) || ge.Path.String() != "user.repos" || ge.Locations[0].Line != 4 {
		t.Errorf("GQLError() = %+v", ge)
	}
}

func TestInvalidDocuments(t *testing.T) {
	tests := []struct{ name, query, op string }{
		{"unknown field", `{ nope }`, ""},
		{"unknown fragment", `{ n { ...Missing } }`, ""},
		{"unknown operation", `query A { n { leaf } }`, "B"},
		{"two operations unnamed", `query A { n { leaf } } query B { n { leaf } }`, ""},
		{"no mutation type", `mutation { n }`, ""},
	}
	schema, err := complexity.LoadSchema(&ast.Source{Input: nestSDL})
	if err != nil {
		t.Fatal(err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := parser.ParseQuery(&ast.Source{Input: tt.query})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Analyze(doc, tt.op, nil); !errors.Is(err, complexity.ErrInvalidDocument) {
				t.Fatalf("err = %v, want ErrInvalidDocument", err)
			}
		})
	}
	if _, err := a.Analyze(nil, "", nil); !errors.Is(err, complexity.ErrInvalidDocument) {
		t.Fatalf("nil doc: err = %v", err)
	}
	if _, err := a.AnalyzeOperation(nil, nil, nil); !errors.Is(err, complexity.ErrInvalidDocument) {
		t.Fatalf("nil op: err = %v", err)
	}
}

func TestVariablesInAnyShape(t *testing.T) {
	// Callers may hand over variables straight from JSON or already
	// coerced: every shape of the Int 7 sizes a list the same way. (A
	// fractional number is not an Int: see TestCoercion.)
	const sdl = `type Query { xs(first: Int, ids: [ID!]): [X] } type X { y: Int }`
	shapes := map[string]any{
		"int": 7, "int64": int64(7), "int32": int32(7), "uint8": uint8(7), "float64": 7.0,
		"json.Number": json.Number("7"), "string": "7",
	}
	for name, v := range shapes {
		r, err := analyze(t, sdl, `query Q($n: Int) { xs(first: $n) { y } }`, map[string]any{"n": v})
		if err != nil || r.Cost.Points() != 7 {
			t.Errorf("%s: cost %v, err %v; want 7", name, r.Cost, err)
		}
	}
	lists := map[string]any{"[]any": []any{"a", "b", "c"}, "[]string": []string{"a", "b", "c"}}
	for name, v := range lists {
		const q = `query Q($ids: [ID!]) { xs(ids: $ids) { y } }`
		r, err := analyze(t, `type Query { xs(ids: [ID!]): [X] @listSize(slicingArguments: ["ids"]) } type X { y: Int }`, q, map[string]any{"ids": v})
		if err != nil || r.Cost.Points() != 3 {
			t.Errorf("%s: cost %v, err %v; want 3", name, r.Cost, err)
		}
	}
	// A variable that is not sent, without a default, is absent: the
	// default list size applies.
	r, err := analyze(t, sdl, `query Q($n: Int) { xs(first: $n) { y } }`, nil)
	if err != nil || r.Cost.Points() != complexity.DefaultListSize {
		t.Errorf("unset variable: cost %v, err %v", r.Cost, err)
	}
}

func TestConcurrentUse(t *testing.T) {
	c := loadCase(t, "github-complex")
	schema := c.schema(t)
	a, err := complexity.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	doc, op, vars := c.prepare(t, schema)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				r, err := a.AnalyzeOperation(doc, op, vars)
				if err != nil || r.Nodes != 22060 {
					t.Errorf("nodes %d, err %v", r.Nodes, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestDocumentedDefaults pins the defaults docs/cost-model.md and the cost
// CLI's flags state, through behaviour as well as constants.
func TestDocumentedDefaults(t *testing.T) {
	if complexity.DefaultListSize != 10 || complexity.DefaultMutationBaseCost != 10 ||
		complexity.DefaultBreakdownLimit != 1000 || complexity.DefaultBreakdownBytes != 1<<20 ||
		complexity.AbsoluteMaxDepth != 10000 {
		t.Fatal("a documented default changed; update docs/cost-model.md")
	}
	const sdl = `type Query { xs: [X] x: X } type X { y: Int } type Mutation { m: Int }`
	r, err := analyze(t, sdl, `{ xs { y } }`, nil)
	if err != nil || r.Cost.Points() != 10 {
		t.Fatalf("default list size: cost %v, err %v", r.Cost, err)
	}
	// No breakdown unless asked; Explain lists it.
	if len(r.Fields) != 0 || r.FieldsTruncated {
		t.Fatalf("default breakdown: %d fields, truncated %v; want none", len(r.Fields), r.FieldsTruncated)
	}
	if r, err = explain(t, sdl, `{ xs { y } }`, nil); err != nil || len(r.Fields) != 2 {
		t.Fatalf("Explain: %+v, err %v", r, err)
	}
	r, err = analyze(t, sdl, `mutation { m }`, nil)
	if err != nil || r.Cost.Points() != 10 {
		t.Fatalf("mutation base: cost %v, err %v", r.Cost, err)
	}
	// Free introspection and no introspection cost: only x pays, but the
	// introspection fields count toward depth (__schema.types.name is 3).
	r, err = analyze(t, sdl, `{ __typename x { __typename y } __schema { types { name } } }`, nil)
	if err != nil || r.Cost.Points() != 1 || r.Depth != 3 || !r.Introspection {
		t.Fatalf("free introspection: cost %v depth %d introspection %v, err %v", r.Cost, r.Depth, r.Introspection, err)
	}
}

// An abstract field reached twice through one fragment is explained at both
// places, each entry with its own members; an interface with one
// implementation has nothing to compare.
func TestAbstractMembersInTheBreakdown(t *testing.T) {
	sdl := `type Query { a: R b: R one: I }
		union R = X | Y
		interface I { id: ID }
		type X implements I { id: ID n: Int @cost(weight: 3) }
		type Y @cost(weight: 2) { m: Int }`
	q := `{ a { ...F } b { ...F } one { id } } fragment F on R { ... on X { n } ... on Y { m } }`
	r, err := explain(t, sdl, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []complexity.MemberCost{{Type: "X", Cost: 4 * complexity.CostScale, Winner: true}, {Type: "Y", Cost: 2 * complexity.CostScale}}
	var withMembers []string
	for _, fc := range r.Fields {
		if fc.Members == nil {
			continue
		}
		withMembers = append(withMembers, fc.Path)
		if !reflect.DeepEqual(fc.Members, want) {
			t.Errorf("%s: members %v, want %v", fc.Path, fc.Members, want)
		}
	}
	if !reflect.DeepEqual(withMembers, []string{"a", "b"}) {
		t.Fatalf("members on %v, want on a and b: %+v", withMembers, r.Fields)
	}
	r.Fields[0].Members[0].Type = "changed"
	if r.Fields[2].Members[0].Type != "X" {
		t.Error("the two entries share one members slice")
	}
}

// With the breakdown off (the default), recording an
// interface's or union's members costs nothing: they are kept only for the
// explain view. This query allocated twice before members existed (the
// report and the walk's state for several members); since the walker keeps
// the room of merged fields (name is selected twice), only the report is.
func TestAbstractMembersCostNothingWithoutBreakdown(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop Puts at random, so the walk's state is sometimes allocated afresh; run without -race to count allocations")
	}
	schema, err := complexity.LoadSchema(&ast.Source{Name: "s.graphql", Input: `type Query { pet: Pet }
		interface Pet { name: String } type Cat implements Pet { name: String } type Dog implements Pet { name: String }`})
	if err != nil {
		t.Fatal(err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := parser.ParseQuery(&ast.Source{Input: `{ pet { name ... on Cat { name } } }`})
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := a.Analyze(doc, "", nil); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 1 {
		t.Errorf("%v allocations per analysis, want 1 (the Report)", allocs)
	}
}

// The sets a fragment spread shares (memoised for the other places that
// reach it) come from the walker's recycled chunks, as the rest of its
// state does: with the breakdown off (the default), an analysis allocates
// its Report and nothing else, however many selections it memoises.
func TestMemoisedSetsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop Puts at random, so the walk's state is sometimes allocated afresh; run without -race to count allocations")
	}
	schema, err := complexity.LoadSchema(&ast.Source{Name: "s.graphql", Input: `type Query { a: A b: A c: [A] }
		type A { x: Int y: A z: [A] }`})
	if err != nil {
		t.Fatal(err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	p := prepare(t, schema, `{ a { ...F } b { ...F } c { ...F } }
		fragment F on A { x y { x z { x } } z { ...G } }
		fragment G on A { x y { x } }`, nil)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := a.AnalyzeOperation(p.doc, p.op, nil); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 1 {
		t.Errorf("%v allocations per analysis, want 1 (the Report)", allocs)
	}
}

// The breakdown's paths are built in scratch space the walker keeps for the
// next analysis: a report's paths must not change when the Analyzer prices
// something else afterwards.
func TestBreakdownPathsOutliveTheWalk(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "s.graphql", Input: `type Query { a: A b: A }
		type A { x: Int y: A }`})
	if err != nil {
		t.Fatal(err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	first := prepare(t, schema, `{ a { x y { x } } }`, nil)
	r, err := a.Explain(first.doc, first.op, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range r.Fields {
		want = append(want, f.Path)
	}
	second := prepare(t, schema, `{ b { y { y { x } } } longerAlias: a { x } }`, nil)
	for range 3 {
		if _, err := a.Explain(second.doc, second.op, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range r.Fields {
		if f.Path != want[i] {
			t.Errorf("entry %d: path %q became %q", i, want[i], f.Path)
		}
	}
	if !slices.Equal(want, []string{"a", "a.x", "a.y", "a.y.x"}) {
		t.Errorf("paths %q", want)
	}
}
