package complexity_test

import (
	"errors"
	"fmt"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/complexity"
)

const seedSDL = `
type Query { user: User }
type User { repos(first: Int): [Repo] }
type Repo { issues(first: Int): [Issue] }
type Issue { title: String }
`

func ExampleAnalyzer_Analyze() {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "schema.graphql", Input: seedSDL})
	if err != nil {
		panic(err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		panic(err)
	}
	doc, errs := gqlparser.LoadQuery(schema, `{ user { repos(first: 100) { issues(first: 50) { title } } } }`)
	if errs != nil {
		panic(errs)
	}
	r, err := a.Analyze(doc, "", nil)
	if err != nil {
		panic(err)
	}
	fmt.Printf("cost %s, depth %d, nodes %d, %d points\n", r.Cost, r.Depth, r.Nodes, r.Points)
	// Output:
	// cost 5101, depth 4, nodes 5100, 5101 points
}

// Explain prices as AnalyzeOperation does and lists every priced field:
// the explain view, built only when asked.
func ExampleAnalyzer_Explain() {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "schema.graphql", Input: seedSDL})
	if err != nil {
		panic(err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		panic(err)
	}
	doc, errs := gqlparser.LoadQuery(schema, `{ user { repos(first: 100) { issues(first: 50) { title } } } }`)
	if errs != nil {
		panic(errs)
	}
	r, err := a.Explain(doc, doc.Operations[0], nil)
	if err != nil {
		panic(err)
	}
	fmt.Printf("cost %s, depth %d, nodes %d\n", r.Cost, r.Depth, r.Nodes)
	for _, f := range r.Fields {
		fmt.Printf("%-24s ×%-3d %s\n", f.Path, f.Multiplier, f.Cost)
	}
	// Output:
	// cost 5101, depth 4, nodes 5100
	// user                     ×1   5101
	// user.repos               ×100 5100
	// user.repos.issues        ×50  50
	// user.repos.issues.title  ×1   0
}

func ExampleAnalyzer_Analyze_maxCost() {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "schema.graphql", Input: seedSDL})
	if err != nil {
		panic(err)
	}
	a, err := complexity.New(schema, complexity.WithMaxCost(5000))
	if err != nil {
		panic(err)
	}
	doc, errs := gqlparser.LoadQuery(schema, `{ user { repos(first: 100) { issues(first: 50) { title } } } }`)
	if errs != nil {
		panic(errs)
	}
	_, err = a.Analyze(doc, "", nil)
	var ce *complexity.Error
	if errors.As(err, &ce) {
		fmt.Println(ce.Code)
		fmt.Println(ce.Message)
		fmt.Println(errors.Is(err, complexity.ErrMaxCost), ce.Totals.Cost)
	}
	// Output:
	// MAX_COST_EXCEEDED
	// operation (anonymous) costs 5101, which exceeds the maximum of 5000
	// true 5101
}

func ExampleCost_Points() {
	c, err := complexity.ParseCost("12.25")
	if err != nil {
		panic(err)
	}
	fmt.Println(c, c.Points())
	// Output: 12.25 13
}

// After the operation has run, ActualCost prices the response's data (in
// gqlgen, graphql.Response.Data) by the same model, each list counted as
// returned: 4 repositories of 3, 2, 2 and 2 issues cost 1 + 4 + 9.
func ExampleAnalyzer_ActualCost() {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "schema.graphql", Input: seedSDL})
	if err != nil {
		panic(err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		panic(err)
	}
	doc, errs := gqlparser.LoadQuery(schema, `{ user { repos(first: 10) { issues(first: 5) { title } } } }`)
	if errs != nil {
		panic(errs)
	}
	op := doc.Operations[0]
	r, err := a.AnalyzeOperation(doc, op, nil)
	if err != nil {
		panic(err)
	}
	data := []byte(`{"user":{"repos":[
		{"issues":[{"title":"a"},{"title":"b"},{"title":"c"}]},
		{"issues":[{"title":"d"},{"title":"e"}]},
		{"issues":[{"title":"f"},{"title":"g"}]},
		{"issues":[{"title":"h"},{"title":"i"}]}]}}`)
	actual, err := a.ActualCost(doc, op, nil, data)
	if err != nil {
		panic(err)
	}
	fmt.Printf("requested %d, actual %d, refund %d\n", r.Points, actual, r.Points-actual)
	// Output: requested 61, actual 14, refund 47
}

func ExampleAnalyzer_Compile() {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "schema.graphql", Input: seedSDL})
	if err != nil {
		panic(err)
	}
	a, err := complexity.New(schema, complexity.WithBreakdownLimit(0), complexity.WithMaxCost(1000),
		complexity.WithCountedFields("Repo.issues"))
	if err != nil {
		panic(err)
	}
	doc, errs := gqlparser.LoadQuery(schema, `query($repos: Int, $issues: Int) {
		user { repos(first: $repos) { issues(first: $issues) { title } } } }`)
	if errs != nil {
		panic(errs)
	}
	// Compile once per document (next to the query cache), evaluate per request.
	plan, err := a.Compile(doc, doc.Operations[0])
	if err != nil {
		panic(err)
	}
	for _, vars := range []map[string]any{
		{"repos": 10, "issues": 5},
		{"repos": 100, "issues": 50},
	} {
		r, err := plan.Evaluate(vars)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fc := r.FieldCounts[0]
		fmt.Printf("cost %s, %s ×%d at %v\n", r.Cost, fc.Coordinate, fc.Count, fc.Path)
	}
	// Output:
	// cost 61, Repo.issues ×10 at [user repos issues]
	// complexity: operation (anonymous) costs 5101, which exceeds the maximum of 1000 (line 1, column 1)
}
