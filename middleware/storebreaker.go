package middleware

import (
	"time"
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

// breakerState is the breaker's state for an Event ("" without one).
func (l *Limiter) breakerState() BreakerState {
	st, ok := l.stores.BreakerState()
	if !ok {
		return ""
	}
	return BreakerState(st.String())
}
