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

// BenchmarkGraphQL measures one POST /graphql round through gqlgen, with
// and without the limiter (Extension + wrapper, in-memory store, a budget
// that never runs out). The difference is the extension's overhead per
// operation: identity, pricing, one Take, headers and extensions.cost.
//
//	go test -run '^$' -bench BenchmarkGraphQL -benchmem ./middleware/
func BenchmarkGraphQL(b *testing.B) {
	body, _ := json.Marshal(map[string]any{"query": query61})
	run := func(b *testing.B, h http.Handler, key string) {
		b.ReportAllocs()
		for b.Loop() {
			r := httptest.NewRequest("POST", "/graphql", strings.NewReader(string(body)))
			r.Header.Set("Content-Type", "application/json")
			if key != "" {
				r.Header.Set("Authorization", "Bearer "+key)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	}
	schema := newTestSchema()

	newServer := func() *handler.Server {
		srv := handler.New(schema.executable())
		srv.AddTransport(transport.POST{})
		// As production servers do: parse and validate each document once.
		srv.SetQueryCache(lru.New[*ast.QueryDocument](100))
		return srv
	}

	b.Run("baseline", func(b *testing.B) {
		run(b, newServer(), "")
	})

	for _, tc := range []struct{ name, key string }{{"limited/anonymous", ""}, {"limited/api-key", aliceKey}} {
		b.Run(tc.name, func(b *testing.B) {
			lim, err := middleware.New(middleware.Dependencies{
				Logger: discardLogger(),
				Clock:  limiter.SystemClock{},
			}, middleware.Policy{
				Plans: map[string]budget.Plan{
					"big": {Burst: 1e9, Rate: 1e9, Per: time.Second},
				},
				AnonymousPlan: "big",
				APIKeys:       map[string]identity.APIKey{aliceKey: {Principal: "alice", Plan: "big"}},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer lim.Close()
			srv := newServer()
			run(b, lim.Handler(srv), tc.key)
		})
	}
}

// BenchmarkREST measures the REST middleware alone around an empty handler.
func BenchmarkREST(b *testing.B) {
	lim, err := middleware.New(middleware.Dependencies{
		Logger: discardLogger(),
	}, middleware.Policy{
		Plans:         map[string]budget.Plan{"big": {Burst: 1e9, Rate: 1e9, Per: time.Second}},
		AnonymousPlan: "big",
		REST:          middleware.RESTOptions{Routes: map[string]int64{"GET /api/search": 10, "GET /api/users/{login}": 1}},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	benchREST(b, lim, "")
}

// benchREST serves GET /api/users/octocat through lim's REST wrapper (as
// apiKey, when set) once per iteration, each answer checked.
func benchREST(b *testing.B, lim *middleware.Limiter, apiKey string) {
	h := lim.REST(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest(http.MethodGet, "/api/users/octocat", nil)
	if apiKey != "" {
		r.Header.Set("Authorization", "Bearer "+apiKey)
	}
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}

// BenchmarkRESTRouteLimit is BenchmarkREST on a route with a limit of its
// own (a sliding counter per principal and per address), decided with the
// bucket: the price of a route limit against BenchmarkREST's plain route.
func BenchmarkRESTRouteLimit(b *testing.B) {
	lim, err := middleware.New(middleware.Dependencies{
		Logger: discardLogger(),
	}, middleware.Policy{
		Plans:         map[string]budget.Plan{"big": {Burst: 1e9, Rate: 1e9, Per: time.Second}},
		AnonymousPlan: "big",
		APIKeys:       map[string]identity.APIKey{aliceKey: {Principal: "alice", Plan: "big"}},
		REST: middleware.RESTOptions{
			Routes:      map[string]int64{"GET /api/search": 10, "GET /api/users/{login}": 1},
			RouteLimits: map[string]budget.FieldLimit{"GET /api/users/{login}": {Limit: 1e9, Per: time.Second, Algorithm: budget.SlidingCounter, By: budget.ByBoth}},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	benchREST(b, lim, aliceKey)
}

// BenchmarkFormBodyVariables sends a 960 KB request whose variables hold
// 480,000 values, as JSON and as a form body that gqlgen's
// transport.UrlEncodedForm decodes as JSON: both are screened before gqlgen
// decodes them and refused VARIABLES_TOO_LARGE for their invalid cost.
//
//	go test -run '^$' -bench BenchmarkFormBodyVariables -benchmem ./middleware/
func BenchmarkFormBodyVariables(b *testing.B) {
	body := `{"query":"{ __typename }","variables":{"x":[` + strings.Repeat("1,", 480_000) + `1]}}`
	lim, err := middleware.New(middleware.Dependencies{
		Logger: discardLogger(),
		Clock:  limiter.SystemClock{},
	}, middleware.Policy{
		Plans:         map[string]budget.Plan{"big": {Burst: 1e9, Rate: 1e9, Per: time.Second}},
		AnonymousPlan: "big",
	})
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	srv := handler.New(newTestSchema().executable())
	srv.AddTransport(transport.POST{})
	srv.AddTransport(transport.UrlEncodedForm{})
	h := lim.Handler(srv)
	for _, contentType := range []string{"application/json", "application/x-www-form-urlencoded"} {
		b.Run(strings.TrimPrefix(contentType, "application/"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("POST", "/graphql", strings.NewReader(body))
				r.Header.Set("Content-Type", contentType)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusBadRequest {
					b.Fatalf("status %d, want 400 VARIABLES_TOO_LARGE: %.300s", w.Code, w.Body)
				}
			}
		})
	}
}
