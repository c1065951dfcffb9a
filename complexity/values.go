package complexity

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"

	"github.com/vektah/gqlparser/v2/ast"
)

// value is an argument or input value: either a literal from the document
// (whose nested parts may still be variables) or a Go value taken from the
// variables map (JSON-shaped: maps, slices, numbers, strings, bools).
type value struct {
	lit   *ast.Value
	raw   any
	isRaw bool
}

// resolve follows a literal through variables: a variable becomes its value
// from the variables map, else its declared default. ok is false when the
// value is absent (an unset variable without default), which is not the
// same as null.
func (w *walker) resolve(lit *ast.Value) (value, bool) {
	// Two rounds at most: a variable, then its default (defaults are constant
	// in a validated document; the bound keeps unvalidated ones finite).
	for range 2 {
		if lit == nil {
			return value{}, false
		}
		if lit.Kind != ast.Variable {
			return value{lit: lit}, true
		}
		if v, ok := w.vars[lit.Raw]; ok {
			return value{raw: v, isRaw: true}, true
		}
		def := lit.VariableDefinition
		if def == nil && w.op != nil {
			def = w.op.VariableDefinitions.ForName(lit.Raw)
		}
		if def == nil {
			return value{}, false
		}
		lit = def.DefaultValue
	}
	return value{}, false
}

func (v value) isNull() bool {
	if v.isRaw {
		if v.raw == nil {
			return true
		}
		rv := reflect.ValueOf(v.raw)
		switch rv.Kind() {
		case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice:
			return rv.IsNil()
		}
		return false
	}
	return v.lit == nil || v.lit.Kind == ast.NullValue
}

// argument returns the value an argument takes for field f: the literal or
// variable in the query, else the schema default (an unset variable falls
// back to the default too, as in execution).
func (w *walker) argument(f *ast.Field, in *inputInfo) (value, bool) {
	if a := f.Arguments.ForName(in.name); a != nil {
		if v, ok := w.resolve(a.Value); ok {
			return v, true
		}
	}
	if in.def != nil {
		return w.resolve(in.def)
	}
	return value{}, false
}

// given reports whether an argument has a non-null value.
func (w *walker) given(f *ast.Field, in *inputInfo) (value, bool) {
	v, ok := w.argument(f, in)
	if !ok || v.isNull() {
		return value{}, false
	}
	return v, true
}

// elems calls fn for each element when v is a list and reports whether it
// was one.
func (w *walker) elems(v value, fn func(value)) bool {
	if !v.isRaw {
		if v.lit.Kind != ast.ListValue {
			return false
		}
		for _, ch := range v.lit.Children {
			if e, ok := w.resolve(ch.Value); ok {
				fn(e)
			}
		}
		return true
	}
	if s, ok := v.raw.([]any); ok {
		for _, e := range s {
			fn(value{raw: e, isRaw: true})
		}
		return true
	}
	rv := reflect.ValueOf(v.raw)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return false
	}
	for i := range rv.Len() {
		fn(value{raw: rv.Index(i).Interface(), isRaw: true})
	}
	return true
}

// inputField returns field name of an input object value.
func (w *walker) inputField(v value, name string) (value, bool) {
	if !v.isRaw {
		if v.lit.Kind != ast.ObjectValue {
			return value{}, false
		}
		for _, ch := range v.lit.Children {
			if ch.Name == name {
				return w.resolve(ch.Value)
			}
		}
		return value{}, false
	}
	if m, ok := v.raw.(map[string]any); ok {
		x, ok := m[name]
		return value{raw: x, isRaw: true}, ok
	}
	rv := reflect.ValueOf(v.raw)
	if rv.Kind() != reflect.Map || rv.Type().Key().Kind() != reflect.String {
		return value{}, false
	}
	x := rv.MapIndex(reflect.ValueOf(name).Convert(rv.Type().Key()))
	if !x.IsValid() {
		return value{}, false
	}
	return value{raw: x.Interface(), isRaw: true}, true
}

// argCost is argCost(f) of the model: the sum over f's non-null arguments of
// their valueCost.
func (w *walker) argCost(f *ast.Field, fi *fieldInfo) Cost {
	var total Cost
	for _, in := range fi.args {
		if v, ok := w.given(f, in); ok {
			total = addCost(total, w.valueCost(v, in.typ, in, true))
		}
	}
	return total
}

// valueCost prices one input value of type t. own is the argument or input
// field the value is for; its @cost replaces the type's weight. Missing
// input-object fields take their schema defaults (as coercion would), except
// inside a value that is itself a default, so a recursive input type with a
// default cannot expand forever.
func (w *walker) valueCost(v value, t *ast.Type, own *inputInfo, defaults bool) Cost {
	if v.isNull() {
		return 0
	}
	if t.Elem != nil {
		var total Cost
		if w.elems(v, func(e value) { total = addCost(total, w.valueCost(e, t.Elem, own, defaults)) }) {
			return total
		}
		return w.valueCost(v, t.Elem, own, defaults) // a single value coerces to a list of one
	}
	ti := w.c.types[t.NamedType]
	var c Cost
	switch {
	case own.hasWeight:
		c = own.weight
	case ti != nil:
		c = ti.weight
	}
	if ti == nil || ti.def.Kind != ast.InputObject {
		return c
	}
	for _, in := range ti.inputFields {
		fv, ok := w.inputField(v, in.name)
		nested := defaults
		if !ok {
			if !defaults || in.def == nil {
				continue
			}
			if fv, ok = w.resolve(in.def); !ok {
				continue
			}
			nested = false
		}
		if !fv.isNull() {
			c = addCost(c, w.valueCost(fv, in.typ, in, nested))
		}
	}
	return c
}

// size reads a slicing argument as a list size: an integer (floats round
// up, out-of-range values saturate), or the length of a list. ok is false
// for values that are neither.
func (w *walker) size(v value) (n int64, isList, ok bool) {
	var count int64
	if w.elems(v, func(value) { count++ }) {
		return count, true, true
	}
	if !v.isRaw {
		switch v.lit.Kind {
		case ast.IntValue:
			return parseIntSat(v.lit.Raw)
		case ast.FloatValue:
			f, err := strconv.ParseFloat(v.lit.Raw, 64)
			if err != nil {
				return 0, false, false
			}
			return floatSize(f)
		}
		return 0, false, false
	}
	switch x := v.raw.(type) {
	case json.Number:
		if n, _, ok := parseIntSat(string(x)); ok {
			return n, false, true
		}
		f, err := x.Float64()
		if err != nil {
			return 0, false, false
		}
		return floatSize(f)
	case float64:
		return floatSize(x)
	case float32:
		return floatSize(float64(x))
	}
	rv := reflect.ValueOf(v.raw)
	switch {
	case rv.CanInt():
		return rv.Int(), false, true
	case rv.CanUint():
		if u := rv.Uint(); u <= math.MaxInt64 {
			return int64(u), false, true
		}
		return math.MaxInt64, false, true
	}
	return 0, false, false
}

func parseIntSat(s string) (int64, bool, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		ne, ok := err.(*strconv.NumError)
		if !ok || ne.Err != strconv.ErrRange {
			return 0, false, false
		}
		// n is already ±MaxInt64-ish on range errors: MaxInt64 or MinInt64.
	}
	return n, false, true
}

func floatSize(f float64) (int64, bool, bool) {
	switch {
	case math.IsNaN(f):
		return 0, false, false
	case f >= math.MaxInt64:
		return math.MaxInt64, false, true
	case f <= math.MinInt64:
		return math.MinInt64, false, true
	}
	return int64(math.Ceil(f)), false, true
}

// included applies @skip and @include. A condition that cannot be read (an
// unvalidated document) includes the selection: pricing more is the safe
// side.
func (w *walker) included(dirs ast.DirectiveList) bool {
	for _, d := range dirs {
		if d.Name != "skip" && d.Name != "include" {
			continue
		}
		a := d.Arguments.ForName("if")
		if a == nil {
			continue
		}
		v, ok := w.resolve(a.Value)
		if !ok {
			continue
		}
		var b bool
		switch {
		case v.isRaw:
			if b, ok = v.raw.(bool); !ok {
				continue
			}
		case v.lit.Kind == ast.BooleanValue:
			b = v.lit.Raw == "true"
		default:
			continue
		}
		if (d.Name == "skip") == b {
			return false
		}
	}
	return true
}

// describeSize renders a slicing argument for messages: "first=500", or
// "ids (500 elements)" for a list.
func describeSize(name string, n int64, isList bool) string {
	if isList {
		return fmt.Sprintf("%s (%d elements)", name, n)
	}
	return fmt.Sprintf("%s=%d", name, n)
}
