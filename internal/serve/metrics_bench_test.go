package serve

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// What GET /metrics costs the example server, in-process: on the public
// port it is a 404; on the admin listener it is the Prometheus scrape
// (decision counters, cost histograms, Go's and the process's collectors),
// kept off the public port, where anyone could ask for it unmetered.
// GET /healthz on the public port is the named peer, the cheapest answer
// the port gives.
// Run them together for the ratios:
//
//	go test ./internal/serve -run '^$' -bench 'Metrics|PublicHealthz'
func BenchmarkPublicMetrics404(b *testing.B) {
	s := metricsBenchServer(b)
	benchGET(b, s.Handler, "/metrics", http.StatusNotFound)
}

func BenchmarkAdminMetricsScrape(b *testing.B) {
	s := metricsBenchServer(b)
	benchGET(b, s.admin, "/metrics", http.StatusOK)
}

func BenchmarkPublicHealthz(b *testing.B) {
	s := metricsBenchServer(b)
	benchGET(b, s.Handler, "/healthz", http.StatusOK)
}

// metricsBenchServer is the example server with the defaults after a few
// decisions of each kind, so that the scrape has the series a running
// server has.
func metricsBenchServer(b *testing.B) *server {
	b.Helper()
	cfg := defaultConfig()
	cfg.Challenge.Secret = secret(testSecret)
	s, cleanup, err := newServer(cfg, deps{logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := cleanup(); err != nil {
			b.Error(err)
		}
	})
	for _, key := range []string{"", demoAPIKey} {
		for _, req := range []struct{ method, target, body string }{
			{http.MethodPost, "/graphql", `{"query":"{ user(login: \"octocat\") { repos(first: 10) { issues(first: 5) { title } } } }"}`},
			{http.MethodPost, "/graphql", `{"query":"{ user(login: \"octocat\") { repos(first: 1000) { name } } }"}`}, // refused: too broad
			{http.MethodGet, "/api/users/octocat", ""},
			{http.MethodGet, "/api/search?q=octo", ""},
		} {
			r := httptest.NewRequest(req.method, req.target, strings.NewReader(req.body))
			r.Header.Set("Content-Type", "application/json")
			if key != "" {
				r.Header.Set("Authorization", "Bearer "+key)
			}
			s.ServeHTTP(httptest.NewRecorder(), r)
		}
	}
	return s
}

// benchGET serves GET target from h, one request after another, and
// requires status.
func benchGET(b *testing.B, h http.Handler, target string, status int) {
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.Host = "127.0.0.1:9091" // a token-less admin listener answers only loopback names
		h.ServeHTTP(w, r)
		if w.Code != status {
			b.Fatalf("GET %s: %d, want %d", target, w.Code, status)
		}
	}
}
