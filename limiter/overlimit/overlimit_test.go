package overlimit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/overlimit"
	"github.com/costguard/costguard/limiter/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var (
	t0  = time.Unix(1_893_456_000, 0).UTC()
	ctx = context.Background()
	// One token every 333⅓ ms: RetryAfter is rounded up to the µs, and
	// Remaining cannot be read exactly off a decision.
	third = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 2, Rate: 3, Period: time.Second}
	// One token every 100 ms.
	tenPerSec = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}
)

// counting is a limiter.Store that counts the calls reaching it.
type counting struct {
	limiter.Store
	takes, refunds atomic.Int64
}

func (c *counting) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, key, l, cost)
}

func (c *counting) Refund(ctx context.Context, key string, l limiter.Limit, n int64) (limiter.Decision, error) {
	c.refunds.Add(1)
	return c.Store.Refund(ctx, key, l, n)
}

func newMemory(t testing.TB, clock limiter.Clock) *memorystore.Store {
	t.Helper()
	m, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// setup returns a cache over a counting memory store, both on one fake
// clock.
func setup(t testing.TB, cfg overlimit.Config) (*overlimit.Store, *counting, *limitertest.FakeClock) {
	t.Helper()
	clock := limitertest.NewFakeClock(t0)
	next := &counting{Store: newMemory(t, clock)}
	cfg.Clock = clock
	s, err := overlimit.New(next, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, next, clock
}

func TestNewConfig(t *testing.T) {
	mem := newMemory(t, nil)
	cases := []struct {
		name string
		next limiter.Store
		cfg  overlimit.Config
		msg  string // empty: valid
	}{
		{"zero value", mem, overlimit.Config{}, ""},
		{"explicit", mem, overlimit.Config{MaxKeys: 64, Shards: 4}, ""},
		{"small MaxKeys lowers the default Shards", mem, overlimit.Config{MaxKeys: 3}, ""},
		{"nil store", nil, overlimit.Config{}, "nil store"},
		{"negative MaxKeys", mem, overlimit.Config{MaxKeys: -1}, "MaxKeys must not be negative (got -1)"},
		{"negative Shards", mem, overlimit.Config{Shards: -1}, "Shards must not be negative (got -1)"},
		{"more shards than keys", mem, overlimit.Config{MaxKeys: 4, Shards: 8}, "Shards (8) exceeds MaxKeys (4)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := overlimit.New(c.next, c.cfg)
			if c.msg == "" {
				if err != nil || s == nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if !errors.Is(err, overlimit.ErrInvalidConfig) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("New: %v; want ErrInvalidConfig mentioning %q", err, c.msg)
			}
		})
	}
}

// The behaviour suite sees the same decisions through the cache as from
// the store alone.
func TestSuite(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		limitertest.Run(t, func(t *testing.T, clock limiter.Clock) limiter.Store {
			s, err := overlimit.New(newMemory(t, clock), overlimit.Config{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.SharedServer(t).Client(t)
		limitertest.Run(t, func(t *testing.T, clock limiter.Clock) limiter.Store {
			next, err := redisstore.New(rdb, redisstore.Config{Prefix: uniquePrefix(t), Clock: clock, ExpiryMargin: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			s, err := overlimit.New(next, overlimit.Config{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

func uniquePrefix(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "cgtest-overlimit-" + hex.EncodeToString(b[:])
}

// step is one Take at an offset from t0, the decision it must produce and
// whether it must reach the store.
type step struct {
	at      time.Duration
	cost    int64
	limit   *limiter.Limit // nil: the case's limit
	refund  bool
	want    limiter.Decision
	err     error
	reaches bool
}

func deny(limit, remaining int64, retry, reset time.Duration) limiter.Decision {
	return limiter.Decision{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

func allow(limit, remaining int64, reset time.Duration) limiter.Decision {
	return limiter.Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

const (
	ms = time.Millisecond
	us = time.Microsecond
)

func TestRememberedRejections(t *testing.T) {
	police := tenPerSec
	police.Algorithm = limiter.LeakyBucketPolicing
	otherLimit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 20, Period: time.Second}
	cases := []struct {
		name  string
		limit limiter.Limit
		steps []step
	}{
		{"expires exactly at R", third, []step{
			{cost: 2, want: allow(2, 0, 666667*us), reaches: true},
			{cost: 1, want: deny(2, 0, 333334*us, 666667*us), reaches: true},
			{at: 1 * us, cost: 1, want: deny(2, 0, 333333*us, 666666*us)},
			{at: 333333 * us, cost: 1, want: deny(2, 0, 1*us, 333334*us)},
			{at: 333334 * us, cost: 1, want: allow(2, 0, 666666*us), reaches: true},
		}},
		{"a larger cost adds its tokens' time", tenPerSec, []step{
			{cost: 10, want: allow(10, 0, time.Second), reaches: true},
			{at: 50 * ms, cost: 1, want: deny(10, 0, 50*ms, 950*ms), reaches: true},
			{at: 60 * ms, cost: 3, want: deny(10, 0, 240*ms, 940*ms)},
			{at: 60 * ms, cost: 10, want: deny(10, 0, 940*ms, 940*ms)},
			{at: 60 * ms, cost: 11, want: deny(10, 0, 0, 940*ms), err: limiter.ErrCostExceedsCapacity},
			{at: 100 * ms, cost: 3, want: deny(10, 1, 200*ms, 900*ms), reaches: true},
		}},
		{"a cheaper request and a peek reach the store", tenPerSec, []step{
			{cost: 10, want: allow(10, 0, time.Second), reaches: true},
			{at: 150 * ms, cost: 3, want: deny(10, 1, 150*ms, 850*ms), reaches: true},
			{at: 160 * ms, cost: 2, want: deny(10, 1, 40*ms, 840*ms), reaches: true},
			{at: 170 * ms, cost: 0, want: allow(10, 1, 830*ms), reaches: true},
			{at: 180 * ms, cost: 2, want: deny(10, 1, 20*ms, 820*ms)}, // the peek kept the entry
		}},
		{"an admission forgets", tenPerSec, []step{
			{cost: 10, want: allow(10, 0, time.Second), reaches: true},
			{at: 150 * ms, cost: 2, want: deny(10, 1, 50*ms, 850*ms), reaches: true},
			{at: 150 * ms, cost: 1, want: allow(10, 0, 950*ms), reaches: true},
			{at: 160 * ms, cost: 2, want: deny(10, 0, 140*ms, 940*ms), reaches: true},
		}},
		{"another limit reaches the store", tenPerSec, []step{
			{cost: 10, want: allow(10, 0, time.Second), reaches: true},
			{cost: 1, want: deny(10, 0, 100*ms, time.Second), reaches: true},
			{at: 10 * ms, cost: 1, limit: &otherLimit, want: deny(10, 0, 40*ms, 490*ms), reaches: true},
			{at: 20 * ms, cost: 1, limit: &otherLimit, want: deny(10, 0, 30*ms, 480*ms)},
			// The store read the other limit's level in its own units: the
			// entry for this limit would have been wrong.
			{at: 20 * ms, cost: 1, want: allow(10, 4, 580*ms), reaches: true},
		}},
		{"a refund forgets", tenPerSec, []step{
			{cost: 10, want: allow(10, 0, time.Second), reaches: true},
			{cost: 1, want: deny(10, 0, 100*ms, time.Second), reaches: true},
			{at: 10 * ms, refund: true, cost: 5, want: allow(10, 5, 490*ms), reaches: true},
			{at: 10 * ms, cost: 1, want: allow(10, 4, 590*ms), reaches: true},
		}},
		{"leaky bucket policing", police, []step{
			{cost: 10, want: allow(10, 0, time.Second), reaches: true},
			{cost: 2, want: deny(10, 0, 200*ms, time.Second), reaches: true},
			{at: 199 * ms, cost: 2, want: deny(10, 1, 1*ms, 801*ms)},
			{at: 200 * ms, cost: 2, want: allow(10, 0, time.Second), reaches: true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, next, clock := setup(t, overlimit.Config{})
			for i, st := range c.steps {
				clock.Set(t0.Add(st.at))
				l := c.limit
				if st.limit != nil {
					l = *st.limit
				}
				before := next.takes.Load() + next.refunds.Load()
				var (
					d   limiter.Decision
					err error
				)
				if st.refund {
					d, err = s.Refund(ctx, "k", l, st.cost)
				} else {
					d, err = s.Take(ctx, "k", l, st.cost)
				}
				where := fmt.Sprintf("step %d (cost %d at +%v)", i, st.cost, st.at)
				if !errors.Is(err, st.err) {
					t.Fatalf("%s: error %v, want %v", where, err, st.err)
				}
				if d != st.want {
					t.Fatalf("%s:\n got  %+v\n want %+v", where, d, st.want)
				}
				if reached := next.takes.Load()+next.refunds.Load() > before; reached != st.reaches {
					t.Fatalf("%s: reached the store %v, want %v", where, reached, st.reaches)
				}
			}
		})
	}
}

// Other algorithms are never answered locally.
func TestOtherAlgorithmsPassThrough(t *testing.T) {
	for _, l := range []limiter.Limit{
		{Algorithm: limiter.LeakyBucketShaping, Burst: 1, Rate: 1, Period: time.Second},
		{Algorithm: limiter.FixedWindow, Rate: 1, Period: time.Second},
		{Algorithm: limiter.SlidingLog, Rate: 1, Period: time.Second},
		{Algorithm: limiter.SlidingCounter, Rate: 1, Period: time.Second},
	} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			s, next, _ := setup(t, overlimit.Config{})
			for range 5 {
				if _, err := s.Take(ctx, "k", l, 1); err != nil {
					t.Fatal(err)
				}
			}
			if n := next.takes.Load(); n != 5 || s.Len() != 0 {
				t.Fatalf("%d calls reached the store, %d entries; want 5 and 0", n, s.Len())
			}
		})
	}
}

// Errors and invalid input reach the store, which reports them.
func TestInvalidInputReachesStore(t *testing.T) {
	s, next, _ := setup(t, overlimit.Config{})
	if _, err := s.Take(ctx, "k", tenPerSec, 10); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Take(ctx, "k", tenPerSec, 1); d.Allowed {
		t.Fatal("not rejected")
	}
	if _, err := s.Take(ctx, "k", tenPerSec, -1); !errors.Is(err, limiter.ErrInvalidCost) {
		t.Errorf("negative cost: %v", err)
	}
	bad := tenPerSec
	bad.Burst = 0
	if _, err := s.Take(ctx, "k", bad, 1); !errors.Is(err, limiter.ErrInvalidLimit) {
		t.Errorf("invalid limit: %v", err)
	}
	if n := next.takes.Load(); n != 4 {
		t.Errorf("%d calls reached the store, want 4", n)
	}
	// A cancelled caller gets ctx's error, even for a remembered key.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Take(cctx, "k", tenPerSec, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// Against a twin store that sees every call, the cache only ever answers
// with the twin's rejection: RetryAfter never earlier (equal for the
// remembered cost), ResetAfter equal, Remaining never higher.
func TestAgreesWithTheStore(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	periods := []time.Duration{time.Second, time.Minute, 333 * time.Millisecond, 7 * time.Second, 1500 * time.Microsecond}
	hits := 0
	for round := range 200 {
		l := limiter.Limit{
			Algorithm: limiter.TokenBucket + limiter.Algorithm(rng.IntN(2)),
			Burst:     1 + rng.Int64N(40),
			Rate:      1 + rng.Int64N(100),
			Period:    periods[rng.IntN(len(periods))],
		}
		s, next, clock := setup(t, overlimit.Config{})
		twin := newMemory(t, clock)
		var lastRejected int64 // cost of the last rejection that reached the store
		// With readings between whole microseconds the cache floors the
		// time elapsed, where the store floors each reading: it may then
		// answer one microsecond on the strict side.
		subMicro := round%2 == 1
		var slack time.Duration
		if subMicro {
			slack = time.Microsecond
		}
		period := l.Period
		for i := range 60 {
			step := time.Duration(rng.Int64N(int64(period)/4+1)) + time.Duration(rng.IntN(3))*time.Microsecond
			if !subMicro {
				step = step.Truncate(time.Microsecond)
			}
			clock.Advance(step)
			where := fmt.Sprintf("round %d %+v step %d", round, l, i)
			if rng.IntN(15) == 0 {
				n := rng.Int64N(l.Burst + 1)
				d, err := s.Refund(ctx, "k", l, n)
				want, werr := twin.Refund(ctx, "k", l, n)
				if d != want || (err == nil) != (werr == nil) {
					t.Fatalf("%s: Refund %d: %+v, %v; twin %+v, %v", where, n, d, err, want, werr)
				}
				continue
			}
			cost := rng.Int64N(l.Burst + 2) // sometimes above Burst
			before := next.takes.Load()
			d, err := s.Take(ctx, "k", l, cost)
			want, werr := twin.Take(ctx, "k", l, cost)
			if !errors.Is(err, limiter.ErrCostExceedsCapacity) && err != nil || (err == nil) != (werr == nil) {
				t.Fatalf("%s: Take %d: %v, twin %v", where, cost, err, werr)
			}
			if next.takes.Load() > before { // passed through: identical
				if d != want {
					t.Fatalf("%s: Take %d through the store: %+v, twin %+v", where, cost, d, want)
				}
				if !d.Allowed && err == nil {
					lastRejected = cost
				}
				continue
			}
			hits++
			if d.Allowed || want.Allowed || d.RetryAfter < want.RetryAfter || d.Remaining > want.Remaining || d.Limit != want.Limit ||
				d.ResetAfter < want.ResetAfter || d.ResetAfter > want.ResetAfter+slack {
				t.Fatalf("%s: Take %d answered locally %+v; the store says %+v", where, cost, d, want)
			}
			if cost == lastRejected && d.RetryAfter > want.RetryAfter+slack {
				t.Fatalf("%s: Take %d (the remembered cost): RetryAfter %v, the store %v", where, cost, d.RetryAfter, want.RetryAfter)
			}
			if tokens := time.Duration(cost-lastRejected) * l.Period / time.Duration(l.Rate); d.RetryAfter > want.RetryAfter+tokens+time.Microsecond+slack {
				t.Fatalf("%s: Take %d: RetryAfter %v, more than the store's %v plus %v", where, cost, d.RetryAfter, want.RetryAfter, tokens)
			}
		}
	}
	if hits < 500 {
		t.Fatalf("only %d answers came from the cache: the test exercises too little", hits)
	}
	t.Logf("%d answers from the cache", hits)
}

// gated returns the inner store's answer only once released, so a test can
// hold a decision in flight.
type gated struct {
	limiter.Store
	entered chan struct{}
	release chan struct{}
}

func (g *gated) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	d, err := g.Store.Take(ctx, key, l, cost)
	if g.entered != nil {
		g.entered <- struct{}{}
		<-g.release
	}
	return d, err
}

// A rejection decided before a refund and returned after it is not
// remembered: the refund may have made it wrong.
func TestRejectionRacingRefundIsNotRemembered(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	g := &gated{Store: newMemory(t, clock)}
	next := &counting{Store: g}
	s, err := overlimit.New(next, overlimit.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx, "k", tenPerSec, 10); err != nil {
		t.Fatal(err)
	}
	g.entered, g.release = make(chan struct{}), make(chan struct{})
	done := make(chan limiter.Decision)
	go func() {
		d, _ := s.Take(ctx, "k", tenPerSec, 5)
		done <- d
	}()
	<-g.entered // decided (rejected), not yet returned
	if _, err := s.Refund(ctx, "k", tenPerSec, 10); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if d := <-done; d.Allowed {
		t.Fatalf("the held Take was admitted: %+v", d)
	}
	g.entered = nil
	before := next.takes.Load()
	if d, err := s.Take(ctx, "k", tenPerSec, 5); err != nil || !d.Allowed || next.takes.Load() != before+1 {
		t.Fatalf("after the refund: %+v, %v, reached the store %v; want an admission from the store",
			d, err, next.takes.Load() > before)
	}
}

func TestBoundedAndEviction(t *testing.T) {
	long := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1, Rate: 1, Period: time.Hour}
	short := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1, Rate: 1, Period: time.Second}
	reject := func(t *testing.T, s *overlimit.Store, key string, l limiter.Limit) {
		t.Helper()
		for {
			d, err := s.Take(ctx, key, l, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				return
			}
		}
	}
	cached := func(s *overlimit.Store, next *counting, key string, l limiter.Limit) bool {
		before := next.takes.Load()
		_, _ = s.Take(ctx, key, l, 1)
		return next.takes.Load() == before
	}

	t.Run("bounded", func(t *testing.T) {
		s, next, _ := setup(t, overlimit.Config{MaxKeys: 16, Shards: 4})
		for i := range 1000 {
			reject(t, s, fmt.Sprint("key-", i), long)
		}
		if n := s.Len(); n > 16 || n < 4 {
			t.Fatalf("Len %d, want between 4 and 16", n)
		}
		if !cached(s, next, "key-999", long) {
			t.Fatal("the newest rejection was not remembered")
		}
	})
	t.Run("expired first", func(t *testing.T) {
		s, next, clock := setup(t, overlimit.Config{MaxKeys: 2, Shards: 1})
		reject(t, s, "a", long)
		reject(t, s, "b", short)
		clock.Advance(2 * time.Second) // b's rejection has expired
		reject(t, s, "c", long)
		if !cached(s, next, "a", long) || !cached(s, next, "c", long) {
			t.Fatal("a live entry was evicted while an expired one was there")
		}
	})
	t.Run("soonest to expire", func(t *testing.T) {
		s, next, _ := setup(t, overlimit.Config{MaxKeys: 2, Shards: 1})
		reject(t, s, "a", long)
		reject(t, s, "b", short)
		reject(t, s, "c", long)
		if !cached(s, next, "a", long) || !cached(s, next, "c", long) {
			t.Fatal("evicted an entry other than the one expiring soonest")
		}
		if s.Len() != 2 {
			t.Fatalf("Len %d, want 2", s.Len())
		}
	})
}

// 64 callers on one key, as a scrape bot: admissions stay within the
// exact bound, and nearly every rejection is answered locally.
func TestHammerExact(t *testing.T) {
	s, next, clock := setup(t, overlimit.Config{})
	// A refill slow against Hammer's 15 ms clock steps: once the burst is
	// spent, a rejection's retry-after spans many steps, so whatever the
	// scheduling most calls must be answered from the cache. (With a fast
	// refill the entry expires every step and the share of calls reaching
	// the store depends on how the goroutines interleave.)
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 2, Period: time.Second}
	r := limitertest.Hammer(t, s, "bot", l, 64, 400, clock)
	if passed := next.takes.Load(); passed*2 > r.Calls {
		t.Errorf("%d of %d calls reached the store; want most answered locally", passed, r.Calls)
	}
	t.Logf("%d of %d calls reached the store", next.takes.Load(), r.Calls)
}

// Concurrent callers on many keys, with refunds, under -race.
func TestConcurrentKeys(t *testing.T) {
	s, _, clock := setup(t, overlimit.Config{MaxKeys: 64, Shards: 4})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				key := fmt.Sprint("k", (g*7+i)%100)
				if i%50 == 0 {
					_, _ = s.Refund(ctx, key, tenPerSec, 1)
					clock.Advance(time.Millisecond)
					continue
				}
				if _, err := s.Take(ctx, key, tenPerSec, 1+int64(i%3)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := s.Len(); n > 64 {
		t.Fatalf("Len %d > MaxKeys", n)
	}
}

// TestEvictionKeepsBudgetsExact floods a small cache with remembered
// rejections of fresh keys between alice's requests, so her entry is
// evicted again and again. Losing an entry only sends her next request to
// the store: every answer she gets, from the cache or the store, is the
// exact bucket's (a twin store on the same clock), and so is the number of
// requests admitted.
func TestEvictionKeepsBudgetsExact(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   overlimit.Config
		flood int // fresh keys rejected between two of alice's requests
	}{
		{"one shard, two keys", overlimit.Config{MaxKeys: 2, Shards: 1}, 3},
		{"four shards", overlimit.Config{MaxKeys: 16, Shards: 4}, 40},
		{"no flood", overlimit.Config{MaxKeys: 16, Shards: 4}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, next, clock := setup(t, c.cfg)
			twin := newMemory(t, clock)
			fresh := 0
			admitted, wantAdmitted, fromCache, evicted := 0, 0, 0, 0
			var rejected limiter.Decision // alice's last rejection, its cost and time
			var rejectedCost int64
			var rejectedAt time.Time
			for i := range 400 {
				now := clock.Advance(7 * time.Millisecond) // a token every 100 ms
				cost := int64(1 + i%3)
				before := next.takes.Load()
				d, err := s.Take(ctx, "alice", tenPerSec, cost)
				want, werr := twin.Take(ctx, "alice", tenPerSec, cost)
				if err != nil || werr != nil || d != want {
					t.Fatalf("request %d: %+v, %v; the exact bucket says %+v, %v", i, d, err, want, werr)
				}
				switch stillHeld := cost >= rejectedCost && now.Sub(rejectedAt) < rejected.RetryAfter; {
				case next.takes.Load() == before:
					fromCache++
				case stillHeld:
					evicted++ // the remembered rejection would have answered: it was evicted
				}
				switch { // what the cache remembers
				case d.Allowed:
					rejected = limiter.Decision{} // an admission forgets
				case next.takes.Load() > before:
					rejected, rejectedCost, rejectedAt = d, cost, now
				}
				if d.Allowed {
					admitted++
				}
				if want.Allowed {
					wantAdmitted++
				}
				for range c.flood {
					key := fmt.Sprint("fresh:", fresh)
					fresh++
					for {
						d, err := s.Take(ctx, key, third, 1)
						if err != nil {
							t.Fatal(err)
						}
						if !d.Allowed {
							break // remembered, taking the place of another entry
						}
					}
				}
				if n := s.Len(); n > c.cfg.MaxKeys {
					t.Fatalf("Len %d > MaxKeys %d", n, c.cfg.MaxKeys)
				}
			}
			if admitted != wantAdmitted {
				t.Fatalf("admitted %d, the exact bucket %d", admitted, wantAdmitted)
			}
			if c.flood == 0 && (fromCache == 0 || evicted > 0) || c.flood > 0 && evicted == 0 {
				t.Fatalf("%d answers from the cache, %d after an eviction: the test exercises too little", fromCache, evicted)
			}
			t.Logf("of 400 requests, %d answered from the cache, %d sent to the store by an eviction; %d admitted", fromCache, evicted, admitted)
		})
	}
}
