package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/complexity"
)

// LoadSDL parses and validates the upstream's schema. The SDL may apply
// @cost and @listSize without declaring them (they are added as package
// complexity declares them), or declare them itself in either form.
func LoadSDL(sdl string) (*ast.Schema, error) {
	s, err := complexity.LoadSchema(&ast.Source{Name: "upstream.graphqls", Input: sdl})
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	return s, nil
}

// MaxIntrospectionBytes bounds the introspection response Introspect reads.
const MaxIntrospectionBytes = 64 << 20

// ErrNoIntrospection is wrapped by Introspect's error when the upstream
// does not answer introspection.
var ErrNoIntrospection = errors.New("upstream: introspection unavailable")

// Introspect asks the upstream at url for its schema with the standard
// introspection query and returns it as SDL that LoadSDL accepts: types,
// interfaces, unions, enums, input objects, default values, descriptions,
// deprecations, custom directive definitions and the root operation
// types. Introspection does not carry the directives a schema applies, so
// the SDL has no @cost or @listSize on its fields: give the proxy the
// schema file to price by them. headers go with the request (credentials
// the upstream needs). The query asks first for what recent servers
// describe (repeatable directives, deprecated arguments, specifiedByURL,
// oneOf inputs) and, when the upstream refuses that, for what every server
// does.
func Introspect(ctx context.Context, client *http.Client, url string, headers http.Header) (string, error) {
	if client == nil {
		client = defaultClient()
	}
	var first error
	for _, full := range []bool{true, false} {
		s, err := introspect(ctx, client, url, headers, full)
		if err == nil {
			sdl, err := printSchema(s)
			if err != nil {
				return "", fmt.Errorf("upstream: the introspection of %s: %w", url, err)
			}
			if _, err := LoadSDL(sdl); err != nil {
				return "", fmt.Errorf("upstream: the introspection of %s gives a schema that does not load: %w", url, err)
			}
			return sdl, nil
		}
		if first == nil {
			first = err
		}
		if !errors.Is(err, ErrNoIntrospection) || ctx.Err() != nil {
			break // unreachable, or a bad answer: the other query fares no better
		}
	}
	return "", fmt.Errorf("upstream: cannot introspect %s: %w; pass -schema FILE with the upstream's SDL instead", url, first)
}

func introspect(ctx context.Context, client *http.Client, url string, headers http.Header, full bool) (*introSchema, error) {
	body, _ := json.Marshal(request{Query: introspectionQuery(full), OperationName: "IntrospectionQuery"})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for name, vs := range headers {
		req.Header[name] = slices.Clone(vs)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", acceptGraphQL)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := readBounded(resp.Body, MaxIntrospectionBytes)
	if err != nil {
		return nil, err
	}
	var answer struct {
		Data *struct {
			Schema *introSchema `json:"__schema"`
		} `json:"data"`
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return nil, fmt.Errorf("status %d without a GraphQL response", resp.StatusCode)
	}
	if answer.Data == nil || answer.Data.Schema == nil {
		why := fmt.Sprintf("status %d, no __schema in the answer", resp.StatusCode)
		if len(answer.Errors) > 0 {
			why = fmt.Sprintf("status %d, %q", resp.StatusCode, answer.Errors[0].Message)
		}
		return nil, fmt.Errorf("%w (%s)", ErrNoIntrospection, why)
	}
	return answer.Data.Schema, nil
}

// introspectionQuery is the standard query; full adds what servers
// describe since the 2021 specification.
func introspectionQuery(full bool) string {
	schemaDescription, repeatable, deprecatedArgs, typeExtras, inputDeprecation := "", "", "", "", ""
	if full {
		schemaDescription = "description"
		repeatable = "isRepeatable"
		deprecatedArgs = "(includeDeprecated: true)"
		typeExtras = "specifiedByURL isOneOf"
		inputDeprecation = "isDeprecated deprecationReason"
	}
	ofType := "kind name"
	for range 8 {
		ofType = "kind name ofType { " + ofType + " }"
	}
	return `query IntrospectionQuery {
  __schema {
    ` + schemaDescription + `
    queryType { name } mutationType { name } subscriptionType { name }
    types { ...FullType }
    directives { name description ` + repeatable + ` locations args` + deprecatedArgs + ` { ...InputValue } }
  }
}
fragment FullType on __Type {
  kind name description ` + typeExtras + `
  fields(includeDeprecated: true) { name description args` + deprecatedArgs + ` { ...InputValue } type { ...TypeRef } isDeprecated deprecationReason }
  inputFields` + deprecatedArgs + ` { ...InputValue }
  interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) { name description isDeprecated deprecationReason }
  possibleTypes { ...TypeRef }
}
fragment InputValue on __InputValue { name description type { ...TypeRef } defaultValue ` + inputDeprecation + ` }
fragment TypeRef on __Type { ` + ofType + ` }
`
}

type introSchema struct {
	Description      *string          `json:"description"`
	QueryType        *introName       `json:"queryType"`
	MutationType     *introName       `json:"mutationType"`
	SubscriptionType *introName       `json:"subscriptionType"`
	Types            []introType      `json:"types"`
	Directives       []introDirective `json:"directives"`
}

type introName struct {
	Name string `json:"name"`
}

type introType struct {
	Kind           string       `json:"kind"`
	Name           string       `json:"name"`
	Description    *string      `json:"description"`
	SpecifiedByURL *string      `json:"specifiedByURL"`
	IsOneOf        bool         `json:"isOneOf"`
	Fields         []introField `json:"fields"`
	InputFields    []introInput `json:"inputFields"`
	Interfaces     []typeRef    `json:"interfaces"`
	EnumValues     []introEnum  `json:"enumValues"`
	PossibleTypes  []typeRef    `json:"possibleTypes"`
}

type introField struct {
	Name              string       `json:"name"`
	Description       *string      `json:"description"`
	Args              []introInput `json:"args"`
	Type              typeRef      `json:"type"`
	IsDeprecated      bool         `json:"isDeprecated"`
	DeprecationReason *string      `json:"deprecationReason"`
}

type introInput struct {
	Name              string  `json:"name"`
	Description       *string `json:"description"`
	Type              typeRef `json:"type"`
	DefaultValue      *string `json:"defaultValue"`
	IsDeprecated      bool    `json:"isDeprecated"`
	DeprecationReason *string `json:"deprecationReason"`
}

type introEnum struct {
	Name              string  `json:"name"`
	Description       *string `json:"description"`
	IsDeprecated      bool    `json:"isDeprecated"`
	DeprecationReason *string `json:"deprecationReason"`
}

type introDirective struct {
	Name         string       `json:"name"`
	Description  *string      `json:"description"`
	IsRepeatable bool         `json:"isRepeatable"`
	Locations    []string     `json:"locations"`
	Args         []introInput `json:"args"`
}

type typeRef struct {
	Kind   string   `json:"kind"`
	Name   string   `json:"name"`
	OfType *typeRef `json:"ofType"`
}

// builtinTypes and builtinDirectives come with every schema gqlparser
// loads: the SDL leaves them out.
var (
	builtinTypes      = map[string]bool{"String": true, "Int": true, "Float": true, "Boolean": true, "ID": true}
	builtinDirectives = map[string]bool{"skip": true, "include": true, "deprecated": true, "specifiedBy": true, "defer": true, "oneOf": true}
	graphQLName       = regexp.MustCompile(`^[_A-Za-z][_0-9A-Za-z]*$`)
)

// sdlWriter prints a schema; err keeps the first name that is not a
// GraphQL name, which would make the SDL mean something else.
type sdlWriter struct {
	b   strings.Builder
	err error
}

func printSchema(s *introSchema) (string, error) {
	if s.QueryType == nil {
		return "", errors.New("the schema has no query type")
	}
	w := &sdlWriter{}
	w.description(s.Description, "")
	w.b.WriteString("schema {\n  query: " + w.name(s.QueryType.Name) + "\n")
	if s.MutationType != nil {
		w.b.WriteString("  mutation: " + w.name(s.MutationType.Name) + "\n")
	}
	if s.SubscriptionType != nil {
		w.b.WriteString("  subscription: " + w.name(s.SubscriptionType.Name) + "\n")
	}
	w.b.WriteString("}\n")
	for _, d := range s.Directives {
		if builtinDirectives[d.Name] {
			continue
		}
		w.b.WriteString("\n")
		w.description(d.Description, "")
		w.b.WriteString("directive @" + w.name(d.Name))
		w.args(d.Args, "")
		if d.IsRepeatable {
			w.b.WriteString(" repeatable")
		}
		w.b.WriteString(" on ")
		for i, loc := range d.Locations {
			if i > 0 {
				w.b.WriteString(" | ")
			}
			w.b.WriteString(w.name(loc))
		}
		w.b.WriteString("\n")
	}
	for _, t := range s.Types {
		if strings.HasPrefix(t.Name, "__") || builtinTypes[t.Name] {
			continue
		}
		w.b.WriteString("\n")
		w.typ(t)
	}
	return w.b.String(), w.err
}

func (w *sdlWriter) typ(t introType) {
	w.description(t.Description, "")
	switch t.Kind {
	case "SCALAR":
		w.b.WriteString("scalar " + w.name(t.Name))
		if t.SpecifiedByURL != nil {
			w.b.WriteString(" @specifiedBy(url: " + quote(*t.SpecifiedByURL) + ")")
		}
		w.b.WriteString("\n")
	case "OBJECT", "INTERFACE":
		keyword := map[string]string{"OBJECT": "type ", "INTERFACE": "interface "}[t.Kind]
		w.b.WriteString(keyword + w.name(t.Name))
		for i, in := range t.Interfaces {
			w.b.WriteString(map[bool]string{true: " implements ", false: " & "}[i == 0] + w.name(in.Name))
		}
		w.b.WriteString(" {\n")
		for _, f := range t.Fields {
			w.description(f.Description, "  ")
			w.b.WriteString("  " + w.name(f.Name))
			w.args(f.Args, "  ")
			w.b.WriteString(": " + w.ref(f.Type))
			w.deprecated(f.IsDeprecated, f.DeprecationReason)
			w.b.WriteString("\n")
		}
		w.b.WriteString("}\n")
	case "UNION":
		w.b.WriteString("union " + w.name(t.Name) + " =")
		for i, m := range t.PossibleTypes {
			if i > 0 {
				w.b.WriteString(" |")
			}
			w.b.WriteString(" " + w.name(m.Name))
		}
		w.b.WriteString("\n")
	case "ENUM":
		w.b.WriteString("enum " + w.name(t.Name) + " {\n")
		for _, v := range t.EnumValues {
			w.description(v.Description, "  ")
			w.b.WriteString("  " + w.name(v.Name))
			w.deprecated(v.IsDeprecated, v.DeprecationReason)
			w.b.WriteString("\n")
		}
		w.b.WriteString("}\n")
	case "INPUT_OBJECT":
		w.b.WriteString("input " + w.name(t.Name))
		if t.IsOneOf {
			w.b.WriteString(" @oneOf")
		}
		w.b.WriteString(" {\n")
		for _, f := range t.InputFields {
			w.input(f, "  ")
			w.b.WriteString("\n")
		}
		w.b.WriteString("}\n")
	default:
		if w.err == nil {
			w.err = fmt.Errorf("type %s has the unknown kind %q", t.Name, t.Kind)
		}
	}
}

// args prints an argument list, one argument a line when any has a
// description.
func (w *sdlWriter) args(args []introInput, indent string) {
	if len(args) == 0 {
		return
	}
	described := slices.ContainsFunc(args, func(a introInput) bool { return a.Description != nil && *a.Description != "" })
	w.b.WriteString("(")
	for i, a := range args {
		switch {
		case described:
			w.b.WriteString("\n")
			w.input(a, indent+"  ")
		case i > 0:
			w.b.WriteString(", ")
			w.input(a, "")
		default:
			w.input(a, "")
		}
	}
	if described {
		w.b.WriteString("\n" + indent)
	}
	w.b.WriteString(")")
}

// input prints an argument or input field. Its default value is the
// GraphQL literal introspection gives.
func (w *sdlWriter) input(a introInput, indent string) {
	w.description(a.Description, indent)
	w.b.WriteString(indent + w.name(a.Name) + ": " + w.ref(a.Type))
	if a.DefaultValue != nil {
		w.b.WriteString(" = " + *a.DefaultValue)
	}
	w.deprecated(a.IsDeprecated, a.DeprecationReason)
}

func (w *sdlWriter) deprecated(is bool, reason *string) {
	if !is {
		return
	}
	w.b.WriteString(" @deprecated")
	if reason != nil && *reason != "No longer supported" {
		w.b.WriteString("(reason: " + quote(*reason) + ")")
	}
}

func (w *sdlWriter) ref(t typeRef) string {
	switch {
	case t.Kind == "NON_NULL" && t.OfType != nil:
		return w.ref(*t.OfType) + "!"
	case t.Kind == "LIST" && t.OfType != nil:
		return "[" + w.ref(*t.OfType) + "]"
	}
	return w.name(t.Name)
}

func (w *sdlWriter) name(n string) string {
	if !graphQLName.MatchString(n) && w.err == nil {
		w.err = fmt.Errorf("%q is not a GraphQL name", n)
	}
	return n
}

// description prints d as a block string when that keeps it exactly,
// else as a quoted string.
func (w *sdlWriter) description(d *string, indent string) {
	if d == nil || *d == "" {
		return
	}
	if !blockable(*d) {
		w.b.WriteString(indent + quote(*d) + "\n")
		return
	}
	w.b.WriteString(indent + `"""` + "\n")
	for line := range strings.SplitSeq(*d, "\n") {
		if line != "" {
			w.b.WriteString(indent + line)
		}
		w.b.WriteString("\n")
	}
	w.b.WriteString(indent + `"""` + "\n")
}

// blockable reports whether a block string holding s, its lines indented,
// reads back as s: the block string value drops the lines' common
// indentation (so one line must start with no blank), the blank first and
// last lines, and cannot hold control characters or """.
func blockable(s string) bool {
	if strings.Contains(s, `"""`) || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' && r != '\n' && r != '\t' }) {
		return false
	}
	lines := strings.Split(s, "\n")
	if strings.TrimLeft(lines[0], " \t") == "" || strings.TrimLeft(lines[len(lines)-1], " \t") == "" {
		return false
	}
	return slices.ContainsFunc(lines, func(l string) bool { return l != "" && l[0] != ' ' && l[0] != '\t' })
}

// quote writes s as a GraphQL string: JSON's escapes are GraphQL's.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}
