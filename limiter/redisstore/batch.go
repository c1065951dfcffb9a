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

// batcher coalesces concurrent calls into shared round trips.
//
// Who does what:
//
//   - slots counts the round trips in flight, and nothing else does: a
//     round trip holds one of its maxInFlight tokens from before it is
//     sent until its callers are answered.
//   - New starts maxInFlight sender goroutines and Close stops them; no
//     other goroutine is ever started. A sender waits for work, takes a
//     token, and sends batches of up to maxSize queued calls until the
//     queue is empty, then gives the token back.
//   - A call that finds the queue empty and a token free, and whose ctx
//     allows it (see inlineSafe), runs its round trip itself, in its own
//     goroutine, holding the token meanwhile: a lone caller pays no
//     hand-off. Any other call queues and wakes a sender.
//
// So calls arriving while round trips are in flight leave together in the
// next one, sent by whichever sender gets the next free token.
type batcher struct {
	s           *Store
	maxSize     int
	maxWait     time.Duration
	maxInFlight int
	// deadlines: the client bounds its socket I/O by a ctx's deadline.
	deadlines bool

	// timer starts the MaxBatchWait timer; tests replace it (limiter.Timer).
	timer limiter.Timer
	// onBatch, when set, is called with each batch before it is sent, in
	// the sending goroutine: a sender's, or the caller's for an inline
	// call. Tests use it to watch and to hold batches.
	onBatch func(n int, inline bool)

	// slots holds one token per round trip in flight (capacity
	// maxInFlight): the semaphore senders and inline calls share.
	slots chan struct{}

	mu     sync.Mutex
	queue  []*call // FIFO; calls whose caller left stay in it, dropped
	queued int     // the calls in queue still waiting to be sent
	closed bool    // no more calls; the senders are stopping

	// wake is pending (capacity 1) while calls are queued and no sender
	// has taken them yet; a sender filling a batch waits on it too.
	wake    chan struct{}
	closing chan struct{} // closed by close
	senders sync.WaitGroup
	stop    sync.Once
}

func newBatcher(s *Store, maxSize int, maxWait time.Duration, maxInFlight int, deadlines bool) *batcher {
	b := &batcher{
		s:           s,
		maxSize:     maxSize,
		maxWait:     maxWait,
		maxInFlight: maxInFlight,
		deadlines:   deadlines,
		timer: func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		},
		slots:   make(chan struct{}, maxInFlight),
		wake:    make(chan struct{}, 1),
		closing: make(chan struct{}),
	}
	b.senders.Add(maxInFlight)
	for range maxInFlight {
		go b.send()
	}
	return b
}

// submit runs c's round trip inline when it may, or queues c and waits
// for its outcome or for ctx to end. It returns nil once c is decided
// (its outcome is in c's fields, the caller's again), or the error that
// kept c from being decided: then c's fields may still belong to a sender
// and must be left alone.
func (b *batcher) submit(ctx context.Context, c *call) error {
	if err := ctx.Err(); err != nil {
		return c.wrap(err) // never queued: nothing debited
	}
	inline := b.inlineSafe(ctx)

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	if inline && b.queued == 0 && b.tryAcquire() {
		b.mu.Unlock()
		b.runInline(ctx, c)
		return nil
	}
	c.done = make(chan struct{})
	c.deadline, _ = ctx.Deadline()
	c.state = queued
	b.queue = append(b.queue, c)
	b.queued++
	signal(b.wake)
	b.mu.Unlock()

	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	if c.state == queued {
		c.state = dropped // take skips it
		b.queued--
	}
	b.mu.Unlock()
	select {
	case <-c.done: // decided meanwhile: the outcome beats the ctx error
		return nil
	default:
	}
	// Dropped, or sent and still in flight: its outcome, debit included,
	// is discarded. c's fields now belong to the sender; leave them alone.
	return c.wrap(ctx.Err())
}

// tryAcquire takes a round-trip token if one is free.
func (b *batcher) tryAcquire() bool {
	select {
	case b.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// release gives a round-trip token back.
func (b *batcher) release() { <-b.slots }

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
// taken its token. Calls queued meanwhile have woken a sender, which takes
// the token once it is released.
func (b *batcher) runInline(ctx context.Context, c *call) {
	defer b.release() // even if the hook or the client panics
	if b.onBatch != nil {
		b.onBatch(1, true)
	}
	b.s.roundTrip(ctx, c.single())
}

// signal sends on c, a channel of capacity 1, unless a signal is pending.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// send is a sender goroutine, started by New and stopped by close. Woken
// by a queued call, it takes a round-trip token and sends batches until
// the queue is empty; take gives the token back then.
func (b *batcher) send() {
	defer b.senders.Done()
	var batch []*call // reused: the sender's own
	for {
		select {
		case <-b.wake:
		case <-b.closing:
			return
		}
		select {
		case b.slots <- struct{}{}:
		case <-b.closing:
			return
		}
		for prev := 0; ; prev = len(batch) {
			batch = b.take(batch[:0], prev)
			if len(batch) == 0 {
				break
			}
			if b.onBatch != nil {
				b.onBatch(len(batch), false)
			}
			ctx, cancel := b.context(batch)
			b.s.roundTrip(ctx, batch)
			cancel()
			for i, c := range batch {
				close(c.done)
				batch[i] = nil // the caller's, from now on
			}
		}
	}
}

// take moves the next batch, up to maxSize calls, from the queue into
// batch, for a sender holding a token. prev is the size of the sender's
// previous batch under this token, whose callers have been answered (0
// for none). When nothing is left to send, or the store has closed (close
// has failed what was queued), take gives the token back and returns
// batch empty.
//
// With MaxBatchWait set, a batch that is not full first waits for more, but
// only right after a round trip that carried prev ≥ 2 calls: that is the
// sign of concurrent callers. A caller making one call after another, or
// one arriving at an idle store, never waits.
func (b *batcher) take(batch []*call, prev int) []*call {
	if prev >= 2 && b.maxWait > 0 {
		b.fill()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.queued == 0 || b.closed {
		// Given back only now, after the previous callers were answered:
		// a call arriving meanwhile queues for this sender instead of
		// going inline alone.
		clear(b.queue) // dropped calls, if any
		b.queue = b.queue[:0]
		b.release()
		return batch
	}
	i := 0
	for ; i < len(b.queue) && len(batch) < b.maxSize; i++ {
		c := b.queue[i]
		b.queue[i] = nil
		if c.state == dropped {
			continue
		}
		c.state = sent
		batch = append(batch, c)
	}
	b.queued -= len(batch)
	if b.queued == 0 {
		clear(b.queue[i:]) // only dropped calls are left
		b.queue = b.queue[:0]
		select { // taken: no sender need wake for them
		case <-b.wake:
		default:
		}
	} else {
		b.queue = b.queue[i:]
		signal(b.wake) // for another sender, if a token is free
	}
	return batch
}

// fill waits until the queue holds a full batch, MaxBatchWait has passed,
// or the store closes. An empty queue does not wait.
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
		case <-b.wake:
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

// close fails the queued calls with ErrClosed, stops the senders and waits
// for every round trip in flight, senders' and inline, by taking all the
// tokens (which it keeps: nothing is sent after close). Concurrent and
// later calls wait for the first to finish.
func (b *batcher) close() {
	b.stop.Do(func() {
		b.mu.Lock()
		b.closed = true
		close(b.closing)
		for i, c := range b.queue {
			b.queue[i] = nil
			if c.state == queued {
				c.state = sent
				c.d, c.err = limiter.Decision{}, ErrClosed
				for _, p := range c.parts {
					p.d = limiter.Decision{}
				}
				close(c.done)
			}
		}
		b.queue, b.queued = nil, 0
		b.mu.Unlock()
		b.senders.Wait()
		for range b.maxInFlight {
			b.slots <- struct{}{}
		}
	})
}
