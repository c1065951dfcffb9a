package middleware

import (
	"net/http"

	"github.com/costguard/costguard/limiter"
)

// Wrap is the handler Handler puts around a gqlgen server, around h, so
// that the door (identity, body bounds, screening) can be tried alone.
func Wrap(l *Limiter, h http.Handler) http.Handler { return l.graphQL(h) }

// WaitRepaid flushes the fail-open fallback's debts of l's store guard now
// (after a flush in progress) and returns when the flush is done.
func WaitRepaid(l *Limiter) { l.stores.Flush() }

// SetTimer makes l hold requests for their shaping turn on timers from t.
func SetTimer(l *Limiter, t limiter.Timer) { l.timer = t }
