package middleware_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
)

// stoppedClock keeps the examples' output exact: no refill between requests.
type stoppedClock struct{}

func (stoppedClock) Now() time.Time { return time.Unix(1_700_000_000, 0) }

// exampleSchema stands in for a generated gqlgen schema
// (graph.NewExecutableSchema(...) in a real server).
func exampleSchema() graphql.ExecutableSchema {
	s := gqlparser.MustLoadSchema(&ast.Source{Input: `
		type Query { repos(first: Int): [Repo!]! }
		type Repo { name: String! }`})
	return &graphql.ExecutableSchemaMock{
		SchemaFunc: func() *ast.Schema { return s },
		ExecFunc: func(ctx context.Context) graphql.ResponseHandler {
			return graphql.OneShot(&graphql.Response{Data: []byte(`{"repos":[]}`)})
		},
	}
}

// Installing on a gqlgen server: every operation is priced and debited
// before it runs, and its answer carries the decision's status and headers.
func ExampleLimiter_Handler() {
	lim, err := middleware.New(middleware.Dependencies{
		Clock: stoppedClock{},
	}, middleware.Policy{
		Plans: map[string]budget.Plan{
			"anon": {Burst: 500, Rate: 500, Per: time.Hour},
		},
		AnonymousPlan: "anon",
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	srv := handler.New(exampleSchema())
	srv.AddTransport(transport.POST{})
	h := lim.Handler(srv)

	for range 3 {
		// Priced 100 (100 repositories × 1 point) and debited before it
		// runs; the response holds no repository, so it actually costs
		// the minimum, 1, and 99 points come back before the headers.
		r := httptest.NewRequest("POST", "/graphql", strings.NewReader(`{"query":"{ repos(first: 100) { name } }"}`))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "anon";r=499;t=8
	// 200 "anon";r=498;t=15
	// 200 "anon";r=497;t=22
}

// Pricing REST routes: the search costs 10 points, everything else 1, from
// the same budget as the principal's GraphQL operations.
func ExampleLimiter_REST() {
	lim, err := middleware.New(middleware.Dependencies{
		Clock: stoppedClock{},
	}, middleware.Policy{
		Plans: map[string]budget.Plan{
			"free": {Burst: 25, Rate: 5000, Per: time.Hour},
			"anon": {Burst: 10, Rate: 500, Per: time.Hour},
		},
		AnonymousPlan: "anon",
		APIKeys: map[string]identity.APIKey{
			"demo-free-key": {Principal: "alice", Plan: "free"},
		},
		REST: middleware.RESTOptions{Routes: map[string]int64{"GET /api/search": 10}},
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	api := http.NewServeMux()
	api.HandleFunc("GET /api/search", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `[]`) })
	h := lim.REST(api)

	for _, key := range []string{"demo-free-key", "demo-free-key", "demo-free-key", "wrong-key"} {
		r := httptest.NewRequest("GET", "/api/search?q=go", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("Retry-After"), strings.TrimSpace(w.Body.String()))
	}
	// Output:
	// 200 15  []
	// 200 5  []
	// 429 5 4 {"error":"rate_limited","retry_after_seconds":4}
	// 401   {"error":"unknown_api_key"}
}

// GitHub's rateLimit field: the example schema's resolver returns
// RateLimitFrom(ctx); with dryRun: true the operation is priced, nothing is
// debited and no other root field runs.
func ExampleRateLimitFrom() {
	lim, err := middleware.New(middleware.Dependencies{
		Clock: stoppedClock{},
	}, middleware.Policy{
		Plans:         map[string]budget.Plan{"anon": {Burst: 500, Rate: 500, Per: time.Hour}},
		AnonymousPlan: "anon",
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	srv := handler.New(graph.NewResolver().Schema()) // Query.rateLimit(dryRun: Boolean = false): RateLimit
	srv.AddTransport(transport.POST{})
	h := lim.Handler(srv)

	for _, dryRun := range []string{"true", "false"} {
		q := `{ rateLimit(dryRun: ` + dryRun + `) { cost remaining used resetAt nodeCount } user(login: \"octocat\") { repos(first: 3) { name } } }`
		r := httptest.NewRequest("POST", "/graphql", strings.NewReader(`{"query":"`+q+`"}`))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var resp struct{ Data json.RawMessage }
		_ = json.Unmarshal(w.Body.Bytes(), &resp)
		fmt.Println(w.Code, string(resp.Data))
	}
	// Output:
	// 200 {"rateLimit":{"cost":4,"remaining":500,"used":0,"resetAt":"2023-11-14T22:13:20Z","nodeCount":3},"user":null}
	// 200 {"rateLimit":{"cost":4,"remaining":496,"used":4,"resetAt":"2023-11-14T22:13:49Z","nodeCount":3},"user":{"repos":[{"name":"hello-world"},{"name":"spoon-knife"},{"name":"linguist"}]}}
}

// Defaults says what a zero field of Dependencies or Policy stands for.
func ExampleDefaults() {
	deps, policy := middleware.Defaults()
	fmt.Println("max body bytes:", deps.MaxBodyBytes)
	fmt.Println("store timeout:", deps.StoreTimeout)
	fmt.Println("max depth:", policy.GraphQL.MaxDepth)
	fmt.Println("REST cost:", policy.REST.DefaultCost)
	fmt.Println("subscriptions per principal:", policy.Subscriptions.MaxPerPrincipal)
	// Output:
	// max body bytes: 1048576
	// store timeout: 100ms
	// max depth: 15
	// REST cost: 1
	// subscriptions per principal: 100
}
