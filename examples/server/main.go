// Command server is costguard's example API: the graph package's GitHub-like
// schema on GraphQL and three REST routes, every request priced and debited
// from its principal's token bucket.
//
//	go run ./examples/server                       # :8080, in-memory budgets
//	go run ./examples/server -redis localhost:6379  # or redis://[:password@]localhost:6379/0
//	go run ./examples/server -redis-cluster 10.0.0.1:7000,10.0.0.2:7000
//	go run ./examples/server -config costguard.yaml
//	go run ./examples/server -keys-postgres postgres://localhost/costguard
//
// Routes:
//
//	GET  /                     GraphiQL, to explore the schema
//	GET  /graphql, POST /graphql
//	GET  /api/users/{login}    costs 1 point (rest.default_cost)
//	GET  /api/search?q=        costs 10 points (rest.routes); 503 degraded under load
//	POST /api/login            costs 1 point; 5 attempts in any 15 minutes per client address (rest.route_limits)
//	GET  /healthz              200 while serving; unlimited
//	GET  /readyz               200 when the budget store answers a ping, else 503; unlimited
//
// and on the admin listener (-admin-addr, default 127.0.0.1:9091) the
// probes again, GET /metrics (Prometheus metrics, docs/operations.md;
// unlimited, and never on the public port, where a scrape would be
// unmetered work), and package admin's routes behind a bearer token
// (-admin-token-file or admin.token_sha256; a loopback-only listener may
// go without):
//
//	GET    /admin/principals/{principal}           plan, override and budgets
//	PUT    /admin/principals/{principal}/override  {"plan": "pro"} or limits, optionally "until"
//	DELETE /admin/principals/{principal}/override
//	GET    /admin/top, /admin/operations, /admin/stats, /admin/stats/history
//	GET    /admin/list-sizes                       the list sizes responses returned, the sizes to assume
//	GET    /admin/                                 a dashboard of those (the page needs no token)
//
// Requests with "Authorization: Bearer demo-free-key" (or X-API-Key) spend
// alice's budget on the free plan (5000 points an hour); requests without a
// key spend their IP address's budget on the anon plan (500 an hour).
// docs/server.md describes the flags and every configuration key.
//
// Under load, requests are shed by lane: anonymous ones first, with a
// proof-of-work challenge a client can solve to be admitted; checkout
// (createIssue) last. demo_latency slows the resolvers for a demo.
//
// SIGHUP re-reads the -config file and swaps plans, API keys, modes, route
// costs and GraphQL limits without dropping a request; docs/server.md's
// "Reloading" says what takes a restart instead.
//
// The process is package serve (internal/serve) with its demo parts:
// flags, store, listener, reloads on SIGHUP, graceful shutdown on SIGINT
// or SIGTERM, and the handler, which its tests drive directly.
package main

import "github.com/costguard/costguard/internal/serve"

func main() {
	serve.Main(serve.Options{}) // the zero Options: the example server, its demo parts included
}
