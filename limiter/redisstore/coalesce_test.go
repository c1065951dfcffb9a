package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/redisstore"
)

// A budget no test here exhausts by accident.
var roomy = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1000, Rate: 1, Period: time.Hour}

// private starts a server of the test's own, so that INFO commandstats
// counts only this test's script calls, and a store on it.
func private(t *testing.T, cfg redisstore.Config) (*redistest.Server, *redis.Client, *redisstore.Store) {
	t.Helper()
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	if cfg.Prefix == "" {
		cfg.Prefix = uniquePrefix(t)
	}
	s, err := redisstore.New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return srv, rdb, s
}

// recorder is a batch hook: it records batch sizes and whether each was
// sent inline, and can hold a batch (block the goroutine sending it before
// the round trip) until released.
type recorder struct {
	mu     sync.Mutex
	sizes  []int
	inline []bool
	hold   map[int]chan struct{} // batch index → closed to release it
	before map[int]func()        // batch index → run before it is sent
	seen   chan int              // receives each batch's index, if set
}

func newRecorder() *recorder {
	return &recorder{hold: map[int]chan struct{}{}, before: map[int]func(){}, seen: make(chan int, 1024)}
}

// holdBatch makes batch i wait until the returned func is called.
func (r *recorder) holdBatch(i int) (release func()) {
	c := make(chan struct{})
	r.mu.Lock()
	r.hold[i] = c
	r.mu.Unlock()
	return sync.OnceFunc(func() { close(c) })
}

func (r *recorder) hook(n int, inline bool) {
	r.mu.Lock()
	i := len(r.sizes)
	r.sizes = append(r.sizes, n)
	r.inline = append(r.inline, inline)
	hold, before := r.hold[i], r.before[i]
	r.mu.Unlock()
	r.seen <- i
	if before != nil {
		before()
	}
	if hold != nil {
		<-hold
	}
}

func (r *recorder) batchSizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.sizes...)
}

// kinds describes how each batch was sent: "inline" from its caller's
// goroutine, "handoff" by a sender.
func (r *recorder) kinds() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := make([]string, len(r.inline))
	for i, in := range r.inline {
		k[i] = "handoff"
		if in {
			k[i] = "inline"
		}
	}
	return strings.Join(k, " ")
}

// waitFor spins until cond holds. It never measures time: the deadline
// only turns a hang into a failure.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// outcome is what one asynchronous call returned.
type outcome struct {
	d   limiter.Decision
	err error
}

// goTake runs Take in a goroutine; its outcome arrives on the channel.
func goTake(ctx context.Context, s *redisstore.Store, key string, l limiter.Limit, cost int64) <-chan outcome {
	c := make(chan outcome, 1)
	go func() {
		d, err := s.Take(ctx, key, l, cost)
		c <- outcome{d, err}
	}()
	return c
}

func commandStats(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	return scriptCalls(t, context.Background(), []*redis.Client{rdb})
}

// TestLoneCallerSentAtOnce: a call arriving at an idle store goes out in a
// batch of its own, without starting the MaxBatchWait timer, however long
// that wait is: inline when its ctx allows, else handed to the sender
// (lingering for work after the first call) and sent at once.
func TestLoneCallerSentAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() context.Context
		kind string
	}{
		{"background", context.Background, "inline"},
		{"cancellable", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			return ctx
		}, "handoff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rdb, s := private(t, redisstore.Config{MaxBatchWait: redisstore.MaxMaxBatchWait})
			rec := newRecorder()
			redisstore.SetBatchHook(s, rec.hook)
			var timers atomic.Int64
			redisstore.SetBatchTimer(s, func(time.Duration) (<-chan time.Time, func() bool) {
				timers.Add(1)
				fired := make(chan time.Time, 1)
				fired <- time.Time{} // no need to wait: the count tells
				return fired, func() bool { return false }
			})
			ctx := tc.ctx()
			if _, err := s.Take(ctx, "warm-up", roomy, 0); err != nil { // caches the script
				t.Fatal(err)
			}
			before := commandStats(t, rdb)
			const calls = 20
			for i := range calls {
				if d, err := s.Take(ctx, "lone", roomy, 1); err != nil || !d.Allowed || d.Remaining != roomy.Burst-int64(i+1) {
					t.Fatalf("call %d: %+v, %v", i, d, err)
				}
			}
			if n := commandStats(t, rdb) - before; n != calls {
				t.Errorf("%d script calls for %d sequential calls, want one each", n, calls)
			}
			for i, n := range rec.batchSizes() {
				if n != 1 {
					t.Errorf("batch %d has %d calls, want 1", i, n)
				}
			}
			if got, want := rec.kinds(), strings.TrimSpace(strings.Repeat(tc.kind+" ", calls+1)); got != want {
				t.Errorf("batches sent %s, want all %s", got, tc.kind)
			}
			if n := timers.Load(); n != 0 {
				t.Errorf("%d MaxBatchWait timers started for lone callers", n)
			}
		})
	}
}

// TestIdleCallRunsInline: a call finding no round trip in flight and
// nothing queued runs its round trip in its own goroutine, when its ctx
// asks no more of the network than the client enforces: a ctx that never
// ends, or a deadline on a client that bounds its socket I/O by it
// (ContextTimeoutEnabled). Any other call is handed to a sender, so that
// its caller can leave when its ctx ends. Counted by the batch hook.
func TestIdleCallRunsInline(t *testing.T) {
	addr := redistest.SharedServer(t).Addr()
	standalone := func(o redis.Options) func(t *testing.T) redis.Scripter {
		return func(t *testing.T) redis.Scripter {
			o.Addr = addr
			rdb := redis.NewClient(&o)
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}
	}
	cluster := func(o redis.ClusterOptions) func(t *testing.T) redis.Scripter {
		return func(t *testing.T) redis.Scripter {
			o.Addrs = redistest.SharedCluster(t).Addrs()
			rdb := redis.NewClusterClient(&o)
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}
	}
	plain := func(t *testing.T) redis.Scripter {
		return plainScripter{standalone(redis.Options{ContextTimeoutEnabled: true})(t)}
	}
	background := func(*testing.T) context.Context { return context.Background() }
	deadline := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel)
		return ctx
	}
	cancellable := func(t *testing.T) context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		return ctx
	}
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.Scripter
		ctx    func(t *testing.T) context.Context
		inline bool
	}{
		{"background ctx", standalone(redis.Options{}), background, true},
		{"deadline, client enforces it", standalone(redis.Options{ContextTimeoutEnabled: true}), deadline, true},
		{"deadline, client ignores it", standalone(redis.Options{}), deadline, false},
		{"deadline, no socket deadlines", standalone(redis.Options{ContextTimeoutEnabled: true, ReadTimeout: -2}), deadline, false},
		{"cancellable, client enforces deadlines", standalone(redis.Options{ContextTimeoutEnabled: true}), cancellable, false},
		{"cluster, deadline, client enforces it", cluster(redis.ClusterOptions{ContextTimeoutEnabled: true}), deadline, true},
		{"cluster, deadline, client ignores it", cluster(redis.ClusterOptions{}), deadline, false},
		{"plain scripter, background ctx", plain, background, true},
		{"plain scripter, deadline", plain, deadline, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, tc.client(t), nil)
			rec := newRecorder()
			redisstore.SetBatchHook(s, rec.hook)
			ctx := tc.ctx(t)
			const calls = 5
			for i := range calls {
				if d, err := s.Take(ctx, "idle", roomy, 1); err != nil || !d.Allowed || d.Remaining != roomy.Burst-int64(i+1) {
					t.Fatalf("call %d: %+v, %v", i, d, err)
				}
			}
			kind := "handoff"
			if tc.inline {
				kind = "inline"
			}
			if got, want := rec.kinds(), strings.TrimSpace(strings.Repeat(kind+" ", calls)); got != want {
				t.Errorf("batches sent %s, want all %s", got, kind)
			}
		})
	}
}

// TestInlineCallHandsQueueOver: while an inline round trip is in flight,
// every other call queues, even one that could run inline, and when the
// inline one lands a sender sends them all in one round trip. The next
// lone call runs inline again.
func TestInlineCallHandsQueueOver(t *testing.T) {
	_, rdb, s := private(t, redisstore.Config{})
	rec := newRecorder()
	redisstore.SetBatchHook(s, rec.hook)
	ctx := context.Background()
	if _, err := s.Take(ctx, "warm-up", roomy, 0); err != nil {
		t.Fatal(err)
	}
	<-rec.seen
	before := commandStats(t, rdb)
	release := rec.holdBatch(1)
	defer release()

	first := goTake(ctx, s, "first", roomy, 1)
	<-rec.seen
	if n := redisstore.InFlight(s); n != 1 {
		t.Fatalf("%d round trips in flight, want the inline one", n)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const others = 12
	var outs []<-chan outcome
	for i := range others {
		c := ctx
		if i%3 == 0 {
			c = cctx
		}
		outs = append(outs, goTake(c, s, "user:"+strconv.Itoa(i), roomy, 1))
	}
	waitFor(t, "12 queued calls", func() bool { return redisstore.Queued(s) == others })
	release()
	for i, c := range append([]<-chan outcome{first}, outs...) {
		if o := <-c; o.err != nil || !o.d.Allowed || o.d.Remaining != roomy.Burst-1 {
			t.Fatalf("call %d: %+v, %v", i, o.d, o.err)
		}
	}
	if d, err := s.Take(ctx, "last", roomy, 1); err != nil || !d.Allowed {
		t.Fatalf("last call: %+v, %v", d, err)
	}
	if got := fmt.Sprint(rec.batchSizes()); got != fmt.Sprintf("[1 1 %d 1]", others) {
		t.Errorf("batch sizes %s, want [1 1 %d 1]", got, others)
	}
	if got, want := rec.kinds(), "inline inline handoff inline"; got != want {
		t.Errorf("batches sent %s, want %s", got, want)
	}
	if n := commandStats(t, rdb) - before; n != 3 {
		t.Errorf("%d script calls for 3 round trips, want 3", n)
	}
}

// TestMixedPathsUnderConcurrency: callers whose ctxs take the inline path
// and callers whose ctxs take the hand-off share one store, with one and
// with several round trips in flight: every call is decided exactly once,
// none is lost or stuck, and the store ends idle.
func TestMixedPathsUnderConcurrency(t *testing.T) {
	addr := redistest.SharedServer(t).Addr()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 32})
	t.Cleanup(func() { _ = rdb.Close() })
	big := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1_000_000, Rate: 1, Period: time.Hour}
	for _, inFlight := range []int{1, 3} {
		t.Run(fmt.Sprintf("in_flight_%d", inFlight), func(t *testing.T) {
			s := newStoreWith(t, rdb, nil, redisstore.Config{MaxInFlight: inFlight})
			var inline, handoff, decided atomic.Int64
			redisstore.SetBatchHook(s, func(n int, in bool) {
				if in {
					inline.Add(1)
				} else {
					handoff.Add(1)
				}
				decided.Add(int64(n))
			})
			deadline, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cancellable, cancel2 := context.WithCancel(context.Background())
			defer cancel2()
			ctxs := []context.Context{context.Background(), deadline, cancellable}
			const callers, calls, keys = 16, 150, 4
			var wg sync.WaitGroup
			for g := range callers {
				wg.Go(func() {
					for i := range calls {
						key := "k" + strconv.Itoa((g+i)%keys)
						if _, err := s.Take(ctxs[(g+i)%len(ctxs)], key, big, 1); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if n := decided.Load(); n != callers*calls {
				t.Errorf("%d decisions sent, want %d", n, callers*calls)
			}
			var taken int64
			for k := range keys {
				d, err := s.Take(context.Background(), "k"+strconv.Itoa(k), big, 0)
				if err != nil {
					t.Fatal(err)
				}
				taken += big.Burst - d.Remaining
			}
			if taken != callers*calls {
				t.Errorf("%d tokens debited, want %d", taken, callers*calls)
			}
			// A sender gives its token back just after answering its
			// callers, so rest is awaited, not read at once.
			waitFor(t, "the store to rest", func() bool { return redisstore.Queued(s) == 0 && redisstore.InFlight(s) == 0 })
			t.Logf("%d inline and %d handed-off round trips for %d calls", inline.Load(), handoff.Load(), callers*calls)
		})
	}
}

// TestInlineDeadline: an inline call on a client that enforces ctx
// deadlines returns with an error once its deadline passes, while Redis
// holds the script (CLIENT PAUSE WRITE): the deadline is honoured without
// a sender.
func TestInlineDeadline(t *testing.T) {
	s, rec, admin := pausedIdleStore(t, redis.Options{ContextTimeoutEnabled: true})
	ctx := context.Background()

	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	d, err := s.Take(dctx, "paused", roomy, 1)
	var netErr net.Error
	if d.Allowed || !strings.HasPrefix(fmt.Sprint(err), "redisstore: ") ||
		!(errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()) {
		t.Fatalf("Take past its deadline with Redis paused: %+v, %v; want a timeout", d, err)
	}
	if got := rec.kinds(); got != "inline inline" {
		t.Fatalf("batches sent %s, want both inline", got)
	}
	if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Take(ctx, "later", roomy, 1); err != nil || !d.Allowed {
		t.Fatalf("Take after the pause: %+v, %v", d, err)
	}
}

// TestCallsQueueWhileInFlight: calls arriving while a round trip is in
// flight go out together in the next one, as one script call, so script
// calls per decision drop below 1 (counted by INFO commandstats).
func TestCallsQueueWhileInFlight(t *testing.T) {
	_, rdb, s := private(t, redisstore.Config{})
	rec := newRecorder()
	redisstore.SetBatchHook(s, rec.hook)
	ctx := context.Background()
	if _, err := s.Take(ctx, "warm-up", roomy, 0); err != nil {
		t.Fatal(err)
	}
	before := commandStats(t, rdb)
	release := rec.holdBatch(1)
	defer release()

	first := goTake(ctx, s, "user:0", roomy, 1)
	<-rec.seen // warm-up
	<-rec.seen // the first call's batch, now held
	const others = 31
	var outs []<-chan outcome
	for i := 1; i <= others; i++ {
		outs = append(outs, goTake(ctx, s, "user:"+strconv.Itoa(i%7), roomy, 1))
	}
	waitFor(t, "31 queued calls", func() bool { return redisstore.Queued(s) == others })
	release()
	for i, c := range append([]<-chan outcome{first}, outs...) {
		if o := <-c; o.err != nil || !o.d.Allowed {
			t.Fatalf("call %d: %+v, %v", i, o.d, o.err)
		}
	}
	if got := rec.batchSizes(); fmt.Sprint(got) != fmt.Sprint([]int{1, 1, others}) {
		t.Errorf("batch sizes %v, want [1 1 %d]", got, others)
	}
	n := commandStats(t, rdb) - before
	t.Logf("%d decisions in %d script calls: %.3f per decision", others+1, n, float64(n)/(others+1))
	if n != 2 {
		t.Errorf("%d script calls for %d decisions in 2 batches, want 2", n, others+1)
	}
}

// TestMaxBatchSize: a long queue leaves in batches of at most MaxBatchSize.
func TestMaxBatchSize(t *testing.T) {
	_, _, s := private(t, redisstore.Config{MaxBatchSize: 4})
	rec := newRecorder()
	redisstore.SetBatchHook(s, rec.hook)
	release := rec.holdBatch(0)
	ctx := context.Background()
	outs := []<-chan outcome{goTake(ctx, s, "k", roomy, 1)}
	<-rec.seen
	for range 10 {
		outs = append(outs, goTake(ctx, s, "k", roomy, 1))
	}
	waitFor(t, "10 queued calls", func() bool { return redisstore.Queued(s) == 10 })
	release()
	for _, c := range outs {
		if o := <-c; o.err != nil {
			t.Fatal(o.err)
		}
	}
	if got := rec.batchSizes(); fmt.Sprint(got) != "[1 4 4 2]" {
		t.Errorf("batch sizes %v, want [1 4 4 2]", got)
	}
}

// TestMaxBatchWait: after a round trip that carried several calls, a batch
// that is not full waits for more calls until it is full or the
// MaxBatchWait timer fires. After a round trip of one call it does not.
func TestMaxBatchWait(t *testing.T) {
	_, _, s := private(t, redisstore.Config{MaxBatchSize: 4, MaxBatchWait: time.Millisecond})
	rec := newRecorder()
	redisstore.SetBatchHook(s, rec.hook)
	started := make(chan time.Duration, 4)
	fire := make(chan time.Time)
	redisstore.SetBatchTimer(s, func(d time.Duration) (<-chan time.Time, func() bool) {
		started <- d
		return fire, func() bool { return true }
	})
	ctx := context.Background()
	var outs []<-chan outcome
	take := func(n int) {
		for range n {
			outs = append(outs, goTake(ctx, s, "k", roomy, 1))
		}
	}

	// Batch 0 (one call) is held while two calls queue: they leave at
	// once after it, as batch 1.
	release0 := rec.holdBatch(0)
	take(1)
	<-rec.seen
	take(2)
	waitFor(t, "2 queued calls", func() bool { return redisstore.Queued(s) == 2 })
	release1 := rec.holdBatch(1)
	release0()
	<-rec.seen

	// Batch 1 (two calls) is held while three calls queue; after it, the
	// sender waits for a fourth.
	take(3)
	waitFor(t, "3 queued calls", func() bool { return redisstore.Queued(s) == 3 })
	release2 := rec.holdBatch(2)
	release1()
	if d := <-started; d != time.Millisecond {
		t.Fatalf("timer for %v, want MaxBatchWait", d)
	}
	take(1) // fills batch 2
	<-rec.seen

	// Two more queue behind batch 2; the timer fires before they fill one.
	take(2)
	waitFor(t, "2 queued calls", func() bool { return redisstore.Queued(s) == 2 })
	release2()
	<-started
	fire <- time.Time{}
	for _, c := range outs {
		if o := <-c; o.err != nil {
			t.Fatal(o.err)
		}
	}
	if got := rec.batchSizes(); fmt.Sprint(got) != "[1 2 4 2]" {
		t.Errorf("batch sizes %v, want [1 2 4 2]", got)
	}
}

// TestCancelWhileQueued: a caller whose ctx ends while its call is queued
// returns at once with the ctx error (its round trip is still held), its
// call is never sent, and the others are decided.
func TestCancelWhileQueued(t *testing.T) {
	_, rdb, s := private(t, redisstore.Config{})
	rec := newRecorder()
	redisstore.SetBatchHook(s, rec.hook)
	release := rec.holdBatch(0)
	defer release()
	ctx := context.Background()

	first := goTake(ctx, s, "first", roomy, 1)
	<-rec.seen
	cctx, cancel := context.WithCancel(ctx)
	gone := goTake(cctx, s, "gone", roomy, 5)
	kept := goTake(ctx, s, "kept", roomy, 5)
	waitFor(t, "2 queued calls", func() bool { return redisstore.Queued(s) == 2 })
	cancel()
	o := <-gone // arrives while the first batch is still held
	if !errors.Is(o.err, context.Canceled) || o.d.Allowed || !strings.HasPrefix(o.err.Error(), "redisstore: token_bucket take: ") {
		t.Fatalf("cancelled call: %+v, %v; want a wrapped context.Canceled", o.d, o.err)
	}
	if n := redisstore.Queued(s); n != 1 {
		t.Fatalf("%d calls queued after the cancellation, want 1", n)
	}
	release()
	for _, c := range []<-chan outcome{first, kept} {
		if o := <-c; o.err != nil || !o.d.Allowed {
			t.Fatalf("%+v, %v", o.d, o.err)
		}
	}
	if got := rec.batchSizes(); fmt.Sprint(got) != "[1 1]" {
		t.Errorf("batch sizes %v, want [1 1]: the cancelled call was sent", got)
	}
	if got := rec.kinds(); got != "inline handoff" {
		t.Errorf("batches sent %s, want the first inline, the kept call by a sender", got)
	}
	if n := rdb.Exists(ctx, s.Key("gone", roomy.Algorithm)).Val(); n != 0 {
		t.Error("the cancelled call's bucket exists: it was debited")
	}
}

// TestCancelWhileInFlight: callers share a round trip that Redis holds
// (CLIENT PAUSE WRITE); the one whose ctx ends returns at once, and the
// others get their decisions when Redis answers. The cancelled call was
// sent, so its debit happened: only its result was discarded.
func TestCancelWhileInFlight(t *testing.T) {
	_, rdb, s := private(t, redisstore.Config{})
	rec := newRecorder()
	redisstore.SetBatchHook(s, rec.hook)
	ctx := context.Background()
	if _, err := s.Take(ctx, "warm-up", roomy, 0); err != nil {
		t.Fatal(err)
	}
	<-rec.seen
	admin := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	t.Cleanup(func() { _ = admin.Close() })
	defer admin.Do(ctx, "CLIENT", "UNPAUSE")

	release := rec.holdBatch(1)
	rec.mu.Lock()
	rec.before[2] = func() { // pause writes just before the shared batch leaves
		if err := pauseWrites(admin); err != nil {
			t.Error(err)
		}
	}
	rec.mu.Unlock()
	first := goTake(ctx, s, "first", roomy, 1)
	<-rec.seen
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gone := goTake(cctx, s, "gone", roomy, 5)
	kept := goTake(ctx, s, "kept", roomy, 5)
	waitFor(t, "2 queued calls", func() bool { return redisstore.Queued(s) == 2 })
	release()
	if o := <-first; o.err != nil {
		t.Fatal(o.err)
	}
	<-rec.seen // the shared batch is on its way
	waitFor(t, "the batch to block in Redis", func() bool { return blockedClients(t, admin) == 1 })

	cancel()
	if o := <-gone; !errors.Is(o.err, context.Canceled) || o.d.Allowed {
		t.Fatalf("cancelled call: %+v, %v; want context.Canceled", o.d, o.err)
	}
	select {
	case o := <-kept:
		t.Fatalf("the other call returned while Redis was paused: %+v, %v", o.d, o.err)
	default:
	}
	if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	if o := <-kept; o.err != nil || !o.d.Allowed || o.d.Remaining != roomy.Burst-5 {
		t.Fatalf("the other call: %+v, %v", o.d, o.err)
	}
	if got := rec.batchSizes(); fmt.Sprint(got) != "[1 1 2]" {
		t.Fatalf("batch sizes %v, want [1 1 2]", got)
	}
	if d, err := s.Take(ctx, "gone", roomy, 0); err != nil || d.Remaining != roomy.Burst-5 {
		t.Fatalf("peek at the cancelled call's bucket: %+v, %v; want its debit applied", d, err)
	}
}

// TestCancelLoneCall: a lone call whose ctx can only be cancelled is
// handed to a sender even on an idle store and a client that enforces
// deadlines, so its caller returns at once when cancelled while Redis
// holds the script (CLIENT PAUSE WRITE), long before the client's
// ReadTimeout.
func TestCancelLoneCall(t *testing.T) {
	s, rec, admin := pausedIdleStore(t, redis.Options{ContextTimeoutEnabled: true, ReadTimeout: time.Minute})
	ctx := context.Background()

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gone := goTake(cctx, s, "gone", roomy, 1)
	waitFor(t, "the call to block in Redis", func() bool { return blockedClients(t, admin) == 1 })
	cancel()
	if o := <-gone; !errors.Is(o.err, context.Canceled) || o.d.Allowed {
		t.Fatalf("cancelled lone call: %+v, %v; want context.Canceled", o.d, o.err)
	}
	if got := rec.kinds(); got != "inline handoff" {
		t.Errorf("batches sent %s, want the warm-up inline, the cancellable call by a sender", got)
	}
}

// pausedIdleStore starts a private server, a store on a client with opts
// (Addr is filled in) whose batches rec records, makes one warm-up call
// (sent inline), then pauses the server's writes, so the next script call
// blocks in Redis. admin, a separate client, unpauses when the test ends.
func pausedIdleStore(t *testing.T, opts redis.Options) (s *redisstore.Store, rec *recorder, admin *redis.Client) {
	t.Helper()
	srv := redistest.StartServer(t)
	opts.Addr = srv.Addr()
	rdb := redis.NewClient(&opts)
	t.Cleanup(func() { _ = rdb.Close() })
	s = newStore(t, rdb, nil)
	rec = newRecorder()
	redisstore.SetBatchHook(s, rec.hook)
	if _, err := s.Take(context.Background(), "warm-up", roomy, 0); err != nil {
		t.Fatal(err)
	}
	admin = redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	if err := pauseWrites(admin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "CLIENT", "UNPAUSE") })
	return s, rec, admin
}

// pauseWrites makes the server hold every write command (and so every
// script call) for up to a minute, until CLIENT UNPAUSE.
func pauseWrites(admin *redis.Client) error {
	return admin.Do(context.Background(), "CLIENT", "PAUSE", 60_000, "WRITE").Err()
}

// blockedClients reads INFO clients' blocked_clients: a client whose
// command waits in a CLIENT PAUSE counts.
func blockedClients(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "blocked_clients:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no blocked_clients in INFO clients")
	return 0
}

// TestRestartMidBatch: Redis dies and comes back, empty, while a batch is
// in flight and more calls are queued. The batch's callers get errors, the
// queued ones are decided by the new server (or fail), nobody hangs, and
// later calls succeed.
func TestRestartMidBatch(t *testing.T) {
	srv, rdb, s := private(t, redisstore.Config{})
	rec := newRecorder()
	redisstore.SetBatchHook(s, rec.hook)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = admin.Close() })

	release := rec.holdBatch(0)
	rec.mu.Lock()
	rec.before[1] = func() {
		if err := pauseWrites(admin); err != nil {
			t.Error(err)
		}
	}
	rec.mu.Unlock()
	first := goTake(ctx, s, "first", roomy, 1)
	<-rec.seen
	const n = 10
	var inFlight, queued []<-chan outcome
	for i := range n {
		inFlight = append(inFlight, goTake(ctx, s, "a:"+strconv.Itoa(i), roomy, 1))
	}
	waitFor(t, "10 queued calls", func() bool { return redisstore.Queued(s) == n })
	release()
	if o := <-first; o.err != nil {
		t.Fatal(o.err)
	}
	<-rec.seen
	waitFor(t, "the batch to block in Redis", func() bool { return blockedClients(t, admin) == 1 })
	for i := range n {
		queued = append(queued, goTake(ctx, s, "b:"+strconv.Itoa(i), roomy, 1))
	}
	waitFor(t, "10 more queued calls", func() bool { return redisstore.Queued(s) == n })

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for i, c := range inFlight {
		o := <-c
		if o.err == nil || o.d.Allowed || errors.Is(o.err, context.DeadlineExceeded) || !strings.HasPrefix(o.err.Error(), "redisstore: ") {
			t.Errorf("in-flight call %d: %+v, %v; want a redisstore error", i, o.d, o.err)
		}
	}
	failed := 0
	for i, c := range queued {
		o := <-c
		switch {
		case errors.Is(o.err, context.DeadlineExceeded):
			t.Errorf("queued call %d hung until the test's deadline", i)
		case o.err != nil:
			failed++
		case !o.d.Allowed || o.d.Remaining != roomy.Burst-1:
			t.Errorf("queued call %d: %+v; want a fresh bucket's decision", i, o.d)
		}
	}
	t.Logf("after the restart: %d of %d queued calls failed, the others were decided", failed, n)
	for i := range 3 {
		if d, err := s.Take(ctx, "later", roomy, 1); err != nil || d.Remaining != roomy.Burst-int64(i+1) {
			t.Fatalf("later call %d: %+v, %v", i, d, err)
		}
	}
}

// TestCloseStopsSenders: Close fails queued calls with ErrClosed, lets the
// round trip in flight finish (here an inline one, in its caller's
// goroutine), and returns once no goroutine of the store is left; later
// calls fail with ErrClosed.
func TestCloseStopsSenders(t *testing.T) {
	others := senderGoroutines(t) // other tests' stores, never closed
	_, _, s := private(t, redisstore.Config{})
	rec := newRecorder()
	redisstore.SetBatchHook(s, rec.hook)
	release := rec.holdBatch(0)
	ctx := context.Background()

	first := goTake(ctx, s, "first", roomy, 1)
	<-rec.seen
	queued := goTake(ctx, s, "queued", roomy, 1)
	waitFor(t, "a queued call", func() bool { return redisstore.Queued(s) == 1 })
	closed := make(chan struct{})
	go func() {
		_ = s.Close()
		close(closed)
	}()
	if o := <-queued; !errors.Is(o.err, redisstore.ErrClosed) || o.d.Allowed {
		t.Fatalf("queued call: %+v, %v; want ErrClosed", o.d, o.err)
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a round trip was in flight")
	default:
	}
	release()
	if o := <-first; o.err != nil || !o.d.Allowed {
		t.Fatalf("in-flight call: %+v, %v", o.d, o.err)
	}
	<-closed
	if n := redisstore.InFlight(s); n != redisstore.MaxInFlight(s) {
		t.Fatalf("Close returned holding %d round-trip tokens of %d", n, redisstore.MaxInFlight(s))
	}
	// Close has waited for them; they may still be unwinding.
	waitFor(t, "the sender goroutines to end", func() bool { return senderGoroutines(t) == others })
	if _, err := s.Take(ctx, "after", roomy, 1); !errors.Is(err, redisstore.ErrClosed) {
		t.Fatalf("Take after Close: %v; want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := rec.kinds(); got != "inline" {
		t.Errorf("batches sent %s, want the one inline", got)
	}
}

// TestSendersOwnedByStore: New starts exactly MaxInFlight sender
// goroutines and Close stops them; calls never start any, whether they run
// inline or are handed off, one at a time or many at once, and an idle
// store keeps exactly its fixed senders.
func TestSendersOwnedByStore(t *testing.T) {
	rdb := redistest.SharedServer(t).Client(t)
	for _, inFlight := range []int{1, 4} {
		t.Run(fmt.Sprintf("in_flight_%d", inFlight), func(t *testing.T) {
			others := senderGoroutines(t) // other tests' stores, never closed
			s, err := redisstore.New(rdb, redisstore.Config{Prefix: uniquePrefix(t), MaxInFlight: inFlight})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			waitFor(t, "the senders to start", func() bool { return senderGoroutines(t) == others+inFlight })
			cctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for round := range 3 {
				var wg sync.WaitGroup
				for i := range 16 {
					ctx := context.Background()
					if i%2 == 0 {
						ctx = cctx // handed off
					}
					wg.Go(func() {
						if _, err := s.Take(ctx, "k"+strconv.Itoa(i), roomy, 1); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
				if _, err := s.Take(context.Background(), "lone", roomy, 1); err != nil {
					t.Fatal(err)
				}
				if n := senderGoroutines(t) - others; n != inFlight {
					t.Fatalf("round %d: %d sender goroutines, want the %d New started", round, n, inFlight)
				}
				// A sender gives its token back just after answering.
				waitFor(t, "the store to rest", func() bool { return redisstore.Queued(s) == 0 && redisstore.InFlight(s) == 0 })
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the sender goroutines to end", func() bool { return senderGoroutines(t) == others })
		})
	}
}

// senderGoroutines counts the goroutines running a batcher's sender loop,
// in the whole test binary.
func senderGoroutines(t *testing.T) int {
	t.Helper()
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, block := range strings.Split(b.String(), "\n\n") {
		if strings.HasPrefix(block, "goroutine profile:") { // the header line
			_, block, _ = strings.Cut(block, "\n")
		}
		if strings.Contains(block, "redisstore.(*batcher).send") {
			count, _, _ := strings.Cut(block, " @ ")
			c, err := strconv.Atoi(strings.TrimSpace(count))
			if err != nil {
				t.Fatalf("goroutine profile: %q", block)
			}
			n += c
		}
	}
	return n
}

// TestBatchesDecideLikeSequentialCalls sends random batches (every
// algorithm, keys repeated within a batch, refunds, costs beyond capacity,
// a key of the wrong type) in one round trip each, and requires every
// decision to equal the pure arithmetic's, applied in batch order, key by
// key. On a Cluster the batches span slots: one script call per slot,
// pipelined per node.
func TestBatchesDecideLikeSequentialCalls(t *testing.T) {
	limits := []limiter.Limit{
		{Algorithm: limiter.TokenBucket, Burst: 5, Rate: 3, Period: time.Second},
		{Algorithm: limiter.LeakyBucketPolicing, Burst: 4, Rate: 7, Period: 3 * time.Second},
		{Algorithm: limiter.LeakyBucketShaping, Burst: 4, Rate: 3, Period: time.Second},
		{Algorithm: limiter.FixedWindow, Rate: 6, Period: 700 * time.Millisecond},
		{Algorithm: limiter.SlidingLog, Rate: 5, Period: time.Second},
		{Algorithm: limiter.SlidingCounter, Rate: 6, Period: 900 * time.Millisecond},
	}
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			rdb := target.client(t)
			clock := limitertest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			s := newStore(t, rdb, clock)
			ctx := context.Background()
			// One identity's token bucket holds a string: its calls fail,
			// alone.
			if err := rdb.Set(ctx, s.Key("spoilt", limiter.TokenBucket), "x", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 7))
			refs := map[string]*reference{}
			identities := []string{"a", "b", "c", "d{", "spoilt", "f", "g", "h"}
			for batch := range 60 {
				clock.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
				now := clock.Now()
				calls := make([]redisstore.BatchCall, 1+rng.IntN(150))
				for i := range calls {
					l := limits[rng.IntN(len(limits))]
					refund := rng.IntN(6) == 0 && l.Algorithm != limiter.LeakyBucketShaping
					calls[i] = redisstore.BatchCall{
						Identity: identities[rng.IntN(len(identities))],
						Limit:    l, Refund: refund, N: rng.Int64N(8),
					}
				}
				ds, errs := redisstore.RoundTrip(ctx, s, calls)
				for i, c := range calls {
					where := fmt.Sprintf("batch %d call %d (%s %s refund=%v n=%d)", batch, i, c.Identity, c.Limit.Algorithm, c.Refund, c.N)
					if c.Identity == "spoilt" && c.Limit.Algorithm == limiter.TokenBucket {
						if errs[i] == nil || ds[i].Allowed || !strings.Contains(errs[i].Error(), "WRONGTYPE") {
							t.Fatalf("%s: %+v, %v; want WRONGTYPE", where, ds[i], errs[i])
						}
						continue
					}
					k := c.Identity + "/" + c.Limit.Algorithm.String()
					if refs[k] == nil {
						refs[k] = &reference{}
					}
					want, wantErr := refs[k].call(c.Limit, now, c.Refund, c.N)
					if fmt.Sprint(errs[i]) != fmt.Sprint(wantErr) || ds[i] != want {
						t.Fatalf("%s:\n redis %+v, %v\n pure  %+v, %v", where, ds[i], errs[i], want, wantErr)
					}
				}
			}
		})
	}
}

// TestBatchScriptCalls: one script call decides up to MaxScriptKeys calls
// on a standalone server; a larger batch takes several, in one round trip.
func TestBatchScriptCalls(t *testing.T) {
	_, rdb, s := private(t, redisstore.Config{})
	ctx := context.Background()
	if _, err := s.Take(ctx, "warm-up", roomy, 0); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, redisstore.MaxScriptKeys, redisstore.MaxScriptKeys + 1, 3 * redisstore.MaxScriptKeys} {
		calls := make([]redisstore.BatchCall, n)
		for i := range calls {
			calls[i] = redisstore.BatchCall{Identity: "user:" + strconv.Itoa(i), Limit: roomy, N: 1}
		}
		before := commandStats(t, rdb)
		_, errs := redisstore.RoundTrip(ctx, s, calls)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		want := int64((n + redisstore.MaxScriptKeys - 1) / redisstore.MaxScriptKeys)
		if got := commandStats(t, rdb) - before; got != want {
			t.Errorf("batch of %d: %d script calls, want %d", n, got, want)
		}
	}
}

// TestBatchScriptCallsPerFamily: each algorithm family has its own script,
// so a batch mixing all six algorithms takes one script call per family (the
// three buckets share one), each decision still right.
func TestBatchScriptCallsPerFamily(t *testing.T) {
	_, rdb, s := private(t, redisstore.Config{})
	ctx := context.Background()
	limits := make([]limiter.Limit, 0, limiter.SlidingCounter+1)
	for a := limiter.TokenBucket; a <= limiter.SlidingCounter; a++ {
		l := limiter.Limit{Algorithm: a, Burst: 10, Rate: 10, Period: time.Minute}
		if _, err := s.Take(ctx, "warm-up", l, 0); err != nil { // caches the script
			t.Fatal(err)
		}
		limits = append(limits, l)
	}
	var calls []redisstore.BatchCall
	for i := range 3 * len(limits) { // the families interleaved
		calls = append(calls, redisstore.BatchCall{Identity: "user:" + strconv.Itoa(i), Limit: limits[i%len(limits)], N: 4})
	}
	before := commandStats(t, rdb)
	ds, errs := redisstore.RoundTrip(ctx, s, calls)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := commandStats(t, rdb) - before; got != 4 {
		t.Errorf("%d script calls for a batch of all six algorithms, want 4", got)
	}
	for i, d := range ds {
		if !d.Allowed || d.Remaining != 6 || d.Limit != 10 {
			t.Errorf("call %d (%s): %+v, want allowed with 6 of 10 left", i, calls[i].Limit.Algorithm, d)
		}
	}
}

// TestSlotMatchesRedis: the slot the store groups a batch by is the one
// Redis Cluster computes for every key of the identity.
func TestSlotMatchesRedis(t *testing.T) {
	rdb := redistest.SharedCluster(t).Client(t)
	s := newStore(t, rdb, nil)
	ctx := context.Background()
	ids := []string{"", "a", "user:42", "{", "}", "%", "\x00\xff", strings.Repeat("z", 500)}
	for i := range 200 {
		ids = append(ids, "id-"+strconv.Itoa(i))
	}
	for _, id := range ids {
		for _, a := range []limiter.Algorithm{limiter.TokenBucket, limiter.SlidingLog} {
			want, err := rdb.ClusterKeySlot(ctx, s.Key(id, a)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := redisstore.Slot(id); got != want {
				t.Fatalf("slot of %q: %d, Redis says %d", id, got, want)
			}
		}
	}
}

// plainScripter hides everything of a client but redis.Scripter, as a
// wrapper or a client from another library would.
type plainScripter struct{ redis.Scripter }

// TestSuiteThroughPlainScripter: a client that only implements
// redis.Scripter gets the same decisions, its batches sent one script call
// at a time, grouped by identity. Its keys are its own, so it runs in
// parallel with the other suites.
func TestSuiteThroughPlainScripter(t *testing.T) {
	t.Parallel()
	rdb := plainScripter{redistest.SharedServer(t).Client(t)}
	limitertest.Run(t, func(t *testing.T, clock limiter.Clock) limiter.Store {
		return newStore(t, rdb, clock)
	})
	s := newStore(t, rdb, nil)
	calls := []redisstore.BatchCall{
		{Identity: "a", Limit: roomy, N: 2}, {Identity: "b", Limit: roomy, N: 3}, {Identity: "a", Limit: roomy, N: 4},
	}
	ds, errs := redisstore.RoundTrip(context.Background(), s, calls)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := []int64{ds[0].Remaining, ds[1].Remaining, ds[2].Remaining}; fmt.Sprint(got) != "[998 997 994]" {
		t.Fatalf("remaining %v, want [998 997 994]", got)
	}
}
