package guard

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/lastknown"
)

// What the fail-open fallback admits while the shared store is away is
// owed to the store, which never saw it. Once the store answers again, the
// debt is debited from it (repay), saturating at empty: those points were
// spent. The budget the store answered for is repaid right after that
// call's own decision; every other debt the fallback holds, by one flush
// in the background (flusher), so that a principal who moves to another
// process after an outage is repaid too. So each outage starts from what
// the store then says, and over any series of outages a process admits on
// a budget at most what it last knew of it plus its refill meanwhile, not
// that much again at each outage; and the store, told of it, does not
// hand those points out again through another process.

// The flush: at most flushBatch debts are taken from the fallback at a
// time, and at most flushWorkers debits are in flight (a coalescing store
// carries them in shared round trips).
const (
	flushBatch   = 256
	flushWorkers = 8
)

// flusher runs the Guard's one flush of the fallback's debts at a time, in
// a goroutine it starts when the store answers while a debt is held (kick)
// and Close stops (stop).
type flusher struct {
	mu      sync.Mutex
	running bool // a flush goroutine is started
	again   bool // kicked while running: take the debts again when done
	closed  bool
	// stopping: Close was called; the flush owes its remaining debts back
	// instead of debiting them.
	stopping atomic.Bool
	done     sync.WaitGroup
}

// Wait blocks until no flush of the fallback's debts runs (one starts when
// the store answers while a debt is held).
func (g *Guard) Wait() { g.flush.done.Wait() }

// repayAfter debits what the fallback owes on a budget the store just
// answered for, after the call's own decision, under the timeout and the
// breaker, and starts the flush of every other debt. A debit that fails is
// owed again; no call is ever failed for it.
func (g *Guard) repayAfter(ctx context.Context, key, name string) {
	fb := g.fallback
	if fb.Owing() == 0 {
		return
	}
	if debt, ok := fb.Due(key, name); ok {
		if _, ok := g.repay(ctx, debt); !ok {
			fb.Owe(debt)
		}
	}
	g.kickFlush()
}

// kickFlush starts a flush of the fallback's debts, unless one runs (it
// then takes them again when done) or the Guard is closed.
func (g *Guard) kickFlush() {
	if g.fallback.Owing() == 0 {
		return
	}
	f := &g.flush
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
	case f.running:
		f.again = true
	default:
		f.running = true
		f.done.Add(1)
		go g.runFlush()
	}
}

// runFlush flushes until no kick came meanwhile.
func (g *Guard) runFlush() {
	f := &g.flush
	defer f.done.Done()
	for {
		g.flushDebts()
		f.mu.Lock()
		if !f.again || f.closed {
			f.running, f.again = false, false
			f.mu.Unlock()
			return
		}
		f.again = false
		f.mu.Unlock()
	}
}

// flushDebts debits every debt the fallback holds from the store,
// flushBatch at a time, until none is left or a debit fails: the store is
// away again, and what is left waits for its next answer.
func (g *Guard) flushDebts() {
	for !g.flush.stopping.Load() {
		debts := g.fallback.TakeOwed(flushBatch)
		if len(debts) == 0 || !g.repayAll(debts) {
			return
		}
	}
}

// repayAll debits debts, flushWorkers at a time; after a failure, or once
// Close was called, the rest is owed again untried. It reports whether
// every debit went through.
func (g *Guard) repayAll(debts []lastknown.Debt) bool {
	fb := g.fallback
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(flushWorkers, len(debts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(debts)); i = next.Add(1) - 1 {
				debt := debts[i]
				if failed.Load() || g.flush.stopping.Load() {
					fb.Owe(debt)
					continue
				}
				if _, ok := g.repay(context.Background(), debt); !ok {
					fb.Owe(debt)
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return !failed.Load()
}

// stop ends the flush: a debit in flight finishes (under the timeout), the
// rest stays owed. No flush starts after it.
func (f *flusher) stop() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.stopping.Store(true)
	f.done.Wait()
}

// repay debits debt from the store: all of it, or, when the budget holds
// less, what it holds. It returns the store's answer, and false when the
// store did not take the debit (its breaker is open, or it failed).
func (g *Guard) repay(ctx context.Context, debt lastknown.Debt) (limiter.Decision, bool) {
	t := g.allow(nil)
	if !t.Allowed {
		return limiter.Decision{}, false
	}
	ctx = context.WithoutCancel(ctx) // the call's answer is decided; its debt is not the caller's to cancel
	tctx, cancel := g.callContext(ctx)
	defer cancel()
	d, took, err := g.takeSaturating(tctx, Receipt{from: exact}, debt)
	g.done(ctx, t, err, nil) // the parent: a timeout is the store's failure, not an abandoned call
	if err != nil {
		return limiter.Decision{}, false
	}
	debt.Cost = took
	if debt.Name == "" {
		g.fallback.Observe(debt.Key, debt.Limit, took, d)
	} else {
		g.fallback.ObserveAll([]limiter.Request{debt}, []limiter.Decision{d})
	}
	return d, true
}

// TakeSpent debits req.Cost points that already ran (a response that held
// more than its price) from the store r took req's budget from, saturating
// at empty; it never refuses. The store behind the breaker is debited as
// the fallback's debts are (under its breaker, and owed to it while it
// cannot answer); a local one directly. req.Key is the budget's key where
// r points (r.Key for an overflow bucket). It returns the budget as the
// debit leaves it, false when nothing is known of it.
func (g *Guard) TakeSpent(ctx context.Context, r Receipt, req limiter.Request) (limiter.Decision, bool) {
	if !r.Taken() || req.Cost <= 0 {
		return limiter.Decision{}, false
	}
	if g.remote(r) {
		d, ok := g.repay(ctx, req)
		if !ok {
			g.fallback.Owe(req)
		}
		return d, ok
	}
	tctx, cancel := g.callContext(context.WithoutCancel(ctx))
	defer cancel()
	d, _, err := g.takeSaturating(tctx, r, req)
	return d, err == nil
}

// takeSaturating takes req.Cost from req's budget where r points or, when
// the budget holds less, what it holds: points spent are debited, never
// refused. took is what was taken; d is the budget after it, read as an
// admission (a budget already empty answers its Remaining, 0).
func (g *Guard) takeSaturating(ctx context.Context, r Receipt, req limiter.Request) (d limiter.Decision, took int64, err error) {
	req.Cost = min(req.Cost, capacity(req.Limit))
	if d, err = g.takeOn(ctx, r, req); err == nil && !d.Allowed && d.Remaining > 0 {
		req.Cost = d.Remaining
		d, err = g.takeOn(ctx, r, req)
	}
	if err != nil {
		return limiter.Decision{}, 0, err
	}
	if d.Allowed {
		took = req.Cost
	}
	d.Allowed, d.RetryAfter = true, 0
	return d, took, nil
}

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
