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

// TestMaxKeysBound checks the key count never passes MaxKeys, whatever the
// traffic.
func TestMaxKeysBound(t *testing.T) {
	s, clock := newStore(t, memorystore.Config{MaxKeys: 64, Shards: 4})
	for i := range 5000 {
		mustTake(t, s, fmt.Sprintf("user:%d", i), bucket, 1+int64(i%3))
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

// TestEvictsLeastRecentlyUsed fills a shard with busy keys; a new key
// displaces the one used longest ago, whose budget starts over.
func TestEvictsLeastRecentlyUsed(t *testing.T) {
	s, clock := newStore(t, memorystore.Config{MaxKeys: 3, Shards: 1})
	slow := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 1, Period: time.Hour}
	for _, k := range []string{"old", "mid", "new"} {
		mustTake(t, s, k, slow, 4)
		clock.Advance(time.Second)
	}
	mustTake(t, s, "old", slow, 0) // a peek counts as use
	clock.Advance(time.Second)
	mustTake(t, s, "newest", slow, 4)
	want := map[string]int64{"old": 6, "mid": 10, "new": 6, "newest": 6}
	for k, r := range want {
		if d := mustTake(t, s, k, slow, 0); d.Remaining != r {
			t.Errorf("%s: Remaining %d, want %d", k, d.Remaining, r)
		}
	}
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
// monotonic clock for a short while.
func TestHammerSystemClock(t *testing.T) {
	s, err := memorystore.New(memorystore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 50, Rate: 1000, Period: time.Second}
	limitertest.Hammer(t, s, "hammer", l, 12, 200*time.Millisecond, limiter.SystemClock{})
}
