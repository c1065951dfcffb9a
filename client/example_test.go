package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/client"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
)

// stoppedClock keeps the examples' output exact: no refill between
// requests.
type stoppedClock struct{}

func (stoppedClock) Now() time.Time { return time.Unix(1_700_000_000, 0) }

// exampleServer is the example schema behind costguard, with the free
// plan of the example server.
func exampleServer() *httptest.Server {
	lim, err := middleware.New(middleware.Dependencies{Clock: stoppedClock{}}, middleware.Policy{
		Plans:         map[string]budget.Plan{"free": {Burst: 5000, Rate: 5000, Per: time.Hour}, "anon": {Burst: 500, Rate: 500, Per: time.Hour}},
		AnonymousPlan: "anon",
		APIKeys:       map[string]identity.APIKey{"demo-free-key": {Principal: "alice", Plan: "free"}},
	})
	if err != nil {
		panic(err)
	}
	srv := handler.New(graph.NewResolver().Schema())
	srv.AddTransport(transport.POST{})
	return httptest.NewServer(lim.Handler(srv))
}

// post sends a GraphQL query through c.
func post(ctx context.Context, c *http.Client, url, query string) {
	body := fmt.Sprintf(`{"query":%q}`, query)
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer demo-free-key")
	resp, err := c.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // the body is whole: the Transport read a copy
	fmt.Println(resp.StatusCode, len(b) > 0)
}

// An http.Client whose requests wait for room in the budget, and retry
// refused queries after Retry-After. The Transport's view says what the
// server reported.
func ExampleTransport() {
	srv := exampleServer()
	defer srv.Close()

	t := &client.Transport{MaxWait: 10 * time.Second}
	c := &http.Client{Transport: t}
	post(context.Background(), c, srv.URL, `query Repos { user(login: "alice") { repos(first: 10) { name } } }`)

	v := t.View()
	p := v.Policies[0]
	fmt.Printf("%s: %d of %d points left, full again at %s\n", p.Name, p.Remaining, p.Limit, p.Reset.UTC().Format(time.TimeOnly))
	fmt.Println("Repos costs", v.Prices["Repos"])
	// Output:
	// 200 true
	// free: 4997 of 5000 points left, full again at 22:13:23
	// Repos costs 11
}

// An operation the Transport has not seen yet is paced at the price the
// caller gives.
func ExampleWithPrice() {
	srv := exampleServer()
	defer srv.Close()

	c := &http.Client{Transport: &client.Transport{}}
	ctx := client.WithPrice(context.Background(), 11)
	post(ctx, c, srv.URL, `query Repos { user(login: "alice") { repos(first: 10) { name } } }`)
	// Output:
	// 200 true
}

// A mutation is retried after a refusal only when the caller says that
// sending it twice is safe (it is idempotent, or the server deduplicates
// it).
func ExampleWithRetrySafe() {
	srv := exampleServer()
	defer srv.Close()

	c := &http.Client{Transport: &client.Transport{}}
	ctx := client.WithRetrySafe(context.Background())
	post(ctx, c, srv.URL, `mutation { rateLimit(dryRun: true) { cost remaining } }`)
	// Output:
	// 200 true
}
