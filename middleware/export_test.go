package middleware

// WaitRepaid waits until l's store guard runs no flush of the fail-open
// fallback's debts (a flush starts when the store answers while a debt is
// held).
func WaitRepaid(l *Limiter) { l.stores.Wait() }
