package complexity_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/costguard/costguard/complexity"
)

const countSDL = `
type Query {
	viewer: User
	node: Node
	search(first: Int): [SearchResult]
	repos(first: Int): [Repo]
}
type Mutation {
	login(user: String): Token
	createIssue(title: String): Issue
}
type Token { value: String }
interface Node { id: ID }
union SearchResult = User | Repo
type User implements Node { id: ID login: String repos(first: Int): [Repo] }
type Repo implements Node { id: ID name: String issues(first: Int): [Issue] owner: User }
type Issue implements Node { id: ID title: String createdBy: User }
`

func aliasedLogins(n int) string {
	var b strings.Builder
	b.WriteString("mutation {")
	for i := range n {
		fmt.Fprintf(&b, " l%d: login(user: \"u%d\") { value }", i, i)
	}
	b.WriteString(" }")
	return b.String()
}

// TestFieldCounts is the table of WithCountedFields: each case names the
// coordinates counted and the counts and paths expected, in that order.
func TestFieldCounts(t *testing.T) {
	type fc = complexity.FieldCount
	p := func(keys ...string) []string { return keys }
	tests := []struct {
		name   string
		coords []string
		query  string
		vars   map[string]any
		want   []complexity.FieldCount
	}{
		{
			name:   "100 aliases of one mutation",
			coords: []string{"Mutation.login"},
			query:  aliasedLogins(100),
			want:   []fc{{"Mutation.login", 100, p("l0")}},
		},
		{
			name:   "one root field",
			coords: []string{"Mutation.createIssue", "Mutation.login"},
			query:  `mutation { createIssue(title: "x") { id } }`,
			want:   []fc{{"Mutation.createIssue", 1, p("createIssue")}},
		},
		{
			name:   "merged through two fragments",
			coords: []string{"User.login"},
			query:  `{ viewer { ...A ...B } } fragment A on User { login } fragment B on User { login }`,
			want:   []fc{{"User.login", 1, p("viewer", "login")}},
		},
		{
			name:   "two aliases through two fragments",
			coords: []string{"User.login"},
			query:  `{ viewer { ...A ...B } } fragment A on User { a: login } fragment B on User { b: login }`,
			want:   []fc{{"User.login", 2, p("viewer", "a")}},
		},
		{
			name:   "nested lists multiply",
			coords: []string{"Issue.createdBy"},
			query:  `{ repos(first: 10) { issues(first: 5) { createdBy { id } } } }`,
			want:   []fc{{"Issue.createdBy", 50, p("repos", "issues", "createdBy")}},
		},
		{
			name:   "the order given, not the document's",
			coords: []string{"Issue.title", "Repo.name", "Query.repos"},
			query:  `{ repos(first: 2) { name issues(first: 3) { title } } }`,
			want: []fc{
				{"Issue.title", 6, p("repos", "issues", "title")},
				{"Repo.name", 2, p("repos", "name")},
				{"Query.repos", 1, p("repos")},
			},
		},
		{
			name:   "an empty list counts nothing, so the path is the next one",
			coords: []string{"Repo.name"},
			query:  `{ a: repos(first: 0) { name } b: repos(first: 2) { name } }`,
			want:   []fc{{"Repo.name", 2, p("b", "name")}},
		},
		{
			name:   "nothing selected",
			coords: []string{"Mutation.login"},
			query:  `{ viewer { id } }`,
		},
		{
			name:   "a fragment reached twice, memoised, counts in both places",
			coords: []string{"Issue.title"},
			query:  `{ a: repos(first: 10) { ...R } b: repos(first: 3) { ...R } } fragment R on Repo { issues(first: 5) { title } }`,
			want:   []fc{{"Issue.title", 65, p("a", "issues", "title")}},
		},
		{
			name:   "@include and @skip with variables",
			coords: []string{"Mutation.createIssue", "Mutation.login"},
			query: `mutation($yes: Boolean!, $no: Boolean!) {
				a: createIssue(title: "a") @include(if: $yes) { id }
				b: createIssue(title: "b") @include(if: $no) { id }
				c: createIssue(title: "c") @skip(if: $no) { id }
				login @skip(if: $yes) { value } }`,
			vars: map[string]any{"yes": true, "no": false},
			want: []fc{{"Mutation.createIssue", 2, p("a")}},
		},
		{
			name:   "a skipped fragment",
			coords: []string{"User.login"},
			query:  `query($x: Boolean!) { viewer { ...A @skip(if: $x) id } } fragment A on User { login }`,
			vars:   map[string]any{"x": true},
		},
		{
			name:   "union: the larger member wins",
			coords: []string{"User.login"},
			query:  `{ search(first: 10) { ... on User { a: login b: login } ... on Repo { owner { login } } } }`,
			want:   []fc{{"User.login", 20, p("search", "a")}},
		},
		{
			name:   "union: a tie goes to the first member by name",
			coords: []string{"User.login"},
			query:  `{ search(first: 10) { ... on User { login } ... on Repo { owner { login } } } }`,
			want:   []fc{{"User.login", 10, p("search", "owner", "login")}},
		},
		{
			name:   "union: each coordinate its own maximum",
			coords: []string{"User.login", "Repo.name"},
			query:  `{ search(first: 4) { ... on User { login } ... on Repo { name } } }`,
			want:   []fc{{"User.login", 4, p("search", "login")}, {"Repo.name", 4, p("search", "name")}},
		},
		{
			name:   "interface: nested under a type condition",
			coords: []string{"Issue.title"},
			query:  `{ node { ... on User { repos(first: 3) { issues(first: 2) { title } } } ... on Issue { title } } }`,
			want:   []fc{{"Issue.title", 6, p("node", "repos", "issues", "title")}},
		},
		{
			name:   "interface coordinate counts every implementation",
			coords: []string{"Node.id"},
			query:  `{ node { id } repos(first: 3) { id owner { id } } }`,
			want:   []fc{{"Node.id", 1 + 3 + 3, p("node", "id")}},
		},
		{
			name:   "a field counted inside itself: its own place first",
			coords: []string{"Repo.owner"},
			query:  `{ repos(first: 2) { owner { repos(first: 3) { owner { id } } } } }`,
			want:   []fc{{"Repo.owner", 2 + 2*3, p("repos", "owner")}},
		},
		{
			name:   "sizes from variables",
			coords: []string{"Issue.title"},
			query:  `query($r: Int, $i: Int) { repos(first: $r) { issues(first: $i) { title } } }`,
			vars:   map[string]any{"r": 7, "i": "3"},
			want:   []fc{{"Issue.title", 21, p("repos", "issues", "title")}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := analyze(t, countSDL, tt.query, tt.vars, complexity.WithCountedFields(tt.coords...))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.FieldCounts, tt.want) {
				t.Errorf("FieldCounts = %+v, want %+v", r.FieldCounts, tt.want)
			}
		})
	}
}

// A fragment spread twice per level is priced once per level; its counts
// are carried up the memoised sets and multiplied at each place.
func TestFieldCountsThroughFanOut(t *testing.T) {
	r, err := analyze(t, fanoutSDL, fanout(40), nil, complexity.WithCountedFields("Node.leaf", "Node.a"))
	if err != nil {
		t.Fatal(err)
	}
	want := []complexity.FieldCount{
		{Coordinate: "Node.leaf", Count: 1 << 40, Path: append(slicesRepeat("a", 40), "leaf")},
		{Coordinate: "Node.a", Count: 1<<40 - 1, Path: []string{"node", "a"}},
	}
	want[0].Path = append([]string{"node"}, want[0].Path...)
	if !reflect.DeepEqual(r.FieldCounts, want) {
		t.Errorf("FieldCounts = %+v, want %+v", r.FieldCounts, want)
	}
	// 63 levels pass MaxInt64: the count saturates.
	r, err = analyze(t, fanoutSDL, fanout(70), nil, complexity.WithCountedFields("Node.leaf"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.FieldCounts) != 1 || r.FieldCounts[0].Count != math.MaxInt64 {
		t.Errorf("FieldCounts = %+v, want MaxInt64", r.FieldCounts)
	}
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestCountedFieldsValidated(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Input: countSDL})
	if err != nil {
		t.Fatal(err)
	}
	for _, coord := range []string{"Nope.x", "Query.nope", "Query", "Query.", ".login", "SearchResult.id", "Boolean.x", ""} {
		_, err := complexity.New(schema, complexity.WithCountedFields("User.login", coord))
		if !errors.Is(err, complexity.ErrInvalidOption) || !strings.Contains(err.Error(), fmt.Sprintf("%q", coord)) {
			t.Errorf("%q: err = %v, want ErrInvalidOption naming it", coord, err)
		}
	}
	a, err := complexity.New(schema, complexity.WithCountedFields("User.login", "Node.id"), complexity.WithCountedFields("User.login"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.Analyze(mustParse(t, `{ viewer { login id } }`), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.FieldCounts) != 2 || r.FieldCounts[0].Coordinate != "User.login" || r.FieldCounts[1].Coordinate != "Node.id" {
		t.Errorf("a coordinate given twice: %+v", r.FieldCounts)
	}
}

func mustParse(t testing.TB, query string) *ast.QueryDocument {
	t.Helper()
	doc, err := parser.ParseQuery(&ast.Source{Name: "query.graphql", Input: query})
	if err != nil {
		t.Fatal(err)
	}
	return doc
}
