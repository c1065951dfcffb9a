package apicheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"testing"
)

// The listing's form, pinned on a package that has one of each kind of
// name: a line changes when what a caller can write changes, and only then.
func TestListingFormat(t *testing.T) {
	fset := token.NewFileSet()
	checkSrc := func(path, src string, imp types.Importer) *types.Package {
		t.Helper()
		f, err := parser.ParseFile(fset, path+".go", src, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkg, err := (&types.Config{Importer: imp}).Check(path, fset, []*ast.File{f}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return pkg
	}
	other := checkSrc("example.com/other", `package other
type Schema struct{ Name string }
type Reader interface{ Read([]byte) (int, error) }
`, nil)
	pkg := checkSrc("example.com/p", `package p

import "example.com/other"

const Untyped = 10
const Long = "0123456789012345678901234567890123456789012345678901234567890123456789012345"
type Kind int
const (
	KindA Kind = iota
	KindB
)
var ErrX error
var unexported int

func New(s *other.Schema, opts ...Option) (*T, error) { return nil, nil }
func Bytes(b []byte, r rune, x interface{}) any { return nil }
func Chans(chan (<-chan int), chan<- []string) {}
func Map[K comparable, V any](m map[K]V, f func(K) V) []V { return nil }
func Set[T ~int | ~int64](*T) {}

type Option func(*T)

type inner struct {
	Promoted string
	Hidden   int
	hidden   int
}

type T struct {
	inner
	*other.Schema
	Hidden string
	Tagged int `+"`json:\"tagged\"`"+`
	private bool
	Anon struct{ A, b int }
}

func (T) Value() string { return "" }
func (*T) Pointer(ctx any) {}
func (inner) FromInner() {}
func (t *T) unexported() {}

type Store interface {
	other.Reader
	Take(key string, cost int64) (bool, error)
}

type Sealed interface {
	Exported()
	sealed()
}

type Number interface{ ~int | ~float64 }

type Empty interface{}

type List[E any] struct{ Items []E }

func (l *List[E]) Push(e E) {}

type Alias = other.Schema
type Ints = []int
`, importerFunc(func(string) (*types.Package, error) { return other, nil }))

	want := `
pkg example.com/p, const KindA = 0
pkg example.com/p, const KindA Kind
pkg example.com/p, const KindB = 1
pkg example.com/p, const KindB Kind
pkg example.com/p, const Long = "01234567890123456789012345678901234567890123456789012345678901234567...  // "0123456789012345678901234567890123456789012345678901234567890123456789012345"
pkg example.com/p, const Long ideal-string
pkg example.com/p, const Untyped = 10
pkg example.com/p, const Untyped ideal-int
pkg example.com/p, func Bytes([]uint8, int32, any) any
pkg example.com/p, func Chans(chan (<-chan int), chan<- []string)
pkg example.com/p, func Map[$0 comparable, $1 any](map[$0]$1, func($0) $1) []$1
pkg example.com/p, func New(*other.Schema, ...Option) (*T, error)
pkg example.com/p, func Set[$0 ~int | ~int64](*$0)
pkg example.com/p, method (*List[$0]) Push($0)
pkg example.com/p, method (*T) Pointer(any)
pkg example.com/p, method (T) FromInner()
pkg example.com/p, method (T) Value() string
pkg example.com/p, type Alias = other.Schema
pkg example.com/p, type Empty interface {}
pkg example.com/p, type Ints = []int
pkg example.com/p, type Kind int
pkg example.com/p, type List[$0 any] struct
pkg example.com/p, type List[$0 any] struct, Items []$0
pkg example.com/p, type Number interface { ~int | ~float64 }
pkg example.com/p, type Option func(*T)
pkg example.com/p, type Sealed interface, Exported()
pkg example.com/p, type Sealed interface, unexported methods
pkg example.com/p, type Store interface { Read, Take }
pkg example.com/p, type Store interface, Read([]uint8) (int, error)
pkg example.com/p, type Store interface, Take(string, int64) (bool, error)
pkg example.com/p, type T struct
pkg example.com/p, type T struct, Anon struct{A int; b int}
pkg example.com/p, type T struct, Hidden string
pkg example.com/p, type T struct, Promoted string
pkg example.com/p, type T struct, Tagged int
pkg example.com/p, type T struct, embedded *other.Schema
pkg example.com/p, var ErrX error
`
	got := strings.Join(listing(pkg), "\n")
	if want = strings.TrimSpace(want); got != want {
		t.Errorf("listing:\n%s\nwant:\n%s", got, want)
	}
}
