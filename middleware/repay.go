package middleware

import (
	"context"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/lastknown"
	"github.com/costguard/costguard/limiter/stack"
)

// What the fail-open fallback admits while the shared store is away is
// owed to the store, which never saw it. Once the store answers for a
// budget again, the debt is debited from it (repay), saturating at empty:
// those points were spent. So each outage starts from what the store then
// says, and over any series of outages a process admits on a budget at
// most what it last knew of it plus its refill over the outages, not that
// much again at each outage.

// repayAfter debits what the fallback owes on a budget the store just
// answered for, after the request's own decision, under the store timeout
// and the breaker. A debit that fails is owed again; no request is ever
// failed for it.
func (l *Limiter) repayAfter(ctx context.Context, key, name string) {
	fb := l.stores.Fallback()
	debt, ok := fb.Due(key, name)
	if !ok {
		return
	}
	if _, ok := l.repay(ctx, fb, debt); !ok {
		fb.Owe(debt)
	}
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
