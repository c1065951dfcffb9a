package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/stack"
)

// BreakerOptions tune the circuit breaker in front of a shared store
// (package limiter/breaker). After Failures store failures or timeouts
// in a row the breaker opens: for CoolDown, no request calls the store, and
// each is decided at once by its plan's failure mode (FailOpen: the local
// fallback bucket; FailClosed: 503). Then one request at a time probes the
// store; the first that succeeds closes the breaker, a failure re-opens it.
// A request whose client left before the store answered counts for
// nothing. Refunds are skipped while the breaker is open (the points
// return by refill). The in-memory store has no breaker: it never waits.
type BreakerOptions struct {
	// Failures is how many store failures or timeouts in a row open the
	// breaker. Default DefaultBreakerFailures (5); None disables it.
	Failures int
	// CoolDown is how long an open breaker keeps requests off the store
	// before it lets a probe through. Default DefaultBreakerCoolDown (1 s).
	CoolDown time.Duration
}

// BreakerState is where the store's circuit breaker stands (Event.Breaker).
// Its values are stable: new ones may be added, none renamed.
type BreakerState string

// The breaker states; "" when the Limiter has no breaker.
const (
	BreakerClosed   BreakerState = "closed"
	BreakerOpen     BreakerState = "open"
	BreakerHalfOpen BreakerState = "half_open"
)

// errBreakerOpen: the breaker kept the call off the store.
var errBreakerOpen = errors.New("middleware: store circuit breaker open")

// buildBreaker puts a breaker in front of a store that may wait.
func (l *Limiter) buildBreaker(cfg BreakerOptions) error {
	l.remember = !l.stores.Local()
	if cfg.Failures == None {
		return nil
	}
	b, err := breaker.New(breaker.Config{Failures: cfg.Failures, CoolDown: cfg.CoolDown})
	if err != nil {
		return fmt.Errorf("%w: Breaker: %w", ErrInvalidConfig, err)
	}
	if l.stores.Local() {
		return nil
	}
	l.brk = b
	_, local := l.slots.(*concurrency.Memory)
	l.slotsBehindBreaker = !local
	return nil
}

// breakerState is the breaker's state for an Event ("" without one).
func (l *Limiter) breakerState() BreakerState {
	if l.brk == nil {
		return ""
	}
	return BreakerState(l.brk.State().String())
}

// allowStore asks the breaker whether a store call may be made now; tr
// records a transition. Without a breaker every call is allowed.
func (l *Limiter) allowStore(tr *storeTrace) breaker.Ticket {
	if l.brk == nil {
		return breaker.Ticket{Allowed: true}
	}
	t := l.brk.Allow(l.clock.Now())
	l.breakerMoved(t.Change, tr)
	return t
}

// storeDone tells the breaker how an allowed call ended: abandoned when
// the caller's ctx ended first, a failure on any other error but those a
// store answers with (a cost above capacity, a full memory store).
func (l *Limiter) storeDone(ctx context.Context, t breaker.Ticket, err error, tr *storeTrace) {
	if l.brk == nil {
		return
	}
	r := breaker.Success
	switch {
	case err == nil || errors.Is(err, limiter.ErrCostExceedsCapacity) || stack.IsFull(err):
	case ctx.Err() != nil:
		r = breaker.Abandoned
	default:
		r = breaker.Failure
	}
	if r == breaker.Success && t.Allowed && l.brk.State() == breaker.Closed {
		l.brk.Done(time.Time{}, t, r) // the closed fast path reads no clock
		return
	}
	l.breakerMoved(l.brk.Done(l.clock.Now(), t, r), tr)
}

// breakerMoved logs a transition once (Warn on opening, Info on closing)
// and marks the decision that made it.
func (l *Limiter) breakerMoved(c breaker.Change, tr *storeTrace) {
	if !c.Changed() {
		return
	}
	if tr != nil {
		tr.breakerChanged = true
	}
	switch c.To {
	case breaker.Open:
		l.log.Warn("middleware: rate-limit store circuit breaker open; deciding by each plan's failure mode without the store",
			"from", c.From.String(), "cool_down", l.brkCoolDown)
	case breaker.Closed:
		l.log.Info("middleware: rate-limit store circuit breaker closed; the store answers again")
	default:
		l.log.Debug("middleware: rate-limit store circuit breaker half-open; probing the store")
	}
}

// remote reports whether from is the shared store behind the breaker (not
// the fallback nor the overflow buckets).
func (l *Limiter) remote(from any) bool {
	return l.brk != nil && from != nil && from != any(l.stores.Fallback()) && from != any(l.stores.Overflow())
}
