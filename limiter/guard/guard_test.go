package guard_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/limiter/lastknown"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
)

var (
	errDown = errors.New("connection refused")
	limit   = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: 10 * time.Second}
	open    = guard.Call{Plan: "free", FailOpen: true}
	closed  = guard.Call{Plan: "free"}
)

// link is a shared store reached through a link that can fail: down
// answers errDown, hang waits for the call's deadline. calls counts the
// calls that reached it.
type link struct {
	mem   *memorystore.Store
	down  atomic.Bool
	hang  atomic.Bool
	calls atomic.Int64
	// held, when set, holds the answer of the next Take: the store runs
	// it, then the answer waits until held is closed (ran is closed when
	// it has run).
	held atomic.Pointer[hold]
}

type hold struct{ ran, release chan struct{} }

func (s *link) fail(ctx context.Context) error {
	s.calls.Add(1)
	switch {
	case s.hang.Load():
		<-ctx.Done()
		return ctx.Err()
	case s.down.Load():
		return errDown
	}
	return nil
}

func (s *link) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	if err := s.fail(ctx); err != nil {
		return limiter.Decision{}, err
	}
	d, err := s.mem.Take(ctx, key, l, cost)
	if h := s.held.Swap(nil); h != nil {
		close(h.ran)
		<-h.release
	}
	return d, err
}

func (s *link) Refund(ctx context.Context, key string, l limiter.Limit, n int64) (limiter.Decision, error) {
	if err := s.fail(ctx); err != nil {
		return limiter.Decision{}, err
	}
	return s.mem.Refund(ctx, key, l, n)
}

func (s *link) TakeAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	if err := s.fail(ctx); err != nil {
		return err
	}
	return s.mem.TakeAll(ctx, reqs, ds)
}

func (s *link) RefundAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	if err := s.fail(ctx); err != nil {
		return err
	}
	return s.mem.RefundAll(ctx, reqs, ds)
}

// fixture is a Guard on a link with a breaker of 2 failures and 1 s,
// whose flush runs when the store answers while a debt is held, when the
// breaker closes, and on each tick the test sends.
type fixture struct {
	g     *guard.Guard
	link  *link
	fb    *lastknown.Store
	clock *limitertest.FakeClock
	tick  chan time.Time
}

func newFixture(t *testing.T, memKeys int) *fixture {
	return newFixtureWith(t, memKeys, guard.Config{Timeout: 5 * time.Millisecond})
}

// newFixtureWith is newFixture with cfg's Timeout and CheckDataLoss.
func newFixtureWith(t *testing.T, memKeys int, cfg guard.Config) *fixture {
	t.Helper()
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	mem, err := memorystore.New(memorystore.Config{Clock: clock, MaxKeys: memKeys, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	overflow, err := memorystore.New(memorystore.Config{Clock: clock, MaxKeys: 4, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := lastknown.New(lastknown.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	brk, err := breaker.New(breaker.Config{Failures: 2, CoolDown: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := &link{mem: mem}
	tick := make(chan time.Time)
	g, err := guard.NewTicking(guard.Config{
		Store: l, Multi: l, Fallback: fb, Overflow: overflow,
		Timeout: cfg.Timeout, Breaker: brk, Clock: clock,
		Logger:        slog.New(slog.DiscardHandler),
		CheckDataLoss: cfg.CheckDataLoss,
	}, tick)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.Close()
		mem.Close()
		overflow.Close()
	})
	return &fixture{g: g, link: l, fb: fb, clock: clock, tick: tick}
}

func (f *fixture) take(t *testing.T, c guard.Call, key string, cost int64) (limiter.Decision, guard.Trace, error) {
	t.Helper()
	var tr guard.Trace
	d, err := f.g.Take(context.Background(), c, key, limit, cost, &tr)
	return d, tr, err
}

// remaining reads key's budget in the store, behind the guard.
func (f *fixture) remaining(t *testing.T, key string) int64 {
	t.Helper()
	d, err := f.link.mem.Take(context.Background(), key, limit, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// Each failure mode, each way the store fails: what the call answers and
// what its Trace says.
func TestTakeFailure(t *testing.T) {
	tests := []struct {
		name      string
		call      guard.Call
		down      bool
		hang      bool
		learn     bool // the store answered for the key before failing
		allowed   bool
		remaining int64
		errIs     error
		result    guard.Result
		fallback  bool
	}{
		{name: "healthy", call: open, allowed: true, remaining: 7, result: guard.ResultOK},
		{name: "down, open, learned", call: open, down: true, learn: true, allowed: true, remaining: 6, result: guard.ResultError, fallback: true},
		{name: "down, open, never seen: empty", call: open, down: true, result: guard.ResultError, fallback: true},
		{name: "timeout, open", call: open, hang: true, learn: true, allowed: true, remaining: 6, result: guard.ResultTimeout, fallback: true},
		{name: "down, closed", call: closed, down: true, learn: true, errIs: guard.ErrUnavailable, result: guard.ResultError},
		{name: "timeout, closed", call: closed, hang: true, errIs: guard.ErrUnavailable, result: guard.ResultTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 0)
			if tc.learn {
				if _, _, err := f.take(t, open, "k", 1); err != nil {
					t.Fatal(err)
				}
			}
			f.link.down.Store(tc.down)
			f.link.hang.Store(tc.hang)
			d, tr, err := f.take(t, tc.call, "k", 3)
			if tc.errIs != nil {
				if !errors.Is(err, tc.errIs) {
					t.Fatalf("err = %v, want %v", err, tc.errIs)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if err == nil && (d.Allowed != tc.allowed || d.Remaining != tc.remaining) {
				t.Errorf("decision %+v, want allowed %v remaining %d", d, tc.allowed, tc.remaining)
			}
			if tr.Result != tc.result || tr.Fallback != tc.fallback {
				t.Errorf("trace %+v, want result %v fallback %v", tr, tc.result, tc.fallback)
			}
			if failed := tc.down || tc.hang; (tr.Failure != nil) != failed {
				t.Errorf("Failure %v, want one: %v", tr.Failure, failed)
			}
		})
	}
}

// The breaker opens after two failures in a row, keeps calls off the store
// for its cool-down (the fallback decides at once), and closes on the
// first probe that succeeds; each move is marked on the call that made it.
func TestBreaker(t *testing.T) {
	f := newFixture(t, 0)
	f.take(t, open, "k", 1) // learned: 9 left
	f.link.down.Store(true)
	steps := []struct {
		name    string
		advance time.Duration
		heal    bool
		result  guard.Result
		changed bool
		state   guard.BreakerState
		calls   int64 // calls that reached the store so far
	}{
		{name: "failure 1", result: guard.ResultError, state: guard.BreakerClosed, calls: 2},
		{name: "failure 2 opens", result: guard.ResultError, changed: true, state: guard.BreakerOpen, calls: 3},
		{name: "open: skipped", result: guard.ResultSkipped, state: guard.BreakerOpen, calls: 3},
		{name: "failed probe re-opens", advance: time.Second, result: guard.ResultError, changed: true, state: guard.BreakerOpen, calls: 4},
		{name: "still open", advance: 999 * time.Millisecond, result: guard.ResultSkipped, state: guard.BreakerOpen, calls: 4},
		{name: "good probe closes", advance: time.Millisecond, heal: true, result: guard.ResultOK, changed: true, state: guard.BreakerClosed, calls: 5},
		{name: "closed", result: guard.ResultOK, state: guard.BreakerClosed, calls: 6},
	}
	for _, s := range steps {
		f.clock.Advance(s.advance)
		if s.heal {
			f.link.down.Store(false)
		}
		_, tr, err := f.take(t, open, "k", 0)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		state := f.g.BreakerState()
		if tr.Result != s.result || tr.BreakerChanged != s.changed || state != s.state || f.link.calls.Load() != s.calls {
			t.Errorf("%s: result %v changed %v state %v calls %d; want %v %v %v %d",
				s.name, tr.Result, tr.BreakerChanged, state, f.link.calls.Load(), s.result, s.changed, s.state, s.calls)
		}
	}
}

// A call whose caller left before the store answered decided nothing: it
// is refused whatever the failure mode, marked gone, and not counted by
// the breaker.
func TestGone(t *testing.T) {
	f := newFixture(t, 0)
	f.link.hang.Store(true)
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var tr guard.Trace
		if _, err := f.g.Take(ctx, open, "k", limit, 1, &tr); !errors.Is(err, guard.ErrUnavailable) || !tr.Gone {
			t.Fatalf("err %v, gone %v", err, tr.Gone)
		}
	}
	if state := f.g.BreakerState(); state != guard.BreakerClosed {
		t.Errorf("breaker %v after abandoned calls", state)
	}
}

// What the fallback admits during an outage is debited from the store
// once it answers: every budget's debt, by the flush its answer starts.
func TestSettlement(t *testing.T) {
	f := newFixture(t, 0)
	for _, k := range []string{"a", "b"} {
		f.take(t, open, k, 1) // 9 left each
	}
	f.link.down.Store(true)
	for _, k := range []string{"a", "b"} {
		if d, tr, err := f.take(t, open, k, 4); err != nil || !d.Allowed || !tr.Fallback {
			t.Fatalf("%s in the outage: %+v %+v %v", k, d, tr, err)
		}
	}
	if f.fb.Owing() != 2 {
		t.Fatalf("owing %d, want 2", f.fb.Owing())
	}
	f.link.down.Store(false)
	f.clock.Advance(time.Second) // the breaker the outage opened lets a probe through
	if d, tr, err := f.take(t, open, "a", 1); err != nil || tr.Fallback || d.Remaining != 9 {
		t.Fatalf("a after the outage: %+v %+v, %v; want the store's 9 left (9, 1 refilled, 1 taken)", d, tr, err)
	}
	if d, _ := f.fb.Take(ctx(), "a", limit, 0); d.Remaining != 5 {
		t.Errorf("a in the fallback: %d, want 5 (9, less the 4 owed)", d.Remaining)
	}
	f.g.Flush()
	if got := f.remaining(t, "a"); got != 5 {
		t.Errorf("a in the store after the flush: %d, want 5 (9, less the 4 owed)", got)
	}
	if got := f.remaining(t, "b"); got != 6 {
		t.Errorf("b in the store after the flush: %d, want 6 (9, 1 refilled, less the 4 owed)", got)
	}
	if f.fb.Owing() != 0 {
		t.Errorf("still owing %d", f.fb.Owing())
	}
}

// outage learns k (9 left), has the fallback admit 4 of it while the store
// is down (a debt of 4), and heals the store without a request.
func (f *fixture) outage(t *testing.T) {
	t.Helper()
	f.take(t, open, "k", 1)
	f.link.down.Store(true)
	if d, tr, err := f.take(t, open, "k", 4); err != nil || !d.Allowed || !tr.Fallback {
		t.Fatalf("in the outage: %+v %+v %v", d, tr, err)
	}
	f.link.down.Store(false)
	if f.fb.Owing() != 1 {
		t.Fatalf("owing %d, want 1", f.fb.Owing())
	}
}

// The flush runs on its timer: a process that serves no request after an
// outage still debits its debts, and does not wait for the breaker's
// cool-down to try.
func TestFlushOnTimer(t *testing.T) {
	f := newFixture(t, 0)
	f.outage(t)
	f.link.down.Store(true)
	f.take(t, open, "x", 0) // a second failure: the breaker opens
	f.link.down.Store(false)
	if f.g.BreakerState() != guard.BreakerOpen {
		t.Fatalf("breaker %v, want open", f.g.BreakerState())
	}
	f.tick <- time.Time{}
	f.tick <- time.Time{} // taken once the first tick's flush is done
	if got := f.remaining(t, "k"); got != 5 || f.fb.Owing() != 0 {
		t.Errorf("after a tick: store holds %d, owing %d; want 5 (9 less the 4), 0", got, f.fb.Owing())
	}
}

// A debt is forgotten only when the store answers its debit: a debit that
// times out leaves it owed (and read off the store's answers), to be
// debited by a later flush.
func TestDebtKeptUntilAcknowledged(t *testing.T) {
	f := newFixture(t, 0)
	f.outage(t)
	f.link.hang.Store(true)
	f.g.Flush()
	if got := f.remaining(t, "k"); got != 9 || f.fb.Owing() != 1 {
		t.Fatalf("after a debit that timed out: store %d, owing %d; want 9, 1", got, f.fb.Owing())
	}
	f.link.hang.Store(false)
	f.clock.Advance(time.Second) // the timeout was the second failure: the breaker's cool-down
	if d, tr, err := f.take(t, open, "k", 0); err != nil || tr.Fallback || d.Remaining != 10 {
		t.Fatalf("the store answers: %+v %+v %v", d, tr, err)
	}
	if d, _ := f.fb.Take(ctx(), "k", limit, 0); d.Remaining != 6 {
		t.Errorf("fallback: %d left, want 6 (the store's 10 less the 4 still owed)", d.Remaining)
	}
	f.g.Flush()
	if got := f.remaining(t, "k"); got != 6 || f.fb.Owing() != 0 {
		t.Errorf("after the flush: store %d, owing %d; want 6, 0", got, f.fb.Owing())
	}
}

// An answer to a call the store ran before a debit, arriving after the
// debit's answer, does not raise what the fallback knows: the next outage
// starts from what the store holds, not from the points the debit took.
func TestStaleAnswerAfterDebit(t *testing.T) {
	f := newFixtureWith(t, 0, guard.Config{Timeout: time.Minute})
	f.take(t, open, "k", 1) // 9 left
	f.link.down.Store(true)
	f.take(t, open, "k", 4) // one failure: the breaker stays closed; 4 owed
	f.link.down.Store(false)
	h := &hold{ran: make(chan struct{}), release: make(chan struct{})}
	f.link.held.Store(h)
	answered := make(chan limiter.Decision)
	go func() {
		d, _, _ := f.take(t, open, "k", 1) // the store runs it at once (8 left), answers later
		answered <- d
	}()
	<-h.ran
	f.g.Flush() // the debit: 4 from 8
	if got := f.remaining(t, "k"); got != 4 {
		t.Fatalf("store after the debit: %d, want 4", got)
	}
	close(h.release)
	if d := <-answered; d.Remaining != 8 {
		t.Fatalf("the held answer: %+v, want 8 left", d)
	}
	if d, _ := f.fb.Take(ctx(), "k", limit, 0); d.Remaining != 4 {
		t.Errorf("fallback after the stale answer: %d left, want the store's 4", d.Remaining)
	}
}

// A store that lost its data holds fresh budgets: the flush asks it first
// (Config.CheckDataLoss), whose report drops the debts, and repays
// nothing; while it cannot say, the flush waits.
func TestFlushAfterDataLoss(t *testing.T) {
	var fb *lastknown.Store
	lost, unsure := atomic.Bool{}, atomic.Bool{}
	check := func(ctx context.Context) error {
		if unsure.Load() {
			return errDown
		}
		if lost.Swap(false) {
			fb.DropDebts()
		}
		return nil
	}
	f := newFixtureWith(t, 0, guard.Config{Timeout: 5 * time.Millisecond, CheckDataLoss: check})
	fb = f.fb
	f.outage(t)
	unsure.Store(true)
	f.g.Flush()
	if got := f.remaining(t, "k"); got != 9 || f.fb.Owing() != 1 {
		t.Fatalf("store unsure of its data: store %d, owing %d; want 9, 1", got, f.fb.Owing())
	}
	unsure.Store(false)
	lost.Store(true)
	f.g.Flush()
	if got := f.remaining(t, "k"); got != 9 || f.fb.Owing() != 0 {
		t.Errorf("after data loss: store %d, owing %d; want 9 (nothing repaid), 0", got, f.fb.Owing())
	}
}

// A full memory store sends new identities to their plan's overflow
// bucket; what they took is given back there.
func TestOverflow(t *testing.T) {
	f := newFixture(t, 1)
	f.take(t, open, "alice", 1)
	d, tr, err := f.take(t, open, "bob", 4)
	if err != nil || !d.Allowed || !tr.Overflow || tr.Receipt.Key != guard.OverflowPrefix+"free" {
		t.Fatalf("bob: %+v %+v %v", d, tr, err)
	}
	if d, err := f.g.Refund(context.Background(), tr.Receipt, limit, 4); err != nil || d.Remaining != 10 {
		t.Errorf("refund to the overflow bucket: %+v, %v", d, err)
	}
	reqs := []limiter.Request{{Key: "carol", Limit: limit, Cost: 2}, {Key: "carol", Name: "quota", Limit: limit, Cost: 2}}
	ds := make([]limiter.Decision, 2)
	var all guard.Trace
	if err := f.g.TakeAll(context.Background(), open, reqs, ds, &all); err != nil || !all.Overflow || reqs[1].Key != guard.OverflowPrefix+"free" {
		t.Errorf("TakeAll: %v %+v %+v", err, all, reqs)
	}
}

// Refunds go where the points were taken; while the breaker is open the
// store's are skipped (they return by refill).
func TestRefund(t *testing.T) {
	f := newFixture(t, 0)
	_, tr, _ := f.take(t, open, "k", 5)
	if d, err := f.g.Refund(context.Background(), tr.Receipt, limit, 3); err != nil || d.Remaining != 8 {
		t.Fatalf("refund: %+v, %v", d, err)
	}
	f.link.down.Store(true)
	f.take(t, open, "x", 1)
	f.take(t, open, "x", 1) // the breaker opens
	calls := f.link.calls.Load()
	if _, err := f.g.Refund(context.Background(), tr.Receipt, limit, 1); !errors.Is(err, guard.ErrBreakerOpen) || f.link.calls.Load() != calls {
		t.Errorf("refund with the breaker open: %v, %d calls", err, f.link.calls.Load()-calls)
	}
	if _, err := f.g.Refund(context.Background(), guard.Receipt{}, limit, 1); err == nil {
		t.Error("a refund of nothing taken succeeded")
	}
}

// TakeSpent debits what already ran, saturating at empty, never refusing.
func TestTakeSpent(t *testing.T) {
	f := newFixture(t, 0)
	_, tr, _ := f.take(t, open, "k", 7) // 3 left
	d, ok := f.g.TakeSpent(context.Background(), tr.Receipt, limiter.Request{Key: "k", Limit: limit, Cost: 5})
	if !ok || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("TakeSpent: %+v, %v", d, ok)
	}
	if got := f.remaining(t, "k"); got != 0 {
		t.Errorf("store holds %d, want 0", got)
	}
	if _, ok := f.g.TakeSpent(context.Background(), guard.Receipt{}, limiter.Request{Key: "k", Limit: limit, Cost: 1}); ok {
		t.Error("TakeSpent of nothing taken succeeded")
	}
}

// A debit refused because another caller spent the budget between its
// refusal and the take of what was left takes what is left then: the
// budget ends empty, never forgiven its debt while points remain.
func TestTakeSpentUnderContention(t *testing.T) {
	f := newFixtureWith(t, 0, guard.Config{Timeout: time.Minute})
	_, tr, _ := f.take(t, open, "k", 7) // 3 left
	h := &hold{ran: make(chan struct{}), release: make(chan struct{})}
	f.link.held.Store(h) // the first take of the debit: refused, 3 left
	type spent struct {
		d  limiter.Decision
		ok bool
	}
	done := make(chan spent)
	go func() {
		d, ok := f.g.TakeSpent(context.Background(), tr.Receipt, limiter.Request{Key: "k", Limit: limit, Cost: 5})
		done <- spent{d, ok}
	}()
	<-h.ran
	if _, err := f.link.mem.Take(context.Background(), "k", limit, 1); err != nil { // another process: 2 left
		t.Fatal(err)
	}
	close(h.release)
	got := <-done
	if !got.ok || got.d.Remaining != 0 {
		t.Fatalf("TakeSpent: %+v, %v; want the budget emptied", got.d, got.ok)
	}
	if left := f.remaining(t, "k"); left != 0 {
		t.Errorf("store holds %d, want 0: the debit was refused and counted as taken", left)
	}
}

// A take-only view of the guard refuses TakeAll instead of pretending.
func TestTakeAllUnsupported(t *testing.T) {
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	mem, _ := memorystore.New(memorystore.Config{Clock: clock})
	defer mem.Close()
	fb, _ := lastknown.New(lastknown.Config{Clock: clock})
	g, err := guard.New(guard.Config{Store: mem, Fallback: fb, Overflow: mem, Local: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var tr guard.Trace
	err = g.TakeAll(context.Background(), open, []limiter.Request{{Key: "k", Limit: limit, Cost: 1}}, make([]limiter.Decision, 1), &tr)
	if !errors.Is(err, limiter.ErrTakeAllUnsupported) {
		t.Errorf("err = %v", err)
	}
	if _, err := guard.New(guard.Config{Store: mem}); !errors.Is(err, guard.ErrInvalidConfig) {
		t.Errorf("New without a fallback: %v", err)
	}
}

// TakeAll fails as Take does: the fallback for a fail-open call, refused
// for a fail-closed one; what it took is given back where it was taken.
func TestTakeAllFailure(t *testing.T) {
	tests := []struct {
		name     string
		call     guard.Call
		down     bool
		errIs    error
		fallback bool
	}{
		{name: "healthy", call: closed},
		{name: "down, open", call: open, down: true, fallback: true},
		{name: "down, closed", call: closed, down: true, errIs: guard.ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 0)
			reqs := func() []limiter.Request {
				return []limiter.Request{{Key: "k", Limit: limit, Cost: 2}, {Key: "k", Name: "quota", Limit: limit, Cost: 2}}
			}
			ds := make([]limiter.Decision, 2)
			var learn guard.Trace
			if err := f.g.TakeAll(ctx(), open, reqs(), ds, &learn); err != nil { // the fallback learns k: 8 left each
				t.Fatal(err)
			}
			f.link.down.Store(tc.down)
			var tr guard.Trace
			rs := reqs()
			err := f.g.TakeAll(ctx(), tc.call, rs, ds, &tr)
			if tc.errIs != nil {
				if !errors.Is(err, tc.errIs) {
					t.Fatalf("err = %v, want %v", err, tc.errIs)
				}
				return
			}
			if err != nil || !limiter.AllAllowed(ds) || ds[0].Remaining != 6 || tr.Fallback != tc.fallback {
				t.Fatalf("TakeAll: %v %+v %+v", err, ds, tr)
			}
			if err := f.g.RefundAll(ctx(), tr.Receipt, rs, ds); err != nil || ds[0].Remaining != 8 {
				t.Errorf("RefundAll where it was taken: %v %+v", err, ds)
			}
		})
	}
}

func ctx() context.Context { return context.Background() }

// The flush's default interval is the one docs/middleware.md states, and a
// negative one is refused.
func TestFlushIntervalConfig(t *testing.T) {
	if guard.DefaultFlushInterval != 250*time.Millisecond {
		t.Errorf("DefaultFlushInterval %v; docs/middleware.md says 250 ms", guard.DefaultFlushInterval)
	}
	f := newFixture(t, 0)
	_, err := guard.New(guard.Config{Store: f.link, Fallback: f.fb, Overflow: &memorystore.Store{}, Timeout: time.Second, FlushInterval: -1})
	if !errors.Is(err, guard.ErrInvalidConfig) {
		t.Errorf("negative FlushInterval: %v", err)
	}
}
