// The project's own test, which adoption_test.go copies into a project made
// by gqlgen init: lim.Handler on its server, one request through gqlgen's
// client. It only reports; adoption_test.go checks.

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"

	"example.com/todo/graph"
)

// TestCostguard prints what the server answered, in one line (RESULT, JSON)
// for adoption_test.go to check.
func TestCostguard(t *testing.T) {
	var logs bytes.Buffer
	lim, err := middleware.New(middleware.Config{
		Plans:         map[string]budget.Plan{"anon": {Burst: 500, Rate: 500, Per: time.Hour}},
		AnonymousPlan: "anon",
		Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	srv := handler.New(graph.NewExecutableSchema(graph.Config{Resolvers: &graph.Resolver{}}))
	srv.AddTransport(transport.POST{})
	resp, err := client.New(lim.Handler(srv)).RawPost("{ todos { text } rateLimit { cost remaining } }")
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(map[string]any{"data": resp.Data, "errors": resp.Errors, "extensions": resp.Extensions, "log": logs.String()})
	fmt.Printf("RESULT %s\n", out)
}
