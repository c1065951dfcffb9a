package apicheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"slices"
	"strings"
	"testing"
)

// bounds caps the package-level exported names of a package: its consts,
// vars, funcs and types (methods and fields are not counted). A package
// that exports many names has several jobs; a name past the bound moves to
// the package whose job it is, or stops being exported.
var bounds = map[string]int{
	"github.com/costguard/costguard/client":     8,
	"github.com/costguard/costguard/middleware": 60,
}

func TestSurfaceBounds(t *testing.T) {
	pkgs, err := loadLibrary()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range slices.Sorted(maps.Keys(bounds)) {
		i := slices.IndexFunc(pkgs, func(p *types.Package) bool { return p.Path() == path })
		if i < 0 {
			t.Errorf("no library package %s to bound", path)
			continue
		}
		if msg := overBound(pkgs[i], bounds[path]); msg != "" {
			t.Error(msg)
		}
	}
}

// overBound says, when pkg exports more package-level names than bound,
// how many and which, by kind; "" when it does not.
func overBound(pkg *types.Package, bound int) string {
	names := exportedNames(pkg)
	n := 0
	for _, list := range names {
		n += len(list)
	}
	if n <= bound {
		return ""
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "package %s exports %d package-level names, %d more than its bound of %d: "+
		"move a name to the package whose job it is, or unexport it (and list it in CHANGELOG.md).\n",
		pkg.Path(), n, n-bound, bound)
	for _, kind := range []string{"const", "var", "func", "type"} {
		if len(names[kind]) > 0 {
			fmt.Fprintf(&msg, "%s (%d): %s\n", kind, len(names[kind]), strings.Join(names[kind], " "))
		}
	}
	return strings.TrimSuffix(msg.String(), "\n")
}

// exportedNames returns pkg's package-level exported names by kind (const,
// var, func, type), each list sorted.
func exportedNames(pkg *types.Package) map[string][]string {
	out := map[string][]string{}
	scope := pkg.Scope()
	for _, name := range scope.Names() { // sorted
		if !token.IsExported(name) {
			continue
		}
		var kind string
		switch scope.Lookup(name).(type) {
		case *types.Const:
			kind = "const"
		case *types.Var:
			kind = "var"
		case *types.Func:
			kind = "func"
		case *types.TypeName:
			kind = "type"
		default:
			continue
		}
		out[kind] = append(out[kind], name)
	}
	return out
}

// What is counted: package-level exported names of every kind, aliases
// and generic functions included; methods, fields and unexported names
// are not.
func TestBoundCounts(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", `package p

const A, b = 1, 2
const (
	K Kind = iota
	L
)
var ErrX, errY error
func New() *T { return nil }
func Map[E any](E) {}
func helper() {}
type Kind int
type T struct{ Field int; field int }
func (T) Method() {}
type Alias = T
type hidden struct{ Shown int }
`, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := (&types.Config{}).Check("example.com/p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(exportedNames(pkg))
	if want := "map[const:[A K L] func:[Map New] type:[Alias Kind T] var:[ErrX]]"; got != want {
		t.Errorf("exportedNames:\n got %s\nwant %s", got, want)
	}
	if msg := overBound(pkg, 9); msg != "" {
		t.Errorf("9 names over a bound of 9: %s", msg)
	}
	msg := overBound(pkg, 8)
	for _, want := range []string{"exports 9 package-level names, 1 more than its bound of 8", "const (3): A K L\n", "type (3): Alias Kind T"} {
		if !strings.Contains(msg, want) {
			t.Errorf("9 names over a bound of 8: %q lacks %q", msg, want)
		}
	}
}
