package graph_test

import (
	"fmt"

	"github.com/99designs/gqlgen/client"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/costguard/costguard/graph"
)

// Serve the example schema with gqlgen and count the resolvers a query runs.
func Example() {
	r := graph.NewResolver()
	srv := handler.New(r.Schema())
	srv.AddTransport(transport.POST{})

	var resp struct {
		User struct {
			Repos []struct {
				Name   string
				Issues []struct{ Title string }
			}
		}
	}
	client.New(srv).MustPost(`{ user(login: "octocat") { repos(first: 2) { name issues(first: 1) { title } } } }`, &resp)
	for _, repo := range resp.User.Repos {
		fmt.Printf("%s: %s\n", repo.Name, repo.Issues[0].Title)
	}
	fmt.Println("resolver calls:", r.Calls())
	// Output:
	// hello-world: Add a README
	// spoon-knife: Fork count is wrong
	// resolver calls: 4
}
