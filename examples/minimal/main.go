// Command minimal is the smallest complete program that protects a gqlgen
// server with costguard; the README's "A complete program" is this file.
// Every operation is priced and debited from its client's budget before
// any resolver runs: go run ./examples/minimal [-addr :8080], then POST to
// http://localhost:8080/graphql.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/querycache"
)

func main() {
	addr := flag.String("addr", ":8080", "listen `address`")
	flag.Parse()

	lim, err := middleware.New(middleware.Dependencies{}, middleware.Policy{
		Plans:         map[string]budget.Plan{"anon": {Burst: 500, Rate: 500, Per: time.Hour}},
		AnonymousPlan: "anon", // requests are keyed by client IP until you add API keys
	})
	if err != nil {
		log.Fatal(err) // a bad configuration fails here, at start
	}
	defer lim.Close()

	srv := handler.New(graph.NewResolver().Schema()) // your gqlgen schema
	srv.AddTransport(transport.POST{})
	srv.Use(extension.Introspection{}) // for GraphiQL and other tooling
	cache, _ := querycache.New(0, 0)   // bounded by bytes as well as entries
	srv.SetQueryCache(cache)

	http.Handle("/graphql", lim.Handler(srv)) // the extension, the statuses, the headers
	hs := &http.Server{Addr: *addr, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second}
	log.Printf("GraphQL on %s/graphql, priced and limited by costguard", *addr)
	log.Fatal(hs.ListenAndServe()) // with timeouts: a slow client cannot hold a connection
}
