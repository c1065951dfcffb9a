package limiter

import (
	"context"
	"fmt"
	"time"
)

// Timer starts the timer Wait blocks on: it returns a channel that fires
// after d and a function that stops the timer, like time.NewTimer's C and
// Stop. Tests inject one that fires on demand, so nothing sleeps.
type Timer func(d time.Duration) (fire <-chan time.Time, stop func() bool)

// WaitOption configures Wait.
type WaitOption func(*waitOptions)

type waitOptions struct {
	timer Timer
}

// WithTimer makes Wait block on timers from t instead of time.NewTimer.
// A nil t keeps the default.
func WithTimer(t Timer) WaitOption {
	return func(o *waitOptions) {
		if t != nil {
			o.timer = t
		}
	}
}

func systemTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Wait takes cost from key's budget and, when the store admits it with a
// Delay (LeakyBucketShaping reserves a departure slot), blocks until that
// slot comes or ctx ends. It returns the store's Decision and:
//
//   - nil when the caller may proceed now;
//   - an error wrapping ErrLimitExceeded when the store rejected the cost
//     (the Decision's RetryAfter says when to try again);
//   - the store's error (ErrCostExceedsCapacity, ErrInvalidLimit, …);
//   - an error wrapping ctx.Err() when ctx ends before the slot, or before
//     Wait starts (then nothing is taken).
//
// A slot given up because ctx ended is not handed back: the callers queued
// behind it have already been spaced after it.
func Wait(ctx context.Context, store Store, key string, limit Limit, cost int64, opts ...WaitOption) (Decision, error) {
	o := waitOptions{timer: systemTimer}
	for _, opt := range opts {
		opt(&o)
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, fmt.Errorf("limiter: wait: %w", err)
	}
	d, err := store.Take(ctx, key, limit, cost)
	if err != nil {
		return d, err
	}
	if !d.Allowed {
		return d, fmt.Errorf("%w: retry after %v", ErrLimitExceeded, d.RetryAfter)
	}
	if d.Delay <= 0 {
		return d, nil
	}
	fire, stop := o.timer(d.Delay)
	select {
	case <-fire:
		return d, nil
	case <-ctx.Done():
		stop()
		return d, fmt.Errorf("limiter: wait: %w", ctx.Err())
	}
}
