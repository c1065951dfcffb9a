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

// resolve follows a literal through the walk's variables (see
// resolveIn).
func (w *walker) resolve(lit *ast.Value) (value, bool) { return resolveIn(w.vars, w.op, lit) }

// resolveIn follows a literal of op through vars: a variable becomes its
// value from vars, else its declared default. ok is false when the value
// is absent (an unset variable without default), which is not the same
// as null.
func resolveIn(vars map[string]any, op *ast.OperationDefinition, lit *ast.Value) (value, bool) {
	// Two rounds at most: a variable, then its default (defaults are constant
	// in a validated document; the bound keeps unvalidated ones finite).
	for range 2 {
		if lit == nil {
			return value{}, false
		}
		if lit.Kind != ast.Variable {
			return value{lit: lit}, true
		}
		if v, ok := vars[lit.Raw]; ok {
			return value{raw: v, isRaw: true}, true
		}
		def := lit.VariableDefinition
		if def == nil && op != nil {
			def = op.VariableDefinitions.ForName(lit.Raw)
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

// slicerValue returns the non-null value slicing argument s takes for
// field f: the argument's (its default when absent), then, down s's path,
// each input field's, a missing one taking its default as coercion
// fills it in. ok is false when a step is null or absent; bad is set when
// a step that must be an input object is not one.
func (w *walker) slicerValue(f *ast.Field, s *slicer) (v value, ok bool, bad *invalidValue) {
	v, ok = w.given(f, s.path[0])
	for i, in := range s.path[1:] {
		if !ok {
			return value{}, false, nil
		}
		if _, open := asOpen(v); !open && !isObject(v) {
			bad = &invalidValue{v: v, typ: s.path[i].named.name, reason: notObject}
			for j := i; j >= 1; j-- {
				bad = bad.within("." + s.path[j].name)
			}
			return value{}, false, bad
		}
		if v, ok = w.inputField(v, in.name); !ok && in.def != nil {
			v, ok = w.resolve(in.def)
		}
		ok = ok && !v.isNull()
	}
	return v, ok, nil
}

// elems calls fn for each element when v is a list and reports whether it
// was one. An element that is an unset variable is null, as in execution.
func (w *walker) elems(v value, fn func(value)) bool {
	if !v.isRaw {
		if v.lit.Kind != ast.ListValue {
			return false
		}
		for _, ch := range v.lit.Children {
			e, _ := w.resolve(ch.Value)
			fn(e)
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
	if o, ok := v.raw.(openValue); ok {
		return o.field(name), true
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

// argCost is argCost(f) of the model: the sum over f's arguments of their
// valueCost, an argument left out costing its schema default's (New prices
// every default once). A value the executor would not coerce is refused.
func (w *walker) argCost(f *ast.Field, fi *fieldInfo) (Cost, error) {
	var total Cost
	for _, in := range fi.args {
		var v value
		ok := false
		if a := f.Arguments.ForName(in.name); a != nil {
			v, ok = w.resolve(a.Value)
		}
		var c Cost
		var bad *invalidValue
		if ok {
			c, bad = w.valueCost(v, in.typ, in)
		} else {
			c, bad = w.costByDefault(in)
		}
		if bad != nil {
			return 0, w.invalidArgument(f, fi.name, in.name, bad)
		}
		total = addCost(total, c)
	}
	return total, nil
}

// valueCost prices one input value of type t, coercing it as the executor
// would: a bad Int or Float, a list or object for a scalar, or a scalar for
// an input object is refused. own is the argument or input field the value
// is for; its @cost replaces the type's weight. A null costs nullCost.
// Input-object fields left out take their schema defaults, as coercion
// fills them in, defaults inside defaults included (costByDefault).
func (w *walker) valueCost(v value, t *ast.Type, own *inputInfo) (Cost, *invalidValue) {
	if v.isNull() {
		return w.c.nullCost(t, own), nil
	}
	if o, ok := asOpen(v); ok {
		return w.openCost(o, t, own, nil), nil
	}
	if t.Elem != nil {
		var total Cost
		var bad *invalidValue
		i := 0
		list := w.elems(v, func(e value) {
			if bad != nil {
				return
			}
			c, b := w.valueCost(e, t.Elem, own)
			if b != nil {
				bad = b.within("[" + strconv.Itoa(i) + "]")
			}
			total = addCost(total, c)
			i++
		})
		if list {
			return total, bad
		}
		return w.valueCost(v, t.Elem, own) // a single value coerces to a list of one
	}
	ti := w.c.types[t.NamedType]
	c := own.weightIn(ti)
	if ti == nil {
		return c, nil
	}
	if ti.scalar != notBuiltin {
		if why := checkScalar(v, ti.scalar); why != "" {
			return 0, &invalidValue{v: v, typ: ti.name, reason: why}
		}
		return c, nil
	}
	if ti.def.Kind != ast.InputObject {
		return c, nil
	}
	if !isObject(v) {
		return 0, &invalidValue{v: v, typ: ti.name, reason: notObject}
	}
	for _, in := range ti.inputFields {
		var fc Cost
		var bad *invalidValue
		if fv, ok := w.inputField(v, in.name); ok {
			fc, bad = w.valueCost(fv, in.typ, in)
		} else {
			fc, bad = w.costByDefault(in)
		}
		if bad != nil {
			return 0, bad.within("." + in.name)
		}
		c = addCost(c, fc)
	}
	return c, nil
}

// nullCost is what a null value of type t for own costs: nothing, or with
// WithNullArgumentsCharged the weight of its place, own's @cost else the
// named type's weight.
func (c *compiled) nullCost(t *ast.Type, own *inputInfo) Cost {
	if !c.chargeNulls {
		return 0
	}
	return own.weightIn(c.types[t.Name()])
}

// weightIn is what one value for own costs by its place alone: own's @cost,
// else the weight of ti, its named type (0 when ti is unknown).
func (own *inputInfo) weightIn(ti *typeInfo) Cost {
	switch {
	case own.hasWeight:
		return own.weight
	case ti != nil:
		return ti.weight
	}
	return 0
}

// size reads slicing argument in's non-null value v as a list size, after
// coercing it as the executor would (see coerce.go):
//
//   - a list type counts its elements (a single value is a list of one),
//     each element coerced to the element type;
//   - Int is the integer the resolver receives (a string or json.Number
//     holding one included); Float rounds up, and saturates;
//   - any other type (a custom scalar, an ID…) is read as today: a Go or
//     JSON number, or a string holding a base-10 integer, sizes the list;
//     anything else does not (ok false), and is never refused, since the
//     analyzer cannot know the scalar's coercion.
//
// bad is set for a value the executor would refuse. A value WorstCase
// left open reads at its bound (openSize).
func (w *walker) size(v value, in *inputInfo) (n int64, isList, ok bool, bad *invalidValue) {
	if o, open := asOpen(v); open {
		n, isList, ok = w.openSize(o, in)
		return n, isList, ok, nil
	}
	t := in.typ
	if t.Elem != nil {
		var count int64
		list := w.elems(v, func(e value) {
			if bad == nil {
				if bad = w.checkElem(e, in); bad != nil {
					bad = bad.within("[" + strconv.FormatInt(count, 10) + "]")
				}
			}
			count++
		})
		if !list {
			count = 1
			bad = w.checkElem(v, in)
		}
		return count, true, true, bad
	}
	if ti := in.named; ti != nil {
		switch ti.scalar {
		case builtinInt:
			n, why := coerceInt(v)
			if why != "" {
				return 0, false, false, &invalidValue{v: v, typ: ti.name, reason: why}
			}
			return n, false, true, nil
		case builtinFloat:
			f, why := coerceFloat(v)
			if why == "" && math.IsNaN(f) {
				why = unpriceable
			}
			if why != "" {
				return 0, false, false, &invalidValue{v: v, typ: ti.name, reason: why}
			}
			n, _, _ := floatSize(f)
			return n, false, true, nil
		}
	}
	n, ok = numberSize(v)
	return n, false, ok, nil
}

// checkElem coerces one element of list-typed argument in: a scalar
// element directly against the argument's named type, anything deeper (an
// input object, a nested list) as valueCost does.
func (w *walker) checkElem(e value, in *inputInfo) *invalidValue {
	if e.isNull() {
		return nil
	}
	if _, open := asOpen(e); open {
		return nil
	}
	if ti := in.named; ti != nil && in.typ.Elem.Elem == nil && ti.def.Kind != ast.InputObject {
		if why := checkScalar(e, ti.scalar); why != "" {
			return &invalidValue{v: e, typ: ti.name, reason: why}
		}
		return nil
	}
	_, bad := w.valueCost(e, in.typ.Elem, in)
	return bad
}

// numberSize reads a value of a type whose coercion the analyzer does not
// know as a number, if it is one: an integer (floats round up, out-of-range
// values saturate) or a string holding a base-10 integer.
func numberSize(v value) (int64, bool) {
	if !v.isRaw {
		switch v.lit.Kind {
		case ast.IntValue, ast.StringValue, ast.BlockValue:
			n, _, ok := parseIntSat(v.lit.Raw)
			return n, ok
		case ast.FloatValue:
			f, err := strconv.ParseFloat(v.lit.Raw, 64)
			if err != nil {
				return 0, false
			}
			n, _, ok := floatSize(f)
			return n, ok
		}
		return 0, false
	}
	switch x := v.raw.(type) {
	case string:
		n, _, ok := parseIntSat(x)
		return n, ok
	case json.Number:
		if n, _, ok := parseIntSat(string(x)); ok {
			return n, true
		}
		f, err := x.Float64()
		if err != nil {
			return 0, false
		}
		n, _, ok := floatSize(f)
		return n, ok
	case float64:
		n, _, ok := floatSize(x)
		return n, ok
	case float32:
		n, _, ok := floatSize(float64(x))
		return n, ok
	}
	rv := reflect.ValueOf(v.raw)
	switch {
	case rv.CanInt():
		return rv.Int(), true
	case rv.CanUint():
		if u := rv.Uint(); u <= math.MaxInt64 {
			return int64(u), true
		}
		return math.MaxInt64, true
	}
	return 0, false
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

// included applies @skip and @include. Their condition is read as the
// executor reads it: a Boolean, else the request fails. Such a failure is
// kept in w.refused (the collection cannot return errors) and reported
// when the collection ends; the selection counts as included meanwhile.
func (w *walker) included(dirs ast.DirectiveList) bool {
	return len(dirs) == 0 || w.includedBy(dirs) // most selections have no directive: inlined
}

func (w *walker) includedBy(dirs ast.DirectiveList) bool {
	for _, d := range dirs {
		a := conditionArgument(d)
		if a == nil {
			continue
		}
		b, bad := condition(w.vars, w.op, a)
		if bad != nil {
			if w.refused == nil {
				w.refused = w.invalidCondition(d, bad)
			}
			continue
		}
		if (d.Name == "skip") == b {
			return false
		}
	}
	return true
}

// conditionArgument is the if argument of d when d is @skip or @include,
// else nil.
func conditionArgument(d *ast.Directive) *ast.Argument {
	if d.Name != "skip" && d.Name != "include" {
		return nil
	}
	return d.Arguments.ForName("if")
}

// describeSize renders a slicing argument for messages: "first=500", or
// "ids (500 elements)" for a list.
func describeSize(name string, n int64, isList bool) string {
	if isList {
		return fmt.Sprintf("%s (%d elements)", name, n)
	}
	return fmt.Sprintf("%s=%d", name, n)
}

// describeAsked renders a slicing argument that asked for asked items and
// counts as n: as describeSize does, adding what a negative one (every
// item) was read as.
func describeAsked(name string, asked, n int64, isList bool) string {
	if asked < 0 {
		return fmt.Sprintf("%s (every item: the assumed size %d)", describeSize(name, asked, isList), n)
	}
	return describeSize(name, n, isList)
}
