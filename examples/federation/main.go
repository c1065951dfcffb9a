// Command federation serves two gqlgen subgraphs, accounts and reviews, each
// behind its own costguard Limiter, both spending the budgets in one Redis,
// for an Apollo gateway to compose (docs/gateways.md):
//
//	go run . -redis 127.0.0.1:6379 -trust 127.0.0.1/32
//	node ../../clients/apollo-gateway/example/gateway.js \
//	  --subgraph accounts=http://127.0.0.1:4001/query \
//	  --subgraph reviews=http://127.0.0.1:4002/query
//
// A client with the key alice-key or bob-key spends its user's budget; one
// without a key spends its address's, which the gateway forwards in
// X-Forwarded-For and the subgraphs believe from -trust only.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/examples/federation/accounts"
	"github.com/costguard/costguard/examples/federation/reviews"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/querycache"
)

// Plans every subgraph shares: a budget is one Redis key per principal, so
// the subgraphs must agree on each plan's burst and rate.
var plans = map[string]budget.Plan{
	"free": {Burst: 1000, Rate: 1000, Per: time.Hour},
	"anon": {Burst: 100, Rate: 100, Per: time.Hour},
}

// limiterConfig is one subgraph's Limiter configuration: the same in every
// subgraph, store, keys and trusted gateway addresses included.
func limiterConfig(store limiter.Store, keys map[string]identity.APIKey, gateway []string) (middleware.Dependencies, middleware.Policy) {
	deps := middleware.Dependencies{
		Store: store, // one Redis for every subgraph: one budget per user
	}
	policy := middleware.Policy{
		Plans:          plans,   //
		AnonymousPlan:  "anon",  // clients without a key: by address
		APIKeys:        keys,    // every subgraph knows every key
		TrustedProxies: gateway, // X-Forwarded-For is believed from the gateway only
	}
	return deps, policy
}

// subgraph returns the handler of one subgraph: gqlgen's server for its
// schema, priced and limited by lim.
func subgraph(schema graphql.ExecutableSchema, lim *middleware.Limiter) (http.Handler, error) {
	srv := handler.New(schema)
	srv.AddTransport(transport.POST{})
	srv.Use(extension.Introspection{}) // the gateway reads _service { sdl }, which gqlgen serves only with it
	cache, err := querycache.New(0, 0)
	if err != nil {
		return nil, err
	}
	srv.SetQueryCache(cache)
	return lim.Handler(srv), nil
}

func main() {
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis `address` holding the budgets")
	accountsAddr := flag.String("accounts", "127.0.0.1:4001", "the accounts subgraph's listen `address`")
	reviewsAddr := flag.String("reviews", "127.0.0.1:4002", "the reviews subgraph's listen `address`")
	trust := flag.String("trust", "127.0.0.1/32", "the gateway's `CIDR`: X-Forwarded-For is believed from it only")
	flag.Parse()
	if err := run(*redisAddr, *accountsAddr, *reviewsAddr, *trust); err != nil {
		log.Fatal(err)
	}
}

func run(redisAddr, accountsAddr, reviewsAddr, trust string) error {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	keys := map[string]identity.APIKey{
		"alice-key": {Principal: "alice", Plan: "free"},
		"bob-key":   {Principal: "bob", Plan: "free"},
	}

	errs := make(chan error, 2)
	for _, sg := range []struct {
		name, addr string
		schema     graphql.ExecutableSchema
	}{
		{"accounts", accountsAddr, accounts.Schema()},
		{"reviews", reviewsAddr, reviews.Schema()},
	} {
		// Each subgraph has a store and a Limiter of its own, as it would
		// in its own process; what they share is Redis.
		store, err := redisstore.New(rdb, redisstore.Config{})
		if err != nil {
			return err
		}
		defer store.Close()
		lim, err := middleware.New(limiterConfig(store, keys, []string{trust}))
		if err != nil {
			return err
		}
		defer lim.Close()
		h, err := subgraph(sg.schema, lim)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/query", h)
		hs := &http.Server{Addr: sg.addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second}
		log.Printf("subgraph %s on http://%s/query", sg.name, sg.addr)
		go func() { errs <- hs.ListenAndServe() }()
	}
	return <-errs // the first server that stops ends the program
}
