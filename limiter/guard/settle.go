package guard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/internal/periodic"
	"github.com/costguard/costguard/limiter/lastknown"
)

// What the fail-open fallback admits while the shared store is away is
// owed to the store, which never saw it. The Guard's flush debits every
// debt from the store (repay), saturating at empty: those points were
// spent. A debt stays owed until the store's answer to its debit arrives
// (lastknown.Store.Paid); a debit that fails or times out leaves it owed.
// The flush runs in one goroutine the Guard owns (New starts it, Close
// stops it): every Config.FlushInterval while a debt is held, and at once
// when the store answers while one is held or the breaker closes. It does
// not wait for the breaker: while the breaker keeps requests off the
// store, each flush still tries one debit, so the store learns its debts
// within a flush interval (plus a round trip) of answering again, whether
// or not more traffic comes. Before each flush the store is asked whether
// it lost its data (Config.CheckDataLoss), which drops the debts: none is
// repaid into a fresh budget.

// Flush defaults and sizes.
const (
	// DefaultFlushInterval is Config.FlushInterval's default.
	DefaultFlushInterval = 250 * time.Millisecond
	// flushBatch debts are taken from the fallback at a time, and at most
	// flushWorkers debits are in flight (a coalescing store carries them
	// in shared round trips).
	flushBatch   = 256
	flushWorkers = 8
)

// flusher is the Guard's flush loop.
type flusher struct {
	loop *periodic.Loop // nil for a local store: nothing is ever owed
	mu   sync.Mutex     // one flush at a time
	// stopping: Close was called; a flush leaves its remaining debts owed.
	stopping atomic.Bool
}

// startFlush starts the flush goroutine, ticking every interval or on tick
// when it is not nil (tests).
func (g *Guard) startFlush(interval time.Duration, tick <-chan time.Time) {
	g.flush.loop = periodic.New(interval, tick)
	go g.flushLoop()
}

// flushLoop is the flush goroutine.
func (g *Guard) flushLoop() { g.flush.loop.Run(g.flushDebts) }

// kickFlush asks the flush goroutine for a flush now, when a debt is held.
func (g *Guard) kickFlush() {
	if g.flush.loop != nil && g.fallback.Owing() > 0 {
		g.flush.loop.Kick()
	}
}

// Flush debits every debt of the fallback from the store now, after a
// flush in progress, and returns when it is done: each debt is then paid
// or, when the store did not take its debit, still owed. The flush
// goroutine does the same on its own; Flush is for tests and for a caller
// about to Close.
func (g *Guard) Flush() { g.flushDebts() }

// Wait is Flush.
//
// Deprecated: use Flush.
func (g *Guard) Wait() { g.Flush() }

// flushDebts debits every debt the fallback holds from the store,
// flushBatch at a time, until none is left or a debit fails: the store is
// away again, and what is left waits for the next flush.
func (g *Guard) flushDebts() {
	f := &g.flush
	if g.local || g.fallback.Owing() == 0 || f.stopping.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if g.checkLoss != nil {
		ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
		err := g.checkLoss(ctx)
		cancel()
		if err != nil {
			return // the store cannot say whether it kept its data: not now
		}
	}
	for !f.stopping.Load() {
		debits := g.fallback.Debits(flushBatch)
		if len(debits) == 0 || !g.repayAll(debits) {
			return
		}
	}
}

// repayAll debits debits, flushWorkers at a time; after a failure, or once
// Close was called, the rest is handed back untried. It reports whether
// every debit went through.
func (g *Guard) repayAll(debits []lastknown.Debit) bool {
	fb := g.fallback
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(flushWorkers, len(debits)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(debits)); i = next.Add(1) - 1 {
				dbt := debits[i]
				if failed.Load() || g.flush.stopping.Load() {
					fb.Unpaid(dbt)
					continue
				}
				seq, d, took, ok := g.debit(context.Background(), dbt.Debt, true)
				if !ok {
					fb.Unpaid(dbt)
					failed.Store(true)
					continue
				}
				fb.Paid(seq, dbt, took, d)
			}
		}()
	}
	wg.Wait()
	return !failed.Load()
}

// stopFlush ends the flush loop: a debit in flight finishes (under the
// timeout), the rest stays owed. No flush starts after it.
func (g *Guard) stopFlush() {
	g.flush.stopping.Store(true)
	if g.flush.loop != nil {
		g.flush.loop.Stop()
	}
}

// debit takes req from the store behind the breaker, saturating at empty,
// and returns the number of the call (lastknown.Store.Start), the store's
// answer, what it took, and false when the store did not take it. A
// request's debit (flush false) asks the breaker; the flush's asks it only
// while it is closed, and otherwise tries anyway without telling it (one
// debit a flush while the store is away: the first failure ends the
// flush).
func (g *Guard) debit(ctx context.Context, req limiter.Request, flush bool) (lastknown.Seq, limiter.Decision, int64, bool) {
	gated := g.brk != nil && (!flush || g.brk.State() == breaker.Closed)
	t := breaker.Ticket{Allowed: true}
	if gated {
		if t = g.allow(nil); !t.Allowed {
			return 0, limiter.Decision{}, 0, false
		}
	}
	ctx = context.WithoutCancel(ctx) // points spent are owed whoever waits for them
	tctx, cancel := g.callContext(ctx)
	seq := g.fallback.Start()
	d, took, err := g.takeSaturating(tctx, Receipt{from: exact}, req)
	cancel()
	if gated {
		g.done(ctx, t, err, nil) // the parent: a timeout is the store's failure, not an abandoned call
	}
	if err != nil {
		return 0, limiter.Decision{}, 0, false
	}
	return seq, d, took, true
}

// TakeSpent debits req.Cost points that already ran (a response that held
// more than its price) from the store r took req's budget from, saturating
// at empty; it never refuses. The store behind the breaker is debited
// under its breaker, and owed to it (as the fallback's debts are) while it
// cannot answer; a local one directly. req.Key is the budget's key where r
// points (r.Key for an overflow bucket). It returns the budget as the
// debit leaves it, false when nothing is known of it.
func (g *Guard) TakeSpent(ctx context.Context, r Receipt, req limiter.Request) (limiter.Decision, bool) {
	if !r.Taken() || req.Cost <= 0 {
		return limiter.Decision{}, false
	}
	if g.remote(r) {
		seq, d, took, ok := g.debit(ctx, req, false)
		if !ok {
			g.fallback.Owe(req)
			g.kickFlush()
			return limiter.Decision{}, false
		}
		g.observeDebit(seq, req, took, d)
		return d, true
	}
	tctx, cancel := g.callContext(context.WithoutCancel(ctx))
	defer cancel()
	d, _, err := g.takeSaturating(tctx, r, req)
	return d, err == nil
}

// observeDebit teaches the fallback the store's answer to a debit of req
// (call seq) that took took points.
func (g *Guard) observeDebit(seq lastknown.Seq, req limiter.Request, took int64, d limiter.Decision) {
	if req.Name == "" {
		g.fallback.ObserveFrom(seq, req.Key, req.Limit, took, d)
		return
	}
	req.Cost = took
	g.fallback.ObserveAllFrom(seq, []limiter.Request{req}, []limiter.Decision{d})
}

// takeSaturating takes req.Cost from req's budget where r points or, when
// the budget holds less, what it holds: points spent are debited, never
// refused. took is what was taken; d is the budget after it, read as an
// admission (a budget already empty answers its Remaining, 0).
//
// Another caller may spend from the budget between a refusal and the take
// of what it said was left, so that take is refused too: it is tried
// again with what is left then, up to saturateTries takes in all. A debit
// still refused while points are left is errContended, never "taken":
// its points stay owed rather than being forgiven against a budget that
// was not empty.
func (g *Guard) takeSaturating(ctx context.Context, r Receipt, req limiter.Request) (d limiter.Decision, took int64, err error) {
	req.Cost = min(req.Cost, capacity(req.Limit))
	for try := 1; ; try++ {
		if d, err = g.takeOn(ctx, r, req); err != nil {
			return limiter.Decision{}, 0, err
		}
		if d.Allowed {
			took = req.Cost
			break
		}
		if d.Remaining <= 0 {
			break // empty: nothing more can be taken
		}
		if try == saturateTries {
			return limiter.Decision{}, 0, errContended
		}
		req.Cost = min(req.Cost, d.Remaining)
	}
	d.Allowed, d.RetryAfter = true, 0
	return d, took, nil
}

// saturateTries bounds the takes of one saturating debit.
const saturateTries = 4

// errContended: a saturating debit was refused saturateTries times while
// its budget still held points, taken by other callers in between. The
// store answered every time: it is not a failure of the store.
var errContended = errors.New("guard: the budget was spent by other callers between the takes of a debit")

// takeOn takes req where r points: a named budget through TakeAll, which
// is how it is decided on the request path.
func (g *Guard) takeOn(ctx context.Context, r Receipt, req limiter.Request) (limiter.Decision, error) {
	if req.Name == "" {
		s := g.singleOf(r)
		if s == nil {
			return limiter.Decision{}, limiter.ErrTakeAllUnsupported
		}
		return s.Take(ctx, req.Key, req.Limit, req.Cost)
	}
	all, err := g.multiOf(r)
	if err != nil {
		return limiter.Decision{}, err
	}
	var ds [1]limiter.Decision
	err = all.TakeAll(ctx, []limiter.Request{req}, ds[:])
	return ds[0], err
}

// capacity is the most one debit of l can take.
func capacity(l limiter.Limit) int64 {
	if l.Algorithm.IsBucket() {
		return l.Burst
	}
	return l.Rate
}
