package graph_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/99designs/gqlgen/client"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/middleware"
)

func newClient(r *graph.Resolver) *client.Client {
	srv := handler.New(r.Schema())
	srv.AddTransport(transport.POST{})
	return client.New(srv)
}

// do runs query and returns its data and errors as JSON text.
func do(t *testing.T, c *client.Client, query string, opts ...client.Option) (data, errs string) {
	t.Helper()
	resp, err := c.RawPost(query, opts...)
	require.NoError(t, err)
	b, err := json.Marshal(resp.Data)
	require.NoError(t, err)
	return string(b), string(resp.Errors)
}

func TestQueries(t *testing.T) {
	tests := []struct {
		name, query, want string
	}{
		{
			"user with nullable name",
			`{ user(login: "octocat") { id login name } bob: user(login: "bob") { login name } }`,
			`{"user":{"id":"U_octocat","login":"octocat","name":"The Octocat"},"bob":{"login":"bob","name":null}}`,
		},
		{
			"unknown user is null",
			`{ user(login: "nobody") { login } }`,
			`{"user":null}`,
		},
		{
			"all repos, oldest first",
			`{ user(login: "octocat") { repos { name } } }`,
			`{"user":{"repos":[{"name":"hello-world"},{"name":"spoon-knife"},{"name":"linguist"},{"name":"octocat.github.io"}]}}`,
		},
		{
			"first",
			`{ user(login: "octocat") { repos(first: 2) { name } } }`,
			`{"user":{"repos":[{"name":"hello-world"},{"name":"spoon-knife"}]}}`,
		},
		{
			"last",
			`{ user(login: "octocat") { repos(last: 1) { name } } }`,
			`{"user":{"repos":[{"name":"octocat.github.io"}]}}`,
		},
		{
			"first then last",
			`{ user(login: "octocat") { repos(first: 3, last: 2) { name } } }`,
			`{"user":{"repos":[{"name":"spoon-knife"},{"name":"linguist"}]}}`,
		},
		{
			"first larger than the list",
			`{ user(login: "bob") { repos(first: 100) { name } } }`,
			`{"user":{"repos":[{"name":"build-tools"}]}}`,
		},
		{
			"zero",
			`{ user(login: "octocat") { repos(first: 0) { name } } }`,
			`{"user":{"repos":[]}}`,
		},
		{
			"nested issues",
			`{ user(login: "octocat") { repos(first: 1) { name owner { login } issues(last: 2) { id title body } } } }`,
			`{"user":{"repos":[{"name":"hello-world","owner":{"login":"octocat"},"issues":[
				{"id":"I_2","title":"Greeting is not localised","body":"Say hello in more than one language."},
				{"id":"I_3","title":"Typo in the greeting","body":null}]}]}}`,
		},
		{
			"repository by name with topics",
			`{ repository(name: "linguist") { id topics owner { name } } }`,
			`{"repository":{"id":"R_linguist","topics":["languages","syntax","ruby"],"owner":{"name":"The Octocat"}}}`,
		},
		{
			"bodyHTML escapes and splits paragraphs",
			`{ a: node(id: "I_5") { ... on Issue { bodyHTML } } b: node(id: "I_1") { ... on Issue { bodyHTML } } c: node(id: "I_3") { ... on Issue { bodyHTML } } }`,
			`{"a":{"bodyHTML":"<p>Headings should be &lt;h1&gt;, not &lt;b&gt;.</p>"},
			  "b":{"bodyHTML":"<p>The repository has no README yet.</p><p>It should say what this is.</p>"},
			  "c":{"bodyHTML":null}}`,
		},
		{
			"node resolves each type and unknown IDs to null",
			`{ u: node(id: "U_alice") { __typename id } r: node(id: "R_wonderland") { __typename id } i: node(id: "I_1") { __typename id } x: node(id: "I_999") { id } y: node(id: "nope") { id } }`,
			`{"u":{"__typename":"User","id":"U_alice"},"r":{"__typename":"Repository","id":"R_wonderland"},"i":{"__typename":"Issue","id":"I_1"},"x":null,"y":null}`,
		},
		{
			"nodes answers one item per id, in order, null for an unknown id",
			`{ nodes(ids: ["R_linguist", "nope", "U_bob", "I_999", "I_2", "U_bob"]) { __typename id } }`,
			`{"nodes":[{"__typename":"Repository","id":"R_linguist"},null,{"__typename":"User","id":"U_bob"},null,
				{"__typename":"Issue","id":"I_2"},{"__typename":"User","id":"U_bob"}]}`,
		},
		{
			"nodes of a single id not in a list, and of none",
			`{ one: nodes(ids: "U_alice") { id } none: nodes(ids: []) { id } }`,
			`{"one":[{"id":"U_alice"}],"none":[]}`,
		},
		{
			"recentIssues across repositories, newest first, five by default",
			`{ user(login: "octocat") { recentIssues { id } } }`,
			`{"user":{"recentIssues":[{"id":"I_9"},{"id":"I_8"},{"id":"I_7"},{"id":"I_6"},{"id":"I_5"}]}}`,
		},
		{
			"recentIssues limit, null and beyond the issues there are",
			`{ alice: user(login: "alice") { two: recentIssues(limit: 2) { title } all: recentIssues(limit: 100) { id } null: recentIssues(limit: null) { id } } carol: user(login: "carol") { recentIssues(limit: 0) { id } } }`,
			`{"alice":{"two":[{"title":"Text renders mirrored"},{"title":"Tea party never ends"}],
				"all":[{"id":"I_12"},{"id":"I_11"},{"id":"I_10"}],"null":[{"id":"I_12"},{"id":"I_11"},{"id":"I_10"}]},
			  "carol":{"recentIssues":[]}}`,
		},
		{
			"search returns users, then repositories, then issues",
			`{ search(query: "WONDER") { __typename ... on Repository { name } } more: search(query: "alice") { __typename ... on User { login } } }`,
			`{"search":[{"__typename":"Repository","name":"wonderland"}],"more":[{"__typename":"User","login":"alice"}]}`,
		},
		{
			"search honours first across kinds",
			`{ search(query: "o", first: 3) { __typename ... on User { login } ... on Repository { name } ... on Issue { title } } }`,
			`{"search":[{"__typename":"User","login":"octocat"},{"__typename":"User","login":"bob"},{"__typename":"User","login":"carol"}]}`,
		},
		{
			"search by user name and issue title",
			`{ search(query: "danvers") { ... on User { login } } issues: search(query: "flaky") { ... on Issue { id } } }`,
			`{"search":[{"login":"carol"}],"issues":[{"id":"I_14"}]}`,
		},
		{
			"followers connection",
			`{ user(login: "octocat") { followers(first: 2) { totalCount nodes { login } } } }`,
			`{"user":{"followers":{"totalCount":3,"nodes":[{"login":"alice"},{"login":"bob"}]}}}`,
		},
	}
	c := newClient(graph.NewResolver())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, errs := do(t, c, tt.query)
			assert.Empty(t, errs)
			assert.JSONEq(t, tt.want, data)
		})
	}
}

func TestArgumentErrors(t *testing.T) {
	tests := []struct {
		name, query, wantErr string
	}{
		{"negative first", `{ user(login: "octocat") { repos(first: -1) { name } } }`, "graph: invalid argument: first must not be negative, got -1"},
		{"negative last", `{ repository(name: "linguist") { issues(last: -2) { title } } }`, "graph: invalid argument: last must not be negative, got -2"},
		{"negative search first", `{ search(query: "a", first: -5) { __typename } }`, "graph: invalid argument: first must not be negative, got -5"},
		{"negative followers first", `{ user(login: "octocat") { followers(first: -1) { totalCount } } }`, "graph: invalid argument: first must not be negative, got -1"},
		{"negative recentIssues limit", `{ user(login: "octocat") { recentIssues(limit: -1) { id } } }`, "graph: invalid argument: limit must not be negative, got -1"},
		{"too many node ids", `{ nodes(ids: [` + strings.Repeat(`"U_bob", `, 101) + `]) { id } }`, "graph: invalid argument: at most 100 ids, got 101"},
		{"unknown repository", `mutation { createIssue(repo: "nope", title: "x") { id } }`, `graph: not found: repository \"nope\"`},
		{"blank title", `mutation { createIssue(repo: "linguist", title: "  ") { id } }`, "graph: invalid argument: title must not be empty"},
		{"long title", `mutation { createIssue(repo: "linguist", title: "` + strings.Repeat("é", graph.MaxTitleLength+1) + `") { id } }`, "graph: invalid argument: title is 257 characters, at most 256 allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := graph.NewResolver()
			c := newClient(r)
			_, errs := do(t, c, tt.query)
			assert.Contains(t, errs, tt.wantErr)
			// A failed mutation leaves the data as seeded.
			data, _ := do(t, c, `{ repository(name: "linguist") { issues { id } } }`)
			assert.JSONEq(t, `{"repository":{"issues":[{"id":"I_6"},{"id":"I_7"}]}}`, data)
		})
	}
}

func TestCreateIssueAppearsInRepository(t *testing.T) {
	c := newClient(graph.NewResolver())
	var created struct {
		CreateIssue struct{ ID, Title string }
	}
	require.NoError(t, c.Post(`mutation($t: String!) { createIssue(repo: "spoon-knife", title: $t) { id title } }`,
		&created, client.Var("t", "  Spoons bend  ")))
	assert.Equal(t, "Spoons bend", created.CreateIssue.Title, "title is trimmed")

	data, errs := do(t, c, `{ repository(name: "spoon-knife") { issues(last: 1) { id title body } } }`)
	assert.Empty(t, errs)
	assert.JSONEq(t, fmt.Sprintf(`{"repository":{"issues":[{"id":%q,"title":"Spoons bend","body":null}]}}`, created.CreateIssue.ID), data)

	data, _ = do(t, c, fmt.Sprintf(`{ node(id: %q) { ... on Issue { title } } }`, created.CreateIssue.ID))
	assert.JSONEq(t, `{"node":{"title":"Spoons bend"}}`, data)

	// The newest issue of all the owner's repositories, wherever it was opened.
	data, _ = do(t, c, `{ user(login: "octocat") { recentIssues(limit: 2) { title } } }`)
	assert.JSONEq(t, `{"user":{"recentIssues":[{"title":"Spoons bend"},{"title":"Dark mode"}]}}`, data)
}

// Query.nodes takes up to MaxNodeIDs ids, the middleware's default breadth
// cap, as a list or (input coercion) a single id, literal or variable.
func TestNodesIDs(t *testing.T) {
	assert.Equal(t, 100, graph.MaxNodeIDs, "the schema documents 100")
	_, def := middleware.Defaults()
	assert.Equal(t, def.GraphQL.MaxBreadth, graph.MaxNodeIDs)
	c := newClient(graph.NewResolver())
	ids := make([]string, graph.MaxNodeIDs)
	for i := range ids {
		ids[i] = fmt.Sprintf("I_%d", i+1)
	}
	var resp struct{ Nodes []*struct{ ID string } }
	require.NoError(t, c.Post(`query($ids: [ID!]!) { nodes(ids: $ids) { id } }`, &resp, client.Var("ids", ids)))
	require.Len(t, resp.Nodes, graph.MaxNodeIDs)
	for i, n := range resp.Nodes {
		if i < 14 { // the seeded issues
			assert.Equal(t, ids[i], n.ID)
		} else {
			assert.Nil(t, n, ids[i])
		}
	}

	data, errs := do(t, c, `query($ids: [ID!]!) { nodes(ids: $ids) { id } }`, client.Var("ids", "R_wonderland"))
	assert.Empty(t, errs)
	assert.JSONEq(t, `{"nodes":[{"id":"R_wonderland"}]}`, data)

	_, errs = do(t, c, `query($ids: [ID!]!) { nodes(ids: $ids) { id } }`, client.Var("ids", append(ids, "U_bob")))
	assert.Contains(t, errs, "graph: invalid argument: at most 100 ids, got 101")
}

func TestResolversShareNoData(t *testing.T) {
	a, b := newClient(graph.NewResolver()), newClient(graph.NewResolver())
	_, errs := do(t, a, `mutation { createIssue(repo: "wonderland", title: "Only in a") { id } }`)
	require.Empty(t, errs)
	data, _ := do(t, b, `{ repository(name: "wonderland") { issues { title } } }`)
	assert.JSONEq(t, `{"repository":{"issues":[{"title":"Rabbit hole has no bottom"},{"title":"Tea party never ends"}]}}`, data)
}

func TestRepositoryFull(t *testing.T) {
	c := newClient(graph.NewResolver())
	var resp struct {
		Repository struct{ Issues []struct{ ID string } }
	}
	require.NoError(t, c.Post(`{ repository(name: "looking-glass") { issues { id } } }`, &resp))
	for i := len(resp.Repository.Issues); i < graph.MaxIssuesPerRepository; i++ {
		_, errs := do(t, c, `mutation { createIssue(repo: "looking-glass", title: "more") { id } }`)
		require.Empty(t, errs)
	}
	_, errs := do(t, c, `mutation { createIssue(repo: "looking-glass", title: "one too many") { id } }`)
	assert.Contains(t, errs, `graph: repository is full: \"looking-glass\" has 1000 issues`)
}

func TestSeedShape(t *testing.T) {
	// Scripts and the README depend on these properties of the seeded data.
	c := newClient(graph.NewResolver())
	var resp struct {
		User struct {
			Repos []struct {
				Name   string
				Owner  struct{ Login string }
				Issues []struct{ ID string }
			}
		}
	}
	require.NoError(t, c.Post(`{ user(login: "octocat") { repos { name owner { login } issues { id } } } }`, &resp))
	require.GreaterOrEqual(t, len(resp.User.Repos), 3)
	for _, r := range resp.User.Repos {
		assert.Equal(t, "octocat", r.Owner.Login)
		assert.GreaterOrEqual(t, len(r.Issues), 2, r.Name)
	}

	var all struct {
		Search []struct {
			Typename string `json:"__typename"`
			Name     string
			Owner    struct{ Login string }
		}
	}
	require.NoError(t, c.Post(`{ search(query: "") { __typename ... on Repository { name owner { login } } } }`, &all))
	seen := map[string]string{}
	for _, r := range all.Search {
		if r.Typename != "Repository" {
			continue
		}
		prev, dup := seen[r.Name]
		assert.False(t, dup, "repository %q owned by %s and %s", r.Name, prev, r.Owner.Login)
		seen[r.Name] = r.Owner.Login
	}
	assert.GreaterOrEqual(t, len(seen), 5)
}

func TestCallsCountsResolvers(t *testing.T) {
	var mu sync.Mutex
	var fields []string
	r := graph.NewResolver(graph.WithOnResolve(func(_ context.Context, field string) {
		mu.Lock()
		defer mu.Unlock()
		fields = append(fields, field)
	}))
	c := newClient(r)

	// A query that fails validation executes nothing.
	_, err := c.RawPost(`{ user(login: "octocat") { nosuchfield } }`)
	require.Error(t, err)
	assert.Zero(t, r.Calls())
	assert.Empty(t, fields)

	// user (1) + repos (1) + issues once per repository (2); login and title
	// are plain struct fields.
	_, errs := do(t, c, `{ user(login: "octocat") { login repos(first: 2) { issues(first: 1) { title } } } }`)
	require.Empty(t, errs)
	assert.EqualValues(t, 4, r.Calls())
	mu.Lock()
	defer mu.Unlock()
	assert.ElementsMatch(t, []string{"Query.user", "User.repos", "Repository.issues", "Repository.issues"}, fields)
}

func TestConcurrentUse(t *testing.T) {
	r := graph.NewResolver()
	c := newClient(r)
	const writers, perWriter = 8, 10
	var wg sync.WaitGroup
	ids := make(chan string, writers*perWriter)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				var resp struct{ CreateIssue struct{ ID string } }
				if err := c.Post(`mutation($t: String!) { createIssue(repo: "build-tools", title: $t) { id } }`,
					&resp, client.Var("t", fmt.Sprintf("w%d-%d", w, i))); err != nil {
					t.Error(err)
					return
				}
				ids <- resp.CreateIssue.ID
			}
		})
		wg.Go(func() {
			for range perWriter {
				if _, errs := do(t, c, `{ search(query: "w") { __typename } user(login: "bob") { repos { issues(last: 3) { title } } } }`); errs != "" {
					t.Error(errs)
					return
				}
			}
		})
	}
	wg.Wait()
	close(ids)
	unique := map[string]bool{}
	for id := range ids {
		unique[id] = true
	}
	assert.Len(t, unique, writers*perWriter, "issue IDs are unique")

	var resp struct {
		Repository struct{ Issues []struct{ ID string } }
	}
	require.NoError(t, c.Post(`{ repository(name: "build-tools") { issues { id } } }`, &resp))
	assert.Len(t, resp.Repository.Issues, 2+writers*perWriter)
}

func TestZeroResolverIsSeeded(t *testing.T) {
	srv := handler.New(graph.NewExecutableSchema(graph.Config{Resolvers: &graph.Resolver{}}))
	srv.AddTransport(transport.POST{})
	data, errs := do(t, client.New(srv), `{ user(login: "octocat") { repos(first: 1) { name } } }`)
	assert.Empty(t, errs)
	assert.JSONEq(t, `{"user":{"repos":[{"name":"hello-world"}]}}`, data)
}
