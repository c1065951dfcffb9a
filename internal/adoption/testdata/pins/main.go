// An adopter's program: a scraper on chromedp v0.9.2 (whose Tasks and
// NewRemoteAllocator later releases removed), metrics on client_golang
// v1.19.0, a database on pgx v5.5.0 and a GraphQL API on gqlgen v0.17.73,
// with costguard's core added: the limiter, its plans and its Redis store.
// It is built, not run.
package main

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
)

func main() {
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	scrape := chromedp.Tasks{chromedp.Navigate("http://localhost/")}
	allocCtx, cancel := chromedp.NewRemoteAllocator(ctx, "ws://localhost:9222/")
	defer cancel()
	_, _ = scrape, allocCtx

	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	requests := prometheus.NewCounter(prometheus.CounterOpts{Name: "app_requests_total"})
	prometheus.MustRegister(requests)

	store, err := redisstore.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}), redisstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	lim, err := middleware.New(middleware.Dependencies{
		Store: store,
	}, middleware.Policy{
		Plans:         map[string]budget.Plan{"anon": {Burst: 500, Rate: 500, Per: time.Hour}},
		AnonymousPlan: "anon",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	_ = transport.Websocket{InitFunc: lim.WebsocketInit(nil)}
	log.Fatal(http.ListenAndServe(":8080", lim.REST(http.NotFoundHandler())))
}
