package guard

import "time"

// NewTicking is New with the flush of the fallback's debts driven by tick
// instead of Config.FlushInterval.
func NewTicking(cfg Config, tick <-chan time.Time) (*Guard, error) { return newGuard(cfg, tick) }
