package complexity_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/costguard/costguard/complexity"
)

// The rules where the peers' models differ, each under the default and
// under its option, requested, through a compiled plan and actual.

const negativeArgumentSDL = `
type Query {
  items(approximate: Boolean @cost(weight: "-50")): [Item] @listSize(assumedSize: 100)
  discounted: Item @cost(weight: "-12")
}
type Item { id: ID name: String @cost(weight: "2") }
`

func TestNegativeOwnCost(t *testing.T) {
	subtree := complexity.WithSubtreeDiscounts(true)
	tests := []struct {
		name      string
		opts      []complexity.Option
		query     string
		vars      map[string]any
		data      string
		requested int64
		actual    int64
	}{
		// The field's own cost, 0 + -50, is clamped at 0 and the 100 items
		// are kept; 3 returned cost 3.
		{name: "argument", query: `{ items(approximate: true) { id } }`,
			data: `{"items":[{"id":"1"},{"id":"2"},{"id":"3"}]}`, requested: 100, actual: 3},
		{name: "argument, subtree", opts: []complexity.Option{subtree}, query: `{ items(approximate: true) { id } }`,
			data: `{"items":[{"id":"1"},{"id":"2"},{"id":"3"}]}`, requested: 50, actual: 0},
		// A variable goes through the plan's dynamic own cost.
		{name: "variable", query: `query($a: Boolean) { items(approximate: $a) { id } }`, vars: map[string]any{"a": true},
			data: `{"items":[]}`, requested: 100, actual: 0},
		{name: "variable, subtree", opts: []complexity.Option{subtree}, query: `query($a: Boolean) { items(approximate: $a) { id } }`,
			vars: map[string]any{"a": true}, data: `{"items":[]}`, requested: 50, actual: 0},
		// A negative field weight: max(0, -12) + Item 1 + name 2.
		{name: "field weight", query: `{ discounted { name } }`,
			data: `{"discounted":{"name":"x"}}`, requested: 3, actual: 3},
		{name: "field weight, subtree", opts: []complexity.Option{subtree}, query: `{ discounted { name } }`,
			data: `{"discounted":{"name":"x"}}`, requested: 0, actual: 0},
	}
	schema := loadSchema(t, negativeArgumentSDL)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := complexity.New(schema, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			p := prepare(t, schema, tt.query, tt.vars)
			requested, actual, err := prices(t, a, p, tt.data)
			if err != nil {
				t.Fatal(err)
			}
			if requested != tt.requested || actual != tt.actual {
				t.Errorf("requested %d, actual %d; want %d, %d", requested, actual, tt.requested, tt.actual)
			}
			plan, err := a.Compile(p.doc, p.op)
			if err != nil {
				t.Fatal(err)
			}
			r, err := plan.Evaluate(p.vars)
			if err != nil || r.Points != tt.requested {
				t.Errorf("plan: %v points, %v; want %d", r, err, tt.requested)
			}
		})
	}
}

const nullsSDL = `
input Filter { min: Int @cost(weight: "1") nested: Filter @cost(weight: "4") }
type Query {
  search(term: String @cost(weight: "3"), filter: Filter, tags: [String] @cost(weight: "0.5")): Int
  byDefault(filter: Filter = null): Int
}
`

func TestNullArguments(t *testing.T) {
	tests := []struct {
		name          string
		query         string
		vars          map[string]any
		free, charged float64
	}{
		{name: "literal", query: `{ search(term: null) }`, free: 0, charged: 3},
		// An input object without @cost weighs its type's 1.
		{name: "input object", query: `{ search(filter: null) }`, free: 0, charged: 1},
		{name: "input field", query: `{ search(filter: {nested: null}) }`, free: 1, charged: 1 + 4},
		{name: "list element", query: `{ search(tags: ["a", null]) }`, free: 0.5, charged: 1},
		{name: "variable", query: `query($t: String) { search(term: $t) }`, vars: map[string]any{"t": nil}, free: 0, charged: 3},
		// A variable not sent is absent, not null.
		{name: "variable not sent", query: `query($t: String) { search(term: $t) }`, free: 0, charged: 0},
		{name: "argument left out", query: `{ search }`, free: 0, charged: 0},
		{name: "schema default", query: `{ byDefault }`, free: 0, charged: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, charged := range []bool{false, true} {
				want := tt.free
				if charged {
					want = tt.charged
				}
				r, err := analyze(t, nullsSDL, tt.query, tt.vars, complexity.WithNullArgumentsCharged(charged))
				if err != nil {
					t.Fatal(err)
				}
				if got := r.Cost.Float64(); got != want {
					t.Errorf("charged %v: cost %v, want %v", charged, got, want)
				}
			}
		})
	}
}

const defaultsSDL = `
input In { a: Int b: Int = 5 @cost(weight: "2") }
input Wrap { in: In = {a: 1} }
type Query {
  field(arg: In = {a: 1}): Int
  wrapped(w: Wrap): Int
  listed(ins: [In] = [{a: 1}, {a: 2}]): Int
}
`

// TestDefaultsInsideDefaults pins coercion's filling in of input-field
// defaults at every level: In {a: 1} is worth In 1 + b's 2, wherever it
// comes from.
func TestDefaultsInsideDefaults(t *testing.T) {
	tests := []struct {
		query string
		cost  float64
	}{
		{`{ field }`, 1 + 2},          // the argument's default
		{`{ field(arg: {a: 1}) }`, 3}, // a value the client wrote
		{`{ field(arg: {b: null}) }`, 1},
		{`{ wrapped(w: {}) }`, 1 + 1 + 2}, // Wrap, then in's default
		{`{ listed }`, 2 * (1 + 2)},
	}
	for _, tt := range tests {
		r, err := analyze(t, defaultsSDL, tt.query, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Cost.Float64(); got != tt.cost {
			t.Errorf("%s: cost %v, want %v", tt.query, got, tt.cost)
		}
	}
}

func TestDefaultThatFillsItselfInIsRefused(t *testing.T) {
	for _, sdl := range []string{
		`input R { next: R = {} } type Query { f(r: R): Int }`,
		`input R { next: [R] = [{}] } type Query { f(r: R): Int }`,
		`input A { b: B = {} } input B { a: A = {} } type Query { f(a: A = {}): Int }`,
	} {
		schema := loadSchema(t, sdl)
		_, err := complexity.New(schema)
		if !errors.Is(err, complexity.ErrInvalidSchema) || !strings.Contains(err.Error(), "fills itself in without end") {
			t.Errorf("%s: err = %v", sdl, err)
		}
	}
	// A recursive input type whose default stops is fine: {} is worth R 1
	// + next's default {next: null}, R 1.
	r, err := analyze(t, `input R { next: R = {next: null} } type Query { f(r: R): Int }`, `{ f(r: {}) }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Cost.Float64() != 2 {
		t.Errorf("cost %v, want 2", r.Cost)
	}
}

// TestDefaultsArePricedOnce: each default is priced once, so defaults that
// would double at every level of a 40-deep chain (2⁴⁰ values once filled
// in) price at once.
func TestDefaultsArePricedOnce(t *testing.T) {
	const levels = 40
	var sdl strings.Builder
	for i := range levels {
		sdl.WriteString("input T" + strconv.Itoa(i) + " { a: T" + strconv.Itoa(i+1) + " = {} b: T" + strconv.Itoa(i+1) + " = {} }\n")
	}
	sdl.WriteString("input T" + strconv.Itoa(levels) + ` { x: Int = 1 @cost(weight: "1") }` + "\ntype Query { f(t: T0 = {}): Int }")
	r, err := analyze(t, sdl.String(), `{ f }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := 2.0 // T40 and its x
	for range levels {
		want = 1 + 2*want
	}
	if r.Cost.Float64() != want {
		t.Errorf("cost %v, want %v", r.Cost, want)
	}
}
