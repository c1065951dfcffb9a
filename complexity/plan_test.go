package complexity_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/costguard/costguard/complexity"
)

// priceDiff describes how two pricings differ, "" when they are the same:
// reports deep-equal, or errors with the same code, message, locations,
// path, value, limit and totals.
func priceDiff(r1 *complexity.Report, err1 error, r2 *complexity.Report, err2 error) string {
	if (err1 == nil) != (err2 == nil) {
		return fmt.Sprintf("scratch %+v, %v; plan %+v, %v", r1, err1, r2, err2)
	}
	if err1 != nil {
		var e1, e2 *complexity.Error
		if errors.As(err1, &e1) != errors.As(err2, &e2) {
			return fmt.Sprintf("scratch error %T %v; plan error %T %v", err1, err1, err2, err2)
		}
		if e1 == nil {
			if err1.Error() != err2.Error() {
				return fmt.Sprintf("scratch error %v; plan error %v", err1, err2)
			}
			return ""
		}
		if !reflect.DeepEqual(e1, e2) {
			return fmt.Sprintf("scratch error %+v (totals %+v); plan error %+v (totals %+v)", e1, e1.Totals, e2, e2.Totals)
		}
		return ""
	}
	if !reflect.DeepEqual(r1, r2) {
		return fmt.Sprintf("scratch report %+v; plan report %+v", r1, r2)
	}
	return ""
}

// checkPlan prices op both ways, twice through the plan (the second
// evaluation reuses its scratch space), and fails t on any difference. It
// explains op both ways too: the same, and the price AnalyzeOperation
// gives, with the breakdown.
func checkPlan(t testing.TB, a *complexity.Analyzer, p *complexity.Plan, doc *ast.QueryDocument, op *ast.OperationDefinition, vars map[string]any) {
	t.Helper()
	r1, err1 := a.AnalyzeOperation(doc, op, vars)
	for i := range 2 {
		r2, err2 := p.Evaluate(vars)
		if d := priceDiff(r1, err1, r2, err2); d != "" {
			t.Fatalf("evaluation %d with %v: %s", i+1, vars, d)
		}
	}
	e1, eerr1 := a.Explain(doc, op, vars)
	e2, eerr2 := p.Explain(vars)
	if d := priceDiff(e1, eerr1, e2, eerr2); d != "" {
		t.Fatalf("explain with %v: %s", vars, d)
	}
	if d := priceDiff(totalsOf(r1), err1, totalsOf(e1), eerr1); d != "" {
		t.Fatalf("explain with %v prices otherwise: %s", vars, d)
	}
}

// totalsOf is a copy of r without its breakdown (nil for nil).
func totalsOf(r *complexity.Report) *complexity.Report {
	if r == nil {
		return nil
	}
	c := *r
	c.Fields, c.FieldsTruncated = nil, false
	return &c
}

// actualDiff describes how two actual costs differ, "" when they are the
// same cost or errors with the same message.
func actualDiff(n1 int64, err1 error, n2 int64, err2 error) string {
	switch {
	case (err1 == nil) != (err2 == nil):
		return fmt.Sprintf("scratch %d, %v; plan %d, %v", n1, err1, n2, err2)
	case err1 != nil:
		if d := priceDiff(nil, err1, nil, err2); d != "" || errors.Is(err1, complexity.ErrInvalidResponse) != errors.Is(err2, complexity.ErrInvalidResponse) {
			return fmt.Sprintf("scratch error %v; plan error %v", err1, err2)
		}
	case n1 != n2:
		return fmt.Sprintf("scratch %d; plan %d", n1, n2)
	}
	return ""
}

// checkPlanActual prices data's actual cost both ways, twice through the
// plan (the first call may build the tree the second reads), and fails t
// on any difference.
func checkPlanActual(t testing.TB, a *complexity.Analyzer, p *complexity.Plan, doc *ast.QueryDocument, op *ast.OperationDefinition, vars map[string]any, data []byte) {
	t.Helper()
	n1, err1 := a.ActualCost(doc, op, vars, data)
	for i := range 2 {
		n2, err2 := p.ActualCost(vars, data)
		if d := actualDiff(n1, err1, n2, err2); d != "" {
			t.Fatalf("actual cost %d with %v of %.200q: %s", i+1, vars, data, d)
		}
	}
}

// allCoordinates lists every field of every object and interface type of
// schema, to count them all.
func allCoordinates(schema *ast.Schema) []string {
	var coords []string
	for name, def := range schema.Types {
		if strings.HasPrefix(name, "__") || (def.Kind != ast.Object && def.Kind != ast.Interface) {
			continue
		}
		for _, f := range def.Fields {
			if !strings.HasPrefix(f.Name, "__") {
				coords = append(coords, name+"."+f.Name)
			}
		}
	}
	sort.Strings(coords)
	return coords
}

// A constant plan returns its own Report, shared and read-only, with no
// work: no allocation.
func TestConstantPlanAllocatesNothing(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "fuzz.graphql", Input: fuzzSDL})
	if err != nil {
		t.Fatal(err)
	}
	a, err := complexity.New(schema, complexity.WithCountedFields("Item.id"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`query($n: ID) { node(id: $n) { id } items(first: 5) { id level } }`,
		`query($c: Boolean!) { items(first: 5) @include(if: $c) { id } }`,
		`{ items(first: -1) { id } }`,
	} {
		doc := mustParse(t, q)
		p, err := a.Compile(doc, doc.Operations[0])
		if err != nil {
			t.Fatal(err)
		}
		vars := map[string]any{"n": "1", "c": true}
		r1, err1 := p.Evaluate(vars)
		allocs := testing.AllocsPerRun(100, func() {
			r2, err2 := p.Evaluate(vars)
			if r2 != r1 || err2 != err1 {
				t.Fatalf("%s: a constant plan returned another result", q)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per evaluation, want 0", q, allocs)
		}
	}
}

// TestPlanMatchesGolden prices every golden case from scratch and through
// Compile and Evaluate, with the case's options and the breakdown on, and
// again without the breakdown and counting every field of the schema.
func TestPlanMatchesGolden(t *testing.T) {
	for _, name := range goldenNames(t) {
		t.Run(name, func(t *testing.T) {
			c := loadCase(t, name)
			schema := c.schema(t)
			doc, op, vars := c.prepare(t, schema)
			for _, opts := range [][]complexity.Option{
				append([]complexity.Option{complexity.WithBreakdownLimit(complexity.DefaultBreakdownLimit)}, c.options.list()...),
				append(c.options.list(), complexity.WithBreakdownLimit(0), complexity.WithCountedFields(allCoordinates(schema)...)),
			} {
				a, err := complexity.New(schema, opts...)
				if err != nil {
					t.Fatal(err)
				}
				p, err := a.Compile(doc, op)
				if err != nil {
					t.Fatal(err)
				}
				checkPlan(t, a, p, doc, op, vars)
				checkPlan(t, a, p, doc, op, c.variables) // as decoded, not coerced
			}
		})
	}
}

// TestPlanActualMatchesGolden reads random responses to every golden case
// from scratch and through the plan, with the case's options and the
// breakdown on, and again without it counting every field, with the
// variables coerced and as decoded, and the same responses cut short
// (invalid JSON).
func TestPlanActualMatchesGolden(t *testing.T) {
	for _, name := range goldenNames(t) {
		t.Run(name, func(t *testing.T) {
			c := loadCase(t, name)
			schema := c.schema(t)
			doc, op, vars := c.prepare(t, schema)
			g := &respGen{rnd: rand.New(rand.NewPCG(5, 6)), schema: schema}
			for _, opts := range [][]complexity.Option{
				append([]complexity.Option{complexity.WithBreakdownLimit(complexity.DefaultBreakdownLimit)}, c.options.list()...),
				append(c.options.list(), complexity.WithBreakdownLimit(0), complexity.WithCountedFields(allCoordinates(schema)...)),
			} {
				a, err := complexity.New(schema, opts...)
				if err != nil {
					t.Fatal(err)
				}
				p, err := a.Compile(doc, op)
				if err != nil {
					t.Fatal(err)
				}
				for _, data := range [][]byte{nil, []byte("null"), []byte("{}")} {
					checkPlanActual(t, a, p, doc, op, vars, data)
				}
				for range 50 {
					data := g.data(prepared{doc: doc, op: op, vars: vars})
					checkPlanActual(t, a, p, doc, op, vars, data)
					checkPlanActual(t, a, p, doc, op, c.variables, data)
					checkPlanActual(t, a, p, doc, op, vars, data[:g.rnd.IntN(len(data))])
				}
			}
		})
	}
}

// planQueries are operations over fuzzSDL whose price reads variables in
// every way a plan compiles: slicing arguments (with first/last, requireOne,
// sizedFields and Connection sizes), argument costs, @skip/@include, under
// fragments and abstract types, and past the document limits.
var planQueries = []string{
	`query($n: Int, $f: Filter) { search(first: $n, filter: $f) { ... on Item { related(first: $n) { id price } } ... on User { friends { name } items(first: 2) { id } } } }`,
	`query($a: Int, $b: Int) { items(first: $a, last: $b) { id level } x: items(first: 2) { price } }`,
	`query($s: Int) { page(size: $s) { items { id owner { name } } meta { tags { label } } } }`,
	`query($n: Int, $c: Boolean!, $d: Boolean = false) { conn(first: $n) { edges @include(if: $c) { node { id } cursor } nodes @skip(if: $d) { owner { items(first: $n) { id } } } total } }`,
	`mutation($ids: [ID!]!) { buy(ids: $ids) { id related(first: 3) { id } } }`,
	`query($a: Int, $b: Int) { x: page(size: $a) { ...P } y: page(size: $b) { ...P } z: page { ...P } } fragment P on ItemPage { items { ...I } meta { tags { label } } } fragment I on Item { related(first: $a) { id } }`,
	`query($c: Boolean!, $n: Int) { ...F @include(if: $c) featured { id } } fragment F on Query { items(first: $n) { id } node { ... on User { items(first: $n) { id } } } }`,
	`query($v: Boolean!, $w: Boolean!, $x: Boolean!, $y: Boolean!, $z: Boolean!) { a: featured @skip(if: $v) { id } b: featured @skip(if: $w) { id } c: featured @skip(if: $x) { id } d: featured @skip(if: $y) { id } e: featured @skip(if: $z) { id } }`,
	`query($c: Boolean!) { __schema @include(if: $c) { types { name } } items(first: 3) { id } }`,
	`query($n: Int) { node { ... on User { friends { friends { friends { friends { friends { friends { items(first: $n) { id } } } } } } } } } }`,
	`query($n: Int) { a: items(first: $n) { id } node { ... on User { friends { friends { friends { friends { friends { name } } } } } } } }`,
	`query($f: Filter, $c: Boolean = true) { search(first: 2, filter: $f) @include(if: $c) { __typename } money }`,
	`query($n: Int, $m: Int) { a: search(first: $n) { ...R } b: search(first: $m) { ...R } } fragment R on Result { ... on Item { related(first: $m) { id } } ... on User { items(first: $n) { related(first: $n) { id } } } }`,
	`query($n: Int, $c: Boolean!) { items(first: 2) @skip(if: $c) { related(first: $n) { id } } items(first: 2) @include(if: $c) { related(first: $n) { id } owner { name } } }`,
	`query($n: Int, $c: Boolean!) { a1: items(first: $n) { id } a2: items(first: $n) { id } a3: items(first: $n) { id } a4: items(first: $n) { id } a5: items(first: $n) { id } a6: items(first: $n) @include(if: $c) { id } }`,
}

// randomValue draws a variable's value: sizes (negative, huge, as strings,
// as floats, of the wrong type), Booleans and things that are not,
// filters and lists; absent is a value too (the variable is left out).
func randomValue(rng *rand.Rand, kind string) (any, bool) {
	if rng.IntN(8) == 0 {
		return nil, false
	}
	var pool []any
	switch kind {
	case "Int":
		if rng.IntN(2) == 0 { // mostly sizes a plan prices itself
			return int64(rng.IntN(60)), true
		}
		pool = []any{nil, int64(0), int64(1), int64(3), int64(7), int64(50), int64(51), int64(-1), int64(-1000),
			int64(math.MaxInt64), int64(math.MinInt64), 1 << 40, "12", "-2", "abc", "1e3", 1.5, 2.0, 1e300,
			json.Number("4"), json.Number("9223372036854775808"), true, []any{int64(1), int64(2)}, map[string]any{"x": 1}}
	case "Boolean":
		pool = []any{true, false, true, false, nil, "true", int64(1)}
	case "Filter":
		pool = []any{nil, map[string]any{"min": int64(1)}, map[string]any{"min": "x"}, map[string]any{"min": "-3", "level": "HIGH"},
			map[string]any{"min": int64(3), "tags": []any{"a", "b"}, "next": map[string]any{"level": "HIGH", "next": map[string]any{"min": int64(2)}}},
			"str", []any{map[string]any{"min": int64(1)}}, map[string]any{"tags": "one"}}
	case "IDs":
		pool = []any{nil, []any{"1", "2", "3"}, "1", []any{}, []any{int64(1), nil}, make([]any, 60), int64(5)}
	}
	return pool[rng.IntN(len(pool))], true
}

func randomVariables(rng *rand.Rand, op *ast.OperationDefinition) map[string]any {
	vars := map[string]any{}
	for _, d := range op.VariableDefinitions {
		kind := d.Type.Name()
		if kind == "ID" {
			kind = "IDs"
		}
		if v, ok := randomValue(rng, kind); ok {
			vars[d.Variable] = v
		}
	}
	return vars
}

func planAnalyzers(t testing.TB, schema *ast.Schema) []*complexity.Analyzer {
	t.Helper()
	var out []*complexity.Analyzer
	coords := allCoordinates(schema)
	for _, opts := range [][]complexity.Option{
		{complexity.WithBreakdownLimit(0), complexity.WithCountedFields(allCoordinates(schema)...)},
		{complexity.WithBreakdownLimit(0), complexity.WithMaxDepth(6), complexity.WithMaxBreadth(50), complexity.WithMaxNodes(1000),
			complexity.WithMaxCost(500), complexity.WithMaxAliases(5), complexity.WithMaxRootFields(3), complexity.WithCountedFields(coords[len(coords)/2:]...)},
		{complexity.WithBreakdownLimit(50), complexity.WithIntrospectionCost(2), complexity.WithFreeIntrospection(false)},
	} {
		a, err := complexity.New(schema, opts...)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// TestPlanMatchesScratchRandomly evaluates operations with variables under
// random values, both ways.
func TestPlanMatchesScratchRandomly(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "fuzz.graphql", Input: fuzzSDL})
	if err != nil {
		t.Fatal(err)
	}
	analyzers := planAnalyzers(t, schema)
	rng := rand.New(rand.NewPCG(1, 2))
	for qi, q := range planQueries {
		doc, err := parser.ParseQuery(&ast.Source{Input: q})
		if err != nil {
			t.Fatalf("query %d: %v", qi, err)
		}
		if errs := validator.Validate(schema, doc); len(errs) > 0 {
			t.Fatalf("query %d: %v", qi, errs)
		}
		op := doc.Operations[0]
		for ai, a := range analyzers {
			p, err := a.Compile(doc, op)
			if err != nil {
				t.Fatal(err)
			}
			for range 300 {
				vars := randomVariables(rng, op)
				t.Run(fmt.Sprintf("query%d/analyzer%d", qi, ai), func(t *testing.T) {
					checkPlan(t, a, p, doc, op, vars)
				})
			}
		}
	}
}

// planFuzzSchemas are the schemas of the golden cases, and fuzzSDL.
func planFuzzSchemas(t testing.TB) (names []string, schemas []*ast.Schema, seeds []planSeed) {
	t.Helper()
	index := map[string]int{}
	for _, name := range goldenNames(t) {
		c := loadCase(t, name)
		key := strings.Join(c.schemas, " ")
		i, ok := index[key]
		if !ok {
			i = len(schemas)
			index[key] = i
			names = append(names, key)
			schemas = append(schemas, c.schema(t))
		}
		vars, _ := json.Marshal(c.variables)
		seeds = append(seeds, planSeed{uint8(i), c.query, string(vars)})
	}
	fuzz, err := complexity.LoadSchema(&ast.Source{Name: "fuzz.graphql", Input: fuzzSDL})
	if err != nil {
		t.Fatal(err)
	}
	i := uint8(len(schemas))
	names, schemas = append(names, "fuzz"), append(schemas, fuzz)
	for _, s := range fuzzSeeds {
		seeds = append(seeds, planSeed{i, s.query, s.vars})
	}
	for _, q := range planQueries {
		seeds = append(seeds, planSeed{i, q, `{"n": 3, "a": -1, "b": "4", "c": true, "s": 2, "ids": ["1"], "f": {"min": 2}}`})
	}
	return names, schemas, seeds
}

type planSeed struct {
	schema      uint8
	query, vars string
}

// FuzzPlanMatchesScratch compiles a validated operation and requires its
// plan to price exactly as AnalyzeOperation does, with the variables as
// decoded and as coerced, on the golden cases' schemas.
//
//	go test ./complexity -run '^$' -fuzz FuzzPlanMatchesScratch -fuzztime 1m
func FuzzPlanMatchesScratch(f *testing.F) {
	_, schemas, seeds := planFuzzSchemas(f)
	for _, s := range seeds {
		f.Add(s.schema, s.query, s.vars)
	}
	analyzers := make([][]*complexity.Analyzer, len(schemas))
	for i, s := range schemas {
		analyzers[i] = planAnalyzers(f, s)
	}
	f.Fuzz(func(t *testing.T, si uint8, query, vars string) {
		if len(query) > 4096 || len(vars) > 4096 {
			return
		}
		i := int(si) % len(schemas)
		schema := schemas[i]
		doc, err := parser.ParseQuery(&ast.Source{Input: query})
		if err != nil || len(doc.Operations) == 0 {
			return
		}
		if errs := validator.Validate(schema, doc); len(errs) > 0 {
			return
		}
		var raw map[string]any
		if vars != "" {
			d := json.NewDecoder(strings.NewReader(vars))
			d.UseNumber()
			_ = d.Decode(&raw)
		}
		op := doc.Operations[0]
		coerced, cerr := validator.VariableValues(schema, op, raw)
		for _, a := range analyzers[i] {
			p, err := a.Compile(doc, op)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, a, p, doc, op, raw)
			if cerr == nil {
				checkPlan(t, a, p, doc, op, coerced)
			}
		}
	})
}

// TestPlanIntrospectionCost prices __schema and __type beside a size read
// from a variable (a compiled tree, not a constant) with the introspection
// cost on: through the plan, the first at the root pays nothing and every
// other pays, as from scratch.
func TestPlanIntrospectionCost(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "fuzz.graphql", Input: fuzzSDL})
	if err != nil {
		t.Fatal(err)
	}
	for _, free := range []bool{true, false} {
		a, err := complexity.New(schema, complexity.WithIntrospectionCost(7), complexity.WithFreeIntrospection(free))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`query($n: Int) { __schema { queryType { name } } items(first: $n) { id } }`,
			`query($n: Int) { items(first: $n) { id } __type(name: "Item") { name } a: __schema { queryType { name } } }`,
			`query($n: Int, $c: Boolean!) { a: __schema @include(if: $c) { queryType { name } } b: __type(name: "User") { name } items(first: $n) { id } }`,
		} {
			doc := mustParse(t, q)
			op := doc.Operations[0]
			p, err := a.Compile(doc, op)
			if err != nil {
				t.Fatal(err)
			}
			for _, vars := range []map[string]any{{"n": int64(0), "c": true}, {"n": int64(3), "c": false}} {
				checkPlan(t, a, p, doc, op, vars)
			}
		}
	}
}

// TestPlanReadsEveryCondition prices operations whose fields carry several
// conditions, one of them on a variable read before: the plan reads every
// condition's variable, as the walk does.
func TestPlanReadsEveryCondition(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "fuzz.graphql", Input: fuzzSDL})
	if err != nil {
		t.Fatal(err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`query($a: Boolean!, $b: Boolean!) { x: featured @skip(if: $a) { id } y: featured @skip(if: $a) @include(if: $b) { id } }`,
		`query($a: Boolean!, $b: Boolean!, $n: Int) { featured @include(if: $a) { id } items(first: $n) @include(if: $a) @skip(if: $b) { id } }`,
	} {
		doc := mustParse(t, q)
		op := doc.Operations[0]
		p, err := a.Compile(doc, op)
		if err != nil {
			t.Fatal(err)
		}
		for _, vars := range []map[string]any{
			{"a": false, "b": true, "n": int64(2)}, {"a": true, "b": false, "n": int64(4)},
			{"a": true, "b": true}, {"a": false, "b": false},
		} {
			checkPlan(t, a, p, doc, op, vars)
		}
	}
}
