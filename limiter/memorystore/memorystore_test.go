package memorystore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
)

func newTestStore(t *testing.T, clock limiter.Clock) limiter.Store {
	t.Helper()
	s, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		t.Fatalf("memorystore.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestSuite(t *testing.T) {
	limitertest.Run(t, newTestStore)
}

var (
	t0     = time.Unix(1_893_456_000, 0)
	bucket = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}
)

func TestNewConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  memorystore.Config
		msg  string // empty: valid
	}{
		{"zero value", memorystore.Config{}, ""},
		{"explicit", memorystore.Config{MaxKeys: 10, Shards: 10, SweepInterval: time.Second}, ""},
		{"small MaxKeys lowers the default Shards", memorystore.Config{MaxKeys: 3}, ""},
		{"negative MaxKeys", memorystore.Config{MaxKeys: -1}, "MaxKeys must not be negative (got -1)"},
		{"negative Shards", memorystore.Config{Shards: -2}, "Shards must not be negative (got -2)"},
		{"negative SweepInterval", memorystore.Config{SweepInterval: -time.Second}, "SweepInterval must not be negative (got -1s)"},
		{"more shards than keys", memorystore.Config{MaxKeys: 4, Shards: 8}, "Shards (8) exceeds MaxKeys (4)"},
		{"clock before the epoch", memorystore.Config{Clock: limitertest.NewFakeClock(time.Time{})}, "outside the supported years"},
		{"clock after 2112", memorystore.Config{Clock: limitertest.NewFakeClock(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC))}, "outside the supported years"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := memorystore.New(c.cfg)
			if c.msg == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				_ = s.Close()
				return
			}
			if !errors.Is(err, memorystore.ErrInvalidConfig) || !strings.Contains(err.Error(), c.msg) ||
				!strings.HasPrefix(err.Error(), "memorystore: invalid config: ") {
				t.Fatalf("New: %v; want ErrInvalidConfig mentioning %q", err, c.msg)
			}
		})
	}
}

func newStore(t *testing.T, cfg memorystore.Config) (*memorystore.Store, *limitertest.FakeClock) {
	t.Helper()
	clock := limitertest.NewFakeClock(t0)
	cfg.Clock = clock
	s, err := memorystore.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, clock
}

func mustTake(t *testing.T, s limiter.Store, key string, l limiter.Limit, cost int64) limiter.Decision {
	t.Helper()
	d, err := s.Take(context.Background(), key, l, cost)
	if err != nil {
		t.Fatalf("Take(%q, %d): %v", key, cost, err)
	}
	return d
}

// takeOrFull is Take for a key the store may refuse: it fails the test on
// any other error and on a refusal that returns anything but a zero
// Decision, and reports whether the key was refused.
func takeOrFull(t *testing.T, s limiter.Store, key string, l limiter.Limit, cost int64) (limiter.Decision, bool) {
	t.Helper()
	d, err := s.Take(context.Background(), key, l, cost)
	switch {
	case errors.Is(err, memorystore.ErrFull):
		if d != (limiter.Decision{}) {
			t.Fatalf("Take(%q) refused with a Decision %+v, want the zero one", key, d)
		}
		if !strings.HasPrefix(err.Error(), "memorystore: store full: MaxKeys reached") || !strings.Contains(err.Error(), "no budget") {
			t.Fatalf("ErrFull's message %q does not say MaxKeys is reached and no budget is whole", err)
		}
		return d, true
	case err != nil:
		t.Fatalf("Take(%q, %d): %v", key, cost, err)
	}
	return d, false
}

// TestMaxKeysBound checks the key count never passes MaxKeys, whatever the
// traffic, and that every new key is either admitted or refused.
func TestMaxKeysBound(t *testing.T) {
	s, clock := newStore(t, memorystore.Config{MaxKeys: 64, Shards: 4})
	refused := 0
	for i := range 5000 {
		d, full := takeOrFull(t, s, fmt.Sprintf("user:%d", i), bucket, 1+int64(i%3))
		if full {
			refused++
		} else if !d.Allowed {
			t.Fatalf("a new key was rejected: %+v", d)
		}
		if i%100 == 0 {
			clock.Advance(10 * time.Millisecond)
		}
		if n := s.Len(); n > 64 {
			t.Fatalf("after %d keys: Len %d > MaxKeys 64", i+1, n)
		}
	}
	if n := s.Len(); n < 32 {
		t.Errorf("Len %d: the shards should be close to full", n)
	}
	if refused == 0 || refused > 4900 {
		t.Errorf("%d of 5000 new keys refused: want some (the shards fill within 10 ms), not nearly all (budgets become whole after 300 ms at most)", refused)
	}
}

// TestEvictsWholeBudgetsFirst fills a shard with busy keys and one whose
// budget has become whole; a new key must displace the whole one only.
func TestEvictsWholeBudgetsFirst(t *testing.T) {
	s, clock := newStore(t, memorystore.Config{MaxKeys: 4, Shards: 1})
	slow := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 1, Period: time.Hour}
	for _, k := range []string{"a", "b", "c"} {
		mustTake(t, s, k, slow, 4)
	}
	mustTake(t, s, "quick", bucket, 1) // whole again after 100 ms
	clock.Advance(time.Second)
	mustTake(t, s, "new", slow, 4)
	if n := s.Len(); n != 4 {
		t.Fatalf("Len %d, want 4", n)
	}
	for _, k := range []string{"a", "b", "c", "new"} {
		if d := mustTake(t, s, k, slow, 0); d.Remaining != 6 {
			t.Errorf("%s: Remaining %d, want 6 (its state kept)", k, d.Remaining)
		}
	}
}

// TestFullStoreRefusesNewKeys fills a one-shard store with budgets that are
// not whole, under each algorithm: a new key is refused with ErrFull until
// the first budget becomes whole, to the microsecond, and then takes its
// place; the keys held keep working throughout, and a refused key leaves
// nothing behind.
func TestFullStoreRefusesNewKeys(t *testing.T) {
	cases := []struct {
		name  string
		limit limiter.Limit
		// whole is how long after the fill the first key's budget is
		// whole; second is then whole secondLeft later (the windows
		// align, so theirs are whole at once).
		whole, secondLeft time.Duration
	}{
		{"token bucket", limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}, 200 * time.Millisecond, time.Millisecond},
		{"leaky bucket policing", limiter.Limit{Algorithm: limiter.LeakyBucketPolicing, Burst: 10, Rate: 10, Period: time.Second}, 200 * time.Millisecond, time.Millisecond},
		{"leaky bucket shaping", limiter.Limit{Algorithm: limiter.LeakyBucketShaping, Burst: 10, Rate: 10, Period: time.Second}, 200 * time.Millisecond, time.Millisecond},
		// t0 is a whole second: the window ends a second later.
		{"fixed window", limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 10, Period: time.Second}, time.Second, 0},
		{"sliding counter", limiter.Limit{Algorithm: limiter.SlidingCounter, Rate: 10, Period: time.Second}, 2 * time.Second, 0},
		{"sliding log", limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 10, Period: time.Second}, time.Second, time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, clock := newStore(t, memorystore.Config{MaxKeys: 3, Shards: 1})
			ctx := context.Background()
			mustTake(t, s, "first", c.limit, 2)
			clock.Advance(time.Millisecond) // the others are whole a millisecond later
			mustTake(t, s, "second", c.limit, 2)
			mustTake(t, s, "third", c.limit, 2)
			for _, at := range []time.Duration{0, c.whole - time.Millisecond - time.Microsecond} {
				clock.Set(t0.Add(at))
				if _, full := takeOrFull(t, s, "new", c.limit, 1); !full {
					t.Fatalf("at +%v: a new key was stored in a shard full of live budgets", at)
				}
				if d, err := s.Refund(ctx, "new", c.limit, 1); err != nil || !d.Allowed || d.ResetAfter != 0 {
					// A refund to an unknown key leaves it whole: nothing to store.
					if c.limit.Algorithm != limiter.LeakyBucketShaping {
						t.Fatalf("at +%v: Refund of an unknown key in a full store: %+v, %v", at, d, err)
					}
				}
				if d := mustTake(t, s, "third", c.limit, 1); !d.Allowed {
					t.Fatalf("at +%v: a held key stopped working: %+v", at, d)
				}
				if n := s.Len(); n != 3 {
					t.Fatalf("at +%v: Len %d, want 3", at, n)
				}
			}
			clock.Set(t0.Add(c.whole))
			if d, full := takeOrFull(t, s, "new", c.limit, 1); full || !d.Allowed {
				t.Fatalf("once first's budget is whole: %+v, refused %v; want it admitted in first's place", d, full)
			}
			if d := mustTake(t, s, "second", c.limit, 0); d.ResetAfter != c.secondLeft {
				t.Fatalf("second: %+v, want ResetAfter %v (its state kept)", d, c.secondLeft)
			}
			if d := mustTake(t, s, "first", c.limit, 0); d.ResetAfter != 0 {
				t.Fatalf("first's budget: %+v, want whole", d)
			}
		})
	}
}

// TestWholeAtFromTheStateTime checks a key written by a caller whose clock
// reading is behind the key's state (it read the clock before another
// caller but locked after it) is whole when its state says, not earlier:
// the store counts ResetAfter from the state's own time.
func TestWholeAtFromTheStateTime(t *testing.T) {
	const ms = time.Millisecond
	cases := []struct {
		name       string
		limit      limiter.Limit
		first, lag time.Duration // the first Take's time, the second's
		cost       int64
		whole      time.Duration // when "a" is whole
	}{
		// Last is 1 s; two tokens missing at 100 ms each.
		{"token bucket", limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}, time.Second, 950 * ms, 1, 1200 * ms},
		// The second Take stands at the start of the first's window.
		{"fixed window", limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 10, Period: time.Second}, time.Second + 10*ms, 990 * ms, 1, 2 * time.Second},
		{"sliding counter", limiter.Limit{Algorithm: limiter.SlidingCounter, Rate: 10, Period: time.Second}, time.Second + 10*ms, 990 * ms, 1, 3 * time.Second},
		{"sliding log", limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 10, Period: time.Second}, time.Second + 10*ms, 990 * ms, 1, 2*time.Second + 10*ms},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, clock := newStore(t, memorystore.Config{MaxKeys: 1, Shards: 1})
			clock.Set(t0.Add(c.first))
			mustTake(t, s, "a", c.limit, c.cost)
			clock.Set(t0.Add(c.lag))
			mustTake(t, s, "a", c.limit, c.cost)
			clock.Set(t0.Add(c.whole - time.Microsecond))
			if _, full := takeOrFull(t, s, "b", c.limit, 1); !full {
				t.Fatal("a was dropped before its budget was whole")
			}
			clock.Set(t0.Add(c.whole))
			if _, full := takeOrFull(t, s, "b", c.limit, 1); full {
				t.Fatal("a's budget is whole, yet b was refused")
			}
		})
	}
}

// TestFloodCannotResetABudget: a flood of fresh identities must not evict a
// spent budget so that it starts whole again. Alice spends her budget down
// to 21 points, then 100,000 fresh identities take a point each. Alice's
// budget must follow her own refill exactly (as limiter.TakeBucket
// computes it on her state) at every step; fresh keys are refused while no
// budget in their shard is whole, and admitted again as budgets become
// whole.
func TestFloodCannotResetABudget(t *testing.T) {
	plan := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 5000, Rate: 100, Period: time.Minute} // a point every 600 ms
	s, clock := newStore(t, memorystore.Config{MaxKeys: 64, Shards: 4})
	ctx := context.Background()
	alice := limiter.BucketState{}
	take := func(cost int64) limiter.Decision {
		t.Helper()
		var want limiter.Decision
		var err error
		alice, want, err = limiter.TakeBucket(plan, alice, clock.Now().UnixMicro(), cost)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Take(ctx, "alice", plan, cost)
		if err != nil || got != want {
			t.Fatalf("alice at %v: %+v, %v; want %+v (her own refill, nothing more)", clock.Now().Sub(t0), got, err, want)
		}
		return got
	}
	if d := take(4979); d.Remaining != 21 {
		t.Fatalf("alice: Remaining %d, want 21", d.Remaining)
	}
	const flood = 100_000
	admitted, refused, phase := 0, 0, 0
	for i := range flood {
		// Each fresh key is whole 600 ms after its point. 10,000 keys per
		// 100 ms: the first 30,000 arrive within 300 ms, the rest over
		// the next 700 ms, as the first ones become whole.
		if i%100 == 0 {
			clock.Advance(time.Millisecond)
		}
		d, full := takeOrFull(t, s, fmt.Sprint("flood:", i), plan, 1)
		switch {
		case full:
			refused++
		case !d.Allowed || d.Remaining != plan.Burst-1:
			t.Fatalf("flood:%d admitted with %+v, want a fresh bucket less one point", i, d)
		default:
			admitted++
		}
		if n := s.Len(); n > 64 {
			t.Fatalf("Len %d > MaxKeys 64", n)
		}
		if i%997 == 0 {
			take(0) // alice peeks: her budget, exactly
		}
		if i == 30_000 {
			// Within the first 600 ms no budget can become whole: the
			// shards filled (63 keys at most besides alice) and every
			// other key was refused.
			if admitted > 63 || refused != i+1-admitted {
				t.Fatalf("first 300 ms: %d admitted, %d refused", admitted, refused)
			}
			phase = admitted
		}
	}
	// From 600 ms on, each key admitted in the first phase is whole and
	// its place is taken by a new one: every shard admits again.
	if later := admitted - phase; later < phase {
		t.Errorf("after the first budgets became whole only %d more keys were admitted (first phase: %d)", later, phase)
	}
	if d := take(21); !d.Allowed {
		t.Fatalf("alice cannot spend what she has: %+v", d)
	}
	if d := take(5); d.Allowed {
		t.Fatalf("alice spent points the flood gave her: %+v", d)
	}
	t.Logf("%d fresh keys admitted, %d refused with ErrFull", admitted, refused)
}

// TestWholeBudgetsHoldNothing checks that peeks, rejections of unknown
// keys and full refunds leave no key behind.
func TestWholeBudgetsHoldNothing(t *testing.T) {
	s, _ := newStore(t, memorystore.Config{})
	ctx := context.Background()
	mustTake(t, s, "peeked", bucket, 0)
	if _, err := s.Take(ctx, "too-big", bucket, 11); !errors.Is(err, limiter.ErrCostExceedsCapacity) {
		t.Fatalf("Take(11): %v", err)
	}
	if _, err := s.Refund(ctx, "refunded-unknown", bucket, 3); err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len %d after peeks and refunds of unknown keys, want 0", n)
	}
	mustTake(t, s, "k", bucket, 4)
	if n := s.Len(); n != 1 {
		t.Fatalf("Len %d, want 1", n)
	}
	if d, err := s.Refund(ctx, "k", bucket, 4); err != nil || d.Remaining != 10 {
		t.Fatalf("Refund: %+v, %v", d, err)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len %d after a full refund, want 0", n)
	}
}

// TestAlgorithmChangeStartsFresh checks a key reused with another
// algorithm does not misread the old state.
func TestAlgorithmChangeStartsFresh(t *testing.T) {
	s, _ := newStore(t, memorystore.Config{})
	mustTake(t, s, "k", bucket, 10)
	fixed := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 5, Period: time.Second}
	if d := mustTake(t, s, "k", fixed, 2); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("fixed window on a reused key: %+v", d)
	}
	if d := mustTake(t, s, "k", bucket, 0); d.Remaining != 10 {
		t.Fatalf("back to the bucket: %+v", d)
	}
}

func TestClosed(t *testing.T) {
	s, _ := newStore(t, memorystore.Config{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Take(context.Background(), "k", bucket, 1); !errors.Is(err, memorystore.ErrClosed) {
		t.Fatalf("Take after Close: %v", err)
	}
	if _, err := s.Refund(context.Background(), "k", bucket, 1); !errors.Is(err, memorystore.ErrClosed) {
		t.Fatalf("Refund after Close: %v", err)
	}
}

func TestCancelledContext(t *testing.T) {
	s, _ := newStore(t, memorystore.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Take(ctx, "k", bucket, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Take: %v", err)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("a cancelled Take spent budget: Len %d", n)
	}
}

// TestConcurrentExact runs 12 goroutines on 40 keys with the clock frozen:
// every key must admit exactly its burst, no more and no less.
func TestConcurrentExact(t *testing.T) {
	s, _ := newStore(t, memorystore.Config{Shards: 8})
	const keys, workers = 40, 12
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range 400 {
				k := (i*7 + w) % keys
				d, err := s.Take(context.Background(), fmt.Sprintf("key:%d", k), bucket, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range admitted {
		if n := admitted[k].Load(); n != bucket.Burst {
			t.Errorf("key:%d admitted %d, want exactly %d", k, n, bucket.Burst)
		}
	}
}

// TestHammerSystemClock runs the shared exactness check on the real,
// monotonic clock: 12 callers of 2,000 calls each.
func TestHammerSystemClock(t *testing.T) {
	s, err := memorystore.New(memorystore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 50, Rate: 1000, Period: time.Second}
	limitertest.Hammer(t, s, "hammer", l, 12, 2000, limiter.SystemClock{})
}
