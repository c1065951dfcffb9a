package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/guard"
)

// CodeConcurrencyLimited: the principal already has its plan's requests in
// flight (Config.Concurrency, Plan.MaxConcurrent); 429 with Retry-After,
// nothing debited. REST: {"error":"concurrency_limited","retry_after_seconds":N}.
const CodeConcurrencyLimited = "CONCURRENCY_LIMITED"

// ConcurrencyOptions cap the requests one principal has in flight at once,
// REST and GraphQL together, with leases that expire so that a crashed
// process gives its slots back.
type ConcurrencyOptions struct {
	// PerPrincipal is the cap of plans that set no MaxConcurrent. 0: none.
	PerPrincipal int
	// TTL is how long a lease lives unless its request ends first; a
	// request running longer loses its slot. Default
	// concurrency.DefaultTTL (60 s).
	TTL time.Duration
	// Slots keeps the leases. Nil: Config.Store when it keeps slots too (a
	// redisstore.Store, exact across processes), else an in-memory store
	// of this process.
	Slots concurrency.Slots
}

// buildConcurrency resolves each plan's cap: Plan.MaxConcurrent, else
// Config.Concurrency.PerPrincipal; None lifts it.
func (s *settings) buildConcurrency(cfg Config) error {
	if cfg.Concurrency.PerPrincipal < 0 {
		return fmt.Errorf("%w: Concurrency.PerPrincipal %d is negative", ErrInvalidConfig, cfg.Concurrency.PerPrincipal)
	}
	for _, p := range s.plans {
		switch n := p.MaxConcurrent; {
		case n == 0:
			p.maxConcurrent = int64(cfg.Concurrency.PerPrincipal)
		case n == None:
			p.maxConcurrent = 0
		case n < 0:
			return fmt.Errorf("%w: plan %q: MaxConcurrent %d; it must be positive, 0 for Concurrency.PerPrincipal or None", ErrInvalidConfig, p.name, n)
		default:
			p.maxConcurrent = int64(n)
		}
		if p.maxConcurrent > concurrency.MaxLimit {
			return fmt.Errorf("%w: plan %q: at most %d requests in flight can be capped", ErrInvalidConfig, p.name, concurrency.MaxLimit)
		}
	}
	return nil
}

// buildSlots picks the lease store.
func (l *Limiter) buildSlots(cfg Config) error {
	l.slotTTL = cfg.Concurrency.TTL
	if l.slotTTL == 0 {
		l.slotTTL = concurrency.DefaultTTL
	}
	if err := concurrency.ValidateTTL(l.slotTTL); err != nil {
		return fmt.Errorf("%w: Concurrency.TTL: %w", ErrInvalidConfig, err)
	}
	l.slots = cfg.Concurrency.Slots
	if l.slots == nil {
		if shared, ok := cfg.Store.(concurrency.Slots); ok {
			l.slots = shared
		}
	}
	if l.slots == nil {
		mem, err := concurrency.NewMemory(concurrency.MemoryConfig{Clock: l.clock, MaxKeys: cfg.MemoryStore.MaxKeys})
		if err != nil {
			return fmt.Errorf("%w: concurrency slots: %w", ErrInvalidConfig, err)
		}
		l.slots = mem
	}
	return nil
}

// slot is a request's lease among its principal's requests in flight: the
// zero value holds none.
type slot struct {
	slots concurrency.Slots
	lease concurrency.Lease
	l     *Limiter
}

// release gives the lease back (a request whose client left still frees
// its slot). It runs before the response is complete, so it waits no
// longer than any other store call (StoreTimeout), and not at all while
// the store's breaker is not closed: a lease not given back expires
// after its TTL.
func (s slot) release() {
	if s.slots == nil || s.lease == (concurrency.Lease{}) {
		return
	}
	l := s.l
	if l.slotsBehindBreaker && !l.stores.Closed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.stores.Timeout())
	_, _ = s.slots.Release(ctx, s.lease)
	cancel()
}

// takeSlot leases one of id's plan's concurrent slots. o is the refusal
// when none is free (concurrencyLimited, or unavailable when the slot
// store failed and the plan fails closed); a plan without a cap, or a
// failing store under FailOpen, takes no slot and is admitted.
func (l *Limiter) takeSlot(ctx context.Context, id identity.Identity, p *plan) (slot, *outcome) {
	if p.maxConcurrent == 0 {
		return slot{}, nil
	}
	var d concurrency.Decision
	acquire := func(ctx context.Context) (err error) {
		d, err = l.slots.Acquire(ctx, id.Key, p.maxConcurrent, l.slotTTL) // the store keeps leases apart from budgets
		return err
	}
	var err error
	if l.slotsBehindBreaker {
		err = l.stores.Do(ctx, acquire)
	} else {
		tctx, cancel := context.WithTimeout(ctx, l.stores.Timeout())
		err = acquire(tctx)
		cancel()
	}
	switch {
	case err != nil && (p.failOpen || ctx.Err() != nil) && !errors.Is(err, concurrency.ErrInvalidLimit):
		if ctx.Err() == nil && !errors.Is(err, guard.ErrBreakerOpen) {
			l.storeFailed(p, err)
		}
		return slot{}, nil
	case err != nil:
		if !errors.Is(err, guard.ErrBreakerOpen) {
			l.storeFailed(p, err)
		}
		return slot{}, &outcome{verdict: unavailable, retryAfter: l.retryAfter(unavailableRetryAfter)}
	case !d.Allowed:
		return slot{}, &outcome{verdict: concurrencyLimited, retryAfter: l.retryAfter(d.RetryAfter)}
	}
	return slot{slots: l.slots, lease: d.Lease, l: l}, nil
}
