package lastknown_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/lastknown"
	"github.com/costguard/costguard/limiter/limitertest"
)

var (
	ctx = context.Background()
	// 100 points at most, 10 a second.
	bucket = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 100, Rate: 10, Period: time.Second}
	// 1,000 points an hour.
	window = limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 1000, Period: time.Hour}
	start  = time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC) // on the hour
)

func newStore(t *testing.T, maxBudgets int) (*lastknown.Store, *limitertest.FakeClock) {
	t.Helper()
	clock := limitertest.NewFakeClock(start)
	s, err := lastknown.New(lastknown.Config{Clock: clock, MaxBudgets: maxBudgets})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clock
}

// hammer takes cost every tick for d and returns what was admitted.
func hammer(t *testing.T, s *lastknown.Store, clock *limitertest.FakeClock, key string, limit limiter.Limit, cost int64, tick, d time.Duration) int64 {
	t.Helper()
	var admitted int64
	for end := clock.Now().Add(d); ; clock.Advance(tick) {
		dec, err := s.Take(ctx, key, limit, cost)
		if err != nil {
			t.Fatal(err)
		}
		if dec.Allowed {
			admitted += cost
		}
		if !clock.Now().Before(end) {
			return admitted
		}
	}
}

// The bound of the package doc: from a bucket last seen with R tokens, an
// outage of T admits at most R + rate × T, never more than the burst at
// once; an unknown principal at most rate × T.
func TestOutageBound(t *testing.T) {
	tests := []struct {
		name   string
		known  int64 // remaining when last seen; -1: never seen
		outage time.Duration
		cost   int64
	}{
		{"unknown, 10 s", -1, 10 * time.Second, 1},
		{"unknown, 1 s, cost 7", -1, time.Second, 7},
		{"empty when seen, 5 s", 0, 5 * time.Second, 1},
		{"30 left, 2 s", 30, 2 * time.Second, 1},
		{"30 left, 2 s, cost 3", 30, 2 * time.Second, 3},
		{"full when seen, 60 s", 100, time.Minute, 5},
		{"90 left, 3 s: the burst caps the refill", 90, 3 * time.Second, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, clock := newStore(t, 0)
			known := int64(0)
			if tc.known >= 0 {
				known = tc.known
				s.Observe("user:1", bucket, 0, limiter.Decision{
					Allowed: true, Limit: 100, Remaining: tc.known,
					ResetAfter: time.Duration(100-tc.known) * 100 * time.Millisecond,
				})
			}
			got := hammer(t, s, clock, "user:1", bucket, tc.cost, time.Millisecond, tc.outage)
			rateT := int64(tc.outage/time.Second) * bucket.Rate
			bound := known + rateT
			if got > bound {
				t.Fatalf("admitted %d, bound %d + %d = %d", got, known, rateT, bound)
			}
			// The bound is also what is reached, to a cost's rounding.
			if got < bound-tc.cost-max(0, known+rateT-bucket.Burst) && known+rateT <= bucket.Burst {
				t.Errorf("admitted %d, far below the bound %d", got, bound)
			}
		})
	}
}

// A fresh word from the store replaces what the fallback knew, less what
// the fallback admitted that the store never saw, until the store answers
// a debit of it (Paid).
func TestObserveReplaces(t *testing.T) {
	s, clock := newStore(t, 0)
	s.Observe("k", bucket, 10, limiter.Decision{Allowed: true, Limit: 100, Remaining: 50, ResetAfter: 5 * time.Second})
	if got := hammer(t, s, clock, "k", bucket, 1, 0, 0); got != 1 {
		t.Fatalf("first take: %d", got)
	}
	for range 60 {
		s.Take(ctx, "k", bucket, 1)
	}
	d, _ := s.Take(ctx, "k", bucket, 0)
	if d.Remaining != 0 {
		t.Fatalf("remaining %d after spending 50, want 0", d.Remaining)
	}
	s.Observe("k", bucket, 0, limiter.Decision{Allowed: true, Limit: 100, Remaining: 80, ResetAfter: 2 * time.Second})
	if d, _ := s.Take(ctx, "k", bucket, 0); d.Remaining != 30 {
		t.Errorf("after a fresh observation: remaining %d, want 80 less the 50 owed", d.Remaining)
	}
	debits := s.Debits(10)
	if len(debits) != 1 || debits[0].Key != "k" || debits[0].Cost != 50 || debits[0].Limit != bucket {
		t.Fatalf("debits %+v, want the 50 points admitted here", debits)
	}
	if again := s.Debits(10); len(again) != 0 {
		t.Errorf("handed out twice: %+v", again)
	}
	// The store takes the debit: 30 left.
	s.Paid(s.Start(), debits[0], 50, limiter.Decision{Allowed: true, Limit: 100, Remaining: 30, ResetAfter: 7 * time.Second})
	// Paid: the store's next word stands as it is.
	s.Observe("k", bucket, 0, limiter.Decision{Allowed: true, Limit: 100, Remaining: 80, ResetAfter: 2 * time.Second})
	if d, _ := s.Take(ctx, "k", bucket, 0); d.Remaining != 80 {
		t.Errorf("after a fresh observation, nothing owed: remaining %d, want 80", d.Remaining)
	}
	// A rejection is observed too: its RetryAfter caps the level.
	s.Observe("k", bucket, 30, limiter.Decision{Limit: 100, Remaining: 20, RetryAfter: time.Second, ResetAfter: 8 * time.Second})
	if d, _ := s.Take(ctx, "k", bucket, 0); d.Remaining != 20 {
		t.Errorf("after a rejection: remaining %d, want 20", d.Remaining)
	}
	// A decision that describes nothing is ignored.
	s.Observe("k", bucket, 0, limiter.Decision{})
	if d, _ := s.Take(ctx, "k", bucket, 0); d.Remaining != 20 {
		t.Errorf("after an empty decision: remaining %d, want 20", d.Remaining)
	}
	// Under another limit (a reload) the budget is unknown: empty.
	other := bucket
	other.Burst = 200
	if d, _ := s.Take(ctx, "k", other, 0); d.Remaining != 0 {
		t.Errorf("under a new limit: remaining %d, want 0", d.Remaining)
	}
}

// A debt is owed until the store answers its debit: handed out, it is
// still read off every answer of the store (a concurrent call's answer,
// which the store ran before the debit, cannot hand its points out
// again); a debit that failed is owed again; only Paid forgets it.
func TestDebtOwedUntilPaid(t *testing.T) {
	s, _ := newStore(t, 0)
	full := limiter.Decision{Allowed: true, Limit: 100, Remaining: 100}
	s.Observe("k", bucket, 0, full)
	for range 4 { // the outage: 40 points
		if d, err := s.Take(ctx, "k", bucket, 10); err != nil || !d.Allowed {
			t.Fatalf("outage take: %+v %v", d, err)
		}
	}
	remaining := func() int64 {
		d, _ := s.Take(ctx, "k", bucket, 0)
		return d.Remaining
	}
	debits := s.Debits(10)
	if len(debits) != 1 || debits[0].Cost != 40 || s.Owing() != 1 {
		t.Fatalf("debits %+v, owing %d", debits, s.Owing())
	}
	// The debit is in flight; the store answers a call that started after
	// it was sent but ran before it, still showing 100.
	s.Observe("k", bucket, 0, full)
	if got := remaining(); got != 60 {
		t.Errorf("with the debit in flight: %d left, want 60 (100 less the 40 owed)", got)
	}
	// The debit timed out: owed again, handed out again, still read off.
	s.Unpaid(debits[0])
	s.Observe("k", bucket, 0, full)
	if got := remaining(); got != 60 || s.Owing() != 1 {
		t.Errorf("after a failed debit: %d left, owing %d; want 60, 1", got, s.Owing())
	}
	debits = s.Debits(10)
	if len(debits) != 1 || debits[0].Cost != 40 {
		t.Fatalf("again: %+v", debits)
	}
	// 5 more admitted while the debit flies: owed after it is paid.
	if d, _ := s.Take(ctx, "k", bucket, 5); !d.Allowed {
		t.Fatal("refused")
	}
	s.Paid(s.Start(), debits[0], 40, limiter.Decision{Allowed: true, Limit: 100, Remaining: 60, ResetAfter: 4 * time.Second})
	if got := remaining(); got != 55 || s.Owing() != 1 {
		t.Errorf("after the debit: %d left, owing %d; want 55 (60 less the 5 still owed), 1", got, s.Owing())
	}
	debits = s.Debits(10)
	if len(debits) != 1 || debits[0].Cost != 5 {
		t.Fatalf("the rest: %+v", debits)
	}
	// The store held less than the debt: what it held was taken, and the
	// debt is settled all the same.
	s.Paid(s.Start(), debits[0], 2, limiter.Decision{Allowed: true, Limit: 100, Remaining: 0, ResetAfter: 10 * time.Second})
	if s.Owing() != 0 || len(s.Debits(10)) != 0 || remaining() != 0 {
		t.Errorf("after a saturated debit: owing %d, %d left", s.Owing(), remaining())
	}
}

// An answer to a call that started before the budget's last answer was
// learnt (Start) may lower what is known, never raise it; an answer to a
// call started after it is taken as it stands.
func TestStaleAnswersDoNotRaise(t *testing.T) {
	s, clock := newStore(t, 0)
	remaining := func() int64 {
		d, _ := s.Take(ctx, "k", bucket, 0)
		return d.Remaining
	}
	answer := func(left int64) limiter.Decision {
		return limiter.Decision{Allowed: true, Limit: 100, Remaining: left, ResetAfter: time.Duration(100-left) * 100 * time.Millisecond}
	}
	s.Observe("k", bucket, 0, answer(100))
	// The outage admits 40; then a debit and an earlier call are in flight.
	for range 4 {
		s.Take(ctx, "k", bucket, 10)
	}
	early := s.Start() // a request's call, sent before the debit
	debits := s.Debits(1)
	debit := s.Start()
	s.Paid(debit, debits[0], 40, answer(60))
	// The store ran the early call before the debit: it shows 99.
	s.ObserveFrom(early, "k", bucket, 1, answer(99))
	if got := remaining(); got != 60 {
		t.Errorf("after a stale answer: %d left, want 60 (it may not raise the level)", got)
	}
	// A stale answer that holds less lowers the level.
	late := s.Start()
	s.ObserveFrom(late, "k", bucket, 1, answer(50))
	s.ObserveFrom(early, "k", bucket, 1, answer(45))
	if got := remaining(); got != 45 {
		t.Errorf("after a lower stale answer: %d left, want 45", got)
	}
	// The stale level refills as the budget does: 2 s later, 20 more.
	clock.Advance(2 * time.Second)
	s.ObserveFrom(late, "k", bucket, 1, answer(70))
	if got := remaining(); got != 65 {
		t.Errorf("2 s later: %d left, want 65 (45 + 20 refilled: the stale 70 is above it)", got)
	}
	// A call started now ran after every answer learnt: it may raise.
	s.ObserveFrom(s.Start(), "k", bucket, 0, answer(90))
	if got := remaining(); got != 90 {
		t.Errorf("after a fresh answer: %d left, want 90", got)
	}
	// A fixed window: the count of the later window, the higher in one.
	s.ObserveFrom(s.Start(), "w", window, 0, limiter.Decision{Allowed: true, Limit: 1000, Remaining: 400, ResetAfter: 30 * time.Minute})
	s.ObserveFrom(early, "w", window, 0, limiter.Decision{Allowed: true, Limit: 1000, Remaining: 900, ResetAfter: 30 * time.Minute})
	if d, _ := s.Take(ctx, "w", window, 0); d.Remaining != 400 {
		t.Errorf("window after a stale answer: %d left, want 400", d.Remaining)
	}
}

// After the store lost its data its budgets are fresh: DropDebts forgets
// every debt, and the answer to a debit handed out before it changes
// nothing (nothing is repaid into a fresh budget through it).
func TestDropDebts(t *testing.T) {
	s, _ := newStore(t, 0)
	full := limiter.Decision{Allowed: true, Limit: 100, Remaining: 100}
	for _, k := range []string{"a", "b"} {
		s.Observe(k, bucket, 0, full)
		s.Take(ctx, k, bucket, 30)
	}
	inFlight := s.Debits(1)
	if len(inFlight) != 1 || s.Owing() != 2 {
		t.Fatalf("debits %+v, owing %d", inFlight, s.Owing())
	}
	if n := s.DropDebts(); n != 2 {
		t.Errorf("dropped %d debts, want 2", n)
	}
	if s.Owing() != 0 || len(s.Debits(10)) != 0 {
		t.Errorf("after the drop: owing %d", s.Owing())
	}
	// The voided debit's answer arrives (the store took it before the loss
	// was seen): no debt comes back, and neither does a later failure.
	s.Paid(s.Start(), inFlight[0], 30, limiter.Decision{Allowed: true, Limit: 100, Remaining: 70})
	s.Unpaid(inFlight[0])
	s.Owe(limiter.Request{}) // nothing
	if s.Owing() != 0 {
		t.Errorf("a voided debit brought a debt back: owing %d", s.Owing())
	}
	// The fresh store's answers stand as they are.
	s.Observe("b", bucket, 0, full)
	if d, _ := s.Take(ctx, "b", bucket, 0); d.Remaining != 100 {
		t.Errorf("b after the loss: %d left, want 100", d.Remaining)
	}
}

func TestFixedWindow(t *testing.T) {
	tests := []struct {
		name      string
		seen      *limiter.Decision
		at        time.Duration // from the hour when the outage is hammered
		wantFirst int64         // admitted in the rest of the window
	}{
		{"unknown: spent until the window ends", nil, 10 * time.Minute, 0},
		{"known with 300 used", &limiter.Decision{Allowed: true, Limit: 1000, Remaining: 700, ResetAfter: 50 * time.Minute}, 10 * time.Minute, 700},
		{"known in the previous window", &limiter.Decision{Allowed: true, Limit: 1000, Remaining: 0, ResetAfter: time.Minute}, 0, 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, clock := newStore(t, 0)
			if tc.seen != nil {
				clock.Set(start.Add(tc.at).Add(-10 * time.Minute))
				s.Observe("k", window, 0, *tc.seen)
			}
			clock.Set(start.Add(tc.at))
			first := hammer(t, s, clock, "k", window, 10, time.Second, time.Hour-tc.at-time.Second)
			if first != tc.wantFirst {
				t.Errorf("admitted %d in the window, want %d", first, tc.wantFirst)
			}
			clock.Set(start.Add(time.Hour))
			if next := hammer(t, s, clock, "k", window, 10, time.Millisecond, 200*time.Millisecond); next != 1000 {
				t.Errorf("admitted %d in the next window, want 1000", next)
			}
		})
	}
}

// TakeAll is all or nothing, from the budgets as last known, and a
// budget never seen is empty.
func TestTakeAll(t *testing.T) {
	s, clock := newStore(t, 0)
	field := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 5, Rate: 5, Period: time.Minute}
	reqs := []limiter.Request{
		{Key: "k", Limit: bucket, Cost: 10},
		{Key: "k", Name: "quota", Limit: window, Cost: 10},
		{Key: "k", Name: "field:Mutation.login", Limit: field, Cost: 1},
	}
	seen := []limiter.Decision{
		{Allowed: true, Limit: 100, Remaining: 50, ResetAfter: 5 * time.Second},
		{Allowed: true, Limit: 1000, Remaining: 500, ResetAfter: 30 * time.Minute},
		{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 12 * time.Second},
	}
	s.ObserveAll(reqs[:2], seen[:2]) // the field limit is unknown
	ds := make([]limiter.Decision, 3)
	if err := s.TakeAll(ctx, reqs, ds); err != nil || limiter.AllAllowed(ds) {
		t.Fatalf("unknown field limit admitted: %+v, %v", ds, err)
	}
	if !ds[0].Allowed || ds[0].Remaining != 50 || ds[2].Allowed {
		t.Errorf("refusal: %+v, want the bucket peeked at 50 and the field refused", ds)
	}
	clock.Advance(12 * time.Second) // one login refills
	if err := s.TakeAll(ctx, reqs, ds); err != nil || !limiter.AllAllowed(ds) {
		t.Fatalf("after a refill: %+v, %v", ds, err)
	}
	// 50 seen 12 s ago + 120 refilled, capped at 100, minus 10.
	if ds[0].Remaining != 90 {
		t.Errorf("bucket: remaining %d, want 90", ds[0].Remaining)
	}
	if ds[1].Remaining != 490 || ds[2].Remaining != 0 {
		t.Errorf("quota %d (want 490), field %d (want 0)", ds[1].Remaining, ds[2].Remaining)
	}
	// Refunds give back to what is known.
	if err := s.RefundAll(ctx, reqs[:2], ds[:2]); err != nil || ds[0].Remaining != 100 || ds[1].Remaining != 500 {
		t.Errorf("refund: %+v, %v", ds[:2], err)
	}
	// Over a capacity: nothing is debited.
	reqs[2].Cost = 6
	if err := s.TakeAll(ctx, reqs, ds); !errors.Is(err, limiter.ErrCostExceedsCapacity) {
		t.Errorf("over capacity: %v", err)
	}
	if d, _ := s.Take(ctx, "k", bucket, 0); d.Remaining != 100 {
		t.Errorf("debited %d on a refused TakeAll", 100-d.Remaining)
	}
}

// The table is bounded; an evicted budget is unknown again: empty.
func TestBounded(t *testing.T) {
	s, _ := newStore(t, 64)
	full := limiter.Decision{Allowed: true, Limit: 100, Remaining: 100}
	for i := range 1000 {
		s.Observe(fmt.Sprint("user:", i), bucket, 0, full)
	}
	if n := s.Len(); n > 64 {
		t.Fatalf("holds %d budgets, bound 64", n)
	}
	kept := 0
	for i := range 1000 {
		// A refund of 0 peeks without recording an unknown budget.
		d, err := s.Refund(ctx, fmt.Sprint("user:", i), bucket, 0)
		if err != nil {
			t.Fatal(err)
		}
		switch d.Remaining {
		case 100:
			kept++
		case 0:
		default:
			t.Fatalf("user:%d: remaining %d, neither known nor empty", i, d.Remaining)
		}
	}
	if kept == 0 || kept > 64 {
		t.Errorf("%d budgets kept", kept)
	}
}

func TestRefusals(t *testing.T) {
	s, _ := newStore(t, 0)
	sliding := limiter.Limit{Algorithm: limiter.SlidingCounter, Rate: 10, Period: time.Second}
	if _, err := s.Take(ctx, "k", sliding, 1); !errors.Is(err, lastknown.ErrUnsupported) {
		t.Errorf("sliding counter: %v", err)
	}
	if _, err := s.Take(ctx, "k", limiter.Limit{}, 1); !errors.Is(err, limiter.ErrInvalidLimit) {
		t.Errorf("zero limit: %v", err)
	}
	if _, err := lastknown.New(lastknown.Config{MaxBudgets: -1}); !errors.Is(err, lastknown.ErrInvalidConfig) {
		t.Errorf("negative MaxBudgets: %v", err)
	}
	// A refund of an unknown budget gives nothing: it stays empty.
	if d, err := s.Refund(ctx, "new", bucket, 50); err != nil || d.Remaining != 0 {
		t.Errorf("refund of an unknown budget: %+v, %v", d, err)
	}
}

// What TakeAll admits on named budgets is owed too, each budget on its
// own, and a debit the store could not take is owed again.
func TestDebtsOfNamedBudgets(t *testing.T) {
	s, _ := newStore(t, 0)
	full := limiter.Decision{Allowed: true, Limit: 100, Remaining: 100}
	reqs := []limiter.Request{{Key: "p", Limit: bucket, Cost: 7}, {Key: "p", Name: "quota", Limit: bucket, Cost: 7}}
	s.ObserveAll([]limiter.Request{{Key: "p", Limit: bucket}, {Key: "p", Name: "quota", Limit: bucket}}, []limiter.Decision{full, full})
	ds := make([]limiter.Decision, 2)
	for range 3 { // the outage: 21 points admitted on each
		if err := s.TakeAll(ctx, reqs, ds); err != nil || !limiter.AllAllowed(ds) {
			t.Fatalf("TakeAll: %v %+v", err, ds)
		}
	}
	debits := s.Debits(10)
	if len(debits) != 2 {
		t.Fatalf("debits %+v, want one per budget", debits)
	}
	for _, d := range debits {
		if d.Key != "p" || d.Cost != 21 {
			t.Errorf("debit %+v, want 21 on p", d)
		}
		s.Unpaid(d) // the store was away again
	}
	again := s.Debits(10)
	if len(again) != 2 || again[0].Cost != 21 || again[1].Cost != 21 || again[0].Name == again[1].Name {
		t.Errorf("owed again: %+v", again)
	}
	// Points spent that the store could not be debited for are owed too.
	s.Paid(s.Start(), again[0], 21, full)
	s.Owe(limiter.Request{Key: "p", Name: again[0].Name, Limit: bucket, Cost: 3})
	s.Unpaid(again[1])
	got := map[string]int64{}
	for _, d := range s.Debits(10) {
		got[d.Name] = d.Cost
	}
	if got[again[0].Name] != 3 || got[again[1].Name] != 21 {
		t.Errorf("debts %v, want 3 on %q and 21 on %q", got, again[0].Name, again[1].Name)
	}
}

// Debits hands out every debt, each once, bounded by its argument;
// Owing counts them, evicted and cleared budgets included.
func TestDebits(t *testing.T) {
	s, _ := newStore(t, 0)
	full := limiter.Decision{Allowed: true, Limit: 100, Remaining: 100}
	for _, key := range []string{"a", "b", "c"} {
		s.Observe(key, bucket, 0, full)
	}
	for _, key := range []string{"a", "b"} { // the outage: 5 points on each
		if d, err := s.Take(ctx, key, bucket, 5); err != nil || !d.Allowed {
			t.Fatalf("%s: %+v %v", key, d, err)
		}
	}
	if got := s.Owing(); got != 2 {
		t.Fatalf("owing %d budgets, want 2", got)
	}
	if got := s.Debits(0); got != nil {
		t.Errorf("Debits(0) = %+v", got)
	}
	first := s.Debits(1)
	rest := s.Debits(10)
	if len(first) != 1 || len(rest) != 1 {
		t.Fatalf("Debits(1) = %+v, then %+v", first, rest)
	}
	got := map[string]int64{first[0].Key: first[0].Cost, rest[0].Key: rest[0].Cost}
	if got["a"] != 5 || got["b"] != 5 || first[0].Limit != bucket {
		t.Errorf("debts %+v %+v, want 5 on a and on b", first, rest)
	}
	if again := s.Debits(10); len(again) != 0 || s.Owing() != 2 {
		t.Errorf("handed out twice: %+v; owing %d, want 2 until paid", again, s.Owing())
	}
	// A debit the store could not take is owed again, and handed out again.
	s.Unpaid(first[0])
	if got := s.Debits(10); len(got) != 1 || got[0] != first[0] {
		t.Errorf("owed again: %+v, want %+v", got, first[0])
	}
	// A budget that leaves the table takes its debt with it: the count
	// follows.
	s.Take(ctx, "c", bucket, 5)
	s.Close()
	if s.Owing() != 0 || len(s.Debits(10)) != 0 {
		t.Errorf("after Close: owing %d", s.Owing())
	}
	small, _ := newStore(t, 1) // one budget a shard
	for i := range 200 {
		key := fmt.Sprint("user:", i)
		small.Observe(key, bucket, 0, full)
		small.Take(ctx, key, bucket, 1)
	}
	if n, held := small.Owing(), len(small.Debits(1000)); n != held || n > 64 {
		t.Errorf("owing %d, %d debts held, table of 64", n, held)
	}
}
