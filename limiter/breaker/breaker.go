// Package breaker is the circuit breaker in front of a rate-limit store: a
// pure state machine, told the time and the result of each call, with no
// goroutine and no I/O of its own.
//
//	closed ──Failures failures in a row──▶ open
//	open ──CoolDown elapsed, next call──▶ half-open (that call is the probe)
//	half-open ──probe succeeds──▶ closed
//	half-open ──probe fails──▶ open (a new cool-down)
//
// While open, and in half-open for every call but the one probe in flight,
// Allow says no and the caller decides without the store at once. A call
// the caller abandoned (its client went away) is neither a success nor a
// failure: it changes nothing, and a probe abandoned frees the probe's
// place for the next call.
package breaker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for the zero fields of Config.
const (
	DefaultFailures = 5
	DefaultCoolDown = time.Second
)

// ErrInvalidConfig wraps every Config validation error.
var ErrInvalidConfig = errors.New("breaker: invalid config")

// Config tunes a Breaker. Zero fields take the defaults.
type Config struct {
	// Failures is how many store failures or timeouts in a row open the
	// breaker. Default DefaultFailures (5).
	Failures int `yaml:"failures"`
	// CoolDown is how long the breaker stays open before it lets one probe
	// through. Default DefaultCoolDown (1 s).
	CoolDown time.Duration `yaml:"cool_down"`
}

// State is where a Breaker stands. Its names are stable (metrics, logs).
type State uint32

// The states.
const (
	Closed State = iota
	Open
	HalfOpen
)

// String returns "closed", "open" or "half_open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("State(%d)", uint32(s))
}

// Result is how a call the Breaker allowed ended.
type Result uint8

// The results.
const (
	// Success: the store answered (a refusal is an answer).
	Success Result = iota
	// Failure: the store failed or timed out.
	Failure
	// Abandoned: the caller's own context ended first; nothing is learnt.
	Abandoned
)

// Change is a state transition; the zero Change is none.
type Change struct{ From, To State }

// Changed reports whether c is a transition.
func (c Change) Changed() bool { return c.From != c.To }

// Ticket is Allow's answer, handed back to Done.
type Ticket struct {
	// Allowed: call the store. Otherwise decide without it.
	Allowed bool
	// Change is the transition Allow made (open to half-open), if any.
	Change Change
	probe  bool
}

// Breaker is safe for concurrent use. The closed state with no failure
// counted is read without the lock.
type Breaker struct {
	failures int
	coolDown time.Duration

	state  atomic.Uint32 // a State
	failed atomic.Int64  // failures in a row, while closed

	mu       sync.Mutex
	openedAt time.Time
	probing  bool // half-open: a probe is in flight
}

// New validates cfg and returns a closed Breaker.
func New(cfg Config) (*Breaker, error) {
	switch {
	case cfg.Failures < 0:
		return nil, fmt.Errorf("%w: Failures %d is negative", ErrInvalidConfig, cfg.Failures)
	case cfg.Failures == 0:
		cfg.Failures = DefaultFailures
	}
	switch {
	case cfg.CoolDown < 0:
		return nil, fmt.Errorf("%w: CoolDown %v is negative", ErrInvalidConfig, cfg.CoolDown)
	case cfg.CoolDown == 0:
		cfg.CoolDown = DefaultCoolDown
	}
	return &Breaker{failures: cfg.Failures, coolDown: cfg.CoolDown}, nil
}

// State is the breaker's state now (an open breaker whose cool-down has
// passed still reads Open until the next Allow).
func (b *Breaker) State() State { return State(b.state.Load()) }

// CoolDown is how long the breaker stays open before a probe.
func (b *Breaker) CoolDown() time.Duration { return b.coolDown }

// Allow says whether a call may go to the store at now. Every allowed
// Ticket must be handed to Done.
func (b *Breaker) Allow(now time.Time) Ticket {
	if State(b.state.Load()) == Closed {
		return Ticket{Allowed: true}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch s := State(b.state.Load()); s {
	case Closed:
		return Ticket{Allowed: true}
	case Open:
		if now.Sub(b.openedAt) < b.coolDown {
			return Ticket{}
		}
		b.state.Store(uint32(HalfOpen))
		b.probing = true
		return Ticket{Allowed: true, probe: true, Change: Change{Open, HalfOpen}}
	default: // HalfOpen
		if b.probing {
			return Ticket{}
		}
		b.probing = true
		return Ticket{Allowed: true, probe: true}
	}
}

// Done records how the call of an allowed Ticket t ended at now, and
// returns the transition it caused. Only a probe moves a half-open
// breaker; a call that was let through before the breaker opened and
// ends after changes nothing.
func (b *Breaker) Done(now time.Time, t Ticket, r Result) Change {
	if !t.Allowed || (r == Abandoned && !t.probe) {
		return Change{}
	}
	if !t.probe && r == Success {
		if b.failed.Load() != 0 {
			b.failed.Store(0)
		}
		return Change{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := State(b.state.Load())
	if !t.probe { // a failure
		if s != Closed || b.failed.Add(1) < int64(b.failures) {
			return Change{}
		}
		b.open(now)
		return Change{Closed, Open}
	}
	if s != HalfOpen { // cannot happen: only Allow makes probes
		return Change{}
	}
	b.probing = false
	switch r {
	case Success:
		b.failed.Store(0)
		b.state.Store(uint32(Closed))
		return Change{HalfOpen, Closed}
	case Failure:
		b.open(now)
		return Change{HalfOpen, Open}
	}
	return Change{} // abandoned: the next call probes
}

// open moves to Open at now; b.mu is held.
func (b *Breaker) open(now time.Time) {
	b.openedAt = now
	b.failed.Store(0)
	b.state.Store(uint32(Open))
}
