package stack_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/stack"
)

// lossy is a shared store that can lose its data (a fresh memory store
// takes over) and tells its listener, as redisstore does.
type lossy struct {
	t     *testing.T
	clock limiter.Clock
	mu    sync.Mutex
	cur   *memorystore.Store
	f     func()
	stops atomic.Int64
	takes atomic.Int64
}

var _ stack.DataLossNotifier = (*lossy)(nil)

func newLossy(t *testing.T, clock limiter.Clock) *lossy {
	l := &lossy{t: t, clock: clock}
	l.cur = l.fresh()
	return l
}

func (l *lossy) fresh() *memorystore.Store {
	m, err := memorystore.New(memorystore.Config{Clock: l.clock})
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { _ = m.Close() })
	return m
}

func (l *lossy) store() *memorystore.Store {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

func (l *lossy) Take(ctx context.Context, key string, lim limiter.Limit, cost int64) (limiter.Decision, error) {
	l.takes.Add(1)
	return l.store().Take(ctx, key, lim, cost)
}

func (l *lossy) Refund(ctx context.Context, key string, lim limiter.Limit, n int64) (limiter.Decision, error) {
	return l.store().Refund(ctx, key, lim, n)
}

func (l *lossy) OnDataLoss(f func()) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f = f
	return func() { l.stops.Add(1) }
}

// lose empties the store and reports it.
func (l *lossy) lose() {
	m := l.fresh()
	l.mu.Lock()
	l.cur = m
	f := l.f
	l.mu.Unlock()
	if f != nil {
		f()
	}
}

// After the store reports data loss, neither the over-limit cache nor the
// split-budget leases answer from what they knew: both ask the store,
// which (its data lost) admits.
func TestDataLossDropsLocalState(t *testing.T) {
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	store := newLossy(t, clock)
	st, err := stack.New(stack.Config{Store: store, SplitBudget: true, SettleInterval: time.Hour, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// One token an hour: a refusal is remembered for long.
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 20, Period: 20 * time.Hour}
	for _, leased := range []bool{false, true} {
		key := map[bool]string{false: "exact", true: "leased"}[leased]
		s := st.Store(leased)
		for i := 0; ; i++ {
			d, err := s.Take(ctx, key, limit, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
			if i > 20 {
				t.Fatalf("%s: more than a burst admitted", key)
			}
		}
		takes := store.takes.Load()
		if d, _ := s.Take(ctx, key, limit, 1); d.Allowed || store.takes.Load() != takes {
			t.Fatalf("%s: %+v, store asked %v; want a refusal from local state", key, d, store.takes.Load() != takes)
		}
	}
	store.lose()
	for _, leased := range []bool{false, true} {
		key := map[bool]string{false: "exact", true: "leased"}[leased]
		if d, err := st.Store(leased).Take(ctx, key, limit, 1); err != nil || !d.Allowed {
			t.Errorf("%s after the loss: %+v, %v; want the store's admission", key, d, err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if store.stops.Load() != 1 {
		t.Fatalf("Close unsubscribed %d times, want 1", store.stops.Load())
	}
}

// A Stack on a shared store subscribes even without a cache or leases:
// the fail-open fallback's debts are derived from the store too, and a
// loss drops them.
func TestDataLossDropsDebts(t *testing.T) {
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	store := newLossy(t, clock)
	st, err := stack.New(stack.Config{Store: store, OverLimitCache: stack.OverLimitCacheOff, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 20, Period: 20 * time.Hour}
	st.Fallback().Observe("k", limit, 0, limiter.Decision{Allowed: true, Limit: 20, Remaining: 20})
	if d, err := st.Fallback().Take(context.Background(), "k", limit, 5); err != nil || !d.Allowed || st.Fallback().Owing() != 1 {
		t.Fatalf("the fallback's admission: %+v, %v, owing %d", d, err, st.Fallback().Owing())
	}
	store.lose()
	if n := st.Fallback().Owing(); n != 0 {
		t.Errorf("owing %d after the loss, want 0", n)
	}
}
