package middleware

import "github.com/costguard/costguard/limiter"

// WaitRepaid waits until l's store guard runs no flush of the fail-open
// fallback's debts (a flush starts when the store answers while a debt is
// held).
func WaitRepaid(l *Limiter) { l.stores.Wait() }

// SetTimer makes l hold requests for their shaping turn on timers from t.
func SetTimer(l *Limiter, t limiter.Timer) { l.timer = t }
