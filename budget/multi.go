package budget

import (
	"context"
	"errors"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/guard"
)

// multiScratch holds a decision's requests, answers, uses and taken groups
// in one allocation, sized for a bucket and a quota (the common case);
// multiScratch4 for up to two field limits more. Larger decisions take
// slices of their own.
type multiScratch struct {
	reqs   [2]limiter.Request
	ds     [2]limiter.Decision
	uses   [1]Use
	groups [2]takenGroup
}

type multiScratch4 struct {
	reqs   [4]limiter.Request
	ds     [4]limiter.Decision
	uses   [3]Use
	groups [2]takenGroup
}

// newScratch returns room for a decision of n budgets: reqs and uses
// empty with capacity n and n-1, ds of length n, groups empty.
func newScratch(n int) (reqs []limiter.Request, ds []limiter.Decision, uses []Use, groups []takenGroup) {
	switch {
	case n <= 2:
		sc := new(multiScratch)
		return sc.reqs[:0], sc.ds[:n], sc.uses[:0], sc.groups[:0]
	case n <= 4:
		sc := new(multiScratch4)
		return sc.reqs[:0], sc.ds[:n], sc.uses[:0], sc.groups[:0]
	}
	return make([]limiter.Request, 0, n), make([]limiter.Decision, n), make([]Use, 0, n-1), nil
}

// spendAll debits req.Cost from the principal's bucket on req.Rule, its
// quota, the field limits req.Fields selects and the route limit
// req.Route, all or nothing, then from the lane's budget as spendIn does.
// Limits by client address key on req.Addr; when that is not the
// principal's key they are decided apart from the principal's (a Redis
// Cluster keeps one principal's budgets in one slot, not an address's):
// first, and given back when the principal's budgets refuse, unless they
// hold a LeakyBucketShaping limit, whose turn cannot be given back: then
// last, the principal's budgets given back when they refuse. For the
// same reason a request with a shaping limit pays its lane's budget
// first, given back when its other budgets refuse. (Compile lets shaping
// limits count by one key only, so one side at most holds them.)
func (e *Engine) spendAll(ctx context.Context, req Request) Outcome {
	r, pol, key, addr, cost, rt := req.Rule, req.Rule.policy, req.Key, req.Addr, req.Cost, req.Route
	if addr == "" {
		addr = key
	}
	if !pol.MultiLimited(r) || (r.SplitBudget && rt == nil) {
		return e.spendIn(ctx, key, r, req.Lane, cost)
	}
	if cost > r.Burst {
		return Outcome{Verdict: OverBudget}
	}
	if r.SplitBudget {
		return e.spendSplit(ctx, req)
	}
	// The principal's requests come first (the bucket, the quota, its
	// field and route limits), then the address's; uses[i] describes
	// reqs[i+1].
	n := 1
	if r.quota != nil {
		n++
	}
	// Each field's limit, looked up once for the first few fields (a
	// request selecting more looks the rest up again below).
	var limits [8]*FieldRule
	limitOf := func(i int) *FieldRule {
		if i < len(limits) {
			return limits[i]
		}
		return pol.fields[req.Fields[i].Coordinate]
	}
	for i, c := range req.Fields {
		fl := pol.fields[c.Coordinate]
		if i < len(limits) {
			limits[i] = fl
		}
		if fl != nil && c.Count > 0 {
			n += countsOf(fl.By, key, addr)
		}
	}
	if rt != nil {
		n += countsOf(rt.By, key, addr)
	}
	if n == 1 { // no quota, no limit selected: the bucket alone
		return e.spendIn(ctx, key, r, req.Lane, cost)
	}
	reqs, ds, uses, groups := newScratch(n)
	// The principal's budgets share one key (an override's rule keeps them
	// apart from the plan's), so a Redis Cluster keeps them in one slot.
	own := r.key(key)
	reqs = append(reqs, limiter.Request{Key: own, Limit: r.limit, Cost: cost})
	if q := r.quota; q != nil {
		reqs = append(reqs, limiter.Request{Key: own, Name: quotaBudget, Limit: q.Limit, Cost: cost})
		uses = append(uses, Use{Quota: q, Capacity: q.Limit.Rate})
	}
	mineEnd := 0
	for pass := range 2 { // the principal's limits, then the address's
		k, byAddr := own, pass == 1
		if byAddr {
			k = addr
		}
		for i, c := range req.Fields {
			fl := limitOf(i)
			if fl == nil || c.Count <= 0 || !countsIn(fl.By, byAddr, key, addr) {
				continue
			}
			reqs = append(reqs, limiter.Request{Key: k, Name: fl.budget, Limit: fl.Limit, Cost: c.Count})
			uses = append(uses, Use{Field: fl, Capacity: fl.Limit.Capacity(), Count: c.Count, Path: c.Path, ByAddr: byAddr})
		}
		if rt != nil && countsIn(rt.By, byAddr, key, addr) {
			reqs = append(reqs, limiter.Request{Key: k, Name: rt.budget, Limit: rt.Limit, Cost: 1})
			uses = append(uses, Use{Route: rt, Capacity: rt.Limit.Capacity(), Count: 1, ByAddr: byAddr})
		}
		if pass == 0 {
			mineEnd = len(reqs)
		}
	}
	mine, theirs := reqs[:mineEnd], reqs[mineEnd:]
	o := Outcome{Limits: uses, groups: groups}
	shapingTheirs := anyShaping(theirs)
	ln, lanePaid := req.Lane, false
	if ln != nil && (shapingTheirs || anyShaping(mine)) {
		lo, paid := e.payLane(ctx, key, ln, cost, &o)
		if !paid {
			refusedByLane(&o, lo, ln)
			return o
		}
		lanePaid = true
	}
	// The address's limits are taken first, unless a shaping turn is
	// among them.
	order := [2]bool{true, false} // the address's group?
	if shapingTheirs {
		order = [2]bool{false, true}
	}
	for _, addrs := range order {
		var ok bool
		switch {
		case addrs && len(theirs) == 0:
			continue
		case addrs:
			ok = e.decideGroup(ctx, r, theirs, ds[mineEnd:], &o, mineEnd-1, false)
		default:
			ok = e.decideGroup(ctx, r, mine, ds[:mineEnd], &o, -1, false)
		}
		if ok {
			continue
		}
		if after, given := e.giveBack(ctx, r, o.groups); given && after != nil {
			o.setMine(after)
		}
		o.groups = nil
		if lanePaid {
			e.refund(ctx, ln, o.LaneTrace, cost)
			o.LaneCharged, o.LaneTrace = 0, guard.Trace{}
		}
		return o
	}
	o.Verdict, o.Charged = Admitted, cost
	for _, d := range ds {
		o.Delay = max(o.Delay, d.Delay)
	}
	if g, ok := o.mine(); ok {
		// Refunds and excess debits of the bucket go where the
		// principal's group took, whichever group was decided last.
		o.Trace.Receipt = g.from
	}
	if ln == nil || lanePaid {
		return o
	}
	lo, paid := e.payLane(ctx, key, ln, cost, &o)
	if paid {
		return o
	}
	if after, ok := e.giveBack(ctx, r, o.groups); ok && after != nil {
		o.setMine(after)
	}
	o.groups, o.Delay = nil, 0
	refusedByLane(&o, lo, ln)
	return o
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
			if !e.decideGroup(ctx, r, reqs[i:i+1], ds[i:i+1], &routes, i, true) {
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

// anyShaping reports whether a LeakyBucketShaping budget is among reqs.
func anyShaping(reqs []limiter.Request) bool {
	for i := range reqs {
		if reqs[i].Limit.Algorithm == limiter.LeakyBucketShaping {
			return true
		}
	}
	return false
}

// setMine records the decisions of the principal's group after a refund:
// the bucket's, then the other budgets' in o.Limits.
func (o *Outcome) setMine(after []limiter.Decision) {
	o.Decision = after[0]
	for i := 1; i < len(after); i++ {
		o.Limits[i-1].Decision = after[i]
	}
}

// mine is the principal's group of what o debited (the bucket, then the
// quota), false when none was.
func (o *Outcome) mine() (takenGroup, bool) {
	for _, g := range o.groups {
		if g.mine {
			return g, true
		}
	}
	return takenGroup{}, false
}

// decideGroup takes the requests of one owner in one atomic step and
// records the result in o: the bucket's decision (when the group holds
// it), each other limit's in o.Limits (request i at o.Limits[offset+i];
// offset is -1 for the principal's group, whose request 0 is the bucket),
// and the verdict of a refusal. It reports whether everything was debited.
// store takes from the store even on a plan with split-budget leases.
func (e *Engine) decideGroup(ctx context.Context, r *Rule, reqs []limiter.Request, ds []limiter.Decision, o *Outcome, offset int, store bool) bool {
	err := e.takeAll(ctx, r, reqs, ds, &o.Trace, store)
	from := o.Trace.Receipt
	principal := offset < 0
	decided := err == nil || errors.Is(err, limiter.ErrCostExceedsCapacity)
	if principal {
		// The over-limit cache answers a refusal it remembers without the
		// store: the budgets it did not ask about come back unknown (Limit 0).
		o.Decision, o.Known = ds[0], decided && ds[0].Limit != 0
	}
	if !decided {
		o.Verdict, o.RetryAfter, o.Known = Unavailable, e.RetryAfter(UnavailableRetryAfter), false
		return false
	}
	for i := range reqs {
		if !principal || i > 0 {
			o.Limits[offset+i].Decision = ds[i]
		}
	}
	if err == nil && limiter.AllAllowed(ds) {
		o.groups = append(o.groups, takenGroup{from: from, reqs: reqs, mine: principal})
		return true
	}
	// Report the refusal that waits longest: Retry-After is when every
	// refusing budget can pay (never earlier for any of them). A cost
	// above a capacity (a field selected more often than its limit) can
	// never be paid, and wins.
	best := -1
	var wait time.Duration
	exceeds := errors.Is(err, limiter.ErrCostExceedsCapacity)
	for i, d := range ds {
		if d.Allowed || d.Limit == 0 { // admitted alone, or not asked (the over-limit cache)
			continue
		}
		if d.RetryAfter <= 0 {
			if exceeds {
				best, o.Never = i, true
				break
			}
			continue // a store breaking its contract: nothing to report
		}
		if best < 0 || d.RetryAfter > wait {
			best, wait = i, d.RetryAfter
		}
	}
	switch {
	case best < 0: // a store broke its contract: refuse, honestly unknown
		o.Verdict, o.RetryAfter, o.Known = Unavailable, e.RetryAfter(UnavailableRetryAfter), false
		return false
	case principal && best == 0:
		o.Verdict = RateLimited
	default:
		o.ByLimit = &o.Limits[offset+best]
		switch {
		case o.ByLimit.Field != nil:
			o.Verdict = FieldLimited
		case o.ByLimit.Route != nil:
			o.Verdict = RouteLimited
		default:
			o.Verdict = QuotaExceeded
		}
	}
	if !o.Never {
		o.RetryAfter = e.RetryAfter(wait)
	}
	return false
}

// giveBack refunds what the groups debited (a later budget refused) and
// returns the decisions of the principal's group after its refund (nil
// when it was not among them). Refunds that fail return by refill.
func (e *Engine) giveBack(ctx context.Context, r *Rule, groups []takenGroup) (after []limiter.Decision, ok bool) {
	ok = true
	for _, g := range groups {
		ds := make([]limiter.Decision, len(g.reqs))
		err := e.stores.RefundAll(ctx, g.from, g.reqs, ds)
		if err != nil && !errors.Is(err, guard.ErrBreakerOpen) {
			e.refundFailed(ctx, r, err)
		}
		if g.mine {
			after, ok = ds, err == nil
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
	one := new(struct { // the request and its decision in one allocation
		req [1]limiter.Request
		ds  [1]limiter.Decision
	})
	one.req[0] = g.reqs[1]
	one.req[0].Cost = amount
	ds := one.ds[:]
	if err := e.stores.RefundAll(ctx, g.from, one.req[:], ds); err != nil {
		if !errors.Is(err, guard.ErrBreakerOpen) {
			e.refundFailed(ctx, r, err)
		}
		return
	}
	o.Limits[0].Decision = ds[0]
}
