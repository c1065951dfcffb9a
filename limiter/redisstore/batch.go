package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/costguard/costguard/limiter"
)

// callState is where a call stands in the batcher.
type callState uint8

const (
	queued  callState = iota // waiting in the queue
	sent                     // taken into a batch: its outcome will be set
	dropped                  // its caller left before it was sent
)

// senderLinger is how long an idle sender waits for more calls before it
// exits. A warm sender saves the next call a goroutine start (and the
// growth of its stack through go-redis); exiting leaves an idle store, even
// one never closed, without goroutines.
const senderLinger = time.Second

// batcher coalesces concurrent calls into shared round trips.
//
// Calls wait in a FIFO queue. Sender goroutines take up to maxSize of them
// at a time and run one round trip for the lot. A call that finds no idle
// sender starts one, if fewer than maxInFlight are running; otherwise it
// waits for a running sender to finish its round trip. So a call arriving
// at an idle store is sent at once, and calls arriving while round trips
// are in flight queue and leave together in the next one. A sender that
// finds the queue empty lingers for senderLinger, then exits.
type batcher struct {
	s           *Store
	maxSize     int
	maxWait     time.Duration
	maxInFlight int
	linger      time.Duration // senderLinger; tests shorten it

	// timer starts the MaxBatchWait timer; tests replace it (limiter.Timer).
	timer limiter.Timer
	// onBatch, when set, is called by a sender with each batch before it is
	// sent. Tests use it to watch and to hold batches.
	onBatch func(n int)

	mu         sync.Mutex
	head, tail *call
	queued     int
	senders    int  // running sender goroutines
	idle       int  // senders lingering for work
	closed     bool // no more calls; the senders are stopping

	wake    chan struct{} // a call was queued for an idle sender (capacity 1)
	more    chan struct{} // a call was queued (capacity 1; only with maxWait)
	closing chan struct{} // closed by close
	wg      sync.WaitGroup
}

func newBatcher(s *Store, maxSize int, maxWait time.Duration, maxInFlight int) *batcher {
	return &batcher{
		s:           s,
		maxSize:     maxSize,
		maxWait:     maxWait,
		maxInFlight: maxInFlight,
		linger:      senderLinger,
		timer: func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		},
		wake:    make(chan struct{}, 1),
		more:    make(chan struct{}, 1),
		closing: make(chan struct{}),
	}
}

// submit queues c and waits for its outcome or for ctx to end.
func (b *batcher) submit(ctx context.Context, c *call) (limiter.Decision, error) {
	if err := ctx.Err(); err != nil {
		return limiter.Decision{}, c.wrap(err) // never queued: nothing debited
	}
	c.done = make(chan struct{})
	c.deadline, _ = ctx.Deadline()

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return limiter.Decision{}, ErrClosed
	}
	b.push(c)
	wake := b.idle > 0
	start := !wake && b.senders < b.maxInFlight
	if start {
		b.senders++
		b.wg.Add(1)
	}
	b.mu.Unlock()

	switch {
	case wake:
		signal(b.wake)
	case start:
		go b.send()
	case b.maxWait > 0:
		signal(b.more) // for a sender waiting for its batch to fill
	}

	select {
	case <-c.done:
		return c.d, c.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if c.state == queued {
		b.unlink(c)
		c.state = dropped
	}
	b.mu.Unlock()
	select {
	case <-c.done: // decided meanwhile: the outcome beats the ctx error
		return c.d, c.err
	default:
	}
	// Dropped, or sent and still in flight: its outcome, debit included,
	// is discarded. c's fields now belong to the sender; leave them alone.
	return limiter.Decision{}, c.wrap(ctx.Err())
}

// signal sends on c, a channel of capacity 1, unless a signal is pending.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// send is a sender goroutine: it runs round trips until the queue has been
// empty for b.linger.
func (b *batcher) send() {
	defer b.wg.Done()
	idle := time.NewTimer(b.linger)
	defer idle.Stop()
	for prev := 0; ; {
		batch := b.take(prev, idle)
		if batch == nil {
			return
		}
		prev = len(batch)
		if b.onBatch != nil {
			b.onBatch(len(batch))
		}
		ctx, cancel := b.context(batch)
		b.s.roundTrip(ctx, batch)
		cancel()
		for _, c := range batch {
			close(c.done)
		}
	}
}

// take removes the next batch from the queue. An empty queue makes the
// sender linger on idle; take returns nil, counting the sender out, when
// nothing came or the store closed.
//
// With MaxBatchWait set, a batch that is not full first waits for more, but
// only right after a round trip that carried prev ≥ 2 calls: that is the
// sign of concurrent callers. A caller making one call after another, or
// one arriving at an idle store, never waits.
func (b *batcher) take(prev int, idle *time.Timer) []*call {
	if prev >= 2 && b.maxWait > 0 {
		b.fill()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.queued == 0 && !b.closed {
		if !b.lingerLocked(idle) {
			break
		}
	}
	if b.queued == 0 || b.closed { // close has failed what was queued
		b.senders--
		return nil
	}
	batch := make([]*call, 0, min(b.queued, b.maxSize))
	for b.head != nil && len(batch) < b.maxSize {
		c := b.head
		b.unlink(c)
		c.state = sent
		batch = append(batch, c)
	}
	return batch
}

// lingerLocked waits, with b.mu released, until a call is queued for an
// idle sender (true) or idle fires or the store closes (false).
func (b *batcher) lingerLocked(idle *time.Timer) bool {
	b.idle++
	b.mu.Unlock()
	idle.Reset(b.linger)
	woken := false
	select {
	case <-b.wake:
		woken = true
	case <-idle.C:
	case <-b.closing:
	}
	b.mu.Lock()
	b.idle--
	return woken
}

// fill waits until the queue holds a full batch, MaxBatchWait has passed,
// or the store closes. An empty queue does not wait: the sender exits.
func (b *batcher) fill() {
	b.mu.Lock()
	wait := b.queued > 0 && b.queued < b.maxSize && !b.closed
	b.mu.Unlock()
	if !wait {
		return
	}
	fire, stop := b.timer(b.maxWait)
	defer stop()
	for {
		select {
		case <-fire:
			return
		case <-b.closing:
			return
		case <-b.more:
			b.mu.Lock()
			full := b.queued >= b.maxSize
			b.mu.Unlock()
			if full {
				return
			}
		}
	}
}

// context bounds a batch's round trip by the latest of its callers'
// deadlines, or by none when one of them has none (the client's timeouts
// still apply). It is not any caller's ctx: a caller that leaves must not
// cancel the others' round trip.
func (b *batcher) context(batch []*call) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range batch {
		if c.deadline.IsZero() {
			return context.Background(), func() {}
		}
		if c.deadline.After(latest) {
			latest = c.deadline
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

// close fails the queued calls with ErrClosed and waits for the senders.
func (b *batcher) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.closing)
		for c := b.head; c != nil; c = b.head {
			b.unlink(c)
			c.state = sent
			c.d, c.err = limiter.Decision{}, ErrClosed
			close(c.done)
		}
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// push appends c to the queue. b.mu must be held.
func (b *batcher) push(c *call) {
	c.state = queued
	c.prev, c.next = b.tail, nil
	if b.tail == nil {
		b.head = c
	} else {
		b.tail.next = c
	}
	b.tail = c
	b.queued++
}

// unlink removes queued c from the queue. b.mu must be held.
func (b *batcher) unlink(c *call) {
	if c.prev == nil {
		b.head = c.next
	} else {
		c.prev.next = c.next
	}
	if c.next == nil {
		b.tail = c.prev
	} else {
		c.next.prev = c.prev
	}
	c.prev, c.next = nil, nil
	b.queued--
}
