package serve

import (
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
	"github.com/costguard/costguard/graph"
)

// The server's hot path: the README query (61 points) through the whole
// stack, against the peer workload of the same gqlgen handler without
// costguard. The ratio of the two is costguard's overhead per operation.
const benchBody = `{"query":"{ user(login: \"octocat\") { repos(first: 10) { issues(first: 5) { title } } } }"}`

// benchConfig never runs out: the benchmark measures admission, not refusal.
func benchConfig() config {
	cfg := defaultConfig()
	cfg.Plans["anon"] = planConfig{Plan: budget.Plan{Burst: 1_000_000_000_000, Rate: 1_000_000_000_000, Per: time.Second}}
	cfg.Challenge.Secret = secret(strings.Repeat("b", 32)) // no "random secret drawn" line in the output
	return cfg
}

func benchServe(b *testing.B, h http.Handler, method, target, body string) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := httptest.NewRequest(method, target, strings.NewReader(body))
			r.RemoteAddr = "203.0.113.7:40000"
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	})
}

func BenchmarkGraphQL(b *testing.B) {
	b.Run("costguard", func(b *testing.B) {
		h, cleanup, err := newServer(benchConfig(), deps{})
		if err != nil {
			b.Fatal(err)
		}
		defer cleanup()
		benchServe(b, h, http.MethodPost, "/graphql", benchBody)
	})
	// The same without refunds: what pricing the response and giving the
	// unused points back cost.
	b.Run("costguard-no-refund", func(b *testing.B) {
		h, cleanup, err := newServer(withoutRefunds(benchConfig()), deps{})
		if err != nil {
			b.Fatal(err)
		}
		defer cleanup()
		benchServe(b, h, http.MethodPost, "/graphql", benchBody)
	})
	b.Run("peer=bare-gqlgen", func(b *testing.B) {
		srv := handler.New(graph.NewResolver().Schema())
		srv.AddTransport(transport.POST{})
		srv.SetQueryCache(lru.New[*ast.QueryDocument](1000))
		benchServe(b, srv, http.MethodPost, "/graphql", benchBody)
	})
}

func BenchmarkREST(b *testing.B) {
	b.Run("costguard", func(b *testing.B) {
		h, cleanup, err := newServer(benchConfig(), deps{})
		if err != nil {
			b.Fatal(err)
		}
		defer cleanup()
		benchServe(b, h, http.MethodGet, "/api/users/octocat", "")
	})
	b.Run("peer=bare-handler", func(b *testing.B) {
		rest := &restAPI{res: graph.NewResolver()}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /api/users/{login}", rest.getUser)
		benchServe(b, mux, http.MethodGet, "/api/users/octocat", "")
	})
}
