package budget

import (
	"context"
	"errors"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/guard"
)

// spendAll debits req.Cost from the principal's bucket on req.Rule, its
// quota, the field limits req.Fields selects and the route limit
// req.Route, all or nothing, then from the lane's budget as spendIn does.
// The budgets are decided in one guarded TakeAll per key: the principal's
// (its bucket, quota and limits share one key, so a Redis Cluster keeps
// them in one slot), and the address's (the limits counted ByIP or ByBoth,
// when req.Addr is not the principal's key). The address's group is taken
// first, given back when the principal's refuses; both are given back when
// the lane's budget refuses. A request with a LeakyBucketShaping limit
// takes another order (spendShaping).
func (e *Engine) spendAll(ctx context.Context, req Request) Outcome {
	r, key, cost, ln := req.Rule, req.Key, req.Cost, req.Lane
	if !r.policy.MultiLimited(r) || (r.SplitBudget && req.Route == nil) {
		return e.spendIn(ctx, key, r, ln, cost)
	}
	if cost > r.Burst {
		return Outcome{Verdict: OverBudget}
	}
	if r.SplitBudget {
		return e.spendSplit(ctx, req)
	}
	b, ok := layOut(req)
	if !ok { // no quota, no limit selected: the bucket alone
		return e.spendIn(ctx, key, r, ln, cost)
	}
	if b.shaping {
		return e.spendShaping(ctx, req, &b)
	}
	o := b.outcome()
	if !e.takeGroups(ctx, r, &b, &o, b.address(), b.principal()) {
		return o
	}
	o.admit(&b, cost)
	if ln == nil {
		return o
	}
	if lo, paid := e.payLane(ctx, key, ln, cost, &o); !paid {
		e.undo(ctx, r, &b, &o)
		refusedByLane(&o, lo, ln)
	}
	return o
}

// spendShaping is spendAll for a request with a LeakyBucketShaping limit,
// whose turn, once taken, cannot be given back: everything that can be
// given back is taken before it. The lane's budget pays first, then the
// group without the turn, then the group holding it (Compile lets shaping
// limits count by one key only, so one group at most holds a turn).
func (e *Engine) spendShaping(ctx context.Context, req Request, b *budgets) Outcome {
	r, key, cost, ln := req.Rule, req.Key, req.Cost, req.Lane
	o := b.outcome()
	if ln != nil {
		if lo, paid := e.payLane(ctx, key, ln, cost, &o); !paid {
			refusedByLane(&o, lo, ln)
			return o
		}
	}
	first, turn := b.address(), b.principal()
	if b.turnByAddr {
		first, turn = turn, first
	}
	if !e.takeGroups(ctx, r, b, &o, first, turn) {
		if ln != nil {
			e.refund(ctx, ln, o.LaneTrace, cost)
			o.LaneCharged, o.LaneTrace = 0, guard.Trace{}
		}
		return o
	}
	o.admit(b, cost)
	return o
}

// budgets is one decision's budgets as the store takes them: request i is
// answered in ds[i] and described by uses[i]. uses[0] is the plan's
// bucket (none of Quota, Field and Route: Outcome.Limits starts after it).
// The principal's group comes first (its bucket, quota, field and route
// limits, all on its key), the address's from mine on.
type budgets struct {
	reqs []limiter.Request
	ds   []limiter.Decision
	uses []Use
	mine int
	// shaping: a LeakyBucketShaping limit is among them, in the address's
	// group when turnByAddr.
	shaping, turnByAddr bool
	// groups has room for the groups a decision takes (Outcome.groups).
	groups []takenGroup
}

// group is the requests of one key, their answers and their uses.
type group struct {
	reqs []limiter.Request
	ds   []limiter.Decision
	uses []Use
}

func (b *budgets) principal() group { return group{b.reqs[:b.mine], b.ds[:b.mine], b.uses[:b.mine]} }
func (b *budgets) address() group   { return group{b.reqs[b.mine:], b.ds[b.mine:], b.uses[b.mine:]} }

// outcome is the Outcome of a decision of b before anything is taken: its
// Limits are the budgets beside the bucket.
func (b *budgets) outcome() Outcome { return Outcome{Limits: b.uses[1:], groups: b.groups} }

// add lays out one budget: the request to the store and what it is.
func (b *budgets) add(req limiter.Request, u Use) {
	b.reqs = append(b.reqs, req)
	b.uses = append(b.uses, u)
	if req.Limit.Algorithm == limiter.LeakyBucketShaping {
		b.shaping, b.turnByAddr = true, u.ByAddr
	}
}

// layOut lays out the budgets of req, a request on a plan that is not
// served from split-budget leases, in room for exactly as many as it
// decides; false when the bucket alone decides it (no quota, no limit
// selected).
func layOut(req Request) (budgets, bool) {
	r, key := req.Rule, req.Key
	addr := cmpOr(req.Addr, key)
	n := 1 // the bucket
	if r.quota != nil {
		n++
	}
	for _, c := range req.Fields {
		if fl := r.policy.fields[c.Coordinate]; fl != nil && c.Count > 0 {
			n += countsOf(fl.By, key, addr)
		}
	}
	if rt := req.Route; rt != nil {
		n += countsOf(rt.By, key, addr)
	}
	if n == 1 {
		return budgets{}, false
	}
	b := newBudgets(n)
	own := r.key(key) // an override's rule keeps its budgets apart from the plan's
	b.add(limiter.Request{Key: own, Limit: r.limit, Cost: req.Cost}, Use{})
	if q := r.quota; q != nil {
		b.add(limiter.Request{Key: own, Name: quotaBudget, Limit: q.Limit, Cost: req.Cost}, Use{Quota: q, Capacity: q.Limit.Rate})
	}
	b.addLimits(req, own, false)
	b.mine = len(b.reqs)
	if addr != key {
		b.addLimits(req, addr, true)
	}
	return b, true
}

// addLimits lays out, on key k, the field and route limits of req counted
// in one group: the principal's, or the address's when byAddr.
func (b *budgets) addLimits(req Request, k string, byAddr bool) {
	key, addr := req.Key, cmpOr(req.Addr, req.Key)
	for _, c := range req.Fields {
		fl := req.Rule.policy.fields[c.Coordinate]
		if fl == nil || c.Count <= 0 || !countsIn(fl.By, byAddr, key, addr) {
			continue
		}
		b.add(limiter.Request{Key: k, Name: fl.budget, Limit: fl.Limit, Cost: c.Count},
			Use{Field: fl, Capacity: fl.Limit.Capacity(), Count: c.Count, Path: c.Path, ByAddr: byAddr})
	}
	if rt := req.Route; rt != nil && countsIn(rt.By, byAddr, key, addr) {
		b.add(limiter.Request{Key: k, Name: rt.budget, Limit: rt.Limit, Cost: 1},
			Use{Route: rt, Capacity: rt.Limit.Capacity(), Count: 1, ByAddr: byAddr})
	}
}

// budgets2 and budgets4 hold a decision of up to two budgets (a bucket
// and a quota, the common case) and up to four in one allocation.
type budgets2 struct {
	reqs   [2]limiter.Request
	ds     [2]limiter.Decision
	uses   [2]Use
	groups [2]takenGroup
}

type budgets4 struct {
	reqs   [4]limiter.Request
	ds     [4]limiter.Decision
	uses   [4]Use
	groups [2]takenGroup
}

// newBudgets returns room for a decision of n budgets: reqs and uses
// empty with capacity n, ds of length n, groups empty.
func newBudgets(n int) budgets {
	switch {
	case n <= 2:
		sc := new(budgets2)
		return budgets{reqs: sc.reqs[:0], ds: sc.ds[:n], uses: sc.uses[:0], groups: sc.groups[:0]}
	case n <= 4:
		sc := new(budgets4)
		return budgets{reqs: sc.reqs[:0], ds: sc.ds[:n], uses: sc.uses[:0], groups: sc.groups[:0]}
	}
	return budgets{reqs: make([]limiter.Request, 0, n), ds: make([]limiter.Decision, n), uses: make([]Use, 0, n)}
}

// takeGroups takes first, then second, two groups of b (an empty one is
// skipped), and reports whether both were taken. On a refusal, what was
// taken is given back (undo).
func (e *Engine) takeGroups(ctx context.Context, r *Rule, b *budgets, o *Outcome, first, second group) bool {
	for _, g := range [2]group{first, second} {
		if len(g.reqs) > 0 && !e.decideGroup(ctx, r, g, o, false) {
			e.undo(ctx, r, b, o)
			return false
		}
	}
	return true
}

// undo gives back what o's groups took from b (a later budget refused),
// and records the principal's budgets as the refund left them.
func (e *Engine) undo(ctx context.Context, r *Rule, b *budgets, o *Outcome) {
	if after, ok := e.giveBack(ctx, r, o.groups); ok && after != nil {
		mine := b.principal().uses
		for i := range after {
			mine[i].Decision = after[i]
		}
		o.Decision = after[0]
	}
	o.groups, o.Delay = nil, 0
}

// admit records that o took every budget of b: cost charged, the longest
// shaping turn to wait, and where the bucket's points went, for refunds
// and excess debits (the principal's group, whichever was taken last).
func (o *Outcome) admit(b *budgets, cost int64) {
	o.Verdict, o.Charged = Admitted, cost
	for _, d := range b.ds {
		o.Delay = max(o.Delay, d.Delay)
	}
	if g, ok := o.mine(); ok {
		o.Trace.Receipt = g.from
	}
}

// spendSplit is spendAll for a plan served from split-budget leases, whose
// bucket is spent locally and so cannot be decided in one step with
// anything: its route limit is decided in the store apart (the
// principal's count, then the address's), before the bucket and given
// back if the bucket or the lane refuses, or, when it is a shaping limit,
// after them, which are then given back if it refuses. (Compile refuses
// quotas and field limits on such a plan.)
func (e *Engine) spendSplit(ctx context.Context, req Request) Outcome {
	r, key, addr, rt, cost, ln := req.Rule, req.Key, cmpOr(req.Addr, req.Key), req.Route, req.Cost, req.Lane
	n := countsOf(rt.By, key, addr)
	reqs := make([]limiter.Request, 0, n)
	uses := make([]Use, 0, n)
	for _, byAddr := range []bool{false, true} {
		if countsIn(rt.By, byAddr, key, addr) {
			k := key
			if byAddr {
				k = addr
			}
			reqs = append(reqs, limiter.Request{Key: k, Name: rt.budget, Limit: rt.Limit, Cost: 1})
			uses = append(uses, Use{Route: rt, Capacity: rt.Limit.Capacity(), Count: 1, ByAddr: byAddr})
		}
	}
	ds := make([]limiter.Decision, len(reqs))
	var routes Outcome // the route limit's decisions: Limits, groups, and a refusal
	routes.Limits = uses
	decide := func() bool {
		for i := range reqs {
			if !e.decideGroup(ctx, r, group{reqs[i : i+1], ds[i : i+1], uses[i : i+1]}, &routes, true) {
				e.giveBack(ctx, r, routes.groups)
				routes.groups = nil
				return false
			}
		}
		return true
	}
	shaping := rt.Limit.Algorithm == limiter.LeakyBucketShaping
	if !shaping && !decide() {
		return routes
	}
	o := e.spendIn(ctx, key, r, ln, cost)
	o.Limits, o.groups = routes.Limits, routes.groups
	addTrace(&o.Trace, guard.Trace{Took: routes.Trace.Took, BreakerChanged: routes.Trace.BreakerChanged})
	if o.Verdict != Admitted {
		e.giveBack(ctx, r, o.groups)
		o.groups = nil
		return o
	}
	if shaping && !decide() {
		if d, ok := e.refund(ctx, r, o.Trace, cost); ok {
			o.Decision = d
		}
		if o.LaneCharged == cost && ln != nil {
			e.refund(ctx, ln, o.LaneTrace, cost)
		}
		routes.Decision, routes.Known = o.Decision, o.Known
		routes.Trace.Took += o.Trace.Took
		return routes
	}
	o.groups = routes.groups
	for _, d := range ds {
		o.Delay = max(o.Delay, d.Delay)
	}
	return o
}

// countsOf is how many times a limit counting by by is decided for a
// request of the principal key from the address addr.
func countsOf(by FieldLimitBy, key, addr string) int {
	if by == ByBoth && addr != key {
		return 2
	}
	return 1
}

// countsIn reports whether a limit counting by by is decided in the
// address's group (byAddr) or the principal's.
func countsIn(by FieldLimitBy, byAddr bool, key, addr string) bool {
	apart := addr != key
	if byAddr {
		return apart && (by == ByIP || by == ByBoth)
	}
	return by == ByPrincipal || by == ByBoth || !apart
}

// mine is the principal's group of what o debited (the bucket, then the
// quota), false when none was.
func (o *Outcome) mine() (takenGroup, bool) {
	for _, g := range o.groups {
		if g.mine() {
			return g, true
		}
	}
	return takenGroup{}, false
}

// decideGroup takes the requests of one key in one atomic step and
// records the result in o: each budget's decision in its use, the
// bucket's in o when the group holds it, and the verdict of a refusal. It
// reports whether everything was debited. store takes from the store even
// on a plan with split-budget leases.
func (e *Engine) decideGroup(ctx context.Context, r *Rule, g group, o *Outcome, store bool) bool {
	err := e.takeAll(ctx, r, g.reqs, g.ds, &o.Trace, store)
	from := o.Trace.Receipt
	bucket := g.uses[0].bucket()
	decided := err == nil || errors.Is(err, limiter.ErrCostExceedsCapacity)
	if bucket {
		// The over-limit cache answers a refusal it remembers without the
		// store: the budgets it did not ask about come back unknown (Limit 0).
		o.Decision, o.Known = g.ds[0], decided && g.ds[0].Limit != 0
	}
	if !decided {
		o.Verdict, o.RetryAfter, o.Known = Unavailable, e.RetryAfter(UnavailableRetryAfter), false
		return false
	}
	for i := range g.uses {
		g.uses[i].Decision = g.ds[i]
	}
	if err == nil && limiter.AllAllowed(g.ds) {
		o.groups = append(o.groups, takenGroup{from: from, reqs: g.reqs, ds: g.ds})
		return true
	}
	best, wait, never := longestRefusal(g.ds, errors.Is(err, limiter.ErrCostExceedsCapacity))
	if best < 0 { // a store broke its contract: refuse, honestly unknown
		o.Verdict, o.RetryAfter, o.Known = Unavailable, e.RetryAfter(UnavailableRetryAfter), false
		return false
	}
	u := &g.uses[best]
	o.Verdict = u.refusal()
	if !u.bucket() {
		o.ByLimit = u
	}
	if never {
		o.Never = true
	} else {
		o.RetryAfter = e.RetryAfter(wait)
	}
	return false
}

// longestRefusal is the refusal among ds that waits longest (-1: none
// reported one), so that Retry-After is when every refusing budget can
// pay, never earlier for any of them. When exceeds (a cost above a
// capacity: a field selected more often than its limit), a refusal with
// no wait can never be paid, and wins (never).
func longestRefusal(ds []limiter.Decision, exceeds bool) (best int, wait time.Duration, never bool) {
	best = -1
	for i, d := range ds {
		if d.Allowed || d.Limit == 0 { // admitted alone, or not asked (the over-limit cache)
			continue
		}
		if d.RetryAfter <= 0 {
			if exceeds {
				return i, 0, true
			}
			continue // a store breaking its contract: nothing to report
		}
		if best < 0 || d.RetryAfter > wait {
			best, wait = i, d.RetryAfter
		}
	}
	return best, wait, false
}

// giveBack refunds what the groups debited (a later budget refused) and
// returns the decisions of the principal's group after its refund (nil
// when it was not among them). Refunds that fail return by refill.
func (e *Engine) giveBack(ctx context.Context, r *Rule, groups []takenGroup) (after []limiter.Decision, ok bool) {
	ok = true
	for _, g := range groups {
		err := e.stores.RefundAll(ctx, g.from, g.reqs, g.ds)
		if err != nil && !errors.Is(err, guard.ErrBreakerOpen) {
			e.refundFailed(ctx, r, err)
		}
		if g.mine() {
			after, ok = g.ds, err == nil
		}
	}
	return after, ok
}

// refundQuota gives amount back to the quota o debited with the bucket,
// as the bucket's refund does; field limits keep what they counted.
func (e *Engine) refundQuota(ctx context.Context, r *Rule, o *Outcome, amount int64) {
	g, ok := o.mine() // the bucket, then the quota
	if r.quota == nil || !ok {
		return
	}
	if len(g.reqs) < 2 || g.reqs[1].Name != quotaBudget {
		return
	}
	req, ds := g.reqs[1:2], g.ds[1:2] // the quota's, in the decision's room
	req[0].Cost = amount
	if err := e.stores.RefundAll(ctx, g.from, req, ds); err != nil {
		if !errors.Is(err, guard.ErrBreakerOpen) {
			e.refundFailed(ctx, r, err)
		}
		return
	}
	o.Limits[0].Decision = ds[0]
}
