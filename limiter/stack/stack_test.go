package stack_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/overlimit"
	"github.com/costguard/costguard/limiter/splitbudget"
	"github.com/costguard/costguard/limiter/stack"
)

// shared stands for a store other processes share: it declares nothing
// (limiter.Local), so it is taken to be shared.
type shared struct{ limiter.Store }

// thinWrapper is a wrapper around the memory store that embeds it, and so
// declares, as the memory store does, that it is local.
type thinWrapper struct{ *memorystore.Store }

// remoteWrapper embeds the memory store but says it is not local, as a
// wrapper that adds a network hop must.
type remoteWrapper struct{ *memorystore.Store }

func (remoteWrapper) Local() bool { return false }

func TestComposition(t *testing.T) {
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	mem, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	tests := []struct {
		name      string
		cfg       stack.Config
		cached    bool // Store(false) is behind the over-limit cache
		leased    bool // Store(true) is split-budget leases
		wantErr   error
		wantStore limiter.Store // when neither cached nor owned
		remote    bool          // the Stack treats the store as shared
	}{
		{name: "nil store: an owned memory store, no cache", cfg: stack.Config{}},
		{name: "memory store: auto leaves the cache off", cfg: stack.Config{Store: mem}, wantStore: mem},
		{name: "shared store: auto turns the cache on", cfg: stack.Config{Store: shared{mem}}, cached: true, remote: true},
		{name: "thin wrapper of the memory store: local, no cache", cfg: stack.Config{Store: thinWrapper{mem}}, wantStore: thinWrapper{mem}},
		{name: "wrapper that says it is not local: shared", cfg: stack.Config{Store: remoteWrapper{mem}}, cached: true, remote: true},
		{name: "cache forced on", cfg: stack.Config{Store: mem, OverLimitCache: stack.OverLimitCacheOn}, cached: true},
		{name: "cache forced off", cfg: stack.Config{Store: shared{mem}, OverLimitCache: stack.OverLimitCacheOff}, wantStore: shared{mem}, remote: true},
		{name: "split budget", cfg: stack.Config{Store: mem, SplitBudget: true}, leased: true, wantStore: mem},
		{name: "unknown cache mode", cfg: stack.Config{OverLimitCache: "sometimes"}, wantErr: stack.ErrInvalidConfig},
		{name: "negative keys", cfg: stack.Config{MemoryMaxKeys: -1}, wantErr: stack.ErrInvalidConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Clock = clock
			st, err := stack.New(tc.cfg)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !errors.Is(err, stack.ErrInvalidConfig) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if st.Local() == tc.remote {
				t.Errorf("Local() = %v, want %v", st.Local(), !tc.remote)
			}
			if got := st.BreakerState() != ""; got != tc.remote {
				t.Errorf("breaker present = %v, want %v (only a shared store has one)", got, tc.remote)
			}
			exact := st.Store(false)
			if _, ok := exact.(*overlimit.Store); ok != tc.cached {
				t.Errorf("exact store %T, cached = %v", exact, tc.cached)
			}
			if tc.wantStore != nil && exact != tc.wantStore {
				t.Errorf("exact store %T, want the configured one", exact)
			}
			if _, ok := st.Store(true).(*splitbudget.Store); ok != tc.leased {
				t.Errorf("leased store %T, leased = %v", st.Store(true), tc.leased)
			}
			if !tc.leased && st.Store(true) != exact {
				t.Error("without SplitBudget, Store(true) is the exact store")
			}
			// Every stack decides: the store, the fallback and the overflow.
			// The fallback starts from what it was told (here: 10 left).
			limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Minute}
			st.Fallback().Observe("k", limit, 0, limiter.Decision{Allowed: true, Limit: 10, Remaining: 10})
			for _, s := range []limiter.Store{exact, st.Fallback(), st.Overflow()} {
				if d, err := s.Take(context.Background(), "k", limit, 1); err != nil || !d.Allowed {
					t.Errorf("%T: %+v, %v", s, d, err)
				}
			}
			// A key it was never told about is empty, never a fresh burst.
			if d, err := st.Fallback().Take(context.Background(), "unknown", limit, 1); err != nil || d.Allowed {
				t.Errorf("fallback, unknown key: %+v, %v", d, err)
			}
		})
	}
}

// A full memory store refuses a new identity with an error IsFull knows.
func TestIsFull(t *testing.T) {
	st, err := stack.New(stack.Config{MemoryMaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Hour}
	ctx := context.Background()
	if _, err := st.Store(false).Take(ctx, "alice", limit, 1); err != nil {
		t.Fatal(err)
	}
	_, err = st.Store(false).Take(ctx, "bob", limit, 1)
	if !stack.IsFull(err) {
		t.Fatalf("err = %v, want a full store", err)
	}
	if stack.IsFull(errors.New("other")) || stack.IsFull(nil) {
		t.Error("IsFull says yes to other errors")
	}
	if d, err := st.Overflow().Take(ctx, "overflow:anon", limit, 1); err != nil || !d.Allowed {
		t.Errorf("overflow: %+v, %v", d, err)
	}
}

// sharedAll stands for a shared store with TakeAll (as redisstore has).
type sharedAll struct{ *memorystore.Store }

func (sharedAll) Local() bool { return false }

// TestStoreAll: the store decides several budgets at once when it can,
// behind the cache when that is on; split-budget leases never do, and say
// so when the Stack is asked, not at the first request.
func TestStoreAll(t *testing.T) {
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	mem, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Minute}
	reqs := []limiter.Request{{Key: "k", Limit: limit, Cost: 1}, {Key: "k", Name: "field", Limit: limit, Cost: 2}}
	tests := []struct {
		name          string
		cfg           stack.Config
		exact, leased bool // StoreAll(false), StoreAll(true) succeed
	}{
		{"owned memory store", stack.Config{}, true, true},
		{"memory store", stack.Config{Store: mem}, true, true},
		{"shared store with TakeAll, cached", stack.Config{Store: sharedAll{mem}}, true, true},
		{"shared store without TakeAll", stack.Config{Store: shared{mem}}, false, false},
		{"split budget", stack.Config{Store: mem, SplitBudget: true}, true, false},
		{"split budget, cached", stack.Config{Store: sharedAll{mem}, SplitBudget: true}, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Clock = clock
			st, err := stack.New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for _, leased := range []bool{false, true} {
				want := tc.exact
				if leased {
					want = tc.leased
				}
				all, err := st.StoreAll(leased)
				if !want {
					if !errors.Is(err, limiter.ErrTakeAllUnsupported) || all != nil {
						t.Errorf("StoreAll(%v): %T, %v; want ErrTakeAllUnsupported", leased, all, err)
					}
					if _, ok := st.Store(leased).(limiter.MultiTaker); ok && leased && tc.cfg.SplitBudget {
						t.Errorf("Store(true) is %T, a MultiTaker over leases", st.Store(leased))
					}
					continue
				}
				if err != nil {
					t.Fatalf("StoreAll(%v): %v", leased, err)
				}
				if all != st.Store(leased) {
					t.Errorf("StoreAll(%v) is not Store(%v)", leased, leased)
				}
			}
			st.Fallback().ObserveAll(reqs, []limiter.Decision{{Allowed: true, Limit: 10, Remaining: 10}, {Allowed: true, Limit: 10, Remaining: 10}})
			for name, s := range map[string]stack.TakeAller{"fallback": st.Fallback(), "overflow": st.Overflow()} {
				ds := make([]limiter.Decision, 2)
				if err := s.TakeAll(context.Background(), reqs, ds); err != nil || !limiter.AllAllowed(ds) {
					t.Errorf("%s: %+v, %v", name, ds, err)
				}
			}
		})
	}
}

// flaky is a shared store that counts the calls reaching it and fails
// while down.
type flaky struct {
	limiter.Store
	calls int
	down  bool
}

func (s *flaky) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	s.calls++
	if s.down {
		return limiter.Decision{}, errors.New("connection refused")
	}
	return s.Store.Take(ctx, key, l, cost)
}

// The over-limit cache answers before the guard: a remembered refusal
// reaches neither the breaker nor the store. It remembers the store's own
// refusals, never the fail-open fallback's: once the store is back, it
// decides.
func TestCacheBeforeGuard(t *testing.T) {
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	mem, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	store := &flaky{Store: mem}
	st, err := stack.New(stack.Config{Store: store, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Minute}
	open := guard.Call{Plan: "free", FailOpen: true}
	take := func(key string, cost int64) (limiter.Decision, guard.Trace) {
		t.Helper()
		var tr guard.Trace
		d, err := st.Take(context.Background(), open, key, limit, cost, &tr)
		if err != nil {
			t.Fatal(err)
		}
		return d, tr
	}
	take("a", 10)
	if d, _ := take("a", 1); d.Allowed || store.calls != 2 {
		t.Fatalf("the store's refusal: %+v after %d calls", d, store.calls)
	}
	if d, tr := take("a", 1); d.Allowed || store.calls != 2 || tr.Result != guard.ResultOK || tr.Took != 0 {
		t.Errorf("remembered: %+v %+v after %d calls; want no store call", d, tr, store.calls)
	}
	store.down = true
	if d, tr := take("b", 1); d.Allowed || !tr.Fallback {
		t.Fatalf("b in the outage: %+v %+v; want the empty fallback's refusal", d, tr)
	}
	store.down = false
	if d, tr := take("b", 1); !d.Allowed || tr.Fallback {
		t.Errorf("b once the store is back: %+v %+v; want the store's admission", d, tr)
	}
}
