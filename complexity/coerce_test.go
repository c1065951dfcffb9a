package complexity_test

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/costguard/costguard/complexity"
)

// coerceSDL has a slicing argument of every kind the analyzer coerces: Int
// (by convention), Float, a list of Int, a custom scalar, and input
// objects, Booleans and Strings that are priced.
const coerceSDL = `
scalar Long
input Page { first: Int ratio: Float tags: [String!] next: Page }
type Query {
  xs(first: Int, last: Int): [X]
  defaulted(first: Int = 30): [X]
  floats(size: Float): [X] @listSize(slicingArguments: ["size"], requireOneSlicingArgument: false)
  nums(ids: [Int]): [X] @listSize(slicingArguments: ["ids"], requireOneSlicingArgument: false)
  longs(first: Long): [X] @listSize(slicingArguments: ["first"], requireOneSlicingArgument: false)
  paged(page: Page): X
  weighted(on: Boolean @cost(weight: "1"), name: String @cost(weight: "1")): X
}
type X { y: Int }
`

// TestCoercion: the analyzer sizes and prices a value as the number the
// resolver receives (gqlgen's graphql.UnmarshalInt and friends, after
// gqlparser's VariableValues), and refuses what the executor would refuse.
// Variables go in as given: the analyzer must not rely on a caller having
// coerced them.
func TestCoercion(t *testing.T) {
	const (
		xs     = `query($f: Int) { xs(first: $f) { y } }`
		floats = `query($s: Float) { floats(size: $s) { y } }`
		nums   = `query($ids: [Int]) { nums(ids: $ids) { y } }`
		longs  = `query($f: Long) { longs(first: $f) { y } }`
		paged  = `query($p: Page) { paged(page: $p) { y } }`
		skip   = `query($c: Boolean!) { xs(first: 5) @skip(if: $c) { y } }`
		named  = `query($n: String, $b: Boolean) { weighted(name: $n, on: $b) { y } }`
	)
	type tc struct {
		name  string
		query string
		vars  map[string]any
		opts  []complexity.Option
		cost  float64 // when admitted
		code  string  // when refused
		msg   string  // a part of the refusal's message
		value float64 // the refusal's Value, for MAX_BREADTH_EXCEEDED
	}
	v := func(name string, x any) map[string]any { return map[string]any{name: x} }
	invalid := complexity.CodeInvalidArgumentValue
	breadth := complexity.CodeMaxBreadthExceeded
	tests := []tc{
		// gqlgen reads a string Int as the number: so must the price, not the default size.
		{name: "string", query: xs, vars: v("f", "1000000"), cost: 1000000},
		{name: "string above max breadth", query: xs, vars: v("f", "1000000"), opts: []complexity.Option{complexity.WithMaxBreadth(100)},
			code: breadth, msg: "first=1000000 exceeds the maximum of 100", value: 1000000},
		{name: "negative string", query: xs, vars: v("f", "-5"), code: breadth, msg: "first=-5 asks for every item", value: -5},
		{name: "plus sign", query: xs, vars: v("f", "+5"), cost: 5}, // strconv.ParseInt accepts it, so gqlgen does
		{name: "not a number", query: xs, vars: v("f", "abc"), code: invalid, msg: `field xs: argument first: "abc" is not a valid Int (not a base-10 integer)`},
		{name: "exponent", query: xs, vars: v("f", "1e3"), code: invalid, msg: `"1e3" is not a valid Int`},
		{name: "leading space", query: xs, vars: v("f", " 5"), code: invalid, msg: `" 5" is not a valid Int`},
		{name: "decimal string", query: xs, vars: v("f", "5.0"), code: invalid},
		{name: "hex", query: xs, vars: v("f", "0x10"), code: invalid},
		{name: "empty string", query: xs, vars: v("f", ""), code: invalid},
		{name: "string overflows int64", query: xs, vars: v("f", "9223372036854775808"), code: invalid, msg: "out of the 64-bit range"},
		{name: "string at int64 max", query: xs, vars: v("f", "9223372036854775807"), opts: []complexity.Option{complexity.WithMaxBreadth(100)}, code: breadth},
		{name: "json.Number", query: xs, vars: v("f", json.Number("1000")), cost: 1000},
		{name: "json.Number exponent", query: xs, vars: v("f", json.Number("1e3")), code: invalid, msg: "1e3 is not a valid Int"},
		{name: "json.Number fraction", query: xs, vars: v("f", json.Number("2.5")), code: invalid},
		{name: "json.Number negative", query: xs, vars: v("f", json.Number("-1")), code: breadth},
		{name: "int64", query: xs, vars: v("f", int64(1000)), cost: 1000},
		{name: "int32", query: xs, vars: v("f", int32(1000)), cost: 1000},
		{name: "uint64 beyond int64", query: xs, vars: v("f", uint64(math.MaxUint64)), code: invalid, msg: "out of the 64-bit range"},
		// JSON decoded without UseNumber: VariableValues passes a whole
		// float64; gqlgen then fails the field, any other executor runs it.
		{name: "whole float64", query: xs, vars: v("f", 100.0), cost: 100},
		{name: "fractional float64", query: xs, vars: v("f", 1.5), code: invalid, msg: "1.5 is not a valid Int"},
		{name: "float64 beyond int64", query: xs, vars: v("f", 1e19), code: invalid},
		{name: "NaN", query: xs, vars: v("f", math.NaN()), code: invalid},
		{name: "infinity", query: xs, vars: v("f", math.Inf(1)), code: invalid},
		{name: "bool", query: xs, vars: v("f", true), code: invalid, msg: "true is not a valid Int"},
		{name: "list for an Int", query: xs, vars: v("f", []any{"5"}), code: invalid, msg: "a list is not a valid Int"},
		{name: "object for an Int", query: xs, vars: v("f", map[string]any{}), code: invalid, msg: "an object is not a valid Int"},
		{name: "null", query: xs, vars: v("f", nil), cost: complexity.DefaultListSize},
		{name: "unset", query: xs, cost: complexity.DefaultListSize},
		// Defaults are coerced like the values they stand for.
		{name: "variable default", query: `query($f: Int = 7) { xs(first: $f) { y } }`, cost: 7},
		{name: "string variable default", query: `query($f: Int = "8") { xs(first: $f) { y } }`, cost: 8},
		{name: "bad variable default", query: `query($f: Int = "eight") { xs(first: $f) { y } }`, code: invalid},
		{name: "schema default", query: `{ defaulted { y } }`, cost: 30},
		{name: "null over schema default", query: `query($f: Int) { defaulted(first: $f) { y } }`, vars: v("f", nil), cost: complexity.DefaultListSize},
		// Literals: ParseInt(raw, 10, 64), as ast.Value.Value does.
		{name: "literal", query: `{ xs(first: 1000000) { y } }`, cost: 1000000},
		{name: "literal overflow", query: `{ xs(first: 99999999999999999999) { y } }`, code: invalid, msg: "99999999999999999999 is not a valid Int"},
		{name: "literal string", query: `{ xs(first: "50") { y } }`, cost: 50},
		{name: "literal float", query: `{ xs(first: 2.5) { y } }`, code: invalid},
		{name: "literal enum", query: `{ xs(first: FIVE) { y } }`, code: invalid},
		// Float: ParseFloat, rounded up.
		{name: "float string", query: floats, vars: v("s", "2.5"), cost: 3},
		{name: "float exponent", query: floats, vars: v("s", "1e3"), cost: 1000},
		{name: "float json.Number", query: floats, vars: v("s", json.Number("4")), cost: 4},
		{name: "float NaN", query: floats, vars: v("s", "NaN"), code: invalid, msg: "NaN cannot size a list"},
		{name: "float overflow", query: floats, vars: v("s", "1e400"), code: invalid},
		{name: "float garbage", query: floats, vars: v("s", "lots"), code: invalid},
		{name: "float infinity", query: floats, vars: v("s", "Inf"), opts: []complexity.Option{complexity.WithMaxBreadth(100)}, code: breadth},
		// A list-valued slicing argument counts elements, each coerced.
		{name: "list of strings", query: nums, vars: v("ids", []any{"1", "2", "3"}), cost: 3},
		{name: "list with a bad element", query: nums, vars: v("ids", []any{"1", "abc"}), code: invalid, msg: `argument ids[1]: "abc" is not a valid Int`},
		{name: "list with a null element", query: nums, vars: v("ids", []any{"1", nil}), cost: 2},
		{name: "single value is a list of one", query: nums, vars: v("ids", "500"), cost: 1},
		{name: "single bad value", query: nums, vars: v("ids", "abc"), code: invalid},
		{name: "literal list", query: `{ nums(ids: [1, 2]) { y } }`, cost: 2},
		{name: "literal list with unset variable", query: `query($e: Int) { nums(ids: [1, $e]) { y } }`, cost: 2},
		// A custom scalar's coercion is unknown: numbers size, nothing is refused.
		{name: "custom scalar string", query: longs, vars: v("f", "1000"), cost: 1000},
		{name: "custom scalar json.Number", query: longs, vars: v("f", json.Number("7")), cost: 7},
		{name: "custom scalar non-number", query: longs, vars: v("f", "abc"), cost: complexity.DefaultListSize},
		// Values inside input objects and lists are coerced too.
		{name: "input object", query: paged, vars: v("p", map[string]any{"first": "5", "ratio": "0.5", "tags": []any{"a"}}), cost: 2},
		{name: "input field", query: paged, vars: v("p", map[string]any{"first": "abc"}), code: invalid, msg: `field paged: argument page.first: "abc" is not a valid Int`},
		{name: "nested input field", query: paged, vars: v("p", map[string]any{"next": map[string]any{"ratio": true}}), code: invalid, msg: "argument page.next.ratio: true is not a valid Float"},
		{name: "list element of input field", query: paged, vars: v("p", map[string]any{"tags": []any{"a", map[string]any{}}}), code: invalid, msg: "argument page.tags[1]: an object is not a valid String"},
		{name: "scalar for input object", query: paged, vars: v("p", "first=5"), code: invalid, msg: "is not a valid Page (not an input object)"},
		{name: "literal input field", query: `{ paged(page: {first: "x"}) { y } }`, code: invalid},
		// String and Boolean take any scalar (gqlgen's UnmarshalString and
		// UnmarshalBoolean accept numbers and strings); lists and objects fail.
		{name: "number for a String", query: named, vars: map[string]any{"n": 5, "b": "yes"}, cost: 3},
		{name: "object for a String", query: named, vars: v("n", map[string]any{"a": 1}), code: invalid, msg: "argument name: an object is not a valid String"},
		{name: "list for a Boolean", query: named, vars: v("b", []any{true, false}), code: invalid, msg: "argument on: a list is not a valid Boolean"},
		// @skip/@include: exactly a Boolean, as gqlgen's resolveIfArgument.
		{name: "skip true", query: skip, vars: v("c", true), cost: 0},
		{name: "skip false", query: skip, vars: v("c", false), cost: 5},
		{name: "skip string", query: skip, vars: v("c", "true"), code: invalid, msg: `directive @skip: argument if: "true" is not a valid Boolean`},
		{name: "skip null", query: skip, vars: v("c", nil), code: invalid, msg: "a condition is required"},
		{name: "skip unset", query: skip, code: invalid},
		{name: "include on a fragment", query: `query($c: Boolean!) { ... @include(if: $c) { xs(first: 5) { y } } }`, vars: v("c", 1), code: invalid, msg: "directive @include"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := analyze(t, coerceSDL, tt.query, tt.vars, tt.opts...)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("err = %v, want cost %v", err, tt.cost)
				}
				if got := r.Cost.Float64(); got != tt.cost {
					t.Fatalf("cost %v, want %v", got, tt.cost)
				}
				return
			}
			var ce *complexity.Error
			if !errors.As(err, &ce) || ce.Code != tt.code {
				t.Fatalf("err = %v, want %s", err, tt.code)
			}
			if !strings.Contains(ce.Message, tt.msg) {
				t.Errorf("message %q, want it to contain %q", ce.Message, tt.msg)
			}
			if len(ce.Locations) == 0 {
				t.Errorf("no location")
			}
			if tt.code == breadth && ce.Value != tt.value && tt.value != 0 {
				t.Errorf("value %v, want %v", ce.Value, tt.value)
			}
			if tt.code == invalid {
				if !errors.Is(err, complexity.ErrInvalidArgumentValue) || ce.Value != 0 || ce.Limit != 0 {
					t.Errorf("err %v (value %v, limit %v): want ErrInvalidArgumentValue, 0 and 0", err, ce.Value, ce.Limit)
				}
			}
		})
	}
}

// A refusal names the field by its response path and maps to GraphQL like
// every other code.
func TestInvalidArgumentValueError(t *testing.T) {
	q := "query($f: Int) {\n  a: xs(first: 1) { y }\n  b: xs(first: $f) { y }\n}"
	_, err := analyze(t, coerceSDL, q, map[string]any{"f": "ten"})
	var ce *complexity.Error
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v", err)
	}
	want := `complexity: field xs: argument first: "ten" is not a valid Int (not a base-10 integer) (line 3, column 3)`
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	ge := ce.GQLError()
	if ge.Extensions["code"] != "INVALID_ARGUMENT_VALUE" || ge.Path.String() != "b" || len(ge.Locations) != 1 || ge.Locations[0].Line != 3 ||
		ge.Extensions["value"] != float64(0) || ge.Extensions["limit"] != float64(0) || ge.Message != ce.Message {
		t.Errorf("GQLError = %+v %v", ge, ge.Extensions)
	}
}

// A client's value is quoted in the message, cut to 64 bytes.
func TestInvalidValueIsTruncated(t *testing.T) {
	for name, huge := range map[string]any{
		"string":      strings.Repeat("9", 10000) + "x",
		"json.Number": json.Number(strings.Repeat("1", 10000) + "e"),
		"multibyte":   strings.Repeat("é", 5000),
	} {
		_, err := analyze(t, coerceSDL, `query($f: Int) { xs(first: $f) { y } }`, map[string]any{"f": huge})
		var ce *complexity.Error
		if !errors.As(err, &ce) || ce.Code != complexity.CodeInvalidArgumentValue {
			t.Fatalf("%s: err = %v", name, err)
		}
		if len(ce.Message) > 200 || !strings.Contains(ce.Message, "…") {
			t.Errorf("%s: message of %d bytes: %.300s", name, len(ce.Message), ce.Message)
		}
		if !utf8.ValidString(ce.Message) {
			t.Errorf("%s: message is not valid UTF-8", name)
		}
	}
	// A huge literal in the document too.
	_, err := analyze(t, coerceSDL, `{ xs(first: `+strings.Repeat("9", 5000)+`) { y } }`, nil)
	var ce *complexity.Error
	if !errors.As(err, &ce) || len(ce.Message) > 200 {
		t.Fatalf("err = %v", err)
	}
}

// An Int slicing argument sent as a JSON string, on the example schema and
// through the pipeline a gqlgen server runs (validation, then
// VariableValues): it prices exactly as the number gqlgen passes the
// resolver, not at the default list size, and meets the breadth cap.
func TestStringIntVariablePricesAsTheNumber(t *testing.T) {
	sdl, err := os.ReadFile(filepath.Join("..", "graph", "schema.graphqls"))
	if err != nil {
		t.Fatal(err)
	}
	schema, err := complexity.LoadSchema(&ast.Source{Name: "schema.graphqls", Input: string(sdl)})
	if err != nil {
		t.Fatal(err)
	}
	const q = `query($f:Int){ user(login:"octocat") { repos(first:$f) { issues(first:$f) { title } } } }`
	doc, err := parser.ParseQuery(&ast.Source{Input: q})
	if err != nil {
		t.Fatal(err)
	}
	if errs := validator.Validate(schema, doc); len(errs) > 0 {
		t.Fatal(errs)
	}
	price := func(f any, opts ...complexity.Option) (*complexity.Report, error) {
		t.Helper()
		a, err := complexity.New(schema, opts...)
		if err != nil {
			t.Fatal(err)
		}
		vars, err := validator.VariableValues(schema, doc.Operations[0], map[string]any{"f": f})
		if err != nil {
			t.Fatalf("VariableValues(%#v): %v", f, err)
		}
		return a.AnalyzeOperation(doc, doc.Operations[0], vars)
	}
	for _, pair := range [][2]any{{json.Number("100"), "100"}, {json.Number("1000000"), "1000000"}} {
		num, err1 := price(pair[0])
		str, err2 := price(pair[1])
		if err1 != nil || err2 != nil || num.Cost != str.Cost || num.Nodes != str.Nodes {
			t.Fatalf("%v: number %+v %v, string %+v %v", pair[1], num, err1, str, err2)
		}
	}
	if r, _ := price("100"); r.Points != 10101 {
		t.Errorf(`{"f":"100"} costs %d, want 10101`, r.Points)
	}
	if _, err := price("1000000", complexity.WithMaxBreadth(100)); !errors.Is(err, complexity.ErrMaxBreadth) {
		t.Errorf("max breadth: err = %v", err)
	}
	if _, err := price("-5"); !errors.Is(err, complexity.ErrMaxBreadth) {
		t.Errorf("negative: err = %v", err)
	}
}
