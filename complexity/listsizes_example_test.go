package complexity_test

import (
	"fmt"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/costguard/costguard/complexity"
)

// Lists nested without arguments are priced at the default size; a
// recorder reads what responses really hold, and its suggestions, given
// back as WithAssumedSizes, price the same page at what it returns.
func ExampleListSizeRecorder() {
	schema, _ := complexity.LoadSchema(&ast.Source{Input: `
type Query { scenes: [Scene!]! }
type Scene { id: ID!, galleries: [Gallery!]! }
type Gallery { id: ID! }`})
	doc, _ := parser.ParseQuery(&ast.Source{Input: `{ scenes { id galleries { id } } }`})
	op := doc.Operations[0]

	rec := complexity.NewListSizeRecorder()
	a, _ := complexity.New(schema, complexity.WithListSizeRecorder(rec))
	r, _ := a.AnalyzeOperation(doc, op, nil)
	fmt.Println("priced at the default size:", r.Points)
	for _, data := range []string{
		`{"scenes":[{"id":"1","galleries":[{"id":"a"}]},{"id":"2","galleries":[]}]}`,
		`{"scenes":[{"id":"3","galleries":[{"id":"b"},{"id":"c"}]}]}`,
	} {
		_, _ = a.ActualCost(doc, op, nil, []byte(data))
	}
	sizes := complexity.SuggestedSizes(rec.Fields())
	fmt.Print(complexity.FormatListSizes(sizes))

	calibrated, _ := complexity.New(schema, complexity.WithAssumedSizes(sizes))
	r, _ = calibrated.AnalyzeOperation(doc, op, nil)
	fmt.Println("priced at the suggested sizes:", r.Points)
	// Output:
	// priced at the default size: 110
	// Query.scenes @listSize(assumedSize: 2)
	// Scene.galleries @listSize(assumedSize: 2)
	// priced at the suggested sizes: 6
}
