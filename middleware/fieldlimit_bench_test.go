package middleware_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/middleware"
)

// BenchmarkGraphQLFieldLimit is BenchmarkGraphQL's api-key request on a
// plan with a quota and a field limit on the selected field, counted by
// the principal and by the address: the price of a decision of four
// budgets in two groups, and of passing the report's field counts to the
// engine.
//
//	go test -run '^$' -bench BenchmarkGraphQLFieldLimit -benchmem ./middleware/
func BenchmarkGraphQLFieldLimit(b *testing.B) {
	body, _ := json.Marshal(map[string]any{"query": query61})
	lim, err := middleware.New(middleware.Dependencies{
		Logger: discardLogger(),
		Clock:  limiter.SystemClock{},
	}, middleware.Policy{
		Plans: map[string]budget.Plan{
			"big": {Burst: 1e9, Rate: 1e9, Per: time.Second, Quota: &budget.Quota{Limit: 1e15, Per: 24 * time.Hour}},
		},
		FieldLimits:   map[string]budget.FieldLimit{"Query.user": {Limit: 1e12, Per: time.Second, By: budget.ByBoth}},
		AnonymousPlan: "big",
		APIKeys:       map[string]identity.APIKey{aliceKey: {Principal: "alice", Plan: "big"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	srv := handler.New(newTestSchema().executable())
	srv.AddTransport(transport.POST{})
	srv.SetQueryCache(lru.New[*ast.QueryDocument](100))
	h := lim.Handler(srv)
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/graphql", strings.NewReader(string(body)))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+aliceKey)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || w.Header().Get("RateLimit-Policy") == "" {
			b.Fatalf("status %d: %s %v", w.Code, w.Body, w.Header())
		}
	}
}
