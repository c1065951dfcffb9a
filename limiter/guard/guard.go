// Package guard decides what becomes of a call to the budget store when the
// store fails.
//
// A Guard owns everything that happens then: the per-call timeout, the
// circuit breaker (limiter/breaker), the fail-open fallback (a
// limiter/lastknown store) with the flush of its debts (what the fallback
// admitted is debited from the store once it answers again, by a
// goroutine the Guard owns), and the overflow
// buckets of identities a full memory store cannot hold. Each call says its
// failure mode (Call.FailOpen): every call shares one breaker and one
// fallback, but a fail-closed call is refused (ErrUnavailable) where a
// fail-open one is decided by the fallback.
//
// The caller learns what the calls of a decision did through a Trace it
// passes by pointer (whether the store was called, how it answered, how
// long it took, whether the fallback or the overflow decided, whether the
// breaker moved), and gives points back through the Receipt the Trace
// holds: the store, fallback or overflow bucket that took them.
//
// Package limiter/stack builds a Guard in front of the store it puts
// together; a program deciding budgets needs no other.
package guard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/lastknown"
	"github.com/costguard/costguard/limiter/memorystore"
)

// Errors a call answers with besides the store's own.
var (
	// ErrUnavailable: the store failed or timed out (or its breaker is
	// open) and the call fails closed, or the caller's ctx ended first.
	// It wraps the cause.
	ErrUnavailable = errors.New("guard: rate limiter unavailable")
	// ErrBreakerOpen: the breaker kept the call off the store.
	ErrBreakerOpen = errors.New("guard: store circuit breaker open")
	// ErrInvalidConfig wraps every error New returns.
	ErrInvalidConfig = errors.New("guard: invalid config")
)

// OverflowPrefix prefixes a plan's name to make its overflow bucket's key.
const OverflowPrefix = "overflow:"

// MultiStore decides, and gives back, several budgets at once.
type MultiStore interface {
	limiter.MultiTaker
	limiter.MultiRefunder
}

// Cache answers a refusal it remembers without asking the store (the
// over-limit cache, limiter/overlimit, in front of Config.Store).
type Cache interface {
	Remembered(key string, limit limiter.Limit, cost int64) (limiter.Decision, bool)
	RememberedAll(reqs []limiter.Request, ds []limiter.Decision) (bool, error)
}

// Config is what a Guard is built of. Store, Fallback and Overflow are
// required.
type Config struct {
	// Store holds the budgets (behind the over-limit cache, when on).
	Store limiter.Store
	// Multi is Store deciding several budgets at once; nil when it cannot
	// (TakeAll then refuses with limiter.ErrTakeAllUnsupported).
	Multi MultiStore
	// Leased is the store of the calls with Call.Leased (split-budget
	// leases on Store); nil: Store.
	Leased limiter.Store
	// Cache is the over-limit cache in front of Store, asked before the
	// breaker: its answer is not the store's. Nil: none.
	Cache Cache
	// Fallback decides fail-open calls while the store is away.
	Fallback *lastknown.Store
	// Overflow holds the buckets of the identities a full memory store
	// cannot hold, one per plan (OverflowPrefix + Call.Plan).
	Overflow *memorystore.Store
	// Local says the store answers in memory under a lock: its calls get no
	// timeout, no breaker, and the fallback is never told of them.
	Local bool
	// Timeout bounds every call to a store that is not Local. Required.
	Timeout time.Duration
	// Breaker keeps calls off a store that keeps failing; nil: none. A
	// Local store has none.
	Breaker *breaker.Breaker
	// Clock is the breaker's time source. Default limiter.SystemClock.
	Clock limiter.Clock
	// Logger is told when the breaker moves. Default slog.Default().
	Logger *slog.Logger
	// FlushInterval is how often the fallback's debts are debited from the
	// store while any is held (and at once when the store answers or the
	// breaker closes). Default DefaultFlushInterval.
	FlushInterval time.Duration
	// CheckDataLoss, when set, is called before each flush of the
	// fallback's debts: it finds out, under ctx, whether the store lost
	// its data since it last looked and, if so, has the fallback's debts
	// dropped (lastknown.Store.DropDebts) before it returns, so that none
	// is repaid into a fresh budget. An error (the store cannot say)
	// postpones the flush. Package stack wires it to a
	// redisstore.Store's CheckDataLoss.
	CheckDataLoss func(ctx context.Context) error
}

// Call says how one decision fails and where its budgets are.
type Call struct {
	// Plan names the plan's overflow bucket.
	Plan string
	// FailOpen decides with the fallback when the store fails or its
	// breaker is open; false refuses (ErrUnavailable).
	FailOpen bool
	// Leased takes from Config.Leased (split-budget leases).
	Leased bool
}

// Result is how the store calls of a decision ended. Its values are the
// result label of costguard_store_duration_seconds: new ones may be added,
// none renamed.
type Result string

// The results; ResultNone ("") when no call was made.
const (
	ResultNone    Result = ""
	ResultOK      Result = "ok"
	ResultError   Result = "error"
	ResultTimeout Result = "timeout"
	// ResultSkipped: the breaker kept the call off the store, so the
	// decision was made without calling it (by the failure mode), in no
	// time.
	ResultSkipped Result = "skipped"
)

// BreakerState is where the store's circuit breaker stands. Its values are
// stable: new ones may be added, none renamed.
type BreakerState string

// The breaker states; "" when there is no breaker.
const (
	BreakerClosed   BreakerState = "closed"
	BreakerOpen     BreakerState = "open"
	BreakerHalfOpen BreakerState = "half_open"
)

// Trace is what the calls of one decision did, for its report. A Trace
// passed to several calls adds them up.
type Trace struct {
	// Took is the time spent waiting for the store.
	Took time.Duration
	// Result is how the last store call ended.
	Result Result
	// Fallback: the fail-open fallback decided.
	Fallback bool
	// Overflow: the plan's overflow bucket decided (a full memory store).
	Overflow bool
	// Gone: the caller's ctx ended before the store answered; nothing was
	// decided.
	Gone bool
	// BreakerChanged: a call moved the breaker.
	BreakerChanged bool
	// Failure is the store's error the call's failure mode decided for
	// (nil: none), for the caller's log.
	Failure error
	// Receipt is where the last call took its points.
	Receipt Receipt
}

// source names the store a Receipt points at.
type source uint8

const (
	none source = iota
	exact
	leased
	fallback
	overflow
)

// Receipt says which store took a call's points and under which key, so
// that they are given back (Refund) or added to (TakeSpent) there. The
// zero Receipt took nothing.
type Receipt struct {
	from source
	// Key is the budget's key there: the caller's, or the overflow
	// bucket's.
	Key string
}

// Taken reports whether r took anything.
func (r Receipt) Taken() bool { return r.from != none }

// Guard is safe for concurrent use. Close stops its flush.
type Guard struct {
	store    limiter.Store
	multi    MultiStore
	leased   limiter.Store
	cache    Cache
	fallback *lastknown.Store
	overflow *memorystore.Store
	local    bool
	timeout  time.Duration
	brk      *breaker.Breaker
	clock    limiter.Clock
	log      *slog.Logger
	// checkLoss is Config.CheckDataLoss.
	checkLoss func(ctx context.Context) error
	flush     flusher
}

// New checks cfg and returns a Guard. Unless the store is Local, it starts
// the flush of the fallback's debts, which Close stops.
func New(cfg Config) (*Guard, error) {
	return newGuard(cfg, nil)
}

// newGuard is New with the flush driven by tick when it is not nil
// (tests).
func newGuard(cfg Config, tick <-chan time.Time) (*Guard, error) {
	switch {
	case cfg.Store == nil || cfg.Fallback == nil || cfg.Overflow == nil:
		return nil, fmt.Errorf("%w: Store, Fallback and Overflow are required", ErrInvalidConfig)
	case cfg.Timeout <= 0:
		return nil, fmt.Errorf("%w: Timeout %v must be positive", ErrInvalidConfig, cfg.Timeout)
	case cfg.FlushInterval < 0:
		return nil, fmt.Errorf("%w: FlushInterval %v is negative", ErrInvalidConfig, cfg.FlushInterval)
	}
	g := &Guard{
		store:     cfg.Store,
		multi:     cfg.Multi,
		leased:    cfg.Leased,
		cache:     cfg.Cache,
		fallback:  cfg.Fallback,
		overflow:  cfg.Overflow,
		local:     cfg.Local,
		timeout:   cfg.Timeout,
		clock:     cfg.Clock,
		log:       cfg.Logger,
		checkLoss: cfg.CheckDataLoss,
	}
	if g.leased == nil {
		g.leased = g.store
	}
	if !g.local {
		g.brk = cfg.Breaker
	}
	if g.clock == nil {
		g.clock = limiter.SystemClock{}
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	if !g.local {
		g.startFlush(cmp.Or(cfg.FlushInterval, DefaultFlushInterval), tick)
	}
	return g, nil
}

// Close stops the flush of the fallback's debts: a debit in flight
// finishes (under the timeout), the rest stays owed. No flush starts
// after it.
func (g *Guard) Close() error {
	g.stopFlush()
	return nil
}

// BreakerState is where the breaker stands, "" without one.
func (g *Guard) BreakerState() BreakerState {
	if g.brk == nil {
		return ""
	}
	return BreakerState(g.brk.State().String())
}

// Take debits cost from key's budget, under the timeout, the breaker and
// c's failure mode; tr records the call.
func (g *Guard) Take(ctx context.Context, c Call, key string, limit limiter.Limit, cost int64, tr *Trace) (limiter.Decision, error) {
	store, from := g.store, exact
	if c.Leased {
		store, from = g.leased, leased
	}
	tr.Receipt = Receipt{from: from, Key: key}
	if g.cache != nil && from == exact {
		// A refusal the over-limit cache remembers is answered without the
		// store: it must not count as the store's success for the breaker
		// (a failing store would stay "healthy" while refused clients
		// hammer it), nor wait for the breaker's permission.
		if d, hit := g.cache.Remembered(key, limit, cost); hit {
			tr.Result = ResultOK
			return d, nil
		}
	}
	a := attempt{store: store, key: key, limit: limit, cost: cost}
	if err := g.decide(ctx, c, tr, &a); err != nil {
		if errors.Is(err, ErrUnavailable) {
			return limiter.Decision{}, err // nothing decided: no stale answer
		}
		return a.d, err
	}
	return a.d, nil
}

// TakeAll debits several budgets of one request all or none (the budgets
// of one owner: a Redis Cluster keeps them in one slot), as Take does one;
// tr records the call. When the overflow buckets decide, the keys of reqs
// are rewritten in place to theirs, so that what was taken is given back
// there too. It fails with an error wrapping limiter.ErrTakeAllUnsupported
// for a Leased call, or when the store decides one budget at a time.
func (g *Guard) TakeAll(ctx context.Context, c Call, reqs []limiter.Request, ds []limiter.Decision, tr *Trace) error {
	if c.Leased || g.multi == nil {
		return fmt.Errorf("guard: %w", limiter.ErrTakeAllUnsupported)
	}
	tr.Receipt = Receipt{from: exact, Key: reqs[0].Key}
	if g.cache != nil {
		if hit, err := g.cache.RememberedAll(reqs, ds); hit { // as Take: not the store's answer
			tr.Result = ResultOK
			return err
		}
	}
	return g.decide(ctx, c, tr, &attempt{many: true, multi: g.multi, reqs: reqs, ds: ds})
}

// attempt is one debit or refund the guard makes: one budget (store, key,
// limit, cost, its decision d) or, when many, several all or none (multi,
// reqs, ds).
// One concrete type, switching on many at each step, keeps it on the
// caller's stack; an interface per shape would move it to the heap.
type attempt struct {
	many  bool
	store limiter.Store
	multi MultiStore
	key   string
	limit limiter.Limit
	cost  int64
	d     limiter.Decision
	reqs  []limiter.Request
	ds    []limiter.Decision
}

// decide runs one debit through the failure sequence, the one place it is
// written: the store under the breaker and the timeout; its answer taught
// to the fallback, with what an outage's fallback admitted repaid; a full
// memory store sent to the overflow buckets; a failure refused (fail
// closed) or decided by the fallback (fail open).
func (g *Guard) decide(ctx context.Context, c Call, tr *Trace, a *attempt) error {
	var err error
	if t := g.allow(tr); t.Allowed {
		tctx, cancel := g.callContext(ctx)
		seq := g.start()
		began := time.Now() // a latency, not the limiter's clock
		if a.many {
			err = a.multi.TakeAll(tctx, a.reqs, a.ds)
		} else {
			a.d, err = a.store.Take(tctx, a.key, a.limit, a.cost)
		}
		tr.Took += time.Since(began)
		tr.Result = result(ctx, tctx, err, tr)
		cancel()
		g.done(ctx, t, err, tr)
		if decided(err) {
			if g.remembers() {
				g.learn(seq, a)
			}
			return err
		}
		if isFull(err) {
			return g.overflowFor(ctx, c, tr, a)
		}
		if ctx.Err() != nil {
			// The client went away: not the store's failure, and nobody is
			// left to admit.
			return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
		tr.Failure = err
	} else {
		tr.Result, err = ResultSkipped, ErrBreakerOpen
	}
	if !c.FailOpen {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// The local store never blocks, so the caller's ctx is bound enough.
	tr.Fallback, tr.Receipt.from = true, fallback
	if a.many {
		err = g.fallback.TakeAll(ctx, a.reqs, a.ds)
	} else {
		a.d, err = g.fallback.Take(ctx, a.key, a.limit, a.cost)
	}
	if isFull(err) {
		return g.overflowFor(ctx, c, tr, a)
	}
	return err
}

// learn teaches the fallback what the store answered for a, a call
// numbered seq, and starts the flush of what an outage's fallback admitted
// when anything is owed.
func (g *Guard) learn(seq lastknown.Seq, a *attempt) {
	if !a.many {
		g.fallback.ObserveFrom(seq, a.key, a.limit, a.cost, a.d)
	} else {
		g.fallback.ObserveAllFrom(seq, a.reqs, a.ds)
	}
	g.kickFlush()
}

// start numbers a store call whose answer the fallback will learn (0 when
// it learns none).
func (g *Guard) start() lastknown.Seq {
	if !g.remembers() {
		return 0
	}
	return g.fallback.Start()
}

// overflowFor decides a for an identity that a full memory store cannot
// hold without resetting another identity's budget (memorystore.ErrFull):
// it spends from one bucket per plan and budget name, shared by every such
// identity, with the plan's limits. A flood of new identities then
// exhausts that bucket, not anyone else's budget, and never gets a fresh
// burst per identity. The keys of a's requests are rewritten so that what
// was taken is given back there too.
func (g *Guard) overflowFor(ctx context.Context, c Call, tr *Trace, a *attempt) (err error) {
	key := OverflowPrefix + c.Plan
	tr.Receipt, tr.Overflow = Receipt{from: overflow, Key: key}, true
	if !a.many {
		a.d, err = g.overflow.Take(ctx, key, a.limit, a.cost)
		return err
	}
	for i := range a.reqs {
		a.reqs[i].Key = key
	}
	return g.overflow.TakeAll(ctx, a.reqs, a.ds)
}

// Refund gives amount back to key's budget (r.Key) where r took it, under
// the timeout and, for the store, its breaker: while the breaker is open
// nothing is given back (the points return by refill) and the error wraps
// ErrBreakerOpen.
func (g *Guard) Refund(ctx context.Context, r Receipt, limit limiter.Limit, amount int64) (limiter.Decision, error) {
	store := g.singleOf(r)
	if store == nil {
		return limiter.Decision{}, errors.New("guard: nothing was taken")
	}
	a := attempt{store: store, key: r.Key, limit: limit, cost: amount}
	err := g.giveBack(ctx, r, &a)
	return a.d, err
}

// RefundAll gives back what a TakeAll took where r says it took it, as
// Refund does one budget.
func (g *Guard) RefundAll(ctx context.Context, r Receipt, reqs []limiter.Request, ds []limiter.Decision) error {
	store, err := g.multiOf(r)
	if err != nil {
		return err
	}
	return g.giveBack(ctx, r, &attempt{many: true, multi: store, reqs: reqs, ds: ds})
}

// giveBack refunds a where r took it, the one place a refund is written:
// under the timeout and, for the store, its breaker, whose answer the
// fallback learns.
func (g *Guard) giveBack(ctx context.Context, r Receipt, a *attempt) (err error) {
	remote := g.remote(r)
	t := breaker.Ticket{Allowed: true}
	if remote {
		if t = g.allow(nil); !t.Allowed {
			return ErrBreakerOpen
		}
	}
	tctx, cancel := g.callContext(ctx)
	var seq lastknown.Seq
	if remote {
		seq = g.start()
	}
	if a.many {
		err = a.multi.RefundAll(tctx, a.reqs, a.ds)
	} else {
		a.d, err = a.store.Refund(tctx, a.key, a.limit, a.cost)
	}
	cancel()
	if remote {
		g.done(ctx, t, err, nil)
		if err == nil && g.remembers() {
			if a.many {
				g.fallback.ObserveAllFrom(seq, a.reqs, a.ds)
			} else {
				g.fallback.ObserveFrom(seq, a.key, a.limit, 0, a.d)
			}
		}
	}
	return err
}

// multiOf is the store r took from, deciding several budgets at once.
func (g *Guard) multiOf(r Receipt) (MultiStore, error) {
	switch r.from {
	case exact:
		if g.multi != nil {
			return g.multi, nil
		}
	case fallback:
		return g.fallback, nil
	case overflow:
		return g.overflow, nil
	case none:
		return nil, errors.New("guard: nothing was taken")
	}
	return nil, fmt.Errorf("guard: %w", limiter.ErrTakeAllUnsupported)
}

// singleOf is the store r took from, one budget at a time.
func (g *Guard) singleOf(r Receipt) limiter.Store {
	switch r.from {
	case exact:
		return g.store
	case leased:
		return g.leased
	case fallback:
		return g.fallback
	case overflow:
		return g.overflow
	}
	return nil
}

// Do runs f under the timeout and the breaker, which counts its result as
// a store call's: a store of another kind behind the same link (the
// concurrency slots of a shared store). While the breaker keeps calls off
// the store, f does not run and Do answers ErrBreakerOpen.
func (g *Guard) Do(ctx context.Context, f func(context.Context) error) error {
	t := g.allow(nil)
	if !t.Allowed {
		return ErrBreakerOpen
	}
	tctx, cancel := context.WithTimeout(ctx, g.timeout)
	err := f(tctx)
	cancel()
	g.done(ctx, t, err, nil)
	return err
}

// Closed reports whether the breaker lets every call through (true
// without a breaker).
func (g *Guard) Closed() bool { return g.brk == nil || g.brk.State() == breaker.Closed }

// Timeout is the bound of every call to a store that is not local.
func (g *Guard) Timeout() time.Duration { return g.timeout }

// remembers reports whether the store's answers are handed to the
// fallback, so that it starts from them: a shared store.
func (g *Guard) remembers() bool { return !g.local }

// remote reports whether r points at the store behind the breaker (not the
// fallback nor the overflow buckets).
func (g *Guard) remote(r Receipt) bool {
	return g.brk != nil && (r.from == exact || r.from == leased)
}

// callContext bounds a store call by the timeout. The in-memory store
// answers under a lock and never waits, so its calls keep ctx as it is: a
// deadline costs a timer and four allocations a call.
func (g *Guard) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if g.local {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, g.timeout)
}

func noCancel() {}

// allow asks the breaker whether a store call may be made now; tr records
// a transition. Without a breaker every call is allowed.
func (g *Guard) allow(tr *Trace) breaker.Ticket {
	if g.brk == nil {
		return breaker.Ticket{Allowed: true}
	}
	t := g.brk.Allow(g.clock.Now())
	g.moved(t.Change, tr)
	return t
}

// done tells the breaker how an allowed call ended: abandoned when the
// caller's ctx ended first, a failure on any other error but those a store
// answers with (a cost above capacity, a full memory store, a debit
// refused while others spent the budget).
func (g *Guard) done(ctx context.Context, t breaker.Ticket, err error, tr *Trace) {
	if g.brk == nil {
		return
	}
	r := breaker.Success
	switch {
	case decided(err) || isFull(err) || errors.Is(err, errContended):
	case ctx.Err() != nil:
		r = breaker.Abandoned
	default:
		r = breaker.Failure
	}
	if r == breaker.Success && t.Allowed && g.brk.State() == breaker.Closed {
		g.brk.Done(time.Time{}, t, r) // the closed fast path reads no clock
		return
	}
	g.moved(g.brk.Done(g.clock.Now(), t, r), tr)
}

// moved logs a transition once (Warn on opening, Info on closing) and
// marks the decision that made it.
func (g *Guard) moved(c breaker.Change, tr *Trace) {
	if !c.Changed() {
		return
	}
	if tr != nil {
		tr.BreakerChanged = true
	}
	switch c.To {
	case breaker.Open:
		g.log.Warn("guard: rate-limit store circuit breaker open; deciding by each plan's failure mode without the store",
			"from", c.From.String(), "cool_down", g.brk.CoolDown())
	case breaker.Closed:
		g.log.Info("guard: rate-limit store circuit breaker closed; the store answers again")
		g.kickFlush()
	default:
		g.log.Debug("guard: rate-limit store circuit breaker half-open; probing the store")
	}
}

// decided reports whether err leaves a decision to read: none, or a cost
// above the budget's capacity.
func decided(err error) bool {
	return err == nil || errors.Is(err, limiter.ErrCostExceedsCapacity)
}

// isFull reports whether err says a memory store could not take a new
// identity without resetting another's budget.
func isFull(err error) bool { return errors.Is(err, memorystore.ErrFull) }

// result names how a store call under tctx (from ctx) ended, and marks tr
// gone when the caller left first.
func result(ctx, tctx context.Context, err error, tr *Trace) Result {
	switch {
	case decided(err) || isFull(err):
		return ResultOK
	case ctx.Err() != nil:
		tr.Gone = true
		return tr.Result
	case tctx.Err() == context.DeadlineExceeded:
		return ResultTimeout
	}
	return ResultError
}
