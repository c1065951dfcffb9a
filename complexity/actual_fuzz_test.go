package complexity_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/complexity"
)

// actualOps are operations on the example schema that together select
// every kind of field the model prices differently.
var actualOps = []struct {
	query string
	vars  map[string]any
}{
	{readmeQuery, nil},
	{`query($s: Boolean!, $n: Int) { user(login: "octocat") { login name
		a: repos(first: $n) @skip(if: $s) { name topics owner { login } }
		b: repos(last: 2) { ...R issues(last: 3) { ... on Issue { title bodyHTML } } }
		followers(first: 4) @include(if: $s) { totalCount nodes { login repos(first: 2) { name } } } } }
		fragment R on Repository { id name }`, map[string]any{"s": false, "n": 7}},
	{`query($s: Boolean!) { user(login: "alice") { followers(first: 4) @include(if: $s) { nodes { login } } } }`, map[string]any{"s": true}},
	{`{ search(query: "o", first: 10) { __typename ... on User { repos(first: 5) { name issues(first: 2) { title } } }
		... on Repository { issues(first: 3) { title } } ... on Issue { title bodyHTML } } }`, nil},
	{`{ search(query: "o", first: 6) { ... on User { kind: __typename repos(first: 5) { name } } ...SR } }
		fragment SR on SearchResult { ... on Repository { owner { login } issues(first: 3) { title } } }`, nil},
	{`{ node(id: "1") { id ... on User { repos(first: 3) { name } } ... on Repository { issues { bodyHTML } } } x: node(id: "2") { __typename } }`, nil},
	{`mutation { createIssue(repo: "hello-world", title: "t") { id title bodyHTML } }`, nil},
	{`{ __typename __schema { queryType { name } } repository(name: "linguist") { __typename topics } }`, nil},
}

// respGen writes random data for an operation: lists of any length (longer
// than requested too), nulls anywhere (non-null fields included), missing
// and unselected keys, keys in any order, and a __typename that may lie.
type respGen struct {
	rnd    *rand.Rand
	schema *ast.Schema
	doc    *ast.QueryDocument
	vars   map[string]any
}

// object writes an object of concrete type t answering the merged
// selection sets sels.
func (g *respGen) object(b []byte, t *ast.Definition, sels []ast.SelectionSet, depth int) []byte {
	type entry struct {
		key    string
		fields []*ast.Field
	}
	var entries []entry
	var collect func(ast.SelectionSet)
	collect = func(sel ast.SelectionSet) {
		for _, s := range sel {
			switch s := s.(type) {
			case *ast.Field:
				if !g.included(s.Directives) {
					continue
				}
				key := s.Alias
				if key == "" {
					key = s.Name
				}
				i := slices.IndexFunc(entries, func(e entry) bool { return e.key == key })
				if i < 0 {
					entries = append(entries, entry{key: key})
					i = len(entries) - 1
				}
				entries[i].fields = append(entries[i].fields, s)
			case *ast.FragmentSpread:
				if def := g.doc.Fragments.ForName(s.Name); def != nil && g.included(s.Directives) && g.applies(t, def.TypeCondition) {
					collect(def.SelectionSet)
				}
			case *ast.InlineFragment:
				if g.included(s.Directives) && (s.TypeCondition == "" || g.applies(t, s.TypeCondition)) {
					collect(s.SelectionSet)
				}
			}
		}
	}
	for _, sel := range sels {
		collect(sel)
	}
	if g.rnd.IntN(4) == 0 {
		g.rnd.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
	}
	b = append(b, '{')
	first := true
	comma := func() {
		if !first {
			b = append(b, ',')
		}
		first = false
	}
	for _, e := range entries {
		if g.rnd.IntN(10) == 0 {
			continue // a missing key
		}
		comma()
		b = strconv.AppendQuote(b, e.key)
		b = append(b, ':')
		b = g.value(b, t, e.fields, depth)
	}
	if g.rnd.IntN(8) == 0 {
		comma()
		b = append(b, `"unselected":{"a":[1,{"b":"c"}],"d":null}`...)
	}
	return append(b, '}')
}

// value writes the value of fields (one response key) of parent type t.
func (g *respGen) value(b []byte, t *ast.Definition, fields []*ast.Field, depth int) []byte {
	f := fields[0]
	if g.rnd.IntN(8) == 0 || len(b) > 1<<16 || depth > 12 {
		return append(b, "null"...)
	}
	if f.Name == "__typename" {
		if g.rnd.IntN(6) == 0 {
			return append(b, `"Issue"`...) // possibly a lie
		}
		return strconv.AppendQuote(b, t.Name)
	}
	def := t.Fields.ForName(f.Name)
	if def == nil {
		return append(b, `"?"`...) // introspection: any value
	}
	var sels []ast.SelectionSet
	for _, x := range fields {
		sels = append(sels, x.SelectionSet)
	}
	return g.typed(b, def.Type, sels, depth)
}

func (g *respGen) typed(b []byte, typ *ast.Type, sels []ast.SelectionSet, depth int) []byte {
	if typ.Elem != nil {
		b = append(b, '[')
		for i := range g.rnd.IntN(13) {
			if i > 0 {
				b = append(b, ',')
			}
			if g.rnd.IntN(10) == 0 {
				b = append(b, "null"...)
				continue
			}
			b = g.typed(b, typ.Elem, sels, depth+1)
		}
		return append(b, ']')
	}
	def := g.schema.Types[typ.NamedType]
	switch def.Kind {
	case ast.Object:
		return g.object(b, def, sels, depth+1)
	case ast.Interface, ast.Union:
		possible := g.schema.PossibleTypes[def.Name]
		return g.object(b, possible[g.rnd.IntN(len(possible))], sels, depth+1)
	}
	return append(b, []string{`"s"`, `12`, `-0.5e3`, `true`, `"\u00e9\n"`}[g.rnd.IntN(5)]...)
}

func (g *respGen) applies(t *ast.Definition, cond string) bool {
	if cond == t.Name {
		return true
	}
	return slices.ContainsFunc(g.schema.PossibleTypes[cond], func(d *ast.Definition) bool { return d.Name == t.Name })
}

func (g *respGen) included(dirs ast.DirectiveList) bool {
	for _, d := range dirs {
		a := d.Arguments.ForName("if")
		if a == nil || (d.Name != "skip" && d.Name != "include") {
			continue
		}
		v, err := a.Value.Value(g.vars)
		if b, ok := v.(bool); err == nil && ok && b == (d.Name == "skip") {
			return false
		}
	}
	return true
}

// data writes random data for p: null now and then, else the root object.
func (g *respGen) data(p prepared) []byte {
	if g.rnd.IntN(20) == 0 {
		return []byte("null")
	}
	root := g.schema.Query
	switch p.op.Operation {
	case ast.Mutation:
		root = g.schema.Mutation
	case ast.Subscription:
		root = g.schema.Subscription
	}
	g.doc, g.vars = p.doc, p.vars
	return g.object(nil, root, []ast.SelectionSet{p.op.SelectionSet}, 0)
}

// TestActualExceedsRequestedOnlyByOverruns is the property refunds and
// excess debits rely on: for every response an operation can produce,
// actual ≥ 0, and actual > requested only when a list returned more items
// than it was priced for (prices checks it). Data generated from the
// operation is always well formed, so ActualCost must also accept it.
func TestActualExceedsRequestedOnlyByOverruns(t *testing.T) {
	schema := exampleSchema(t)
	analyzers := map[string][]complexity.Option{
		"defaults":   nil,
		"priced":     {complexity.WithFreeIntrospection(false), complexity.WithIntrospectionCost(2), complexity.WithDefaultListSize(3)},
		"no conv":    {complexity.WithFirstLastConvention(false), complexity.WithConnectionConvention(false)},
		"small list": {complexity.WithDefaultListSize(0)},
	}
	g := &respGen{rnd: rand.New(rand.NewPCG(1, 2)), schema: schema}
	for name, opts := range analyzers {
		a, err := complexity.New(schema, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range actualOps {
			p := prepare(t, schema, o.query, o.vars)
			var below int
			for range 300 {
				data := g.data(p)
				requested, actual, err := prices(t, a, p, string(data))
				if err != nil {
					t.Fatalf("%s, op %d: %v\n%s", name, i, err, data)
				}
				if actual < requested {
					below++
				}
			}
			if below == 0 {
				t.Errorf("%s, op %d: no response cost less than requested; the generator is not exercising the model", name, i)
			}
		}
	}
}

// FuzzActualCost feeds arbitrary bytes as the data of the operations above:
// no panic, an error only for an invalid response (always for bytes that
// are not JSON), and otherwise actual ≥ 0, above requested only when a list
// overran its priced size; and the operation's compiled plan gives the
// same answer, cost or error.
//
//	go test ./complexity -run '^$' -fuzz FuzzActualCost -fuzztime 60s
func FuzzActualCost(f *testing.F) {
	schema := exampleSchema(f)
	a, err := complexity.New(schema)
	if err != nil {
		f.Fatal(err)
	}
	ops := make([]prepared, len(actualOps))
	plans := make([]*complexity.Plan, len(actualOps))
	reports := make([]*complexity.Report, len(actualOps))
	for i, o := range actualOps {
		ops[i] = prepare(f, schema, o.query, o.vars)
		r, err := a.AnalyzeOperation(ops[i].doc, ops[i].op, ops[i].vars)
		if err != nil {
			f.Fatal(err)
		}
		reports[i] = r
		if plans[i], err = a.Compile(ops[i].doc, ops[i].op); err != nil {
			f.Fatal(err)
		}
	}
	g := &respGen{rnd: rand.New(rand.NewPCG(3, 4)), schema: schema}
	for i := range ops {
		for range 3 {
			f.Add(uint8(i), g.data(ops[i]))
		}
	}
	f.Add(uint8(0), []byte(readmeData))
	f.Add(uint8(0), []byte(`{"user":{"repos":[[[[[[`))
	f.Add(uint8(3), []byte(`{"search":[{"__typename":"\ud800","repos":[]}]}`))
	f.Fuzz(func(t *testing.T, op uint8, data []byte) {
		i := int(op) % len(ops)
		p := ops[i]
		actual, err := a.ActualCost(p.doc, p.op, p.vars, data)
		if n, perr := plans[i].ActualCost(p.vars, data); actualDiff(actual, err, n, perr) != "" {
			t.Fatalf("plan: %s", actualDiff(actual, err, n, perr))
		}
		if err != nil {
			if !errors.Is(err, complexity.ErrInvalidResponse) {
				t.Fatalf("err = %v, want ErrInvalidResponse", err)
			}
			return
		}
		if why := actualOutOfBounds(reports[i], actual, data); why != "" {
			t.Fatal(why)
		}
		if len(data) > 0 && !json.Valid(data) {
			t.Fatalf("accepted data that is not JSON: %q", data)
		}
		if again, err := a.ActualCost(p.doc, p.op, p.vars, data); err != nil || again != actual {
			t.Fatalf("not deterministic: %d then %d, %v", actual, again, err)
		}
	})
}

// actualOutOfBounds says what is wrong with an actual cost of data for the
// operation r prices, "" when nothing is: it is never negative, and it
// exceeds the requested points only when some list in data returned more
// items than the field at its path was priced for (or a field the
// breakdown does not list, a member other than the one priced).
func actualOutOfBounds(r *complexity.Report, actual int64, data []byte) string {
	if actual < 0 {
		return fmt.Sprintf("actual %d is negative", actual)
	}
	if actual <= r.Points {
		return ""
	}
	if _, ok := overrunList(r, data); ok {
		return ""
	}
	return fmt.Sprintf("actual %d above requested %d, and no list returned more than it was priced for", actual, r.Points)
}

// overrunList finds a list in data longer than its field's Multiplier in
// r's breakdown, or at a path the breakdown does not price.
func overrunList(r *complexity.Report, data []byte) (path string, ok bool) {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return "", false
	}
	priced := map[string]int64{}
	for _, f := range r.Fields {
		priced[f.Path] = max(priced[f.Path], f.Multiplier)
	}
	var walk func(prefix string, v any) (string, bool)
	walk = func(prefix string, v any) (string, bool) {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		for key, val := range obj {
			path := key
			if prefix != "" {
				path = prefix + "." + key
			}
			items := innermost(val, nil)
			if _, isList := val.([]any); isList {
				if n, ok := priced[path]; !ok || int64(len(items)) > n {
					return path, true
				}
			}
			if _, isList := val.([]any); !isList {
				items = []any{val}
			}
			for _, it := range items {
				if p, ok := walk(path, it); ok {
					return p, true
				}
			}
		}
		return "", false
	}
	return walk("", v)
}

// innermost appends the non-null items of the innermost lists of v.
func innermost(v any, out []any) []any {
	l, ok := v.([]any)
	if !ok {
		if v != nil {
			out = append(out, v)
		}
		return out
	}
	for _, e := range l {
		if inner, ok := e.([]any); ok {
			out = innermost(inner, out)
		} else if e != nil {
			out = append(out, e)
		}
	}
	return out
}
