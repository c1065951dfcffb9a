package complexity_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	gqlcomplexity "github.com/99designs/gqlgen/complexity"
	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/costguard/costguard/complexity"
)

// The benchmarks price the same validated operations on the same schema
// with this package and with gqlgen's complexity.Calculate (its default
// model, no custom complexity functions).
//
//	go test ./complexity -run '^$' -bench 'Analyze|GqlgenComplexity' -benchmem -benchtime 200ms

const benchFanoutLevels = 20

type benchCase struct {
	name  string
	query string
}

func benchCases(t testing.TB) []benchCase {
	t.Helper()
	complex, err := os.ReadFile(filepath.Join(goldenDir, "github-complex.graphql"))
	if err != nil {
		t.Fatal(err)
	}
	return []benchCase{
		{"plain", `query { viewer { login followers(first: 5) { totalCount edges { node { login } } }
			repositories(first: 10) { totalCount nodes { name issues(first: 3) { totalCount } } } } }`},
		{"github-22060", string(complex)},
		{"fanout-20", fanout(benchFanoutLevels)},
	}
}

// benchSchema is the GitHub slice plus the fan-out type, so one schema
// serves every case.
func benchSchema(t testing.TB) *ast.Schema {
	t.Helper()
	github, err := os.ReadFile(filepath.Join(goldenDir, "schemas", "github.graphql"))
	if err != nil {
		t.Fatal(err)
	}
	schema, err := complexity.LoadSchema(
		&ast.Source{Name: "github.graphql", Input: string(github)},
		&ast.Source{Name: "fanout.graphql", Input: `extend type Query { node: Node } type Node { a: Node b: Node leaf: Int }`},
	)
	if err != nil {
		t.Fatal(err)
	}
	return schema
}

func benchDoc(b *testing.B, schema *ast.Schema, query string) (*ast.QueryDocument, *ast.OperationDefinition) {
	b.Helper()
	doc, errs := gqlparser.LoadQuery(schema, query)
	if errs != nil {
		b.Fatal(errs)
	}
	return doc, doc.Operations[0]
}

// BenchmarkAnalyze measures AnalyzeOperation with the defaults, as the
// limiter uses it (totals only), and, as <case>+explain, Explain with its
// breakdown of up to 1,000 fields.
func BenchmarkAnalyze(b *testing.B) {
	schema := benchSchema(b)
	a, err := complexity.New(schema)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range benchCases(b) {
		doc, op := benchDoc(b, schema, c.query)
		for _, v := range []struct {
			suffix string
			price  func(*ast.QueryDocument, *ast.OperationDefinition, map[string]any) (*complexity.Report, error)
		}{{"", a.AnalyzeOperation}, {"+explain", a.Explain}} {
			b.Run(c.name+v.suffix, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := v.price(doc, op, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// gqlgenSchema is the smallest graphql.ExecutableSchema gqlgen's Calculate
// accepts: the schema, and no custom complexity for any field.
type gqlgenSchema struct{ schema *ast.Schema }

var _ graphql.ExecutableSchema = gqlgenSchema{}

func (s gqlgenSchema) Schema() *ast.Schema { return s.schema }

func (gqlgenSchema) Complexity(context.Context, string, string, int, map[string]any) (int, bool) {
	return 0, false
}

func (gqlgenSchema) Exec(context.Context) graphql.ResponseHandler { return nil }

func BenchmarkGqlgenComplexity(b *testing.B) {
	schema := benchSchema(b)
	es := gqlgenSchema{schema: schema}
	ctx := context.Background()
	for _, c := range benchCases(b) {
		_, op := benchDoc(b, schema, c.query)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				gqlcomplexity.Calculate(ctx, es, op, nil)
			}
		})
	}
}

var githubSchema = flag.String("github-schema", "", "path of GitHub's public schema (SDL) for BenchmarkGitHubSchema; empty: skipped")

// githubQueries are GitHub's documented examples (550, 22,060 and 305,100
// nodes) and the bench harness's fragment-heavy query, by file under the
// repository root.
var githubQueries = []struct{ name, file string }{
	{"github-simple", "testdata/cost/github-simple.graphql"},
	{"github-complex", "testdata/cost/github-complex.graphql"},
	{"github-rate-limit", "bench/testdata/github-rate-limit.graphql"},
	{"fragments", "bench/testdata/fragments.graphql"},
}

// BenchmarkGitHubSchema prices GitHub's queries on GitHub's public schema
// (the SDL octokit/graphql-schema publishes, less the second definition of
// each field it defines twice; not in this repository) as a user calling
// the package with its defaults does: complexity.New(schema) and
// AnalyzeOperation (<query>/defaults), the same analyzer's Explain
// (<query>/explain), and gqlgen's complexity.Calculate, the peer
// (<query>/gqlgen). Without -github-schema it is skipped.
//
//	go test ./complexity -run '^$' -bench GitHubSchema -benchmem -count 6 -args -github-schema path/to/schema.graphql
func BenchmarkGitHubSchema(b *testing.B) {
	if *githubSchema == "" {
		b.Skip("no -github-schema given")
	}
	sdl, err := os.ReadFile(*githubSchema)
	if err != nil {
		b.Fatal(err)
	}
	schema, err := complexity.LoadSchema(&ast.Source{Name: filepath.Base(*githubSchema), Input: string(sdl)})
	if err != nil {
		b.Fatal(err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		b.Fatal(err)
	}
	es := gqlgenSchema{schema: schema}
	ctx := context.Background()
	for _, q := range githubQueries {
		src, err := os.ReadFile(filepath.Join("..", q.file))
		if err != nil {
			b.Fatal(err)
		}
		doc, op := benchDoc(b, schema, string(src))
		for _, p := range []struct {
			name  string
			price func() error
		}{
			{"defaults", func() error { _, err := a.AnalyzeOperation(doc, op, nil); return err }},
			{"explain", func() error { _, err := a.Explain(doc, op, nil); return err }},
			{"gqlgen", func() error { gqlcomplexity.Calculate(ctx, es, op, nil); return nil }},
		} {
			b.Run(q.name+"/"+p.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := p.price(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkAnalyzeVariables measures the values the analyzer coerces:
// slicing arguments given as variables (int64, as VariableValues leaves a
// JSON number, and a numeric string) and a list of 1,000 string Ints.
//
//	go test ./complexity -run '^$' -bench AnalyzeVariables -benchmem
func BenchmarkAnalyzeVariables(b *testing.B) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "vars.graphql", Input: `
type Query { user: User nums(ids: [Int!]): [X] @listSize(slicingArguments: ["ids"]) }
type User { repos(first: Int): [Repo] }
type Repo { issues(first: Int): [X] }
type X { y: Int }`})
	if err != nil {
		b.Fatal(err)
	}
	a, err := complexity.New(schema, complexity.WithBreakdownLimit(0))
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]any, 1000)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	const nested = `query($r: Int, $i: Int) { user { repos(first: $r) { issues(first: $i) { y } } } }`
	for _, c := range []struct {
		name  string
		query string
		vars  map[string]any
	}{
		{"int64", nested, map[string]any{"r": int64(50), "i": int64(20)}},
		{"string", nested, map[string]any{"r": "50", "i": "20"}},
		{"list-1000", `query($ids: [Int!]) { nums(ids: $ids) { y } }`, map[string]any{"ids": ids}},
	} {
		doc, op := benchDoc(b, schema, c.query)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.AnalyzeOperation(doc, op, c.vars); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// spreads returns a query whose one selection set spreads n distinct
// fragments, each selecting the leaf under its own alias. (The same key in
// every fragment would make gqlparser's validation compare every pair of
// fields, so setting up 30k would take minutes.)
func spreads(n int) string {
	var b strings.Builder
	b.WriteString("query { node {")
	for i := range n {
		fmt.Fprintf(&b, " ...F%d", i)
	}
	b.WriteString(" } }\n")
	for i := range n {
		fmt.Fprintf(&b, "fragment F%d on Node { l%d: leaf }\n", i, i)
	}
	return b.String()
}

// BenchmarkFragmentSpreads prices one selection set spreading 1k, 10k and
// 30k distinct fragments. ns/spread should not grow with the count.
//
//	go test ./complexity -run '^$' -bench FragmentSpreads -benchtime 20x
func BenchmarkFragmentSpreads(b *testing.B) {
	schema := benchSchema(b)
	a, err := complexity.New(schema, complexity.WithBreakdownLimit(0))
	if err != nil {
		b.Fatal(err)
	}
	// gqlparser's OverlappingFieldsCanBeMerged compares every pair of
	// fragments spread in one selection set: minutes at 30k. The document
	// is valid, so it is parsed and walked (which binds each field to its
	// definition) without the validation rules.
	for _, n := range []int{1_000, 10_000, 30_000} {
		doc, err := parser.ParseQuery(&ast.Source{Input: spreads(n)})
		if err != nil {
			b.Fatal(err)
		}
		validator.Walk(schema, doc, &validator.Events{})
		op := doc.Operations[0]
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.AnalyzeOperation(doc, op, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/spread")
		})
	}
}

// actualPage is the data of actualPageQuery(repos, issues) on the example
// schema: repos repositories of issues issues each, with titles and bodies
// as gqlgen writes them (HTML characters escaped).
func actualPage(repos, issues int) []byte {
	b := []byte(`{"user":{"login":"octocat","repos":[`)
	for r := range repos {
		if r > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"name":"repository-%d","issues":[`, r)
		for i := range issues {
			if i > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `{"title":"Issue %d: the \u003cem\u003eparser\u003c/em\u003e drops a field","body":"Steps to reproduce: run the query twice.\nExpected the same result both times; got %d."}`, i, r)
		}
		b = append(b, "]}"...)
	}
	return append(b, "]}}"...)
}

// requestPage is readmeQuery's data as gqlgen writes it for a full page:
// 10 repositories of 5 issues, titles of 21 to 25 characters (1.9 KB).
func requestPage() []byte {
	titles := []string{"Greeting not localised", "Fork count is wrong", "Typo in the greeting", "Broken footer link", "Detect GraphQL files"}
	b := []byte(`{"user":{"repos":[`)
	for r := range 10 {
		if r > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"issues":[`...)
		for i, t := range titles {
			if i > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `{"title":"%s #%d"}`, t, r)
		}
		b = append(b, "]}"...)
	}
	return append(b, "]}}"...)
}

func actualPageQuery(repos, issues int) string {
	return fmt.Sprintf(`{ user(login: "octocat") { login repos(first: %d) { name issues(first: %d) { title body } } } }`, repos, issues)
}

// BenchmarkActualCost prices responses after execution, next to the
// requested price of the same operation (Analyze) and to decoding the same
// bytes with encoding/json into any, the peer a middleware would otherwise
// reach for. readme is the README's response (4 repositories, 9 issues,
// 394 bytes of data); request-50 the same query's full page (10
// repositories of 5 issues, 1.9 KB), the example server's typical
// response; page-110 a full page of 10 repositories of 10 issues
// (17 KB); 1MB 100 repositories of 60 issues (1.03 MB). Plan.ActualCost
// is the same through the operation's compiled plan, as the middleware
// settles a request it priced through that plan.
//
//	go test ./complexity -run '^$' -bench ActualCost -benchmem
func BenchmarkActualCost(b *testing.B) {
	schema := exampleSchema(b)
	a, err := complexity.New(schema, complexity.WithBreakdownLimit(0))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		query string
		data  []byte
	}{
		{"readme", readmeQuery, []byte(readmeData)},
		{"request-50", readmeQuery, requestPage()},
		{"page-110", actualPageQuery(10, 10), actualPage(10, 10)},
		{"1MB", actualPageQuery(100, 60), actualPage(100, 60)},
		// 1,000 union results: with __typename, and without, when each
		// object is matched against the members by its keys.
		{"union-typename", `{ search(query: "o", first: 1000) { __typename ` + unionMembers + ` } }`, unionResults(true)},
		{"union-keys", `{ search(query: "o", first: 1000) { ` + unionMembers + ` } }`, unionResults(false)},
	} {
		p := prepare(b, schema, c.query, nil)
		r, err := a.AnalyzeOperation(p.doc, p.op, p.vars)
		if err != nil {
			b.Fatal(err)
		}
		actual, err := a.ActualCost(p.doc, p.op, p.vars, c.data)
		if err != nil || actual > r.Points {
			b.Fatalf("%s: actual %d of %d, %v", c.name, actual, r.Points, err)
		}
		b.Run(c.name+"/ActualCost", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				if _, err := a.ActualCost(p.doc, p.op, p.vars, c.data); err != nil {
					b.Fatal(err)
				}
			}
		})
		plan, err := a.Compile(p.doc, p.op)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/Plan.ActualCost", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				if _, err := plan.ActualCost(p.vars, c.data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/Analyze", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.AnalyzeOperation(p.doc, p.op, p.vars); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/json.Unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				var v any
				if err := json.Unmarshal(c.data, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// planVarsQuery is the plain case with its sizes taken from variables, so
// its plan is a compiled tree rather than a constant.
const planVarsQuery = `query($f: Int, $r: Int, $i: Int) { viewer { login followers(first: $f) { totalCount edges { node { login } } }
	repositories(first: $r) { totalCount nodes { name issues(first: $i) { totalCount } } } } }`

// BenchmarkPlanEvaluate measures a compiled plan's Evaluate on the cases of
// BenchmarkAnalyze (whose prices read no variable: constant plans), and
// plain+vars, the plain case sized by variables (a compiled tree), also
// with a counted field (+count).
//
//	go test ./complexity -run '^$' -bench 'Analyze$|PlanEvaluate|GqlgenComplexity' -benchmem -count 3
func BenchmarkPlanEvaluate(b *testing.B) {
	schema := benchSchema(b)
	a, err := complexity.New(schema, complexity.WithBreakdownLimit(0))
	if err != nil {
		b.Fatal(err)
	}
	counted, err := complexity.New(schema, complexity.WithBreakdownLimit(0), complexity.WithCountedFields("Repository.issues"))
	if err != nil {
		b.Fatal(err)
	}
	vars := map[string]any{"f": int64(5), "r": int64(10), "i": int64(3)}
	cases := append(benchCases(b), benchCase{"plain+vars", planVarsQuery})
	for _, c := range cases {
		doc, op := benchDoc(b, schema, c.query)
		for _, v := range []struct {
			suffix string
			a      *complexity.Analyzer
		}{{"", a}, {"+count", counted}} {
			if v.suffix != "" && c.name != "plain+vars" {
				continue
			}
			p, err := v.a.Compile(doc, op)
			if err != nil {
				b.Fatal(err)
			}
			want, err := v.a.AnalyzeOperation(doc, op, vars)
			if err != nil {
				b.Fatal(err)
			}
			if got, err := p.Evaluate(vars); err != nil || got.Cost != want.Cost {
				b.Fatalf("%s: plan %v, %v; scratch %v", c.name, got, err, want.Cost)
			}
			b.Run(c.name+v.suffix, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := p.Evaluate(vars); err != nil {
						b.Fatal(err)
					}
				}
			})
			if c.name == "plain+vars" && v.suffix == "" {
				b.Run(c.name+"/Analyze", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, err := v.a.AnalyzeOperation(doc, op, vars); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// unionMembers selects each member of the example's SearchResult.
const unionMembers = `... on User { login repos(first: 5) { name } } ... on Repository { name issues(first: 3) { title } } ... on Issue { title }`

// unionResults is 1,000 SearchResult objects, a third of each member, with
// or without __typename.
func unionResults(typename bool) []byte {
	tn := func(name string) string {
		if typename {
			return `"__typename":"` + name + `",`
		}
		return ""
	}
	var b strings.Builder
	b.WriteString(`{"search":[`)
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		switch i % 3 {
		case 0:
			b.WriteString(`{` + tn("User") + `"login":"u","repos":[{"name":"a"},{"name":"b"}]}`)
		case 1:
			b.WriteString(`{` + tn("Repository") + `"name":"r","issues":[{"title":"x"}]}`)
		default:
			b.WriteString(`{` + tn("Issue") + `"title":"t"}`)
		}
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}
