// Package periodic is the one background loop of the limiter packages: a
// function called at an interval until the loop is stopped. The memory
// store's sweeper, the split-budget store's settle loop, the guard's flush
// of the fail-open debts and the Redis store's data-loss probe are each one.
//
// The owner starts the goroutine itself, with a method of its own that
// calls Run (go s.sweepLoop(), say), so a stack dump names the store the
// loop belongs to; its Close calls Stop.
package periodic

import (
	"sync"
	"time"
)

// Loop calls a function on every tick, and soon after each Kick, until
// Stop. The zero value is not usable; make one with New.
type Loop struct {
	tick   <-chan time.Time
	ticker *time.Ticker // nil when the ticks come from the caller
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// New prepares a loop ticking every interval, or on tick when it is not
// nil (tests drive a loop with a channel of their own). Nothing runs
// until Run.
func New(interval time.Duration, tick <-chan time.Time) *Loop {
	l := &Loop{tick: tick, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if tick == nil {
		l.ticker = time.NewTicker(interval)
		l.tick = l.ticker.C
	}
	return l
}

// Run calls f on every tick until Stop, then stops the ticker and closes
// Done. It is the body of the loop's goroutine; call it once.
func (l *Loop) Run(f func()) {
	defer close(l.done)
	if l.ticker != nil {
		defer l.ticker.Stop()
	}
	for {
		select {
		case <-l.stop:
			return
		case <-l.tick:
			f()
		case <-l.kick:
			f()
		}
	}
}

// Kick asks for a call of f without waiting for the next tick, and
// returns at once: kicks that come while one is pending or f runs add up
// to one more call.
func (l *Loop) Kick() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Stop ends the loop and waits for Run to return, after any call of f in
// progress. It may be called more than once, but only once Run has been
// started.
func (l *Loop) Stop() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}

// Done is closed once Run has returned.
func (l *Loop) Done() <-chan struct{} { return l.done }
