package middleware

import (
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/costguard/costguard/internal/kept"
)

// The operation name an Event carries is a copy of at most 64 bytes
// (kept.MaxOperation, docs/threat-model.md): the parser's is a substring of the document, and
// every table the Event reaches would keep the whole document alive.
func TestOperationNameIsACopy(t *testing.T) {
	name := "Named" + strings.Repeat("N", 100)
	src := "query " + name + " { x }\n#" + strings.Repeat("x", 1<<20)
	doc, err := parser.ParseQuery(&ast.Source{Input: src})
	if err != nil {
		t.Fatal(err)
	}
	got := operationName(doc.Operations[0])
	if got != name[:64] || kept.MaxOperation != 64 {
		t.Fatalf("operationName = %q", got)
	}
	if kept.Shares(got, src) {
		t.Fatal("the operation name shares the document's memory")
	}
	if operationName(nil) != "" {
		t.Fatal("an anonymous operation has a name")
	}
}
