// Package budget decides what a request's cost does to its principal's
// budgets.
//
// An Engine decides by a compiled, validated Policy (plans, quotas, field
// and route limits, lane budgets, modes) on the stores of a limiter/stack,
// with no transport and no GraphQL: a principal key, a plan, a price in
// points, optional field counts (FieldCount), a route and a lane go in,
// one Outcome comes out, whatever priced the request (the complexity
// package, a proxy's table, a REST route's fixed cost). Charge debits a
// price, ChargeInvalid the cost of a request refused before it could be
// priced, Peek reads a bucket without spending, Settle debits or gives
// back the difference between a price and what a response actually cost,
// Refund gives points back; AcquireSlot leases one of a principal's
// requests in flight. The verdict table (Verdict.Answer: the GraphQL code
// and HTTP status of each outcome) and shadow mode are applied here and
// nowhere else, so an HTTP middleware, a reverse proxy, an Envoy
// rate-limit service or a gRPC interceptor render the same decisions.
//
//	pol, err := budget.Compile(budget.Config{Plans: map[string]budget.Plan{"free": {Burst: 100, Rate: 100, Per: time.Minute}}})
//	st, err := stack.New(stack.Config{Store: redisStore, OverflowKeys: pol.OverflowBudgets()})
//	eng, err := budget.NewEngine(st, pol)
//	free, _ := eng.Policy().Plan("free")
//	o := eng.Charge(ctx, budget.Request{Key: "user:42", Rule: free, Cost: 12})
//	if o.Verdict != budget.Admitted { status := o.Verdict.Answer().Status ... }
package budget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/costguard/costguard/internal/seconds"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/limiter/stack"
)

// UnavailableRetryAfter is the wait of a refusal because the store is
// unavailable: long enough not to hammer a recovering store, short enough
// to notice it is back.
const UnavailableRetryAfter = time.Second

// Engine decides. It is safe for concurrent use; it owns nothing it must
// close (the stack is its caller's).
type Engine struct {
	stores *stack.Stack
	policy atomic.Pointer[Policy]
	slots  concurrency.Slots
	// slotTTL is a lease's life; slotsGuarded: the slots live behind the
	// store's breaker (a shared store).
	slotTTL      time.Duration
	slotsGuarded bool
	clock        limiter.Clock
	log          *slog.Logger
	jitter       float64
	rand         func() float64
	start        time.Time
}

// Option configures an Engine.
type Option func(*Engine)

// WithClock sets the time source of the log gates. Default
// limiter.SystemClock.
func WithClock(c limiter.Clock) Option { return func(e *Engine) { e.clock = c } }

// WithLogger sets the logger of store failures and shadow refusals.
// Default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithRetryAfterJitter adds up to this fraction of each Retry-After, at
// random, so refused clients do not return in lockstep. Between 0 (the
// default) and 1.
func WithRetryAfterJitter(f float64) Option { return func(e *Engine) { e.jitter = f } }

// WithSlots keeps the leases of AcquireSlot in slots, each living ttl
// unless released first; guarded puts their calls behind the store's
// breaker (slots in the shared store).
func WithSlots(slots concurrency.Slots, ttl time.Duration, guarded bool) Option {
	return func(e *Engine) { e.slots, e.slotTTL, e.slotsGuarded = slots, ttl, guarded }
}

// NewEngine returns an Engine deciding by p on the stores of st.
func NewEngine(st *stack.Stack, p *Policy, opts ...Option) (*Engine, error) {
	e := &Engine{stores: st, rand: rand.Float64}
	for _, o := range opts {
		o(e)
	}
	if math.IsNaN(e.jitter) || e.jitter < 0 || e.jitter > 1 {
		return nil, keyed(fmt.Errorf("%w: RetryAfterJitter %v is not between 0 and 1", ErrInvalidConfig, e.jitter), "retry_after_jitter")
	}
	if e.clock == nil {
		e.clock = limiter.SystemClock{}
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.start = e.clock.Now()
	if err := e.Swap(p); err != nil {
		return nil, err
	}
	return e, nil
}

// Policy is the Policy in force.
func (e *Engine) Policy() *Policy { return e.policy.Load() }

// Swap checks that the stores can decide p (Check) and puts it in force
// atomically: a decision in flight finishes under the Policy it started
// with, the next one sees p.
func (e *Engine) Swap(p *Policy) error {
	if err := e.Check(p); err != nil {
		return err
	}
	e.policy.Store(p)
	return nil
}

// Check reports whether the stores can decide p: split-budget leases for
// the plans asking for them, several budgets at once for the plans with a
// quota or field limits, an overflow bucket for each budget. A stack
// shaped without them must be rebuilt.
func (e *Engine) Check(p *Policy) error {
	if n, room := p.OverflowBudgets(), e.stores.OverflowKeys(); n > room {
		return fmt.Errorf("%w: %d overflow budgets (plans × (bucket, quota, field limits) and lane budgets): the stores have room for %d without a restart", ErrInvalidConfig, n, room)
	}
	for _, name := range p.names {
		if err := e.CheckRule(p.plans[name]); err != nil {
			return err
		}
	}
	return nil
}

// CheckRule reports whether the stores can decide r, a plan's rule or an
// override's (Policy.Override): split-budget leases when it asks for them,
// several budgets at once when it has a quota or there are field limits.
func (e *Engine) CheckRule(r *Rule) error {
	if r.SplitBudget && !e.stores.Leases() {
		return fmt.Errorf("%w: plan %q: SplitBudget needs split-budget leases, which the stores were built without (no plan had SplitBudget); restart to add them", ErrInvalidConfig, r.name)
	}
	if r.policy.MultiLimited(r) {
		// A split-budget plan takes only route limits in several budgets
		// at once, from the store (spendSplit).
		if err := e.stores.CanTakeAll(false); err != nil {
			return fmt.Errorf("%w: plan %q: quotas, field limits and route limits need a store that decides several budgets at once (limiter.MultiTaker and limiter.MultiRefunder: memorystore, redisstore): %w", ErrInvalidConfig, r.name, err)
		}
	}
	return nil
}

// Request is what a decision is about.
type Request struct {
	// Key names the principal who pays.
	Key string
	// Addr keys the client's address, for the field and route limits
	// counted ByIP or ByBoth ("": the principal's key).
	Addr string
	// Rule is the principal's plan, from the Policy the request started
	// under (Policy.Plan).
	Rule *Rule
	// Lane is the budget of the request's lane (Policy.Lane), nil for none.
	Lane *Rule
	// Cost is the price, in points.
	Cost int64
	// Fields are the selections of the fields the operation selects; the
	// limited ones are decided with the plan's bucket.
	Fields []FieldCount
	// Route is the limit of the request's route (Policy.Route), nil for
	// none: it counts 1, decided with the plan's bucket.
	Route *RouteRule
	// ChargeInvalidIfNever makes a request whose cost can never be paid
	// (above the plan's burst, or a field selected more often than its
	// limit) pay the Policy's InvalidCost instead, as a request refused by
	// a static cap does.
	ChargeInvalidIfNever bool
}

// FieldCount is how many times a request selects one field, the count its
// field limit is debited (a complexity.FieldCount converts to it).
type FieldCount struct {
	// Coordinate is the field's schema coordinate: "Mutation.login".
	Coordinate string
	// Count is how many times the field would execute; 0 or less counts
	// nothing.
	Count int64
	// Path is the response path of its first selection, for the error of
	// a refusal (Use.Path).
	Path []string
}

// call is how r's budget is decided by the store's guard: its failure
// mode, whether from split-budget leases, and its overflow bucket.
func (r *Rule) call() guard.Call {
	return guard.Call{Plan: cmpOr(r.overflow, r.name), FailOpen: r.failOpen, Leased: r.SplitBudget}
}

// Charge debits req.Cost from the principal's bucket on req.Rule, its
// quota and the field limits req.Fields selects (all or nothing), then
// from the lane's budget, and applies shadow mode.
func (e *Engine) Charge(ctx context.Context, req Request) Outcome {
	o := e.spendAll(ctx, req)
	if req.Rule.Unlimited && o.Verdict.refusedForBudget() {
		// Run unpaid: nothing was debited, and the decisions read stay as
		// they are for the headers.
		o.Verdict, o.RetryAfter, o.Never, o.ByLimit, o.ByLane = Admitted, 0, false, nil, nil
		return o
	}
	if req.ChargeInvalidIfNever && (o.Verdict == OverBudget || o.Never) {
		// It can never run: it pays InvalidCost, as a static cap would.
		if paid := e.chargeInvalid(ctx, req.Key, req.Rule); paid.Verdict == CapExceeded {
			trace := o.Trace
			o = Outcome{Verdict: o.Verdict, Decision: paid.Decision, Known: paid.Known, Charged: paid.Charged, Trace: trace,
				ByLane: o.ByLane, Limits: o.Limits, ByLimit: o.ByLimit, Never: o.Never}
			addTrace(&o.Trace, paid.Trace)
		} else {
			o = paid
		}
	}
	e.shadow(ctx, req.Rule, &o)
	return o
}

// ChargeInvalid debits the Policy's InvalidCost from the bucket and the
// quota of a request refused before it could be priced. Once paid, the
// verdict is paid (CapExceeded: a static cap refused it; Invalid: the
// adapter refuses it with its own status); else it is what refused the
// payment. When shadowable (a static cap) and the plan is in shadow mode,
// the request is let through (Admitted, Shadowed). A request shadow mode
// cannot let through is refused by its own reason, never by the budget's.
func (e *Engine) ChargeInvalid(ctx context.Context, key string, r *Rule, paid Verdict, shadowable bool) Outcome {
	o := e.chargeInvalid(ctx, key, r)
	if o.Verdict == CapExceeded {
		o.Verdict = paid
	}
	if shadowable && e.shadow(ctx, r, &o) {
		return o
	}
	if (o.Verdict == RateLimited && r.shadow) || (o.Verdict.refusedForBudget() && r.Unlimited) {
		o.Verdict, o.RetryAfter = paid, 0 // refused all the same, by its own reason
	}
	return o
}

// chargeInvalid debits InvalidCost, from the bucket and the quota. The
// verdict is CapExceeded once paid, else what refused the payment.
func (e *Engine) chargeInvalid(ctx context.Context, key string, r *Rule) Outcome {
	o := e.spendAll(ctx, Request{Key: key, Rule: r, Cost: r.policy.invalid}) // the quota pays it too
	if o.Verdict == Admitted || o.Verdict == OverBudget {
		o.Verdict = CapExceeded
	}
	return o
}

// Peek reads the principal's bucket on req.Rule without spending from it:
// a take of cost 0, under the store timeout and the plan's failure mode.
// When the bucket cannot be read (the store failed and the plan fails
// closed), the outcome is Admitted with nothing known: a price asked for
// runs nothing, so a store failure refuses nothing either.
func (e *Engine) Peek(ctx context.Context, req Request) Outcome {
	o := e.spend(ctx, req.Key, req.Rule, 0)
	if o.Verdict != Admitted {
		o = Outcome{Verdict: Admitted, Trace: o.Trace}
	}
	return o
}

// Refund gives amount of what req paid (o, its Charge) back to each budget
// it was debited from (its bucket, its quota, its lane's budget) and
// returns o as the refund leaves it: Refunded is what its bucket took back
// (0 when the refund failed, or was skipped while the store's breaker is
// open).
func (e *Engine) Refund(ctx context.Context, req Request, o Outcome, amount int64) Outcome {
	if d, ok := e.refund(ctx, req.Rule, o.Trace, amount); ok {
		o.Decision, o.Refunded = d, o.Refunded+amount
	}
	e.refundQuota(ctx, req.Rule, &o, amount)
	if req.Lane != nil && o.LaneCharged == o.Charged {
		e.refund(ctx, req.Lane, o.LaneTrace, amount)
	}
	return o
}

// Settle settles what req paid (o, its Charge of req.Cost) with the actual
// cost of its response and returns o as the settlement leaves it. Below
// the price, unless the plan keeps unused points or the response is not
// refundable (it has errors: the work its failed resolvers did would come
// back free), the unused part is given back (Refunded). Above it (a list
// returned more than the size it was priced at), the excess ran unpaid: it
// is debited from the same budgets, saturating at empty, never refusing
// (Excess); operation names it in the warning. A request shadow mode let
// through, or not charged its price, is not settled.
func (e *Engine) Settle(ctx context.Context, req Request, o Outcome, actual int64, refundable bool, operation string) Outcome {
	cost := req.Cost
	if o.Shadowed != Admitted || o.Charged != cost {
		return o
	}
	switch {
	case actual < cost && !req.Rule.DisableRefund && refundable:
		return e.Refund(ctx, req, o, cost-actual)
	case actual > cost:
		o.Excess = actual - cost
		e.takeExcess(ctx, req, &o, o.Excess, operation)
	}
	return o
}

// RetryAfter turns a wait into whole seconds, rounded up, never below 1,
// plus the configured jitter (which only adds).
func (e *Engine) RetryAfter(wait time.Duration) int64 {
	s := max(seconds.Ceil(wait), 1)
	if e.jitter == 0 {
		return s
	}
	extra := e.rand() * e.jitter * float64(s)
	if extra >= float64(math.MaxInt64-s) {
		return math.MaxInt64
	}
	return s + int64(extra)
}

// shadow lets a refusal through when r is in shadow mode: a request its
// budget cannot pay or that costs more than it ever could is answered as
// admitted, with the real bucket's headers and no Retry-After. It reports
// whether it did.
func (e *Engine) shadow(ctx context.Context, r *Rule, o *Outcome) bool {
	if !r.shadow {
		return false
	}
	switch o.Verdict {
	case RateLimited, OverBudget, CapExceeded, QuotaExceeded, FieldLimited, RouteLimited:
	default:
		return false
	}
	if held, due := r.shadowWarn.Due(e.since()); due {
		e.log.WarnContext(ctx, "budget: shadow mode let through a request enforce mode would refuse",
			"plan", r.name, "would_be", string(o.Verdict.Class()), "refusals_since_last_warning", held+1)
	}
	o.Shadowed, o.Verdict, o.RetryAfter = o.Verdict, Admitted, 0
	return true
}

// since is the time since the Engine started, for the log gates.
func (e *Engine) since() time.Duration { return e.clock.Now().Sub(e.start) }

// spend debits cost from key's bucket on rule r.
func (e *Engine) spend(ctx context.Context, key string, r *Rule, cost int64) Outcome {
	if cost > r.Burst {
		return Outcome{Verdict: OverBudget} // never debited; the caller decides what it pays
	}
	var o Outcome
	d, err := e.take(ctx, r.key(key), r, cost, &o.Trace)
	switch {
	case errors.Is(err, limiter.ErrCostExceedsCapacity):
		o.Verdict, o.Decision, o.Known = OverBudget, d, true
	case err != nil:
		o.Verdict, o.RetryAfter = Unavailable, e.RetryAfter(UnavailableRetryAfter)
	case !d.Allowed:
		o.Verdict, o.Decision, o.Known, o.RetryAfter = RateLimited, d, true, e.RetryAfter(d.RetryAfter)
	default:
		o.Verdict, o.Decision, o.Known, o.Charged = Admitted, d, true, cost
	}
	return o
}

// spendIn debits cost from key's bucket on r and, when ln is a lane
// budget, from key's bucket of that lane too: both or neither. A refusal
// by the lane's budget gives the plan's debit back; the decision then
// describes the plan's bucket, the verdict and Retry-After the lane's.
func (e *Engine) spendIn(ctx context.Context, key string, r, ln *Rule, cost int64) Outcome {
	o := e.spend(ctx, key, r, cost)
	if o.Verdict != Admitted || ln == nil {
		return o
	}
	lo, paid := e.payLane(ctx, key, ln, cost, &o)
	if paid {
		return o
	}
	if d, ok := e.refund(ctx, r, o.Trace, cost); ok {
		o.Decision = d
	}
	refusedByLane(&o, lo, ln)
	return o
}

// payLane debits cost from key's bucket of lane budget ln, once the plan's
// budgets admitted o, and records it in o; it reports whether the lane
// paid, and its outcome. On a refusal the caller gives the plan's debits
// back, then refusedByLane.
func (e *Engine) payLane(ctx context.Context, key string, ln *Rule, cost int64, o *Outcome) (Outcome, bool) {
	lo := e.spend(ctx, key, ln, cost)
	addLane(&o.Trace, lo.Trace)
	if lo.Verdict != Admitted {
		return lo, false
	}
	o.LaneCharged, o.LaneTrace = cost, lo.Trace
	return lo, true
}

// refusedByLane makes o, whose plan's debits were given back, the lane's
// refusal lo: its verdict and Retry-After, nothing charged.
func refusedByLane(o *Outcome, lo Outcome, ln *Rule) {
	o.Verdict, o.RetryAfter, o.Charged, o.ByLane = lo.Verdict, lo.RetryAfter, 0, ln
	if lo.Verdict == OverBudget {
		o.Known = false // the caller charges InvalidCost and reports that decision
	}
}

// take is Store.Take through the store's guard (the timeout, the breaker
// and the rule's failure mode); tr records the call.
func (e *Engine) take(ctx context.Context, key string, r *Rule, cost int64, tr *guard.Trace) (limiter.Decision, error) {
	d, err := e.stores.Take(ctx, r.call(), key, r.limit, cost, tr)
	e.noteCall(r, tr)
	return d, err
}

// takeAll is TakeAll through the store's guard, as take is for one
// budget (store: from the store, not from split-budget leases). When the
// overflow buckets decide, the keys of reqs become theirs, so that what
// was taken is given back there too.
func (e *Engine) takeAll(ctx context.Context, r *Rule, reqs []limiter.Request, ds []limiter.Decision, tr *guard.Trace, store bool) error {
	c := r.call()
	if store {
		c.Leased = false // a route limit of a split-budget plan
	}
	err := e.stores.TakeAll(ctx, c, reqs, ds, tr)
	e.noteCall(r, tr)
	return err
}

// noteCall logs what a guarded call met: a store failure its failure mode
// decided for, a full memory store.
func (e *Engine) noteCall(r *Rule, tr *guard.Trace) {
	if tr.Failure != nil {
		e.storeFailed(r, tr.Failure)
		tr.Failure = nil
	}
	if tr.Overflow {
		if held, due := r.fullWarn.Due(e.since()); due {
			e.log.Warn("budget: memory store full (MemoryStore.MaxKeys) and no budget in it is whole; new identities share their plan's overflow bucket",
				"plan", r.name, "identities_since_last_warning", held+1)
		}
		tr.Overflow = false
	}
}

// storeFailed logs a store call that failed, at most once a minute for
// each rule (so each failure mode in use gets its own line); the line
// counts the failed calls held back since the previous one. A call is not
// a decision (a request may make several, and an admin read makes one
// too), so the line says nothing of what was decided: the adapter that
// reports decisions logs those of the fail-open fallback, with their count
// (middleware: "deciding through the local fallback bucket").
func (e *Engine) storeFailed(r *Rule, err error) {
	since, due := r.storeWarn.Due(e.since())
	if !due {
		return
	}
	mode := FailClosed
	if r.failOpen {
		mode = FailOpen
	}
	e.log.Warn("budget: rate-limit store failed",
		"err", err, "plan", r.name, "failure_mode", string(mode),
		"failures_since_last_warning", since)
}

// refund gives amount back to the store that took a decision's cost (tr's
// receipt). It reports the bucket after the refund, and false when
// nothing was given back (the store failed: the points then return by
// refill, and a warning is logged at most once a minute per rule; or the
// store's breaker is open: skipped).
func (e *Engine) refund(ctx context.Context, r *Rule, tr guard.Trace, amount int64) (limiter.Decision, bool) {
	if !tr.Receipt.Taken() || amount <= 0 {
		return limiter.Decision{}, false
	}
	d, err := e.stores.Refund(ctx, tr.Receipt, r.limit, amount)
	if errors.Is(err, guard.ErrBreakerOpen) {
		return limiter.Decision{}, false // the points return by refill
	}
	if err != nil {
		e.refundFailed(ctx, r, err)
		return limiter.Decision{}, false
	}
	return d, true
}

// refundFailed logs a refund that failed, at most once a minute per rule.
func (e *Engine) refundFailed(ctx context.Context, r *Rule, err error) {
	if held, due := r.refundWarn.Due(e.since()); due && ctx.Err() == nil {
		e.log.WarnContext(ctx, "budget: giving points back failed; they return by refill",
			"err", err, "plan", r.name, "failures_since_last_warning", held+1)
	}
}

// takeExcess debits excess, what a response held beyond its price, from
// each budget the request was debited from (its bucket, its quota, its
// lane's budget), saturating at empty, and warns at most once a minute
// per plan that the schema's assumed sizes are below what it returns.
func (e *Engine) takeExcess(ctx context.Context, req Request, o *Outcome, excess int64, operation string) {
	r := req.Rule
	if d, ok := e.stores.TakeSpent(ctx, o.Trace.Receipt, limiter.Request{Key: o.Trace.Receipt.Key, Limit: r.limit, Cost: excess}); ok {
		o.Decision = d
	}
	if g, ok := o.mine(); r.quota != nil && ok { // the bucket, then the quota
		if len(g.reqs) >= 2 && g.reqs[1].Name == quotaBudget && len(o.Limits) > 0 {
			qr := g.reqs[1]
			qr.Cost = excess
			if d, ok := e.stores.TakeSpent(ctx, g.from, qr); ok {
				o.Limits[0].Decision = d
			}
		}
	}
	if ln := req.Lane; ln != nil && o.LaneCharged == o.Charged {
		e.stores.TakeSpent(ctx, o.LaneTrace.Receipt, limiter.Request{Key: o.LaneTrace.Receipt.Key, Limit: ln.limit, Cost: excess})
	}
	if held, due := r.excessWarn.Due(e.since()); due {
		e.log.WarnContext(ctx, "budget: a response held more than its price (a list returned more items than the size it was priced at, an assumed size or a slicing argument its resolver ignored); the excess was debited after the response. Give the list a slicing argument or @listSize(assumedSize:) that bounds it",
			"plan", r.name, "operation", operation, "excess", excess, "excesses_since_last_warning", held+1)
	}
}

// addLane folds the trace of a lane budget's call into t, the plan's: its
// time and whether it moved the breaker, but not where to refund (t keeps
// the plan's receipt; the lane's is kept apart).
func addLane(t *guard.Trace, u guard.Trace) {
	t.Took += u.Took
	t.BreakerChanged = t.BreakerChanged || u.BreakerChanged
}

// addTrace folds a later call's trace into t.
func addTrace(t *guard.Trace, u guard.Trace) {
	t.Took += u.Took
	if u.Result != guard.ResultNone {
		t.Result = u.Result
	}
	t.Fallback = t.Fallback || u.Fallback
	t.Gone = t.Gone || u.Gone
	t.BreakerChanged = t.BreakerChanged || u.BreakerChanged
	if u.Receipt.Taken() {
		t.Receipt = u.Receipt
	}
}
