package middleware

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/lastknown"
	"github.com/costguard/costguard/limiter/stack"
)

// What the fail-open fallback admits while the shared store is away is
// owed to the store, which never saw it. Once the store answers again, the
// debt is debited from it (repay), saturating at empty: those points were
// spent. The budget the store answered for is repaid right after that
// request's own decision; every other debt the fallback holds, by one
// flush in the background (flusher), so that a principal who moves to
// another process after an outage is repaid too. So each outage starts
// from what the store then says, and over any series of outages a process
// admits on a budget at most what it last knew of it plus its refill
// meanwhile, not that much again at each outage; and the store, told of
// it, does not hand those points out again through another process.

// The flush: at most flushBatch debts are taken from the fallback at a
// time, and at most flushWorkers debits are in flight (a coalescing store
// carries them in shared round trips).
const (
	flushBatch   = 256
	flushWorkers = 8
)

// flusher runs the Limiter's one flush of the fallback's debts at a time,
// in a goroutine it starts when the store answers while a debt is held
// (kick) and Close stops (stop).
type flusher struct {
	mu      sync.Mutex
	running bool // a flush goroutine is started
	again   bool // kicked while running: take the debts again when done
	closed  bool
	// stopping: Close was called; the flush owes its remaining debts
	// back instead of debiting them.
	stopping atomic.Bool
	done     sync.WaitGroup
}

// repayAfter debits what the fallback owes on a budget the store just
// answered for, after the request's own decision, under the store timeout
// and the breaker, and starts the flush of every other debt. A debit that
// fails is owed again; no request is ever failed for it.
func (l *Limiter) repayAfter(ctx context.Context, key, name string) {
	fb := l.stores.Fallback()
	if fb.Owing() == 0 {
		return
	}
	if debt, ok := fb.Due(key, name); ok {
		if _, ok := l.repay(ctx, fb, debt); !ok {
			fb.Owe(debt)
		}
	}
	l.kickFlush(fb)
}

// kickFlush starts a flush of fb's debts, unless one runs (it then takes
// them again when done) or the Limiter is closed.
func (l *Limiter) kickFlush(fb *lastknown.Store) {
	if fb.Owing() == 0 {
		return
	}
	f := &l.flush
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
	case f.running:
		f.again = true
	default:
		f.running = true
		f.done.Add(1)
		go l.runFlush(fb)
	}
}

// runFlush flushes until no kick came meanwhile.
func (l *Limiter) runFlush(fb *lastknown.Store) {
	f := &l.flush
	defer f.done.Done()
	for {
		l.flushDebts(fb)
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

// flushDebts debits every debt fb holds from the store, flushBatch at a
// time, until none is left or a debit fails: the store is away again, and
// what is left waits for its next answer.
func (l *Limiter) flushDebts(fb *lastknown.Store) {
	for !l.flush.stopping.Load() {
		debts := fb.TakeOwed(flushBatch)
		if len(debts) == 0 || !l.repayAll(fb, debts) {
			return
		}
	}
}

// repayAll debits debts, flushWorkers at a time; after a failure, or once
// Close was called, the rest is owed again untried. It reports whether
// every debit went through.
func (l *Limiter) repayAll(fb *lastknown.Store, debts []lastknown.Debt) bool {
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(flushWorkers, len(debts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(debts)); i = next.Add(1) - 1 {
				debt := debts[i]
				if failed.Load() || l.flush.stopping.Load() {
					fb.Owe(debt)
					continue
				}
				if _, ok := l.repay(context.Background(), fb, debt); !ok {
					fb.Owe(debt)
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return !failed.Load()
}

// stop ends the flush: a debit in flight finishes (under the store
// timeout), the rest stays owed. No flush starts after it.
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
func (l *Limiter) repay(ctx context.Context, fb *lastknown.Store, debt lastknown.Debt) (limiter.Decision, bool) {
	t := l.allowStore(nil)
	if !t.Allowed {
		return limiter.Decision{}, false
	}
	ctx = context.WithoutCancel(ctx) // the request's answer is decided; its debt is not the client's to cancel
	tctx, cancel := l.storeContext(ctx)
	defer cancel()
	var from any = l.stores.Store(false)
	if debt.Name != "" {
		all, err := l.stores.StoreAll(false)
		if err != nil {
			l.storeDone(ctx, t, err, nil)
			return limiter.Decision{}, false
		}
		from = all
	}
	d, took, err := takeSaturating(tctx, from, debt)
	l.storeDone(ctx, t, err, nil) // the parent: a timeout is the store's failure, not an abandoned call
	if err != nil {
		return limiter.Decision{}, false
	}
	debt.Cost = took
	if debt.Name == "" {
		fb.Observe(debt.Key, debt.Limit, took, d)
	} else {
		fb.ObserveAll([]limiter.Request{debt}, []limiter.Decision{d})
	}
	return d, true
}

// takeSpent debits req.Cost points that already ran from the store that
// decided req's budget (from), saturating at empty; it never refuses. A
// shared store is debited as the fallback's debts are (repay: under its
// breaker, and owed to it while it cannot answer); a local one directly.
// It returns the budget as the debit leaves it, false when nothing is
// known of it.
func (l *Limiter) takeSpent(ctx context.Context, from any, req limiter.Request) (limiter.Decision, bool) {
	if from == nil || req.Cost <= 0 {
		return limiter.Decision{}, false
	}
	if l.remote(from) {
		fb := l.stores.Fallback()
		d, ok := l.repay(ctx, fb, req)
		if !ok {
			fb.Owe(req)
		}
		return d, ok
	}
	tctx, cancel := l.storeContext(context.WithoutCancel(ctx))
	defer cancel()
	d, _, err := takeSaturating(tctx, from, req)
	return d, err == nil
}

// takeSaturating takes req.Cost from req's budget in store from or, when
// the budget holds less, what it holds: points spent are debited, never
// refused. took is what was taken; d is the budget after it, read as an
// admission (a budget already empty answers its Remaining, 0).
func takeSaturating(ctx context.Context, from any, req limiter.Request) (d limiter.Decision, took int64, err error) {
	req.Cost = min(req.Cost, capacity(req.Limit))
	if d, err = takeOn(ctx, from, req); err == nil && !d.Allowed && d.Remaining > 0 {
		req.Cost = d.Remaining
		d, err = takeOn(ctx, from, req)
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

// takeOn takes req from store from: a named budget through TakeAll, which
// is how it is decided on the request path.
func takeOn(ctx context.Context, from any, req limiter.Request) (limiter.Decision, error) {
	if req.Name == "" {
		t, ok := from.(stack.Taker)
		if !ok {
			return limiter.Decision{}, limiter.ErrTakeAllUnsupported
		}
		return t.Take(ctx, req.Key, req.Limit, req.Cost)
	}
	all, ok := from.(limiter.MultiTaker)
	if !ok {
		return limiter.Decision{}, limiter.ErrTakeAllUnsupported
	}
	var ds [1]limiter.Decision
	err := all.TakeAll(ctx, []limiter.Request{req}, ds[:])
	return ds[0], err
}

// capacity is the most one debit of l can take.
func capacity(l limiter.Limit) int64 {
	if l.Algorithm.IsBucket() {
		return l.Burst
	}
	return l.Rate
}
