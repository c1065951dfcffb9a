package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

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
// At most maxInFlight round trips are in flight at once. A call that finds
// the queue empty and a round trip free, and whose ctx allows it (see
// inlineSafe), runs its round trip itself, in its own goroutine: a lone
// caller pays no hand-off. Any other call waits in a FIFO queue. Sender
// goroutines take up to maxSize queued calls at a time and run one round
// trip for the lot. A call queued while a round trip is free wakes an idle
// sender or starts one (at most maxInFlight of them); otherwise whoever
// ends a round trip, sender or inline caller, sees to the queue. So calls
// arriving while round trips are in flight leave together in the next one.
// A sender that finds nothing to send lingers for senderLinger, then exits.
type batcher struct {
	s           *Store
	maxSize     int
	maxWait     time.Duration
	maxInFlight int
	linger      time.Duration // senderLinger; tests shorten it
	// deadlines: the client bounds its socket I/O by a ctx's deadline.
	deadlines bool

	// timer starts the MaxBatchWait timer; tests replace it (limiter.Timer).
	timer limiter.Timer
	// onBatch, when set, is called with each batch before it is sent, in
	// the sending goroutine: a sender's, or the caller's for an inline
	// call. Tests use it to watch and to hold batches.
	onBatch func(n int, inline bool)

	mu         sync.Mutex
	head, tail *call
	queued     int
	flying     int  // round trips in flight: senders' and inline calls'
	senders    int  // running sender goroutines
	idle       int  // senders lingering for work
	closed     bool // no more calls; the senders are stopping

	wake    chan struct{}  // a call was queued for an idle sender (capacity 1)
	more    chan struct{}  // a call was queued (capacity 1; only with maxWait)
	closing chan struct{}  // closed by close
	wg      sync.WaitGroup // the senders and the inline round trips
}

func newBatcher(s *Store, maxSize int, maxWait time.Duration, maxInFlight int, deadlines bool) *batcher {
	return &batcher{
		s:           s,
		maxSize:     maxSize,
		maxWait:     maxWait,
		maxInFlight: maxInFlight,
		linger:      senderLinger,
		deadlines:   deadlines,
		timer: func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		},
		wake:    make(chan struct{}, 1),
		more:    make(chan struct{}, 1),
		closing: make(chan struct{}),
	}
}

// submit runs c's round trip inline when it may, or queues c and waits
// for its outcome or for ctx to end.
func (b *batcher) submit(ctx context.Context, c *call) (limiter.Decision, error) {
	if err := ctx.Err(); err != nil {
		return limiter.Decision{}, c.wrap(err) // never queued: nothing debited
	}
	inline := b.inlineSafe(ctx)

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return limiter.Decision{}, ErrClosed
	}
	if inline && b.queued == 0 && b.flying < b.maxInFlight {
		b.flying++
		b.wg.Add(1) // Close waits for this round trip too
		b.mu.Unlock()
		b.runInline(ctx, c)
		return c.d, c.err
	}
	c.done = make(chan struct{})
	c.deadline, _ = ctx.Deadline()
	b.push(c)
	wake, start := b.dispatchLocked()
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

// inlineSafe reports whether a call with ctx may run its round trip in
// the caller's goroutine. A caller blocked in the client's socket I/O can
// return only when the client lets it, so ctx must need no more than the
// client gives: it never ends (no Done channel), or it has a deadline that
// the client enforces on the socket. A ctx that can only be cancelled (a
// request's, with no deadline) is handed to a sender, so that its caller
// can leave at once whatever the network does.
func (b *batcher) inlineSafe(ctx context.Context) bool {
	if ctx.Done() == nil {
		return true
	}
	_, ok := ctx.Deadline()
	return ok && b.deadlines
}

// clientDeadlines reports whether client enforces a ctx's deadline on its
// socket reads and writes: a go-redis client with ContextTimeoutEnabled
// and socket deadlines on (a ReadTimeout or WriteTimeout of -2 turns them
// off, ctx's included). Other clients, and a Ring with a timeout of -1
// whose shards would still set deadlines, are taken not to: their calls
// are handed to a sender unless their ctx never ends.
func clientDeadlines(client any) bool {
	var on bool
	var read, write time.Duration
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		on, read, write = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
	case *redis.ClusterClient:
		o := c.Options()
		on, read, write = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
	case *redis.Ring:
		o := c.Options()
		on, read, write = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
	default:
		return false
	}
	// The options hold go-redis's normalised timeouts: negative means no
	// socket deadline at all.
	return on && read >= 0 && write >= 0
}

// runInline runs c's round trip in the caller's goroutine; submit has
// counted it in flight. Calls queued meanwhile are then handed to a sender.
func (b *batcher) runInline(ctx context.Context, c *call) {
	defer b.wg.Done()
	defer b.landed() // even if the hook or the client panics
	if b.onBatch != nil {
		b.onBatch(1, true)
	}
	b.s.roundTrip(ctx, c.single())
}

// landed counts an inline round trip out and starts whatever the queue
// needs now that a round trip is free.
func (b *batcher) landed() {
	b.mu.Lock()
	b.flying--
	wake, start := b.dispatchLocked()
	b.mu.Unlock()
	if wake {
		signal(b.wake)
	} else if start {
		go b.send()
	}
}

// dispatchLocked decides how queued calls leave when a round trip is free:
// by waking an idle sender (wake) or by a new one, already counted in
// (start). Neither, when nothing is queued, no round trip is free (the
// one that lands first dispatches) or a sender is running anyway. b.mu
// must be held.
func (b *batcher) dispatchLocked() (wake, start bool) {
	switch {
	case b.queued == 0 || b.flying >= b.maxInFlight || b.closed:
		return false, false
	case b.idle > 0:
		return true, false
	case b.senders < b.maxInFlight:
		b.senders++
		b.wg.Add(1)
		return false, true
	}
	return false, false
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
			b.onBatch(len(batch), false)
		}
		ctx, cancel := b.context(batch)
		b.s.roundTrip(ctx, batch)
		cancel()
		for _, c := range batch {
			close(c.done)
		}
	}
}

// take removes the next batch from the queue, counting its round trip in
// flight; prev is the size of the sender's previous batch, whose round
// trip has landed (0 for none). An empty queue, or no round trip free
// (inline calls hold them), makes the sender linger on idle; take returns
// nil, counting the sender out, when nothing came or the store closed.
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
	if prev > 0 {
		// Counted out only now, after its callers were answered: a call
		// arriving meanwhile queues for the next batch instead of going
		// inline alone.
		b.flying--
	}
	for !b.readyLocked() && !b.closed {
		if !b.lingerLocked(idle) {
			break
		}
	}
	if !b.readyLocked() || b.closed { // close has failed what was queued
		b.senders--
		return nil
	}
	b.flying++
	batch := make([]*call, 0, min(b.queued, b.maxSize))
	for b.head != nil && len(batch) < b.maxSize {
		c := b.head
		b.unlink(c)
		c.state = sent
		batch = append(batch, c)
	}
	return batch
}

// readyLocked reports whether a batch may leave now: calls are queued and
// a round trip is free. b.mu must be held.
func (b *batcher) readyLocked() bool {
	return b.queued > 0 && b.flying < b.maxInFlight
}

// lingerLocked waits, with b.mu released, until a call is queued for an
// idle sender or a round trip lands (true), or idle fires or the store
// closes (false).
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

// close fails the queued calls with ErrClosed and waits for the round trips
// in flight, senders' and inline, and for the senders to exit.
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
