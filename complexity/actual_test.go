package complexity_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/costguard/costguard/complexity"
)

// readmeData is the data member of the README's response to
// readmeQuery: octocat's four repositories hold 3, 2, 2 and 2 issues.
const (
	readmeQuery = `{ user(login: "octocat") { repos(first: 10) { issues(first: 5) { title } } } }`
	readmeData  = `{"user":{"repos":[{"issues":[{"title":"Add a README"},{"title":"Greeting is not localised"},{"title":"Typo in the greeting"}]},{"issues":[{"title":"Fork count is wrong"},{"title":"Use \u003cem\u003esemantic\u003c/em\u003e markup"}]},{"issues":[{"title":"Detect GraphQL files"},{"title":"Vendored code counted as source"}]},{"issues":[{"title":"Broken link in footer"},{"title":"Dark mode"}]}]}}`
)

// exampleSchema loads the example API's schema, graph/schema.graphqls.
func exampleSchema(t testing.TB) *ast.Schema {
	t.Helper()
	sdl, err := os.ReadFile(filepath.Join("..", "graph", "schema.graphqls"))
	if err != nil {
		t.Fatal(err)
	}
	return loadSchema(t, string(sdl))
}

func loadSchema(t testing.TB, sdl string) *ast.Schema {
	t.Helper()
	schema, err := complexity.LoadSchema(&ast.Source{Name: "schema.graphql", Input: sdl})
	if err != nil {
		t.Fatal(err)
	}
	return schema
}

// prepared is an operation parsed, validated and with its variables
// coerced, as a gqlgen server hands it over.
type prepared struct {
	doc  *ast.QueryDocument
	op   *ast.OperationDefinition
	vars map[string]any
}

func prepare(t testing.TB, schema *ast.Schema, query string, vars map[string]any) prepared {
	t.Helper()
	doc, err := parser.ParseQuery(&ast.Source{Name: "query.graphql", Input: query})
	if err != nil {
		t.Fatal(err)
	}
	if errs := validator.Validate(schema, doc); len(errs) > 0 {
		t.Fatalf("validate %s: %v", query, errs)
	}
	coerced, err := validator.VariableValues(schema, doc.Operations[0], vars)
	if err != nil {
		t.Fatalf("variables %v: %v", vars, err)
	}
	return prepared{doc: doc, op: doc.Operations[0], vars: coerced}
}

// prices returns the requested and actual points of p with data.
func prices(t testing.TB, a *complexity.Analyzer, p prepared, data string) (requested, actual int64, err error) {
	t.Helper()
	r, err := a.AnalyzeOperation(p.doc, p.op, p.vars)
	if err != nil {
		t.Fatalf("AnalyzeOperation: %v", err)
	}
	actual, err = a.ActualCost(p.doc, p.op, p.vars, []byte(data))
	if err == nil {
		if why := actualOutOfBounds(r, actual, []byte(data)); why != "" {
			t.Error(why)
		}
	}
	plan, perr := a.Compile(p.doc, p.op)
	if perr != nil {
		t.Fatalf("Compile: %v", perr)
	}
	checkPlanActual(t, a, plan, p.doc, p.op, p.vars, []byte(data))
	return r.Points, actual, err
}

type actualCase struct {
	name      string
	sdl       string // "" for the example schema
	opts      []complexity.Option
	query     string
	vars      map[string]any // as a client sends them; coerced by VariableValues
	data      string         // the response's data member
	requested int64
	actual    int64
}

func runActualCases(t *testing.T, cases []actualCase) {
	t.Helper()
	example := exampleSchema(t)
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			schema := example
			if tt.sdl != "" {
				schema = loadSchema(t, tt.sdl)
			}
			a, err := complexity.New(schema, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			requested, actual, err := prices(t, a, prepare(t, schema, tt.query, tt.vars), tt.data)
			if err != nil {
				t.Fatalf("ActualCost: %v", err)
			}
			if requested != tt.requested || actual != tt.actual {
				t.Errorf("requested %d, actual %d; want %d and %d", requested, actual, tt.requested, tt.actual)
			}
		})
	}
}

// TestActualCostWorkedExample is docs/cost-model.md's example: the README
// query requests 1 + 10 × (1 + 5) = 61; octocat's 4 repositories holding
// 3 + 2 + 2 + 2 issues make the actual cost 1 + 4 + 9 = 14.
func TestActualCostWorkedExample(t *testing.T) {
	runActualCases(t, []actualCase{
		{name: "README response", query: readmeQuery, data: readmeData, requested: 61, actual: 14},
		{name: "a full page costs what was requested", query: readmeQuery, data: fullPage(10, 5), requested: 61, actual: 61},
		{name: "no repositories", query: readmeQuery, data: `{"user":{"repos":[]}}`, requested: 61, actual: 1},
		{name: "no such user", query: readmeQuery, data: `{"user":null}`, requested: 61, actual: 0},
	})
}

// fullPage is readmeQuery's data with repos repositories of issues issues.
func fullPage(repos, issues int) string {
	issue := `{"title":"t"}`
	repo := `{"issues":[` + strings.TrimSuffix(strings.Repeat(issue+",", issues), ",") + `]}`
	return `{"user":{"repos":[` + strings.TrimSuffix(strings.Repeat(repo+",", repos), ",") + `]}}`
}

// seedSDL (example_test.go) has nullable lists and objects at every level.
const seedQuery = `{ user { repos(first: 10) { issues(first: 5) { title } } } }`

func TestActualCostNullsAndMissingKeys(t *testing.T) {
	runActualCases(t, []actualCase{
		// Requested: 1 + 10 × (1 + 5 × 1) = 61 throughout.
		{name: "data null", sdl: seedSDL, query: seedQuery, data: `null`, requested: 61, actual: 0},
		{name: "data absent", sdl: seedSDL, query: seedQuery, data: ``, requested: 61, actual: 0},
		{name: "data empty", sdl: seedSDL, query: seedQuery, data: `{}`, requested: 61, actual: 0},
		{name: "user null", sdl: seedSDL, query: seedQuery, data: `{"user":null}`, requested: 61, actual: 0},
		{name: "user empty", sdl: seedSDL, query: seedQuery, data: `{"user":{}}`, requested: 61, actual: 1},
		{name: "repos null", sdl: seedSDL, query: seedQuery, data: `{"user":{"repos":null}}`, requested: 61, actual: 1},
		{name: "repos of empty objects", sdl: seedSDL, query: seedQuery, data: `{"user":{"repos":[{},{}]}}`, requested: 61, actual: 3},
		// user 1 + a null repo 0 + a repo with null issues 1 + a repo
		// with a null issue and an issue with a null title 1 + 1.
		{name: "nulls at every level", sdl: seedSDL, query: seedQuery,
			data: `{"user":{"repos":[null,{"issues":null},{"issues":[null,{"title":null}]}]}}`, requested: 61, actual: 4},
		{name: "whitespace everywhere", sdl: seedSDL, query: seedQuery,
			data: " \n{ \"user\" : { \"repos\" : [ { \"issues\" : [ { \"title\" : \"x\" } ] } ] } }\r\n\t", requested: 61, actual: 3},
		// Keys the operation did not select are read past, whatever they
		// hold; an escaped key is the name it spells.
		{name: "unselected keys and escaped keys", sdl: seedSDL, query: seedQuery,
			data:      `{"extra":{"a":[1,-2.5e+3,{"b":null,"c":[true,false,"\ud83d\ude00"]}]},"\u0075ser":{"repos":[{"issues":[{"title":"\"quoted\" \\ \/ \b\f\n\r\t"}]}]}}`,
			requested: 61, actual: 3},
	})
}

func TestActualCostSelections(t *testing.T) {
	runActualCases(t, []actualCase{
		// Two aliases of one list are counted apart, whatever their order.
		{name: "aliases", query: `{ user(login: "octocat") { a: repos(first: 10) { name } b: repos(last: 3) { name } } }`,
			data:      `{"user":{"a":[{"name":"x"},{"name":"y"}],"b":[{"name":"x"},{"name":"y"},{"name":"z"}]}}`,
			requested: 1 + 10 + 3, actual: 1 + 2 + 3},
		{name: "aliases in another order", query: `{ user(login: "octocat") { a: repos(first: 10) { name } b: repos(last: 3) { name } } }`,
			data:      `{"user":{"b":[{"name":"x"},{"name":"y"},{"name":"z"}],"a":[{"name":"x"},{"name":"y"}]}}`,
			requested: 1 + 10 + 3, actual: 1 + 2 + 3},
		{name: "fragments and inline fragments",
			query: `query { user(login: "octocat") { ...U } }
				fragment U on User { repos(first: 10) { ... on Repository { issues(first: 5) { title } } ...R } }
				fragment R on Repository { name }`,
			data: readmeData, requested: 61, actual: 14},
		// @skip/@include read their variables as the requested price does;
		// a key the response should not hold is not priced.
		{name: "skip repos, include followers",
			query: `query($s: Boolean!, $n: Int) { user(login: "octocat") {
				repos(first: $n) @skip(if: $s) { name } followers(first: 10) @include(if: $s) { totalCount nodes { login } } } }`,
			vars:      map[string]any{"s": true, "n": "4"},
			data:      `{"user":{"repos":[{},{},{},{}],"followers":{"totalCount":3,"nodes":[{"login":"a"},{"login":"b"},{"login":"c"}]}}}`,
			requested: 1 + (1 + 10), actual: 1 + (1 + 3)},
		{name: "include repos, skip followers",
			query: `query($s: Boolean!, $n: Int) { user(login: "octocat") {
				repos(first: $n) @skip(if: $s) { name } followers(first: 10) @include(if: $s) { totalCount nodes { login } } } }`,
			vars:      map[string]any{"s": false, "n": "4"},
			data:      `{"user":{"repos":[{},{},{}],"followers":{"totalCount":3,"nodes":[{"login":"a"},{"login":"b"},{"login":"c"}]}}}`,
			requested: 1 + 4, actual: 1 + 3},
		// Twenty aliases, answered in reverse order: found through an index
		// of the keys rather than in the order priced.
		{name: "twenty aliases in reverse order", query: manyAliases(20),
			data: manyAliasesData(20), requested: 1 + 20*3, actual: 1 + 20*1},
		// Up to 64 fields are tracked in a bitmask, more in a slice.
		{name: "64 aliases in reverse order", query: manyAliases(64),
			data: manyAliasesData(64), requested: 1 + 64*3, actual: 1 + 64*1},
		{name: "65 aliases in reverse order", query: manyAliases(65),
			data: manyAliasesData(65), requested: 1 + 65*3, actual: 1 + 65*1},
		{name: "65 aliases, the last missing", query: manyAliases(65),
			data: strings.Replace(manyAliasesData(65), `"r64":[{"name":"x"}],`, "", 1), requested: 1 + 65*3, actual: 1 + 64*1},
		{name: "64 aliases, the last missing", query: manyAliases(64),
			data: strings.Replace(manyAliasesData(64), `"r63":[{"name":"x"}],`, "", 1), requested: 1 + 64*3, actual: 1 + 63*1},
		// The size first hands to nodes through @listSize(sizedFields:)
		// becomes the number of nodes returned.
		{name: "sizedFields connection", query: `{ user(login: "octocat") { followers(first: 10) { totalCount nodes { login } } } }`,
			data:      `{"user":{"followers":{"totalCount":3,"nodes":[{"login":"alice"},{"login":"bob"},{"login":"carol"}]}}}`,
			requested: 1 + 1 + 10, actual: 1 + 1 + 3},
		{name: "sizedFields connection, null", query: `{ user(login: "octocat") { followers(first: 10) { totalCount nodes { login } } } }`,
			data: `{"user":{"followers":null}}`, requested: 12, actual: 1},
		// A list longer than it was priced for costs the items it returned:
		// the excess ran.
		{name: "more items than requested", query: `{ user(login: "octocat") { repos(first: 2) { name } } }`,
			data: `{"user":{"repos":[{},{},{},{},{}]}}`, requested: 1 + 2, actual: 1 + 5},
		// An overrun below a list within its size is not hidden by it.
		{name: "more items deeper down", query: `{ user(login: "octocat") { repos(first: 2) { issues(first: 1) { title } } } }`,
			data: `{"user":{"repos":[{"issues":[{},{},{},{},{}]}]}}`, requested: 1 + 2*(1+1), actual: 1 + (1 + 5)},
		// An assumed size the data overran (the default 10).
		{name: "assumed size overrun", query: `{ user(login: "octocat") { repos { name } } }`,
			data: `{"user":{"repos":[` + strings.Repeat(`{"name":"a"},`, 24) + `{"name":"a"}]}}`, requested: 1 + 10, actual: 1 + 25},
		// The same coercion as the requested price: "3" is the Int 3.
		{name: "variables coerced", query: `query($f: Int) { user(login: "octocat") { repos(first: $f) { name } } }`,
			vars: map[string]any{"f": "3"}, data: `{"user":{"repos":[{},{}]}}`, requested: 1 + 3, actual: 1 + 2},
	})
}

// readerSDL has leaves and lists side by side in each object.
const readerSDL = `
type Query { user: User }
type User { login: String repos(first: Int): [Repo] stars: Int }
type Repo { name: String issues(first: Int): [Issue] }
type Issue { title: String }
`

// TestActualCostKeyAndValueForms reads the same answer written in every
// form JSON allows: compact with keys in selection order, as gqlgen writes
// it (the fast path: keys compared in place, strings skipped to their
// quote), and the forms that fall back to decoding (escaped keys,
// whitespace, keys out of order, keys that merely start like a selected
// one, values of every kind).
func TestActualCostKeyAndValueForms(t *testing.T) {
	const query = `{ user { login repos(first: 3) { name issues(first: 2) { title } } stars } }`
	// Requested: user 1 + 3 repos × (1 + 2 issues × 1) = 10.
	cases := []struct{ name, data string }{
		{"compact, in order", `{"user":{"login":"a","repos":[{"name":"r","issues":[{"title":"t"},{"title":"u"}]}],"stars":3}}`},
		{"whitespace everywhere", " {\n\t\"user\" : { \"login\" : \"a\" , \"repos\" : [ { \"name\" : \"r\" , \"issues\" : [ { \"title\" : \"t\" } , { \"title\" : \"u\" } ] } ] , \"stars\" : 3 } }\r\n"},
		{"whitespace before a colon only", `{"user" :{"login":"a","repos" :[{"name":"r","issues":[{"title" :"t"},{"title":"u"}]}],"stars":3}}`},
		{"escaped keys", `{"\u0075ser":{"log\u0069n":"a","repos":[{"n\u0061me":"r","issues":[{"titl\u0065":"t"},{"title":"u"}]}],"st\u0061rs":3}}`},
		{"keys out of order", `{"user":{"stars":3,"repos":[{"issues":[{"title":"t"},{"title":"u"}],"name":"r"}],"login":"a"}}`},
		{"keys like selected ones", `{"user":{"log":1,"logins":"x","login":"a","repo":[],"repos":[{"nam":"r","name":"r","issues":[{"titles":"t","title":"t"},{"title":"u","titl":{"title":[]}}]}],"stars":3}}`},
		{"values of every kind", `{"user":{"login":"a\"\\\u00e9","repos":[{"name":null,"issues":[{"title":"\n"},{"title":true}]}],"stars":-1.5e3}}`},
		{"leaves missing", `{"user":{"repos":[{"issues":[{},{"title":"u"}]}]}}`},
		{"a string ending the data", `{"user":{"login":"a","repos":[{"name":"r","issues":[{"title":"t"},{"title":"u"}]}],"stars":3},"x":"` + strings.Repeat("y", 40) + `"}`},
	}
	var tests []actualCase
	for _, c := range cases {
		// user 1 + 1 repo + 2 issues.
		tests = append(tests, actualCase{name: c.name, sdl: readerSDL, query: query, data: c.data, requested: 10, actual: 4})
	}
	runActualCases(t, tests)
}

// manyAliases selects n aliases of repos(first: 3).
func manyAliases(n int) string {
	var b strings.Builder
	b.WriteString(`{ user(login: "octocat") {`)
	for i := range n {
		fmt.Fprintf(&b, " r%d: repos(first: 3) { name }", i)
	}
	b.WriteString(" } }")
	return b.String()
}

// manyAliasesData answers manyAliases(n) with one repository each, the last
// alias first.
func manyAliasesData(n int) string {
	keys := make([]string, 0, n)
	for i := n - 1; i >= 0; i-- {
		keys = append(keys, fmt.Sprintf(`"r%d":[{"name":"x"}]`, i))
	}
	return `{"user":{` + strings.Join(keys, ",") + `}}`
}

const conventionSDL = `
type Query { repos(first: Int, last: Int): RepoConnection items(first: Int, last: Int): [Item] }
type RepoConnection { edges: [RepoEdge] nodes: [Repo] pageInfo: PageInfo }
type RepoEdge { node: Repo cursor: String }
type Repo { name: String }
type PageInfo { hasNextPage: Boolean }
type Item { id: ID }
`

func TestActualCostConventions(t *testing.T) {
	const conn = `{ repos(first: 20) { edges { node { name } } pageInfo { hasNextPage } } }`
	// Three edges, one with a null node: 1 + (2 + 2 + 1) + 1.
	const connData = `{"repos":{"edges":[{"node":{"name":"a"}},{"node":{"name":"b"}},{"node":null}],"pageInfo":{"hasNextPage":false}}}`
	runActualCases(t, []actualCase{
		{name: "Connection convention", sdl: conventionSDL, query: conn, data: connData,
			requested: 1 + 20*(1+1) + 1, actual: 1 + 5 + 1},
		{name: "Connection convention off", sdl: conventionSDL, opts: []complexity.Option{complexity.WithConnectionConvention(false)},
			query: conn, data: connData, requested: 1 + 10*(1+1) + 1, actual: 1 + 5 + 1},
		{name: "first and last: the larger", sdl: conventionSDL, query: `{ items(first: 5, last: 8) { id } }`,
			data: `{"items":[{},{},{},{},{},{}]}`, requested: 8, actual: 6},
		{name: "first/last convention off", sdl: conventionSDL, opts: []complexity.Option{complexity.WithFirstLastConvention(false)},
			query: `{ items(first: 5) { id } }`, data: `{"items":[{},{},{}]}`, requested: 10, actual: 3},
	})
}

func TestActualCostAbstractTypes(t *testing.T) {
	const members = `... on User { repos(first: 5) { name } } ... on Repository { issues(first: 3) { title } } ... on Issue { title }`
	// Requested: 10 × max(User's 1 + 5, Repository's 1 + 3, Issue's 1) = 60.
	const search = `{ search(query: "o", first: 10) { __typename ` + members + ` } }`
	const searchNoTypename = `{ search(query: "o", first: 10) { ` + members + ` } }`
	runActualCases(t, []actualCase{
		// Each object priced as the member its __typename names: 3 + 2 + 1.
		{name: "union with __typename", query: search,
			data:      `{"search":[{"__typename":"User","repos":[{},{}]},{"__typename":"Repository","issues":[{}]},{"__typename":"Issue","title":"x"}]}`,
			requested: 60, actual: 3 + 2 + 1},
		{name: "__typename after the other keys", query: search,
			data:      `{"search":[{"repos":[{},{}],"__typename":"User"},{"issues":[{}],"__typename":"Repository"}]}`,
			requested: 60, actual: 3 + 2},
		{name: "escaped __typename", query: search,
			data: `{"search":[{"__typename":"\u0049ssue","title":"x"}]}`, requested: 60, actual: 1},
		// Without __typename an object costs the costliest member whose
		// selections hold its keys, priced by what it holds: here the one
		// member each could come from.
		{name: "union without __typename", query: searchNoTypename,
			data:      `{"search":[{"repos":[{},{}]},{"issues":[{}]},{"title":"x"}]}`,
			requested: 60, actual: 3 + 2 + 1},
		// A __typename naming no member, in objects whose keys are no
		// member's selections: each costs the requested price's member.
		{name: "__typename naming no member", query: search,
			data: `{"search":[{"__typename":"Nope"},{"__typename":42}]}`, requested: 60, actual: 6 + 6},
		// __typename selected for one member only, under an alias: the
		// other members' objects are priced by their keys.
		{name: "aliased __typename on one member", query: `{ search(query: "o", first: 10) {
				... on User { kind: __typename repos(first: 5) { name } } ... on Repository { issues(first: 3) { title } } } }`,
			data:      `{"search":[{"kind":"User","repos":[]},{"issues":[{}]}]}`,
			requested: 60, actual: 1 + 2},
		// A field aliased to "__typename" on one member can write any
		// member's name there (an issue whose body is "User"): the key names
		// nothing, and each object is priced by its keys, as the costliest
		// member that could have written them.
		{name: "forged __typename", query: `{ search(query: "o", first: 10) {
				... on User { __typename } ... on Issue { __typename: body bodyHTML } } }`,
			data:      `{"search":[{"__typename":"User","bodyHTML":"<p>x</p>"},{"__typename":"User"}]}`,
			requested: 60, actual: 6 + 1},
		// Keys that fit several members: the costliest of them.
		{name: "keys of several members", query: `{ search(query: "o", first: 10) {
				... on User { login: login } ... on Repository { login: name issues(first: 3) { title } } } }`,
			data:      `{"search":[{"login":"x"}]}`,
			requested: 40, actual: 1},
		{name: "empty union list", query: search, data: `{"search":[]}`, requested: 60, actual: 0},
		// Requested: max(User's 1 + 3, Repository's 1, Issue's 1) = 4.
		{name: "interface without __typename", query: `{ node(id: "1") { id ... on User { repos(first: 3) { name } } } }`,
			data: `{"node":{"id":"1"}}`, requested: 4, actual: 1},
		{name: "interface without __typename, a user", query: `{ node(id: "1") { id ... on User { repos(first: 3) { name } } } }`,
			data: `{"node":{"id":"1","repos":[{"name":"a"},{"name":"b"}]}}`, requested: 4, actual: 3},
		{name: "interface with __typename", query: `{ node(id: "1") { __typename id ... on User { repos(first: 3) { name } } } }`,
			data: `{"node":{"__typename":"User","id":"1","repos":[{"name":"x"}]}}`, requested: 4, actual: 2},
		{name: "interface, another member", query: `{ node(id: "1") { __typename id ... on User { repos(first: 3) { name } } } }`,
			data: `{"node":{"__typename":"Issue","id":"1"}}`, requested: 4, actual: 1},
		{name: "interface null", query: `{ node(id: "1") { id ... on User { repos(first: 3) { name } } } }`,
			data: `{"node":null}`, requested: 4, actual: 0},
	})
}

func TestActualCostOperationsAndWeights(t *testing.T) {
	const createIssue = `mutation { createIssue(repo: "hello-world", title: "t") { id title } }`
	const weighted = `
scalar Money @cost(weight: "2")
scalar JSON
type Query { prices: [Money] @listSize(assumedSize: 5) grid: [[Cell]] blob: JSON cell: Cell
  xs(first: Int): [X] @cost(weight: "20") ys(first: Int): [Y] }
type Cell @cost(weight: "0.5") { v: Int }
type X @cost(weight: "-5") { y: Int @cost(weight: "1") }
type Y @cost(weight: "-1") { y: Int @cost(weight: "3") }
`
	runActualCases(t, []actualCase{
		// A mutation keeps its base cost, whatever it returned.
		{name: "mutation", query: createIssue, data: `{"createIssue":{"id":"1","title":"t"}}`, requested: 10 + 1, actual: 10 + 1},
		{name: "mutation returned null", query: createIssue, data: `{"createIssue":null}`, requested: 11, actual: 10},
		{name: "mutation, data null", query: createIssue, data: `null`, requested: 11, actual: 10},
		{name: "mutation base 2.5", opts: []complexity.Option{complexity.WithMutationBaseCost(2.5)},
			query: createIssue, data: `null`, requested: 4, actual: 3},
		// A field's own weight is paid when it returns null: the resolver
		// ran. 1 + 2 × (1 + 5) requested; 1 + (1 + 5) + (1 + 5) actual.
		{name: "field weight paid on null", query: `{ repository(name: "linguist") { issues(first: 2) { bodyHTML } } }`,
			data: `{"repository":{"issues":[{"bodyHTML":null},{"bodyHTML":"<p>x</p>"}]}}`, requested: 13, actual: 13},
		{name: "field weight, one issue", query: `{ repository(name: "linguist") { issues(first: 2) { bodyHTML } } }`,
			data: `{"repository":{"issues":[{"bodyHTML":"x"}]}}`, requested: 13, actual: 7},
		// Leaves count their non-null values at their type's weight.
		{name: "weighted scalar list", sdl: weighted, query: `{ prices }`, data: `{"prices":[1,null,"3"]}`, requested: 10, actual: 4},
		// A list of lists is sized once when requested, counted item by
		// item when actual: 3 cells at 0.5, rounded up.
		{name: "list of lists", sdl: weighted, query: `{ grid { v } }`,
			data: `{"grid":[[{"v":1},{}],[{}],null,[null],[]]}`, requested: 5, actual: 2},
		// A custom scalar holds any JSON value, read past unpriced.
		{name: "custom scalar", sdl: weighted, query: `{ blob cell { v } }`,
			data: `{"blob":{"any":[1,{"deep":[true,null]}]},"cell":{"v":1}}`, requested: 1, actual: 1},
		// Negative weights: 10 × (-1 + 3) requested, 2 × 2 actual…
		{name: "negative type weight", sdl: weighted, query: `{ ys(first: 10) { y } }`,
			data: `{"ys":[{"y":1},{"y":2}]}`, requested: 20, actual: 4},
		// …and where the discount outweighs the field (20 + 10 × (-5 + 1)
		// < 0), an empty list still costs no more than requested.
		{name: "negative weight outweighs the field", sdl: weighted, query: `{ xs(first: 10) { y } }`,
			data: `{"xs":[]}`, requested: 0, actual: 0},
	})
}

func TestActualCostIntrospection(t *testing.T) {
	runActualCases(t, []actualCase{
		// Introspection fields cost what the requested price charged them,
		// whatever they returned.
		// The first __schema or __type is free of the introspection cost,
		// each further one pays it.
		{name: "introspection cost", opts: []complexity.Option{complexity.WithIntrospectionCost(3)},
			query: `{ __typename __schema { queryType { name } } again: __schema { queryType { name } } }`,
			data:  `{"__typename":"Query","__schema":{"queryType":{"name":"Query"}},"again":{"queryType":{"name":"Query"}}}`, requested: 3, actual: 3},
		{name: "introspection cost, __schema missing", opts: []complexity.Option{complexity.WithIntrospectionCost(3)},
			query: `{ __typename __schema { queryType { name } } again: __schema { queryType { name } } }`, data: `{"__typename":"Query"}`, requested: 3, actual: 3},
		{name: "introspection cost, one __schema", opts: []complexity.Option{complexity.WithIntrospectionCost(3)},
			query: `{ __schema { queryType { name } } }`, data: `{"__schema":{"queryType":{"name":"Query"}}}`, requested: 0, actual: 0},
		// Priced against the introspection types: 1 + fields 10 × 1.
		{name: "priced introspection", opts: []complexity.Option{complexity.WithFreeIntrospection(false)},
			query: `{ __type(name: "User") { name fields { name } } }`,
			data:  `{"__type":{"name":"User","fields":[{"name":"id"},{"name":"login"}]}}`, requested: 11, actual: 11},
		{name: "__typename beside a field", query: `{ user(login: "octocat") { __typename repos(first: 10) { __typename name } } }`,
			data: `{"user":{"__typename":"User","repos":[{"__typename":"Repository","name":"x"}]}}`, requested: 11, actual: 2},
	})
}

// An operation the requested price refuses has no actual cost: ActualCost
// fails with the same error.
func TestActualCostRefusesWhatAnalyzeRefuses(t *testing.T) {
	schema := exampleSchema(t)
	capped, err := complexity.New(schema, complexity.WithMaxCost(50))
	if err != nil {
		t.Fatal(err)
	}
	p := prepare(t, schema, readmeQuery, nil)
	if _, err := capped.ActualCost(p.doc, p.op, p.vars, []byte(readmeData)); !errors.Is(err, complexity.ErrMaxCost) {
		t.Errorf("max cost: err = %v", err)
	}
	a, err := complexity.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	// Variables the analyzer reads itself, uncoerced: "abc" is no Int.
	p = prepare(t, schema, `query($f: Int) { user(login: "octocat") { repos(first: $f) { name } } }`, nil)
	_, aerr := a.AnalyzeOperation(p.doc, p.op, map[string]any{"f": "abc"})
	_, err = a.ActualCost(p.doc, p.op, map[string]any{"f": "abc"}, []byte(`{"user":null}`))
	if !errors.Is(err, complexity.ErrInvalidArgumentValue) || err.Error() != aerr.Error() {
		t.Errorf("invalid variable: err = %v, Analyze: %v", err, aerr)
	}
	if _, err := a.ActualCost(p.doc, nil, nil, nil); !errors.Is(err, complexity.ErrInvalidDocument) {
		t.Errorf("nil operation: err = %v", err)
	}
}

// seedPlan is the seed operation with its analyzer and compiled plan, for
// the tests that read responses both ways.
func seedPlan(t *testing.T) (*complexity.Analyzer, prepared, *complexity.Plan) {
	t.Helper()
	schema := loadSchema(t, seedSDL)
	a, err := complexity.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	p := prepare(t, schema, seedQuery, nil)
	plan, err := a.Compile(p.doc, p.op)
	if err != nil {
		t.Fatal(err)
	}
	return a, p, plan
}

func TestActualCostInvalidResponses(t *testing.T) {
	a, p, plan := seedPlan(t)
	tests := []struct{ name, data, want string }{
		{"whitespace only", " ", "neither an object nor null"},
		{"a list as data", `[]`, "neither an object nor null"},
		{"a string as data", `"x"`, "neither an object nor null"},
		{"unterminated object", `{"user":{}`, "expected ',' or '}'"},
		{"no value", `{"user":}`, "expected an object"},
		{"missing colon", `{"user" null}`, "expected ':'"},
		{"unquoted key", `{user:null}`, "expected a key"},
		{"trailing comma", `{"user":null,}`, "expected a key"},
		{"trailing data", `{"user":null} {}`, "continues after"},
		{"bad literal", `{"user":nul}`, "invalid literal"},
		{"a list where an object belongs", `{"user":[]}`, "expected an object"},
		{"a string where an object belongs", `{"user":"octocat"}`, "expected an object"},
		{"an object where a list belongs", `{"user":{"repos":{}}}`, "expected a list"},
		{"a number where an object belongs", `{"user":{"repos":[1]}}`, "expected an object"},
		{"a list too deep", `{"user":{"repos":[[{}]]}}`, "expected an object"},
		{"a key twice", `{"user":{"repos":[],"repos":[{}]}}`, "twice"},
		{"a key twice, one escaped", `{"user":null,"\u0075ser":null}`, "twice"},
		{"unterminated string", `{"user":{"x":"abc`, "unterminated string"},
		{"control character", "{\"user\":{\"x\":\"a\nb\"}}", "control character"},
		{"bad escape", `{"user":{"x":"\q"}}`, "invalid escape"},
		{"bad unicode escape", `{"user":{"x":"\u12G4"}}`, `invalid \u escape`},
		{"leading zero", `{"user":{"x":01}}`, "expected ',' or '}'"},
		{"bare minus", `{"user":{"x":-}}`, "invalid number"},
		{"fraction without digits", `{"user":{"x":1.}}`, "invalid number"},
		{"exponent without digits", `{"user":{"x":1e+}}`, "invalid number"},
		{"mismatched brackets", `{"user":{"x":[1}}}`, "expected ',' or ']'"},
		{"NUL byte", "{\"user\":\x00}", "expected an object"},
		{"unselected value malformed", `{"user":{"x":{"a":tru}}}`, "invalid literal"},
		{"not JSON", `<html>`, "neither an object nor null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.ActualCost(p.doc, p.op, p.vars, []byte(tt.data))
			if !errors.Is(err, complexity.ErrInvalidResponse) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidResponse mentioning %q", err, tt.want)
			}
			checkPlanActual(t, a, plan, p.doc, p.op, p.vars, []byte(tt.data))
		})
	}
}

// TestActualCostErrorMessages pins the whole message of an invalid
// response, offset and path included: the path names the selected fields
// the reader was inside, and a skipped value adds none of its keys.
func TestActualCostErrorMessages(t *testing.T) {
	a, p, plan := seedPlan(t)
	const prefix = "complexity: invalid response: "
	tests := []struct{ name, data, want string }{
		{"at the root", `{"user":nul}`, "invalid literal at byte 8"},
		{"in a root field", `{"user":[]}`, "expected an object at byte 8 (under user)"},
		{"in a nested list", `{"user":{"repos":[{"issues":[{"title":"x"},1]}]}}`, "expected an object at byte 43 (under user.repos.issues)"},
		{"in a leaf", `{"user":{"repos":[{"issues":[{"title":"a\qb"}]}]}}`, "invalid escape at byte 40 (under user.repos.issues.title)"},
		{"in a skipped value", `{"user":{"repos":[{"x":{"a":[1,}]}]}}`, "expected a value at byte 31 (under user.repos)"},
		{"a key twice", `{"user":{"repos":[{"issues":[],"issues":[]}]}}`, `key "issues" appears twice in one object at byte 40 (under user.repos)`},
		{"an escaped key twice", `{"user":{"repos":[],"rep\u006fs":null}}`, `key "repos" appears twice in one object at byte 33 (under user)`},
		{"after a key", `{"user":{"repos" []}}`, "expected ':' after a key at byte 17 (under user)"},
		{"whitespace before the error", "{\"user\": {\"repos\": [ {\"issues\" : [ {\"title\":\"x\"} ] } ]  x}}", "expected ',' or '}' in an object at byte 56 (under user)"},
		{"trailing data", `{"user":null} x`, "data continues after its value at byte 14"},
		{"a key cut short", `{"user":{"repos"`, "expected ':' after a key at byte 16 (under user)"},
		{"a key cut at its quote", `{"user":{"repos`, "unterminated string at byte 15 (under user)"},
		{"a key twice, in order", `{"user":{"repos":[{"issues":[],"x":1,"issues":[]}]}}`, `key "issues" appears twice in one object at byte 46 (under user.repos)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.ActualCost(p.doc, p.op, p.vars, []byte(tt.data))
			if err == nil || err.Error() != prefix+tt.want {
				t.Fatalf("err = %v, want %s%s", err, prefix, tt.want)
			}
			checkPlanActual(t, a, plan, p.doc, p.op, p.vars, []byte(tt.data))
		})
	}
}

// Values the operation does not select are skipped without recursion: a
// depth bomb fails fast at 10,000 levels wherever it is, and nesting below
// that is read through.
func TestActualCostDepthBombs(t *testing.T) {
	a, p, plan := seedPlan(t)
	const deep = 1_000_000
	tests := []struct {
		name, data, want string
	}{
		{"unselected lists", `{"user":{"x":` + strings.Repeat("[", deep), "nested more than 10000 levels"},
		{"unselected objects", `{"user":{"x":` + strings.Repeat(`{"a":`, deep), "nested more than 10000 levels"},
		{"inside a leaf", `{"user":{"repos":[{"issues":[{"title":` + strings.Repeat("[", deep), "nested more than 10000 levels"},
		{"where objects belong", `{"user":{"repos":` + strings.Repeat("[", deep), "expected an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.ActualCost(p.doc, p.op, p.vars, []byte(tt.data))
			if !errors.Is(err, complexity.ErrInvalidResponse) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidResponse mentioning %q", err, tt.want)
			}
			checkPlanActual(t, a, plan, p.doc, p.op, p.vars, []byte(tt.data))
		})
	}
	const levels = 9_999
	data := `{"user":{"x":` + strings.Repeat(`[{"a":`, levels/2) + "1" + strings.Repeat("}]", levels/2) + `,"repos":[]}}`
	if n, err := a.ActualCost(p.doc, p.op, p.vars, []byte(data)); err != nil || n != 1 {
		t.Fatalf("%d levels: %d, %v", levels, n, err)
	}
	checkPlanActual(t, a, plan, p.doc, p.op, p.vars, []byte(data))
}

// ActualCost allocates nothing per value read: the priced tree and the
// reader's scratch space are recycled with the walker, so the count does
// not grow with the response. An interface or union with several members
// keeps what it knows of each (two allocations), whatever the response.
func TestActualCostAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop Puts at random, so the walk's state is sometimes allocated afresh; run without -race to count allocations")
	}
	schema := exampleSchema(t)
	a, err := complexity.New(schema, complexity.WithBreakdownLimit(0))
	if err != nil {
		t.Fatal(err)
	}
	search := `{ search(query: "o", first: 10) { __typename ... on User { repos(first: 5) { name } } ... on Repository { issues(first: 3) { title } } } }`
	manyResults := `{"search":[` + strings.TrimSuffix(strings.Repeat(`{"__typename":"User","repos":[{"name":"a"},{"name":"b"}]},{"__typename":"Repository","issues":[{"title":"x"}]},`, 500), ",") + `]}`
	tests := []struct {
		name, query, data string
		want              float64
	}{
		{"README", readmeQuery, readmeData, 0},
		{"1 MB", actualPageQuery(100, 60), string(actualPage(100, 60)), 0},
		{"union, empty", search, `{"search":[]}`, 2},
		{"union, 1,000 results", search, manyResults, 2},
	}
	for _, tt := range tests {
		p, data := prepare(t, schema, tt.query, nil), []byte(tt.data)
		allocs := testing.AllocsPerRun(20, func() {
			if _, err := a.ActualCost(p.doc, p.op, p.vars, data); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != tt.want {
			t.Errorf("%s: %v allocations per call, want %v", tt.name, allocs, tt.want)
		}
	}
}

// The forged-alias attack at its size: 100 posts of 50 comments, each
// calling itself a User through a note aliased to "__typename". Priced by
// its keys, every object is the Post it is, and nothing comes back.
func TestActualCostForgedTypenameAtSize(t *testing.T) {
	const sdl = `
union Feed = User | Post
type User { name: String }
type Post { note: String body: String comments(first: Int): [Comment] }
type Comment { text: String }
type Query { feed(first: Int): [Feed] }
`
	query := `{ feed(first: 100) { ... on User { __typename } ... on Post { __typename: note body comments(first: 50) { text } } } }`
	var b strings.Builder
	b.WriteString(`{"feed":[`)
	for i := range 100 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"__typename":"User","body":"b","comments":[`)
		for j := range 50 {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"text":"t"}`)
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`]}`)
	runActualCases(t, []actualCase{
		// 100 × max(User 1, Post 1 + 50 × 1).
		{name: "forged __typename, 100 posts of 50 comments", sdl: sdl, query: query, data: b.String(), requested: 5100, actual: 5100},
	})
}

// The trial on gqlgen's starwars app, where no client sent __typename: the
// hero and its friends are Characters (Human or Droid, priced alike), and
// before objects were priced by their keys the refund never came.
// R2-D2 has three friends; they have 4 + 3 + 4 of their own.
func TestActualCostStarwarsWithoutTypename(t *testing.T) {
	const sdl = `
enum Episode { NEWHOPE EMPIRE JEDI }
interface Character { id: ID! name: String! friends: [Character!] appearsIn: [Episode!]! }
type Human implements Character { id: ID! name: String! friends: [Character!] appearsIn: [Episode!]! height: Float mass: Float }
type Droid implements Character { id: ID! name: String! friends: [Character!] appearsIn: [Episode!]! primaryFunction: String }
type Query { hero(episode: Episode): Character }
`
	friendsOf := func(names ...string) string {
		return `[{"name":"` + strings.Join(names, `"},{"name":"`) + `"}]`
	}
	twoLevels := `{"hero":{"friends":[` +
		`{"friends":` + friendsOf("Han Solo", "Leia Organa", "C-3PO", "R2-D2") + `},` +
		`{"friends":` + friendsOf("Luke Skywalker", "Leia Organa", "R2-D2") + `},` +
		`{"friends":` + friendsOf("Luke Skywalker", "Han Solo", "C-3PO", "R2-D2") + `}]}}`
	runActualCases(t, []actualCase{
		// 1 + 10 × 1 requested; the hero and 3 friends returned.
		{name: "hero { name friends { name } }", sdl: sdl,
			query:     `{ hero { name friends { name } } }`,
			data:      `{"hero":{"name":"R2-D2","friends":` + friendsOf("Luke Skywalker", "Han Solo", "Leia Organa") + `}}`,
			requested: 11, actual: 4},
		// 1 + 10 × (1 + 10) requested; 1 + 3 + 11 objects returned.
		{name: "hero { friends { friends { name } } }", sdl: sdl,
			query: `{ hero { friends { friends { name } } } }`, data: twoLevels,
			requested: 111, actual: 15},
		// A member-only field tells the member apart: a Human's height.
		{name: "hero as a Human by its keys", sdl: sdl,
			query:     `{ hero(episode: EMPIRE) { name ... on Human { height } ... on Droid { primaryFunction } friends { name } } }`,
			data:      `{"hero":{"name":"Luke Skywalker","height":1.72,"friends":` + friendsOf("Han Solo", "Leia Organa", "C-3PO", "R2-D2") + `}}`,
			requested: 11, actual: 5},
	})
}
