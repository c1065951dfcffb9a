package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/costguard/costguard/complexity"

	"github.com/costguard/costguard/internal/echo"
)

// decodeVariables reads a variables document the way a server does, with
// numbers kept as json.Number.
func decodeVariables(b []byte) (map[string]any, error) {
	var raw map[string]any
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	err := d.Decode(&raw)
	return raw, err
}

// variableFailure explains a variable gqlparser's VariableValues refused:
// which variable (down to the list element or input field), the type
// expected there and the value sent, e.g. "variable $n: 2.5 is not a valid
// Int". gqlparser's own message is kept as the reason ("cannot be null",
// "unknown field"…), except where it misreports the value. rawJSON is
// decoded afresh because VariableValues writes coerced values into the map
// it is given.
func variableFailure(schema *ast.Schema, op *ast.OperationDefinition, rawJSON []byte, err error) failure {
	var ge *gqlerror.Error
	if !errors.As(err, &ge) || len(ge.Path) < 2 || ge.Path[0] != ast.PathName("variable") {
		return gqlFailures(codeInvalidVariables, err)[0].(failure)
	}
	fl := failure{Code: codeInvalidVariables, Locations: []complexity.Location{}}
	for _, l := range ge.Locations {
		fl.Locations = append(fl.Locations, complexity.Location{Line: l.Line, Column: l.Column})
	}
	name, _ := ge.Path[1].(ast.PathName)
	var typ *ast.Type
	if def := op.VariableDefinitions.ForName(string(name)); def != nil {
		typ = def.Type
		if len(fl.Locations) == 0 && def.Position != nil {
			fl.Locations = append(fl.Locations, complexity.Location{Line: def.Position.Line, Column: def.Position.Column})
		}
	}
	raw, _ := decodeVariables(rawJSON)
	val, sent := raw[string(name)]

	where := "$" + string(name)
	for _, el := range ge.Path[2:] {
		switch el := el.(type) {
		case ast.PathIndex:
			where += "[" + strconv.Itoa(int(el)) + "]"
			if typ != nil {
				typ = typ.Elem
			}
			switch list := val.(type) {
			case []any:
				if sent = int(el) < len(list); sent {
					val = list[el]
				}
			default:
				// A single value stands for a list of one.
				sent = sent && el == 0
			}
		case ast.PathName:
			where += "." + string(el)
			typ = fieldType(schema, typ, string(el))
			obj, _ := val.(map[string]any)
			val, sent = obj[string(el)]
		}
	}

	reason := ge.Message
	if strings.HasPrefix(reason, "cannot use ") {
		// "cannot use value 0 as Int" for 2.5, "cannot use string as Int"
		// for a number inside a list: gqlparser describes what it failed
		// to read, not what was sent, and the message already says both.
		reason = ""
	}
	switch {
	case typ == nil:
		fl.Message = fmt.Sprintf("variable %s: %s", where, describeSent(val, sent))
	case !sent:
		fl.Message = fmt.Sprintf("variable %s: no value for %s", where, typ)
	default:
		fl.Message = fmt.Sprintf("variable %s: %s is not a valid %s", where, describeSent(val, sent), typ)
	}
	if reason != "" {
		fl.Message += " (" + reason + ")"
	}
	return fl
}

// fieldType is the type of input field name of the input object type typ,
// or nil when either is unknown.
func fieldType(schema *ast.Schema, typ *ast.Type, name string) *ast.Type {
	if typ == nil || typ.Elem != nil {
		return nil
	}
	def := schema.Types[typ.NamedType]
	if def == nil {
		return nil
	}
	if fd := def.Fields.ForName(name); fd != nil {
		return fd.Type
	}
	return nil
}

// describeSent renders a sent value as JSON, cut to echo.MaxBytes bytes: the
// client chose it.
func describeSent(v any, sent bool) string {
	if !sent {
		return "no value"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("a value of type %T", v)
	}
	return echo.Cut(string(b))
}
