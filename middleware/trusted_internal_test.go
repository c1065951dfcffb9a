package middleware

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware/trusteddocs"
)

// Reload compiles the trusted documents' plans of every Extension on a
// server before a request needs them.
func TestReloadPreparesTrustedPlans(t *testing.T) {
	schema := gqlparser.MustLoadSchema(&ast.Source{Input: "type Query { a: Int, b: Int }"})
	dir := t.TempDir()
	path := filepath.Join(dir, "m.json")
	write := func(docs ...string) {
		t.Helper()
		b := "{"
		for i, d := range docs {
			if i > 0 {
				b += ","
			}
			b += `"` + trusteddocs.Hash(d) + `": "` + d + `"`
		}
		if err := os.WriteFile(path, []byte(b+"}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("{ a }")
	policy := Policy{
		Plans:            map[string]budget.Plan{"anon": {Burst: 10, Rate: 10, Per: time.Second}},
		AnonymousPlan:    "anon",
		TrustedDocuments: TrustedDocumentsOptions{File: path},
	}
	l, err := New(Dependencies{}, policy)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	e := &costExtension{l: l}
	if err := e.Validate(&graphql.ExecutableSchemaMock{SchemaFunc: func() *ast.Schema { return schema }}); err != nil {
		t.Fatal(err)
	}
	if b := e.priced.Load(); len(b.trusted) != 1 {
		t.Fatalf("at start: %d trusted plans, want 1", len(b.trusted))
	}
	write("{ a }", "{ b }")
	if err := l.Reload(policy); err != nil {
		t.Fatal(err)
	}
	if b := e.priced.Load(); b.set != l.current() || len(b.trusted) != 2 {
		t.Fatalf("after the reload: prepared %v, %d trusted plans; want the new settings' 2", b.set == l.current(), len(b.trusted))
	}
}
