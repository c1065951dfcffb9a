package splitbudget_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/splitbudget"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var (
	t0  = time.Unix(1_893_456_000, 0).UTC()
	ctx = context.Background()
	// One token a second, bursts of 100.
	slow = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 100, Rate: 100, Period: 100 * time.Second}
	// One token every 100 ms, bursts of 10.
	tenPerSec = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}
)

// counting is a limiter.Store that counts the calls reaching it and can
// be told to fail.
type counting struct {
	limiter.Store
	takes, refunds atomic.Int64
	takeErr        error
	refundErr      error
}

func (c *counting) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	c.takes.Add(1)
	if c.takeErr != nil {
		return limiter.Decision{}, c.takeErr
	}
	return c.Store.Take(ctx, key, l, cost)
}

func (c *counting) Refund(ctx context.Context, key string, l limiter.Limit, n int64) (limiter.Decision, error) {
	c.refunds.Add(1)
	if c.refundErr != nil {
		return limiter.Decision{}, c.refundErr
	}
	return c.Store.Refund(ctx, key, l, n)
}

func (c *counting) calls() int64 { return c.takes.Load() + c.refunds.Load() }

func newMemory(t testing.TB, clock limiter.Clock) *memorystore.Store {
	t.Helper()
	m, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// newSplit builds a split store over next with a settle interval no test
// reaches (tests settle by hand), closed at cleanup.
func newSplit(t testing.TB, next limiter.Store, cfg splitbudget.Config) *splitbudget.Store {
	t.Helper()
	if cfg.SettleInterval == 0 {
		cfg.SettleInterval = time.Hour
	}
	s, err := splitbudget.New(next, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestNewConfig(t *testing.T) {
	mem := newMemory(t, nil)
	cases := []struct {
		name string
		next limiter.Store
		cfg  splitbudget.Config
		msg  string // empty: valid
	}{
		{"zero value", mem, splitbudget.Config{}, ""},
		{"explicit", mem, splitbudget.Config{LeaseFraction: 1, SettleInterval: time.Second, SettleTimeout: time.Second, MaxKeys: 5}, ""},
		{"nil store", nil, splitbudget.Config{}, "nil store"},
		{"negative fraction", mem, splitbudget.Config{LeaseFraction: -0.1}, "LeaseFraction -0.1 is not in (0, 1]"},
		{"fraction above 1", mem, splitbudget.Config{LeaseFraction: 1.5}, "LeaseFraction 1.5 is not in (0, 1]"},
		{"NaN fraction", mem, splitbudget.Config{LeaseFraction: nan()}, "LeaseFraction NaN"},
		{"negative interval", mem, splitbudget.Config{SettleInterval: -1}, "SettleInterval must not be negative"},
		{"negative timeout", mem, splitbudget.Config{SettleTimeout: -1}, "SettleTimeout must not be negative"},
		{"negative MaxKeys", mem, splitbudget.Config{MaxKeys: -1}, "MaxKeys must not be negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := splitbudget.New(c.next, c.cfg)
			if c.msg == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, splitbudget.ErrInvalidConfig) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("New: %v; want ErrInvalidConfig mentioning %q", err, c.msg)
			}
		})
	}
}

func nan() float64 {
	var zero float64
	return zero / zero
}

func TestLeaseSize(t *testing.T) {
	tb := func(burst int64) limiter.Limit {
		return limiter.Limit{Algorithm: limiter.TokenBucket, Burst: burst, Rate: 1, Period: time.Second}
	}
	cases := []struct {
		fraction float64
		limit    limiter.Limit
		want     int64
	}{
		{0, tb(1000), 50}, // the default, 5 %
		{0, tb(10), 1},    // at least one token
		{0.1, tb(25), 2},  // rounded down
		{1, tb(7), 7},     // the whole burst
		{0.5, limiter.Limit{Algorithm: limiter.LeakyBucketPolicing, Burst: 9, Rate: 1, Period: time.Second}, 4},
		{0.5, limiter.Limit{Algorithm: limiter.LeakyBucketShaping, Burst: 9, Rate: 1, Period: time.Second}, 0},
		{0.5, limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 9, Period: time.Second}, 0},
		{0.5, tb(0), 0}, // invalid
	}
	for _, c := range cases {
		s := newSplit(t, newMemory(t, nil), splitbudget.Config{LeaseFraction: c.fraction})
		if got := s.LeaseSize(c.limit); got != c.want {
			t.Errorf("fraction %v, %+v: lease %d, want %d", c.fraction, c.limit, got, c.want)
		}
	}
}

// step is one call and what it must produce. remaining is the Remaining
// reported; reaches the number of calls it makes to the store.
type step struct {
	at        time.Duration
	op        string // "take" (default), "refund", "settle"
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reaches   int64
	global    int64 // the store's own Remaining afterwards (checked with a peek)
}

func TestLeaseLifecycle(t *testing.T) {
	// slow: lease 10 of a 100-token bucket, a token a second.
	steps := []step{
		{cost: 1, allowed: true, remaining: 99, reaches: 1, global: 90},  // lease 10, spend 1
		{cost: 3, allowed: true, remaining: 96, global: 90},              // local
		{cost: 6, allowed: true, remaining: 90, global: 90},              // local, lease empty
		{cost: 1, allowed: true, remaining: 89, reaches: 1, global: 80},  // top-up of 10
		{cost: 11, allowed: true, remaining: 78, reaches: 1, global: 69}, // above the lease: direct
		{cost: 0, allowed: true, remaining: 78, reaches: 1, global: 69},  // a peek is direct
		{op: "refund", cost: 1, allowed: true, remaining: 79, global: 69},
		{op: "refund", cost: 4, allowed: true, remaining: 83, reaches: 1, global: 73}, // 0 fit in the lease
		{op: "settle", reaches: 1, global: 83},
		{at: 5 * time.Second, cost: 2, allowed: true, remaining: 86, reaches: 1, global: 78},
	}
	clock := limitertest.NewFakeClock(t0)
	mem := newMemory(t, clock)
	next := &counting{Store: mem}
	s := newSplit(t, next, splitbudget.Config{LeaseFraction: 0.1, Clock: clock})
	for i, st := range steps {
		clock.Set(t0.Add(st.at))
		before := next.calls()
		var (
			d   limiter.Decision
			err error
		)
		switch st.op {
		case "refund":
			d, err = s.Refund(ctx, "k", slow, st.cost)
		case "settle":
			err = s.Settle(ctx)
			d = limiter.Decision{Allowed: st.allowed, Remaining: st.remaining}
		default:
			d, err = s.Take(ctx, "k", slow, st.cost)
		}
		where := fmt.Sprintf("step %d: %s %d", i, st.op, st.cost)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if d.Allowed != st.allowed || d.Remaining != st.remaining || d.RetryAfter != st.retry {
			t.Fatalf("%s: %+v; want allowed %v, remaining %d, retry %v", where, d, st.allowed, st.remaining, st.retry)
		}
		if got := next.calls() - before; got != st.reaches {
			t.Fatalf("%s: %d calls to the store, want %d", where, got, st.reaches)
		}
		if g, _ := mem.Take(ctx, "k", slow, 0); g.Remaining != st.global {
			t.Fatalf("%s: the store holds %d tokens, want %d", where, g.Remaining, st.global)
		}
	}
	if st := s.Stats(); st.Leases != 3 || st.Leased != 30 || st.Returned != 10 || st.Lost != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Two processes share a bucket. When it runs dry the rejection says when
// the tokens this process lacks will be there, a later request within that
// time is rejected without a round trip, and the store is asked again once
// it has passed.
func TestNearExhaustion(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	mem := newMemory(t, clock)
	nextA, nextB := &counting{Store: mem}, &counting{Store: mem}
	a := newSplit(t, nextA, splitbudget.Config{LeaseFraction: 0.5, Clock: clock})
	b := newSplit(t, nextB, splitbudget.Config{LeaseFraction: 0.5, Clock: clock})

	mustTake := func(s *splitbudget.Store, cost int64, allowed bool, remaining int64, retry time.Duration) {
		t.Helper()
		d, err := s.Take(ctx, "k", tenPerSec, cost)
		if err != nil || d.Allowed != allowed || d.Remaining != remaining || d.RetryAfter != retry {
			t.Fatalf("Take(%d) at +%v: %+v, %v; want allowed %v, remaining %d, retry %v",
				cost, clock.Now().Sub(t0), d, err, allowed, remaining, retry)
		}
	}
	mustTake(a, 1, true, 9, 0) // a leases 5
	mustTake(b, 1, true, 4, 0) // b leases the other 5
	mustTake(a, 4, true, 5, 0) // b's tokens are not seen by a: 5 last seen + 0
	mustTake(a, 2, false, 0, 200*time.Millisecond)
	if n := nextA.takes.Load(); n != 2 {
		t.Fatalf("a made %d Takes, want 2 (lease, refused top-up)", n)
	}
	clock.Advance(50 * time.Millisecond)
	mustTake(a, 3, false, 0, 250*time.Millisecond) // remembered: no round trip
	mustTake(a, 1, false, 0, 50*time.Millisecond)  // lacks less than refused: asks again
	if n := nextA.takes.Load(); n != 3 {
		t.Fatalf("a made %d Takes, want 3", n)
	}
	clock.Advance(150 * time.Millisecond) // two tokens back
	mustTake(a, 2, true, 0, 0)            // takes the two left
	if n := nextA.takes.Load(); n != 5 {
		t.Fatalf("a made %d Takes, want 5 (refused top-up, then what is left)", n)
	}
	// b gives its 4 unspent tokens back: a sees them.
	if err := b.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	mustTake(a, 1, true, 3, 0) // takes the 4 now left; 3 remain in a's lease
}

// After a rejection with RetryAfter R, and the lease given back, the shared
// bucket rejects the same cost until R and admits it at R: the split store
// reports the shared bucket's truth, never earlier.
func TestRetryAfterHonest(t *testing.T) {
	limits := []limiter.Limit{
		tenPerSec,
		{Algorithm: limiter.TokenBucket, Burst: 9, Rate: 3, Period: time.Second},          // a token every 333⅓ ms
		{Algorithm: limiter.LeakyBucketPolicing, Burst: 20, Rate: 7, Period: time.Second}, // 142857.14 µs
	}
	for _, l := range limits {
		for _, cost := range []int64{1, 2} {
			t.Run(fmt.Sprintf("%s/%d/cost_%d", l.Algorithm, l.Rate, cost), func(t *testing.T) {
				clock := limitertest.NewFakeClock(t0.Add(123 * time.Millisecond))
				mem := newMemory(t, clock)
				s := newSplit(t, mem, splitbudget.Config{LeaseFraction: 0.3, Clock: clock})
				var d limiter.Decision
				for i := 0; ; i++ {
					var err error
					if d, err = s.Take(ctx, "k", l, cost); err != nil {
						t.Fatal(err)
					}
					if !d.Allowed {
						break
					}
					if i > 100 {
						t.Fatal("never rejected")
					}
				}
				if err := s.Settle(ctx); err != nil {
					t.Fatal(err)
				}
				// R is computed from the store's rounded answer, so it may be
				// one µs late, never early.
				rejected := clock.Now()
				clock.Set(rejected.Add(d.RetryAfter - 2*time.Microsecond))
				if g, _ := mem.Take(ctx, "k", l, cost); g.Allowed {
					t.Fatalf("the bucket admits %d 2 µs before R = %v", cost, d.RetryAfter)
				}
				clock.Set(rejected.Add(d.RetryAfter))
				if g, _ := mem.Take(ctx, "k", l, cost); !g.Allowed {
					t.Fatalf("the bucket rejects %d at R = %v: %+v", cost, d.RetryAfter, g)
				}
			})
		}
	}
}

// Keys of other algorithms, and costs above the lease, go to the store.
func TestPassThrough(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	next := &counting{Store: newMemory(t, clock)}
	s := newSplit(t, next, splitbudget.Config{Clock: clock})
	for _, l := range []limiter.Limit{
		{Algorithm: limiter.LeakyBucketShaping, Burst: 100, Rate: 1, Period: time.Second},
		{Algorithm: limiter.FixedWindow, Rate: 100, Period: time.Second},
		{Algorithm: limiter.SlidingLog, Rate: 100, Period: time.Second},
		{Algorithm: limiter.SlidingCounter, Rate: 100, Period: time.Second},
	} {
		before := next.calls()
		for range 3 {
			if _, err := s.Take(ctx, "k-"+l.Algorithm.String(), l, 1); err != nil {
				t.Fatal(err)
			}
		}
		if got := next.calls() - before; got != 3 {
			t.Errorf("%s: %d calls reached the store, want 3", l.Algorithm, got)
		}
	}
	if _, err := s.Take(ctx, "k", slow, -1); !errors.Is(err, limiter.ErrInvalidCost) {
		t.Errorf("negative cost: %v", err)
	}
	if _, err := s.Refund(ctx, "k", slow, -1); !errors.Is(err, limiter.ErrInvalidCost) {
		t.Errorf("negative refund: %v", err)
	}
	bad := slow
	bad.Period = 0
	if _, err := s.Take(ctx, "k", bad, 1); !errors.Is(err, limiter.ErrInvalidLimit) {
		t.Errorf("invalid limit: %v", err)
	}
	if _, err := s.Take(ctx, "k", slow, 101); !errors.Is(err, limiter.ErrCostExceedsCapacity) {
		t.Errorf("cost above burst: %v", err)
	}
	if s.Len() != 0 {
		t.Errorf("%d leases after pass-through calls only", s.Len())
	}
}

// A key whose limit changes gives its lease back under the old limit.
func TestLimitChange(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	mem := newMemory(t, clock)
	next := &counting{Store: mem}
	s := newSplit(t, next, splitbudget.Config{LeaseFraction: 0.1, Clock: clock})
	police := slow
	police.Algorithm = limiter.LeakyBucketPolicing
	if _, err := s.Take(ctx, "k", slow, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx, "k", police, 1); err != nil {
		t.Fatal(err)
	}
	if next.refunds.Load() != 1 || s.Stats().Returned != 9 {
		t.Fatalf("refunds %d, stats %+v; want the 9 unspent tokens given back", next.refunds.Load(), s.Stats())
	}
}

func TestMaxKeys(t *testing.T) {
	next := &counting{Store: newMemory(t, nil)}
	s := newSplit(t, next, splitbudget.Config{MaxKeys: 1, LeaseFraction: 0.1})
	for range 3 {
		for _, key := range []string{"a", "b"} {
			if _, err := s.Take(ctx, key, slow, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	// a: one lease, then two local answers; b: three direct Takes.
	if n, st := next.takes.Load(), s.Stats(); n != 4 || s.Len() != 1 || st.Direct != 3 || st.Local != 2 {
		t.Fatalf("%d Takes reached the store, %d leases, stats %+v", n, s.Len(), st)
	}
}

// A failed top-up is an error, and the tokens the lease held stay in it.
func TestStoreErrors(t *testing.T) {
	boom := errors.New("connection refused")
	next := &counting{Store: newMemory(t, nil)}
	var reported []string
	s := newSplit(t, next, splitbudget.Config{LeaseFraction: 0.1, OnSettleError: func(key string, err error) {
		reported = append(reported, key+": "+err.Error())
	}})
	if _, err := s.Take(ctx, "k", slow, 8); err != nil {
		t.Fatal(err)
	}
	next.takeErr = boom
	if _, err := s.Take(ctx, "k", slow, 3); !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "splitbudget: ") {
		t.Fatalf("top-up failure: %v", err)
	}
	if d, err := s.Take(ctx, "k", slow, 2); err != nil || !d.Allowed {
		t.Fatalf("the 2 tokens left in the lease: %+v, %v", d, err)
	}
	next.takeErr = nil
	if _, err := s.Take(ctx, "k", slow, 1); err != nil {
		t.Fatal(err)
	}
	next.refundErr = boom
	err := s.Settle(ctx)
	if !errors.Is(err, boom) || len(reported) != 1 || !strings.Contains(reported[0], "giving back 9 tokens") {
		t.Fatalf("settle: %v, reported %q", err, reported)
	}
	if st := s.Stats(); st.Lost != 9 || st.Returned != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// holding holds every Refund until released, counting those in flight.
type holding struct {
	limiter.Store
	release        chan struct{}
	inFlight, most atomic.Int64
}

func (h *holding) Refund(ctx context.Context, key string, l limiter.Limit, n int64) (limiter.Decision, error) {
	now := h.inFlight.Add(1)
	defer h.inFlight.Add(-1)
	for m := h.most.Load(); now > m && !h.most.CompareAndSwap(m, now); m = h.most.Load() {
	}
	<-h.release
	return h.Store.Refund(ctx, key, l, n)
}

// A settle gives its leases back MaxSettleRefunds at a time, not one after
// another, and loses none.
func TestSettleRefundsConcurrently(t *testing.T) {
	const keys = 3 * splitbudget.MaxSettleRefunds
	mem := newMemory(t, nil)
	h := &holding{Store: mem, release: make(chan struct{})}
	s := newSplit(t, h, splitbudget.Config{LeaseFraction: 0.1})
	for i := range keys {
		if _, err := s.Take(ctx, fmt.Sprint("k", i), slow, 1); err != nil {
			t.Fatal(err)
		}
	}
	settled := make(chan error)
	go func() { settled <- s.Settle(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); h.inFlight.Load() < splitbudget.MaxSettleRefunds; {
		if time.Now().After(deadline) {
			t.Fatalf("%d refunds in flight after 10 s, want %d", h.inFlight.Load(), splitbudget.MaxSettleRefunds)
		}
		time.Sleep(time.Millisecond)
	}
	close(h.release)
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
	if most := h.most.Load(); most != splitbudget.MaxSettleRefunds {
		t.Errorf("at most %d refunds in flight, want %d", most, splitbudget.MaxSettleRefunds)
	}
	if st := s.Stats(); st.Returned != keys*9 || st.Lost != 0 || s.Len() != 0 {
		t.Errorf("stats %+v, %d leases left; want %d returned", st, s.Len(), keys*9)
	}
	for i := range keys {
		if d, _ := mem.Take(ctx, fmt.Sprint("k", i), slow, 0); d.Remaining != 99 {
			t.Fatalf("k%d: the store holds %d, want 99", i, d.Remaining)
		}
	}
}

// gated holds every Take until released, so a test can keep a top-up in
// flight.
type gated struct {
	limiter.Store
	entered chan struct{}
	release chan struct{}
}

func (g *gated) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.Store.Take(ctx, key, l, cost)
}

// Callers waiting for another's top-up honour their ctx; Close during a
// top-up gets the tokens back once it returns.
func TestWaitersAndCloseDuringTopUp(t *testing.T) {
	mem := newMemory(t, nil)
	g := &gated{Store: mem, entered: make(chan struct{}), release: make(chan struct{})}
	s, err := splitbudget.New(g, splitbudget.Config{LeaseFraction: 0.1, SettleInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error)
	go func() {
		_, err := s.Take(ctx, "k", slow, 1)
		first <- err
	}()
	<-g.entered // the top-up is in flight
	cctx, cancel := context.WithCancel(ctx)
	waiter := make(chan error)
	go func() {
		_, err := s.Take(cctx, "k", slow, 1)
		waiter <- err
	}()
	cancel()
	if err := <-waiter; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter: %v; want context.Canceled", err)
	}
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	if err := <-closed; err != nil { // the lease being topped up is skipped
		t.Fatal(err)
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Fatalf("the top-up finishing after Close: %v", err)
	}
	if d, _ := mem.Take(ctx, "k", slow, 0); d.Remaining != 99 {
		t.Fatalf("after Close the store holds %d tokens, want 99 (the lease's 9 given back)", d.Remaining)
	}
	if _, err := s.Take(ctx, "k", slow, 1); !errors.Is(err, splitbudget.ErrClosed) {
		t.Fatalf("Take after Close: %v", err)
	}
	if _, err := s.Refund(ctx, "k", slow, 1); !errors.Is(err, splitbudget.ErrClosed) {
		t.Fatalf("Refund after Close: %v", err)
	}
}

func TestCloseGivesLeasesBack(t *testing.T) {
	mem := newMemory(t, nil)
	s, err := splitbudget.New(mem, splitbudget.Config{LeaseFraction: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b", "c"} {
		if _, err := s.Take(ctx, key, slow, 3); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, key := range []string{"a", "b", "c"} {
		if d, _ := mem.Take(ctx, key, slow, 0); d.Remaining != 97 {
			t.Errorf("%s: the store holds %d, want 97", key, d.Remaining)
		}
	}
	if s.Len() != 0 || s.Stats().Returned != 21 {
		t.Errorf("Len %d, stats %+v", s.Len(), s.Stats())
	}
}

// The admitted total through a split store stays within the exact bound.
func TestHammer(t *testing.T) {
	for _, callers := range []int{12, 64} {
		t.Run(fmt.Sprint(callers), func(t *testing.T) {
			clock := limitertest.NewFakeClock(t0)
			s := newSplit(t, newMemory(t, clock), splitbudget.Config{LeaseFraction: 0.1, Clock: clock})
			l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 100, Rate: 300, Period: time.Second}
			limitertest.Hammer(t, s, "k", l, callers, 400, clock)
		})
	}
}

// Three split stores on one shared bucket, settling while they hammer it:
// the total stays within Burst + Rate × elapsed, and within any window the
// admissions exceed Burst + Rate × window by no more than the leases
// outstanding (3 × lease size).
func TestProcessesShareExactly(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 200, Rate: 1000, Period: time.Second}
	const procs = 3
	stores := processes(t, procs, clock, 0.05)
	size := stores[0].LeaseSize(l)

	// Each admission is logged at its fake time, in µs from t0.
	var (
		mu     sync.Mutex
		events []event
	)
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			s := stores[i%procs]
			for n := range 4000 {
				cost := 1 + int64(n%3)
				at := clock.Now()
				d, err := s.Take(ctx, "k", l, cost)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					events = append(events, event{at.Sub(t0).Microseconds(), cost})
					mu.Unlock()
				}
				switch {
				case n%7 == 0:
					clock.Advance(100 * time.Microsecond)
				case n%500 == 0:
					if err := s.Settle(ctx); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	for _, s := range stores {
		if err := s.Settle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := clock.Now().Sub(t0)
	total, worst := overshoot(events, l)
	bound := limitertest.MaxAdmitted(l, t0, t0.Add(elapsed))
	t.Logf("%d admitted over %v, bound %d; worst window: %d above Burst + Rate × window (allowed %d)",
		total, elapsed, bound, worst, procs*size)
	if total > bound {
		t.Errorf("admitted %d > bound %d", total, bound)
	}
	// Event times are read before each call while other callers move the
	// clock, so a window may be off by the time one call takes: a few
	// tokens of slack.
	if slack := int64(5); worst > procs*size+slack {
		t.Errorf("a window exceeded Burst + Rate × window by %d > %d tokens leased out + %d", worst, procs*size, slack)
	}
}

// The worst case of the window bound, on purpose: each process holds a
// nearly whole lease while the bucket refills to full; then all of them
// spend at once.
func TestIdleLeasesOvershootBound(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 100, Rate: 100, Period: time.Second}
	const procs = 3
	stores := processes(t, procs, clock, 0.1)
	for _, s := range stores {
		if _, err := s.Take(ctx, "k", l, 1); err != nil { // 9 left in each lease
			t.Fatal(err)
		}
	}
	clock.Advance(time.Second) // the bucket is full again behind the leases
	start := clock.Now()
	var admitted int64
	for more := true; more; {
		more = false
		for _, s := range stores {
			d, err := s.Take(ctx, "k", l, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
				more = true
			}
		}
	}
	bound := limitertest.MaxAdmitted(l, start, clock.Now())
	t.Logf("admitted %d at one instant; an exact bucket admits %d; %d were leased before", admitted, bound, procs*9)
	if admitted != bound+procs*9 {
		t.Fatalf("admitted %d, want %d + %d", admitted, bound, procs*9)
	}
}

// processes returns n split stores, as n gateway processes, on one memory
// store and clock, each taking leases of fraction of Burst.
func processes(t *testing.T, n int, clock limiter.Clock, fraction float64) []*splitbudget.Store {
	t.Helper()
	shared := newMemory(t, clock)
	stores := make([]*splitbudget.Store, n)
	for i := range stores {
		stores[i] = newSplit(t, shared, splitbudget.Config{LeaseFraction: fraction, Clock: clock})
	}
	return stores
}

type event struct{ at, cost int64 }

// overshoot returns the total of events and the largest excess, over all
// windows [a, b] of event times, of the cost admitted in the window over
// Burst + ⌊Rate × (b − a) / Period⌋.
func overshoot(events []event, l limiter.Limit) (total, worst int64) {
	// Bucket the events by µs; windows start and end on event times.
	byTime := map[int64]int64{}
	for _, e := range events {
		byTime[e.at] += e.cost
		total += e.cost
	}
	times := make([]int64, 0, len(byTime))
	for at := range byTime {
		times = append(times, at)
	}
	slices.Sort(times)
	period := l.Period.Microseconds()
	for i := range times {
		var sum int64
		for j := i; j < len(times); j++ {
			sum += byTime[times[j]]
			allowed := l.Burst + l.Rate*(times[j]-times[i])/period
			worst = max(worst, sum-allowed)
		}
	}
	return total, worst
}

// TestFullTableNeverCreatesTokens fills the lease table with fresh keys
// while alice spends: new keys that find their shard full go to the store
// as they are, leases are dropped only by settling (which gives their
// unspent tokens back), and alice is never admitted a token the store did
// not hand out. With the clock still, she is admitted exactly Burst, and
// once every lease is given back the store holds exactly the rest.
func TestFullTableNeverCreatesTokens(t *testing.T) {
	for _, c := range []struct {
		name        string
		maxKeys     int
		flood       int // fresh keys between two of alice's requests
		settleEvery int // requests of alice's between settles; 0: never
	}{
		{"full table, no settle", 4, 3, 0},
		{"full table, settles", 4, 3, 7},
		{"one key, settles often", 1, 1, 2},
		{"room for all", 10_000, 3, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := limitertest.NewFakeClock(t0)
			next := &counting{Store: newMemory(t, clock)}
			s := newSplit(t, next, splitbudget.Config{MaxKeys: c.maxKeys, Clock: clock})
			admitted, fresh := int64(0), 0
			for i := range 3 * slow.Burst / 2 {
				d, err := s.Take(ctx, "alice", slow, 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted++
				}
				if admitted > slow.Burst {
					t.Fatalf("request %d: alice admitted %d, more than the bucket's %d", i, admitted, slow.Burst)
				}
				for range c.flood {
					if d, err := s.Take(ctx, fmt.Sprint("fresh:", fresh), slow, 1); err != nil || !d.Allowed {
						t.Fatalf("a fresh key: %+v, %v", d, err)
					}
					fresh++
				}
				if n := s.Len(); n > c.maxKeys {
					t.Fatalf("%d leases, more than MaxKeys %d", n, c.maxKeys)
				}
				if c.settleEvery > 0 && i%int64(c.settleEvery) == 0 {
					if err := s.Settle(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if admitted != slow.Burst {
				t.Fatalf("alice admitted %d, want exactly the bucket's %d", admitted, slow.Burst)
			}
			if err := s.Settle(ctx); err != nil {
				t.Fatal(err)
			}
			d, err := next.Store.Take(ctx, "alice", slow, 0)
			if err != nil || d.Remaining != 0 {
				t.Fatalf("alice's bucket after every lease is back: %+v, %v; want 0 left", d, err)
			}
			if st := s.Stats(); c.maxKeys < 10 && st.Direct == 0 {
				t.Fatalf("stats %+v: no fresh key went to the store, yet the table was full", st)
			}
		})
	}
}
