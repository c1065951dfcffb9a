package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/99designs/gqlgen/graphql/introspection"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/formatter"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/graph"
)

// format prints a schema the same way whatever SDL it came from: sorted,
// descriptions and applied directives included.
func format(s *ast.Schema) string {
	var b strings.Builder
	formatter.NewFormatter(&b).FormatSchema(s)
	return b.String()
}

// price is what package complexity charges for query on s.
func price(t *testing.T, s *ast.Schema, query string) int64 {
	t.Helper()
	a, err := complexity.New(s)
	must(t, err)
	doc, err := parser.ParseQuery(&ast.Source{Input: query})
	must(t, err)
	r, err := a.Analyze(doc, "", nil)
	must(t, err)
	return r.Points
}

// The example API's schema through introspection: the same types,
// fields, arguments and descriptions as its file, without the cost
// directives the file applies, which introspection does not carry. Fields
// priced by the default rules cost the same; those priced by a directive
// do not.
func TestIntrospectExampleAPI(t *testing.T) {
	gql := handler.New(graph.NewResolver().Schema())
	gql.AddTransport(transport.POST{})
	gql.Use(extension.Introspection{})
	up := httptest.NewServer(gql)
	t.Cleanup(up.Close)

	sdl, err := Introspect(context.Background(), nil, up.URL, nil)
	must(t, err)
	introspected, err := LoadSDL(sdl)
	must(t, err)
	file, err := LoadSDL(readFile(t, exampleSchemaFile))
	must(t, err)

	const deep = `{ user(login: "a") { repos(first: 100) { issues(first: 50) { title } } } }`
	const weighted = `{ repository(name: "x") { issues(first: 10) { bodyHTML } topics } }`
	for _, tc := range []struct {
		schema         *ast.Schema
		deep, weighted int64
	}{
		// 1 + 100 × (1 + 50 × 1), no directive involved.
		{file, 5101, 1 + 10*(1+5)},         // bodyHTML @cost(weight: "5"); topics is scalars
		{introspected, 5101, 1 + 10*(1+0)}, // bodyHTML a scalar of weight 0
	} {
		if got := price(t, tc.schema, deep); got != tc.deep {
			t.Errorf("deep query: %d, want %d", got, tc.deep)
		}
		if got := price(t, tc.schema, weighted); got != tc.weighted {
			t.Errorf("weighted query: %d, want %d", got, tc.weighted)
		}
	}

	withoutCostDirectives(file)
	if got, want := format(introspected), format(file); got != want {
		t.Errorf("the introspected schema differs from the file's:\n%s\nwant\n%s", got, want)
	}
}

// withoutCostDirectives drops the @cost and @listSize s applies.
func withoutCostDirectives(s *ast.Schema) {
	keep := func(l ast.DirectiveList) ast.DirectiveList {
		var out ast.DirectiveList
		for _, d := range l {
			if d.Name != "cost" && d.Name != "listSize" {
				out = append(out, d)
			}
		}
		return out
	}
	for _, def := range s.Types {
		def.Directives = keep(def.Directives)
		for _, f := range def.Fields {
			f.Directives = keep(f.Directives)
			for _, a := range f.Arguments {
				a.Directives = keep(a.Directives)
			}
		}
		for _, v := range def.EnumValues {
			v.Directives = keep(v.Directives)
		}
	}
}

// roundTripSDL uses what introspection describes: root types with other
// names, a schema description, directive definitions (one repeatable),
// interfaces implementing interfaces, unions, enums, input objects, a
// oneOf input, default values of every kind, deprecations everywhere they
// may be, a specifiedBy scalar, and descriptions a block string cannot
// hold as they are.
const roundTripSDL = `
"The schema's own description."
schema { query: Root mutation: Writes subscription: Feed }

"""
Who owns a field.
  Indented second line, \ and "quotes".
"""
directive @owner(team: String!, tags: [String!] = ["a", "b"]) repeatable on FIELD_DEFINITION | OBJECT

directive @flag(
  "Why the flag is set."
  reason: String @deprecated(reason: "say nothing")
) on ENUM_VALUE | ARGUMENT_DEFINITION | INPUT_FIELD_DEFINITION

scalar DateTime @specifiedBy(url: "https://example.com/date-time")

interface Node { id: ID! }

"  Every line\n  indented."
interface Entity implements Node { id: ID! name: String }

type Root {
  "A \"quoted\" description with a tab\tand ünïcode < > &."
  entity(id: ID!, kind: Kind = PERSON, filter: Filter = {names: ["a", "b\"c"], limit: 3, at: null}, old: Int @deprecated(reason: "use filter")): Entity
  search(first: Int = 10, ratio: Float = 0.5, exact: Boolean = false): [Result!]! @deprecated
  legacy: String @deprecated(reason: "gone\nsoon")
  "\nstarts with a blank line"
  matrix: [[Int!]]!
}

type Writes { touch(at: DateTime!, by: ByInput!): Boolean }
type Feed { ticks: Int! }
type Person implements Entity & Node { id: ID! name: String born: DateTime }
type Robot implements Entity & Node { id: ID! name: String }
union Result = Person | Robot

enum Kind {
  PERSON
  "Made."
  ROBOT @deprecated(reason: "no more robots")
}

input Filter {
  names: [String!]
  limit: Int = 5
  at: DateTime
  old: Boolean @deprecated
  kinds: [Kind!] = [PERSON]
}

input ByInput @oneOf { id: ID name: String }
`

// introspectionServer answers every POST with the introspection of s, or,
// for a query that asks what refuse names, with a validation error as an
// older server would.
func introspectionServer(t *testing.T, s *ast.Schema, refuse ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req request
		body, _ := io.ReadAll(r.Body)
		must(t, json.Unmarshal(body, &req))
		for _, name := range refuse {
			if strings.Contains(req.Query, name) {
				w.WriteHeader(http.StatusUnprocessableEntity)
				_, _ = io.WriteString(w, `{"errors":[{"message":"Cannot query field \"`+name+`\""}]}`)
				return
			}
		}
		full := strings.Contains(req.Query, "isRepeatable")
		out, err := json.Marshal(map[string]any{"data": map[string]any{"__schema": introspectionOf(s, full)}})
		must(t, err)
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// introspectionOf is the __schema of s as the specification has it. It
// is built with gqlgen's package introspection, which generated servers
// answer with, except where gqlgen v0.17.73 departs from the
// specification: it gives each argument its field's deprecation and
// directive arguments none, and lists no interfaces for an interface.
// Those come from s itself.
func introspectionOf(s *ast.Schema, full bool) map[string]any {
	is := introspection.WrapSchema(s)
	name := func(t *introspection.Type) any {
		if t == nil {
			return nil
		}
		return map[string]any{"name": t.Name()}
	}
	var ref func(t *introspection.Type) map[string]any
	ref = func(t *introspection.Type) map[string]any {
		m := map[string]any{"kind": t.Kind(), "name": t.Name()}
		if of := t.OfType(); of != nil {
			m["ofType"] = ref(of)
		}
		return m
	}
	// inputs describes vs; defs, when not nil, are the arguments vs
	// stand for, whose deprecations count.
	inputs := func(vs []introspection.InputValue, defs ast.ArgumentDefinitionList) []any {
		out := []any{}
		for _, v := range vs {
			deprecated, reason := v.IsDeprecated(), v.DeprecationReason()
			if defs != nil {
				deprecated, reason = deprecation(defs.ForName(v.Name).Directives)
			}
			if !full && deprecated {
				continue // args and input fields without includeDeprecated
			}
			out = append(out, map[string]any{
				"name": v.Name, "description": v.Description(), "type": ref(v.Type), "defaultValue": v.DefaultValue,
				"isDeprecated": deprecated, "deprecationReason": reason,
			})
		}
		return out
	}
	var types []any
	for _, t := range is.Types() {
		def := s.Types[*t.Name()]
		m := map[string]any{
			"kind": t.Kind(), "name": t.Name(), "description": t.Description(),
			"specifiedByURL": t.SpecifiedByURL(), "isOneOf": t.IsOneOf(),
			"fields": nil, "inputFields": nil, "interfaces": nil, "enumValues": nil, "possibleTypes": nil,
		}
		if def.Kind == ast.Object || def.Kind == ast.Interface {
			var fields []any
			for _, f := range t.Fields(true) {
				fields = append(fields, map[string]any{
					"name": f.Name, "description": f.Description(), "args": inputs(f.Args, def.Fields.ForName(f.Name).Arguments),
					"type": ref(f.Type), "isDeprecated": f.IsDeprecated(), "deprecationReason": f.DeprecationReason(),
				})
			}
			m["fields"] = fields
			interfaces := []any{}
			for _, in := range def.Interfaces {
				interfaces = append(interfaces, ref(introspection.WrapTypeFromDef(s, s.Types[in])))
			}
			m["interfaces"] = interfaces
		}
		if def.Kind == ast.InputObject {
			m["inputFields"] = inputs(t.InputFields(), nil)
		}
		if def.Kind == ast.Interface || def.Kind == ast.Union {
			possible := []any{}
			for _, x := range t.PossibleTypes() {
				possible = append(possible, ref(&x))
			}
			m["possibleTypes"] = possible
		}
		if def.Kind == ast.Enum {
			var values []any
			for _, v := range t.EnumValues(true) {
				values = append(values, map[string]any{
					"name": v.Name, "description": v.Description(),
					"isDeprecated": v.IsDeprecated(), "deprecationReason": v.DeprecationReason(),
				})
			}
			m["enumValues"] = values
		}
		types = append(types, m)
	}
	var directives []any
	for _, d := range is.Directives() {
		directives = append(directives, map[string]any{
			"name": d.Name, "description": d.Description(), "isRepeatable": full && d.IsRepeatable,
			"locations": d.Locations, "args": inputs(d.Args, s.Directives[d.Name].Arguments),
		})
	}
	return map[string]any{
		"description": is.Description(),
		"queryType":   name(is.QueryType()), "mutationType": name(is.MutationType()), "subscriptionType": name(is.SubscriptionType()),
		"types": types, "directives": directives,
	}
}

// deprecation reads a @deprecated among dirs, as introspection gives it.
func deprecation(dirs ast.DirectiveList) (bool, *string) {
	d := dirs.ForName("deprecated")
	if d == nil {
		return false, nil
	}
	reason := "No longer supported"
	if a := d.Arguments.ForName("reason"); a != nil {
		reason = a.Value.Raw
	}
	return true, &reason
}

func TestIntrospectRoundTrip(t *testing.T) {
	// The upstream's schema as it declares it: no cost directives added.
	original, err := gqlparser.LoadSchema(&ast.Source{Input: roundTripSDL})
	must(t, err)
	up := introspectionServer(t, original)
	sdl, err := Introspect(context.Background(), nil, up.URL, nil)
	must(t, err)
	loaded, err := LoadSDL(sdl)
	must(t, err)
	if got, want := format(loaded), format(original); got != want {
		t.Errorf("round trip:\n%s\nwant\n%s\nfrom the SDL\n%s", got, want, sdl)
	}
}

// An older server refuses the fields the 2021 specification added: the
// basic query still gives a schema, without what it cannot say.
func TestIntrospectOlderServer(t *testing.T) {
	original, err := gqlparser.LoadSchema(&ast.Source{Input: roundTripSDL})
	must(t, err)
	up := introspectionServer(t, original, "isRepeatable")
	sdl, err := Introspect(context.Background(), nil, up.URL, nil)
	must(t, err)
	if _, err := LoadSDL(sdl); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sdl, "repeatable") || strings.Contains(sdl, `"use filter"`) || !strings.Contains(sdl, `"no more robots"`) {
		t.Errorf("the basic query's SDL:\n%s", sdl)
	}
}

func TestIntrospectRefused(t *testing.T) {
	disabled := handler.New(graph.NewResolver().Schema()) // no extension.Introspection: refused
	disabled.AddTransport(transport.POST{})
	for name, h := range map[string]http.Handler{
		"introspection disabled": disabled,
		"not GraphQL": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.NotFound(w, r)
		}),
	} {
		t.Run(name, func(t *testing.T) {
			up := httptest.NewServer(h)
			t.Cleanup(up.Close)
			_, err := Introspect(context.Background(), nil, up.URL, nil)
			if err == nil || !strings.Contains(err.Error(), up.URL) || !strings.Contains(err.Error(), "pass -schema FILE") {
				t.Fatalf("error %v, want one naming %s and -schema FILE", err, up.URL)
			}
			if want := name == "introspection disabled"; errors.Is(err, ErrNoIntrospection) != want {
				t.Errorf("errors.Is(%v, ErrNoIntrospection) = %v", err, !want)
			}
		})
	}
}

func TestBlockable(t *testing.T) {
	for s, want := range map[string]bool{
		"one line":                  true,
		"two\nlines":                true,
		"  indented\nnot":           true,
		"  all\n  indented":         false,
		"\nblank first":             false,
		"blank last\n":              false,
		`has """ in it`:             false,
		"control \x01":              false,
		"a\n\n  middle blank\nline": true,
	} {
		if got := blockable(s); got != want {
			t.Errorf("blockable(%q) = %v", s, got)
		}
	}
}
