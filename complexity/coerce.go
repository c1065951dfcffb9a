package complexity

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/internal/echo"
)

// Coercion: the analyzer reads a value as the number the resolver will
// receive, or refuses it when the executor would fail to coerce it. The
// reference is what reaches a gqlgen resolver: gqlparser's
// validator.VariableValues accepts a variable, ast.Value.Value turns a
// literal into Go (an Int literal is strconv.ParseInt(raw, 10, 64)), and
// gqlgen's graphql.UnmarshalInt, UnmarshalFloat… convert the result. For
// Int that is strconv.ParseInt(s, 10, 64) on a string or json.Number (an
// optional sign and decimal digits: "+5" is 5; "1e3", " 5", "5.0" and
// "0x10" fail), any Go int kind as is, and nothing else.
//
// Where gqlgen refuses a value that another executor could accept as a
// number (a whole float64 for Int, which VariableValues lets through from
// JSON decoded without UseNumber; a Go uint), the analyzer reads the
// number: gqlgen then fails the field before its resolver runs, and any
// executor that accepts it gets the price of what it runs.

// builtin is a built-in scalar type whose coercion the analyzer knows.
type builtin uint8

const (
	notBuiltin builtin = iota // custom scalars, enums, input objects…
	builtinInt
	builtinFloat
	builtinString // String and ID: any scalar value coerces
	builtinBoolean
)

func builtinScalar(name string) builtin {
	switch name {
	case "Int":
		return builtinInt
	case "Float":
		return builtinFloat
	case "String", "ID":
		return builtinString
	case "Boolean":
		return builtinBoolean
	}
	return notBuiltin
}

// The reasons a value does not coerce. Constants, so a refusal costs no
// formatting until it becomes an *Error.
const (
	notInteger   = "not a base-10 integer"
	intRange     = "out of the 64-bit range"
	notNumber    = "not a number"
	unpriceable  = "NaN cannot size a list"
	notScalar    = "a list or object where a scalar is expected"
	notObject    = "not an input object"
	notBoolean   = "not a Boolean"
	unsetBoolean = "a condition is required"
)

// invalidValue is a value the executor would refuse: where it sits inside
// the argument (".filter.min", "[2]", or "" for the argument itself), the
// value, the type it failed as and why.
type invalidValue struct {
	at     string
	v      value
	typ    string
	reason string
}

// within prefixes the position of a nested refusal.
func (b *invalidValue) within(step string) *invalidValue {
	b.at = step + b.at
	return b
}

// coerceInt returns the Int the resolver receives for a non-null v, or
// why there is none.
func coerceInt(v value) (int64, string) {
	if !v.isRaw {
		switch v.lit.Kind {
		case ast.IntValue, ast.StringValue, ast.BlockValue:
			// A string literal reaches UnmarshalInt as a string (only in
			// documents validation would have refused).
			return parseInt(v.lit.Raw)
		case ast.FloatValue:
			return 0, notInteger
		case ast.ListValue, ast.ObjectValue:
			return 0, notScalar
		}
		return 0, notInteger // an enum name or a Boolean
	}
	switch x := v.raw.(type) {
	case int:
		return int64(x), ""
	case int64:
		return x, ""
	case string:
		return parseInt(x)
	case json.Number:
		return parseInt(string(x))
	case float64:
		return wholeFloat(x)
	}
	rv := reflect.ValueOf(v.raw)
	switch {
	case rv.CanInt():
		return rv.Int(), ""
	case rv.CanUint():
		if u := rv.Uint(); u <= math.MaxInt64 {
			return int64(u), ""
		}
		return 0, intRange
	case rv.CanFloat():
		return wholeFloat(rv.Float())
	case rv.Kind() == reflect.String:
		return parseInt(rv.String())
	case rv.Kind() == reflect.Slice, rv.Kind() == reflect.Array, rv.Kind() == reflect.Map:
		return 0, notScalar
	}
	return 0, notInteger
}

func parseInt(s string) (int64, string) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, intRange
		}
		return 0, notInteger
	}
	return n, ""
}

// wholeFloat accepts a float that is an integer within int64.
func wholeFloat(f float64) (int64, string) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f):
		return 0, notInteger
	case f < math.MinInt64 || f >= math.MaxInt64: // float64(MaxInt64) is 2^63, out of range
		return 0, intRange
	}
	return int64(f), ""
}

// coerceFloat returns the Float the resolver receives for a non-null v
// (gqlgen's UnmarshalFloat: strconv.ParseFloat on a string or
// json.Number, numbers as they are), or why there is none. NaN and the
// infinities parse; sizing decides what to do with them.
func coerceFloat(v value) (float64, string) {
	if !v.isRaw {
		switch v.lit.Kind {
		case ast.IntValue, ast.FloatValue, ast.StringValue, ast.BlockValue:
			return parseFloat(v.lit.Raw)
		case ast.ListValue, ast.ObjectValue:
			return 0, notScalar
		}
		return 0, notNumber
	}
	switch x := v.raw.(type) {
	case float64:
		return x, ""
	case int:
		return float64(x), ""
	case int64:
		return float64(x), ""
	case string:
		return parseFloat(x)
	case json.Number:
		return parseFloat(string(x))
	}
	rv := reflect.ValueOf(v.raw)
	switch {
	case rv.CanFloat():
		return rv.Float(), ""
	case rv.CanInt():
		return float64(rv.Int()), ""
	case rv.CanUint():
		return float64(rv.Uint()), ""
	case rv.Kind() == reflect.String:
		return parseFloat(rv.String())
	case rv.Kind() == reflect.Slice, rv.Kind() == reflect.Array, rv.Kind() == reflect.Map:
		return 0, notScalar
	}
	return 0, notNumber
}

func parseFloat(s string) (float64, string) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, intRange
		}
		return 0, notNumber
	}
	return f, ""
}

// scalarOnly refuses a list or an object where a String, ID or Boolean is
// expected: no mapping of those scalars coerces one. Other values pass;
// what they hold does not change a price.
func scalarOnly(v value) string {
	if !v.isRaw {
		if v.lit.Kind == ast.ListValue || v.lit.Kind == ast.ObjectValue {
			return notScalar
		}
		return ""
	}
	switch v.raw.(type) {
	case string, bool, json.Number, int, int64, float64:
		return ""
	}
	switch reflect.ValueOf(v.raw).Kind() {
	case reflect.Slice, reflect.Array, reflect.Map, reflect.Struct:
		return notScalar
	}
	return ""
}

// checkScalar reports why a non-null value of built-in scalar type s does
// not coerce, or "".
func checkScalar(v value, s builtin) string {
	switch s {
	case builtinInt:
		_, why := coerceInt(v)
		return why
	case builtinFloat:
		_, why := coerceFloat(v)
		return why
	case builtinString, builtinBoolean:
		return scalarOnly(v)
	}
	return ""
}

// isObject reports whether v can be read as an input object.
func isObject(v value) bool {
	if !v.isRaw {
		return v.lit.Kind == ast.ObjectValue
	}
	if _, ok := v.raw.(map[string]any); ok {
		return true
	}
	rv := reflect.ValueOf(v.raw)
	return rv.Kind() == reflect.Map && rv.Type().Key().Kind() == reflect.String
}

// condition reads the if argument of @skip or @include of op, with vars,
// as the executor does (gqlgen's resolveIfArgument): exactly a Boolean,
// else the request fails.
func condition(vars map[string]any, op *ast.OperationDefinition, a *ast.Argument) (bool, *invalidValue) {
	v, ok := resolveIn(vars, op, a.Value)
	switch {
	case !ok || v.isNull():
		return false, &invalidValue{v: v, typ: "Boolean", reason: unsetBoolean}
	case v.isRaw:
		if b, ok := v.raw.(bool); ok {
			return b, nil
		}
	case v.lit.Kind == ast.BooleanValue:
		return v.lit.Raw == "true", nil
	}
	return false, &invalidValue{v: v, typ: "Boolean", reason: notBoolean}
}

// describeValue renders a refused value for a message, cut to echo.MaxBytes
// bytes: a client controls it.
func describeValue(v value) string {
	if !v.isRaw {
		switch {
		case v.lit == nil:
			return "null"
		case v.lit.Kind == ast.StringValue || v.lit.Kind == ast.BlockValue:
			return strconv.Quote(echo.Cut(v.lit.Raw))
		case v.lit.Kind == ast.ListValue:
			return "a list"
		case v.lit.Kind == ast.ObjectValue:
			return "an object"
		}
		return echo.Cut(v.lit.Raw)
	}
	switch x := v.raw.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(echo.Cut(x))
	case json.Number:
		return echo.Cut(string(x))
	case bool:
		return strconv.FormatBool(x)
	}
	rv := reflect.ValueOf(v.raw)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.String:
		return strconv.Quote(echo.Cut(rv.String()))
	}
	if rv.CanInt() || rv.CanUint() || rv.CanFloat() {
		return echo.Cut(fmt.Sprint(v.raw))
	}
	return fmt.Sprintf("a value of type %T", v.raw)
}

// invalidArgument turns a refusal inside argument name of field f into an
// *Error.
func (w *walker) invalidArgument(f *ast.Field, field, name string, bad *invalidValue) *Error {
	return &Error{
		Code: CodeInvalidArgumentValue,
		Message: fmt.Sprintf("field %s: argument %s%s: %s is not a valid %s (%s)",
			field, name, bad.at, describeValue(bad.v), bad.typ, bad.reason),
		Locations: locationsOf(f.Position),
		Path:      w.errPath(),
	}
}

// invalidCondition turns a refused @skip/@include condition into an
// *Error, at the directive.
func (w *walker) invalidCondition(d *ast.Directive, bad *invalidValue) *Error {
	return &Error{
		Code:      CodeInvalidArgumentValue,
		Message:   fmt.Sprintf("directive @%s: argument if: %s is not a valid %s (%s)", d.Name, describeValue(bad.v), bad.typ, bad.reason),
		Locations: locationsOf(d.Position),
		Path:      w.errPath(),
	}
}
