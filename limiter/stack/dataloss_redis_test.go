package stack_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/limiter/stack"
)

// The scenario: two gateway processes on one Redis; a principal's
// budget is spent; Redis restarts without persistence. Within a second of
// the restart neither process refuses the principal from its local state
// (over-limit cache, split-budget lease refusal): the store, whose data is
// gone, decides again.
func TestRestartWithoutPersistenceDropsLocalState(t *testing.T) {
	srv := redistest.StartServer(t)
	// Five tokens, one back every 200 s: a refusal says Retry-After 200s.
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 5, Rate: 1, Period: 200 * time.Second}
	ctx := context.Background()
	var gateways []*stack.Stack
	for range 2 {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		store, err := redisstore.New(rdb, redisstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		st, err := stack.New(stack.Config{Store: store, SplitBudget: true, LeaseFraction: 0.2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		gateways = append(gateways, st)
	}
	keys := map[bool]string{false: "principal", true: "leased-principal"}
	// The first gateway spends both budgets; then both refuse, from the
	// store and then from what they remember.
	for _, leased := range []bool{false, true} {
		for range 5 {
			if d, err := gateways[0].Store(leased).Take(ctx, keys[leased], limit, 1); err != nil || !d.Allowed {
				t.Fatalf("spending %s: %+v, %v", keys[leased], d, err)
			}
		}
		for i, g := range gateways {
			for range 2 {
				if d, err := g.Store(leased).Take(ctx, keys[leased], limit, 1); err != nil || d.Allowed || d.RetryAfter < time.Minute {
					t.Fatalf("gateway %d, %s spent: %+v, %v; want a long refusal", i, keys[leased], d, err)
				}
			}
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	for i, g := range gateways {
		for _, leased := range []bool{false, true} {
			deadline := restarted.Add(time.Second)
			for {
				d, err := g.Store(leased).Take(ctx, keys[leased], limit, 1)
				if err == nil && d.Allowed {
					t.Logf("gateway %d admits %s %v after the restart completed", i, keys[leased], time.Since(restarted).Round(time.Millisecond))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("gateway %d still refuses %s 1s after the restart: %+v, %v", i, keys[leased], d, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
}
