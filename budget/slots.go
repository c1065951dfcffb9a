package budget

import (
	"context"
	"errors"

	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/guard"
)

// Slot is a request's lease among its principal's requests in flight: the
// zero Slot holds none.
type Slot struct {
	e     *Engine
	lease concurrency.Lease
}

// AcquireSlot leases one of the principal's slots on req.Rule (its
// MaxConcurrent). The Outcome is the refusal when none is free
// (ConcurrencyLimited, or Unavailable when the slot store failed and the
// plan fails closed); a plan without a cap, or a failing store under
// FailOpen, takes no slot and is admitted (nil).
func (e *Engine) AcquireSlot(ctx context.Context, req Request) (Slot, *Outcome) {
	r := req.Rule
	if r.maxConcurrent == 0 || e.slots == nil {
		return Slot{}, nil
	}
	var d concurrency.Decision
	acquire := func(ctx context.Context) (err error) {
		d, err = e.slots.Acquire(ctx, req.Key, r.maxConcurrent, e.slotTTL) // the store keeps leases apart from budgets
		return err
	}
	var err error
	if e.slotsGuarded {
		err = e.stores.Do(ctx, acquire)
	} else {
		tctx, cancel := context.WithTimeout(ctx, e.stores.Timeout())
		err = acquire(tctx)
		cancel()
	}
	switch {
	case err != nil && (r.failOpen || ctx.Err() != nil) && !errors.Is(err, concurrency.ErrInvalidLimit):
		if ctx.Err() == nil && !errors.Is(err, guard.ErrBreakerOpen) {
			e.storeFailed(r, err)
		}
		return Slot{}, nil
	case err != nil:
		if !errors.Is(err, guard.ErrBreakerOpen) {
			e.storeFailed(r, err)
		}
		return Slot{}, &Outcome{Verdict: Unavailable, RetryAfter: e.RetryAfter(UnavailableRetryAfter)}
	case !d.Allowed:
		return Slot{}, &Outcome{Verdict: ConcurrencyLimited, RetryAfter: e.RetryAfter(d.RetryAfter)}
	}
	return Slot{e: e, lease: d.Lease}, nil
}

// Release gives the lease back (a request whose client left still frees
// its slot). It waits no longer than a store call, and not at all while
// the store's breaker is not closed: a lease not given back expires after
// its TTL.
func (s Slot) Release() {
	if s.e == nil || s.lease == (concurrency.Lease{}) {
		return
	}
	e := s.e
	if e.slotsGuarded && !e.stores.Closed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.stores.Timeout())
	_, _ = e.slots.Release(ctx, s.lease)
	cancel()
}
