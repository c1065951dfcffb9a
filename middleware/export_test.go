package middleware

import "github.com/costguard/costguard/limiter"

// WaitRepaid flushes the fail-open fallback's debts of l's store guard now
// (after a flush in progress) and returns when the flush is done.
func WaitRepaid(l *Limiter) { l.stores.Flush() }

// SetTimer makes l hold requests for their shaping turn on timers from t.
func SetTimer(l *Limiter, t limiter.Timer) { l.timer = t }
