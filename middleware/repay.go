package middleware

import (
	"context"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/lastknown"
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
	if !l.repay(ctx, fb, debt) {
		fb.Owe(debt)
	}
}

// repay debits debt from the store: all of it, or, when the budget holds
// less, what it holds. It reports whether the store took the debit.
func (l *Limiter) repay(ctx context.Context, fb *lastknown.Store, debt lastknown.Debt) bool {
	t := l.allowStore(nil)
	if !t.Allowed {
		return false
	}
	ctx = context.WithoutCancel(ctx) // the request's answer is decided; its debt is not the client's to cancel
	tctx, cancel := l.storeContext(ctx)
	defer cancel()
	debt.Cost = min(debt.Cost, capacity(debt.Limit))
	d, err := l.debit(tctx, debt)
	if err == nil && !d.Allowed && d.Remaining > 0 {
		debt.Cost = d.Remaining // saturate: the rest is spent
		d, err = l.debit(tctx, debt)
	}
	l.storeDone(ctx, t, err, nil) // the parent: a timeout is the store's failure, not an abandoned call
	if err != nil {
		return false
	}
	cost := debt.Cost
	if !d.Allowed {
		cost = 0 // nothing was debited: the answer is a peek
	}
	if debt.Name == "" {
		fb.Observe(debt.Key, debt.Limit, cost, d)
	} else {
		debt.Cost = cost
		fb.ObserveAll([]limiter.Request{debt}, []limiter.Decision{d})
	}
	return true
}

// debit takes debt from the store: a named budget through TakeAll, which
// is how it is decided on the request path.
func (l *Limiter) debit(ctx context.Context, debt lastknown.Debt) (limiter.Decision, error) {
	if debt.Name == "" {
		return l.stores.Store(false).Take(ctx, debt.Key, debt.Limit, debt.Cost)
	}
	all, err := l.stores.StoreAll(false)
	if err != nil {
		return limiter.Decision{}, err
	}
	var ds [1]limiter.Decision
	err = all.TakeAll(ctx, []limiter.Request{debt}, ds[:])
	return ds[0], err
}

// capacity is the most one debit of l can take.
func capacity(l limiter.Limit) int64 {
	if l.Algorithm.IsBucket() {
		return l.Burst
	}
	return l.Rate
}
