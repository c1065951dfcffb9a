package overload

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costguard/costguard/limiter"
)

var (
	// ErrOverloaded: the request was shed (refused at once, or its wait in
	// the queue ran out). It was not debited; answer 503 with a
	// Retry-After (see Shedder.RetryAfter).
	ErrOverloaded = errors.New("overload: overloaded")
	// ErrInvalidQueue: a negative queue, or a queue for a priority other
	// than Critical. Only a critical lane may wait.
	ErrInvalidQueue = errors.New("overload: invalid queue")

	errQueueFull    = fmt.Errorf("%w: the queue is full", ErrOverloaded)
	errQueueTimeout = fmt.Errorf("%w: no slot came free in the queue time", ErrOverloaded)
)

// ValidateLane reports whether a lane of priority p may set queue: nil, or
// an error wrapping ErrInvalidQueue. Admit applies the same rule; a
// configuration loader calls this to fail at start instead.
func ValidateLane(p Priority, queue time.Duration) error {
	switch {
	case !p.valid():
		return fmt.Errorf("%w: %d", ErrInvalidPriority, uint8(p))
	case queue < 0:
		return fmt.Errorf("%w: %v is negative", ErrInvalidQueue, queue)
	case queue > 0 && p != Critical:
		return fmt.Errorf("%w: a %v lane may not queue (%v); only critical lanes wait", ErrInvalidQueue, p, queue)
	}
	return nil
}

// Shedder counts the requests in flight in one process and admits or sheds
// each new one by its priority. It is safe for concurrent use and owns no
// goroutine, so there is nothing to close.
//
// One mutex guards the count, the queue, the tickets and the adaptive
// state, as x/sync/semaphore does; the counters are also atomics so that
// metrics, the degradation list and a refusal can read them without it.
type Shedder struct {
	inFlight atomic.Int64 // admitted and not yet released; written under mu
	peak     atomic.Int64 // the most in flight at once since New; written under mu
	capacity atomic.Int64 // MaxInFlight, or the adaptive limit; written under mu
	waiting  atomic.Int64 // queued critical requests; written under mu

	set   settings
	timer limiter.Timer
	rand  func() float64

	mu    sync.Mutex
	queue list.List // of *waiter, oldest first
	// Tickets make a second release harmless without allocating: one per
	// slot of MaxInFlight, free ones stacked in free. A Permit names its
	// ticket and the ticket's generation, which its release moves on, so
	// a second release, or a copy released after the ticket went to
	// another request, finds it moved and does nothing. No more tickets
	// are out than requests in flight, never more than MaxInFlight.
	free []uint32
	gen  []uint64

	adapt   *aimd         // nil unless Config.Adaptive
	epoch   atomic.Uint64 // decreases of the adaptive capacity; written under mu
	degrade *degradation  // nil without a degradation list
}

var _ Degrader = (*Shedder)(nil)

// New returns a Shedder for cfg, or an error wrapping ErrInvalidConfig. It
// allocates 12 bytes per slot of MaxInFlight.
func New(cfg Config) (*Shedder, error) {
	set, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	if cfg.Timer == nil {
		cfg.Timer = systemTimer
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	s := &Shedder{
		set:     set,
		timer:   cfg.Timer,
		rand:    cfg.Rand,
		free:    make([]uint32, set.max),
		gen:     make([]uint64, set.max),
		degrade: newDegradation(set, cfg.Clock),
	}
	for i := range s.free {
		s.free[i] = uint32(len(s.free) - 1 - i) // ticket 0 on top
	}
	if set.adaptive {
		s.adapt = newAIMD(set)
	}
	s.capacity.Store(set.max)
	return s, nil
}

func systemTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Admit admits a request of priority p or sheds it.
//
// A request is admitted while the requests in flight are below p's
// threshold, ⌊ShedAt[p] × capacity⌋ (the whole capacity for Critical), and
// no critical request is queued. Otherwise, when queue is zero, it is shed
// at once with ErrOverloaded. A critical request whose lane sets a queue
// waits instead, first in first out, until a slot frees (admitted), queue
// passes (ErrOverloaded) or ctx ends (an error wrapping ctx.Err(), and no
// slot is taken). Only the wait looks at ctx.
//
// The Permit of an admitted request must be released exactly once, by Done,
// Drop or Ignore; releasing it again does nothing. A refused request gets
// the zero Permit, whose methods do nothing. An invalid p or queue (see
// ValidateLane) is refused with its error.
func (s *Shedder) Admit(ctx context.Context, p Priority, queue time.Duration) (Permit, error) {
	if !p.valid() || queue != 0 {
		if err := ValidateLane(p, queue); err != nil {
			return Permit{}, err
		}
	}
	share := s.set.shed[p]
	// Shedding must stay cheap when it matters most: a request the count
	// already refuses is refused without the lock.
	if queue == 0 && (s.inFlight.Load() >= slots(s.capacity.Load(), share) || s.waiting.Load() > 0) {
		return Permit{}, ErrOverloaded
	}
	s.mu.Lock()
	if s.queue.Len() == 0 && s.inFlight.Load() < slots(s.capacity.Load(), share) {
		permit := s.takeLocked()
		s.mu.Unlock()
		s.observe()
		return permit, nil
	}
	if queue == 0 {
		s.mu.Unlock()
		return Permit{}, ErrOverloaded
	}
	return s.wait(ctx, queue) // unlocks
}

// takeLocked counts one more request in flight and gives it a ticket.
func (s *Shedder) takeLocked() Permit {
	if n := s.inFlight.Add(1); n > s.peak.Load() {
		s.peak.Store(n)
	}
	i := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	return Permit{s: s, i: i, gen: s.gen[i], epoch: s.epoch.Load()}
}

// observe re-evaluates the degradation list after the count moved.
func (s *Shedder) observe() {
	if s.degrade != nil {
		s.degrade.observe(s.inFlight.Load(), s.capacity.Load())
	}
}

// waiter is a critical request in the queue. When a slot is handed to it,
// permit is set and ready closed, under Shedder.mu.
type waiter struct {
	elem   *list.Element
	ready  chan struct{}
	permit Permit
}

// wait queues a critical request for up to queue. It is called with s.mu
// held and releases it.
func (s *Shedder) wait(ctx context.Context, queue time.Duration) (Permit, error) {
	if s.queue.Len() >= s.set.maxQueue {
		s.mu.Unlock()
		return Permit{}, errQueueFull
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return Permit{}, fmt.Errorf("overload: before queueing: %w", err)
	}
	w := &waiter{ready: make(chan struct{})}
	w.elem = s.queue.PushBack(w)
	s.waiting.Add(1)
	s.mu.Unlock()

	fire, stop := s.timer(queue)
	select {
	case <-w.ready:
		stop()
		s.observe()
		return w.permit, nil
	case <-fire:
		s.mu.Lock()
		permit := w.permit // handed a slot as time ran out: take it
		if !permit.Admitted() {
			s.leaveLocked(w)
		}
		s.mu.Unlock()
		if permit.Admitted() {
			s.observe()
			return permit, nil
		}
		return Permit{}, errQueueTimeout
	case <-ctx.Done():
		stop()
		s.mu.Lock()
		permit := w.permit
		if !permit.Admitted() {
			s.leaveLocked(w)
		}
		s.mu.Unlock()
		permit.Ignore() // handed a slot as the client left: give it back
		return Permit{}, fmt.Errorf("overload: queued: %w", ctx.Err())
	}
}

// leaveLocked takes w, never granted, out of the queue.
func (s *Shedder) leaveLocked(w *waiter) {
	s.queue.Remove(w.elem)
	s.waiting.Add(-1)
}

// grantLocked hands the free slots, up to the capacity, to the waiters
// from the front of the queue.
func (s *Shedder) grantLocked() {
	for s.queue.Len() > 0 && s.inFlight.Load() < s.capacity.Load() {
		w := s.queue.Remove(s.queue.Front()).(*waiter)
		s.waiting.Add(-1)
		w.permit = s.takeLocked()
		close(w.ready)
	}
}

// release gives back p's slot, unless it already was: it feeds the
// adaptive capacity and hands the slot to the queue if anyone waits.
func (s *Shedder) release(p Permit, o outcome, latency time.Duration) {
	s.mu.Lock()
	if s.gen[p.i] != p.gen {
		s.mu.Unlock()
		return
	}
	s.gen[p.i]++
	s.free = append(s.free, p.i)
	s.inFlight.Add(-1)
	if s.adapt != nil && o != ignored {
		limit, decreased := s.adapt.next(p.epoch, s.epoch.Load(), o, latency)
		if decreased {
			s.epoch.Add(1)
		}
		s.capacity.Store(limit)
	}
	if s.queue.Len() > 0 {
		s.grantLocked()
	}
	s.mu.Unlock()
	s.observe()
}

// InFlight returns the requests admitted and not yet released.
func (s *Shedder) InFlight() int { return int(s.inFlight.Load()) }

// Peak is the most requests that were in flight at once since New: what a
// benchmark or an alert compares with the capacity, which sampling
// InFlight would miss between two samples.
func (s *Shedder) Peak() int { return int(s.peak.Load()) }

// Capacity returns the current capacity: MaxInFlight, or the adaptive
// limit.
func (s *Shedder) Capacity() int { return int(s.capacity.Load()) }

// Waiting returns the critical requests queued for a slot.
func (s *Shedder) Waiting() int { return int(s.waiting.Load()) }

// Load returns InFlight ÷ Capacity. It may exceed 1 for a moment after
// the adaptive capacity shrinks below what is already running.
func (s *Shedder) Load() float64 {
	return float64(s.inFlight.Load()) / float64(s.capacity.Load())
}

// Threshold returns the in-flight count at or above which a request of
// priority p is shed at the current capacity: ⌊ShedAt[p] × Capacity⌋, the
// whole capacity for Critical; 0 for an invalid p.
func (s *Shedder) Threshold(p Priority) int {
	if !p.valid() {
		return 0
	}
	return int(slots(s.capacity.Load(), s.set.shed[p]))
}

// Degraded reports whether the feature named is switched off now; false
// for a name not on the degradation list, and for a nil Shedder.
func (s *Shedder) Degraded(feature string) bool {
	return s != nil && s.degrade != nil && s.degrade.degraded(feature)
}

// DegradedFeatures returns the names of the features switched off now, in
// the order they went off (for logs and metrics).
func (s *Shedder) DegradedFeatures() []string {
	if s.degrade == nil {
		return nil
	}
	k := s.degrade.off.Load()
	names := make([]string, 0, k)
	for _, f := range s.degrade.features[:k] {
		names = append(names, f.name)
	}
	return names
}

// RetryAfter returns a Retry-After, in whole seconds, for a shed request:
// drawn uniformly from 1 to ⌈RetryAfterMax⌉ seconds, so shed clients do
// not come back together (see the function RetryAfter).
func (s *Shedder) RetryAfter() int64 { return RetryAfter(s.set.retryMax, s.rand) }

// Permit is an admitted request's slot. Release it exactly once, when the
// request is finished, with Done, Drop or Ignore; further calls, and calls
// on the zero Permit of a refused request, do nothing. A Permit is a small
// value: copies share one release.
type Permit struct {
	s     *Shedder
	i     uint32 // the ticket
	gen   uint64 // the ticket's generation when it was taken
	epoch uint64 // the adaptive capacity's epoch at admission
}

// Admitted reports whether p holds a slot (is not the zero Permit). It
// stays true after release.
func (p Permit) Admitted() bool { return p.s != nil }

// Done releases the slot of a request that completed in latency, a sample
// for the adaptive capacity. A negative latency is released as Ignore.
func (p Permit) Done(latency time.Duration) {
	if latency < 0 {
		p.release(ignored, 0)
		return
	}
	p.release(completed, latency)
}

// Drop releases the slot of a request that failed in a way that signals
// overload (it timed out, or a dependency refused it): to the adaptive
// capacity, congestion.
func (p Permit) Drop() { p.release(dropped, 0) }

// Ignore releases the slot without telling the adaptive capacity anything:
// for a request whose outcome says nothing about load (the client left, a
// bad request).
func (p Permit) Ignore() { p.release(ignored, 0) }

func (p Permit) release(o outcome, latency time.Duration) {
	if p.s != nil {
		p.s.release(p, o, latency)
	}
}
