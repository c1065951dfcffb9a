package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
)

// A budget of 100 points per minute with bursts of 20, shared by every
// gateway that talks to the same Redis (or Redis Cluster: pass a
// *redis.ClusterClient). This example needs a running Redis, so it is
// compiled but not run; the tests start their own servers.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "redis.internal:6379"})
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.Config{Prefix: "myapi"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // stops the senders New started
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 100, Period: time.Minute}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	d, err := store.Take(ctx, "user:42", limit, 3)
	switch {
	case errors.Is(err, limiter.ErrCostExceedsCapacity):
		fmt.Println("this request can never fit the budget")
	case err != nil:
		log.Print(err) // Redis unreachable: apply your failure policy
	case !d.Allowed:
		fmt.Printf("429, retry after %v\n", d.RetryAfter)
	default:
		fmt.Printf("ok, %d points left\n", d.Remaining)
	}
}

// Coalescing is on by default; these are its knobs. New checks them before
// any round trip.
func ExampleConfig() {
	rdb := redis.NewClient(&redis.Options{Addr: "redis.internal:6379"}) // New does not dial
	defer rdb.Close()

	_, err := redisstore.New(rdb, redisstore.Config{MaxBatchWait: 50 * time.Millisecond})
	fmt.Println(err)

	store, err := redisstore.New(rdb, redisstore.Config{
		MaxBatchSize: 128,                    // decisions per round trip (default 64)
		MaxBatchWait: 200 * time.Microsecond, // under load, let a batch fill a little
	})
	fmt.Println(err)
	defer store.Close() // stops the senders; the client stays open

	// Output:
	// redisstore: invalid config: max batch wait 50ms outside [0, 10ms]
	// <nil>
}

// go-redis's pool lines ("failed to dial", …) go to the program's slog
// logger at Debug instead of standard error. go-redis's logger is
// process-wide, so this is done once, at start-up. Compiled, not run: it
// would change the logger of every test in this package.
func ExampleSetGoRedisLogger() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	redisstore.SetGoRedisLogger(logger) // at Info, go-redis's lines are dropped unformatted
}
