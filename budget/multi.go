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
// quota and the field limits req.Fields selects, all or nothing, then from
// the lane's budget as spendIn does. Field limits by client address key
// on req.Addr; when that is not the principal's key they are decided
// first, apart (a Redis Cluster keeps one principal's budgets in one slot,
// not an address's), and given back when the principal's budgets refuse.
func (e *Engine) spendAll(ctx context.Context, req Request) Outcome {
	r, pol, key, addr, cost := req.Rule, req.Rule.policy, req.Key, req.Addr, req.Cost
	if !pol.MultiLimited(r) {
		return e.spendIn(ctx, key, r, req.Lane, cost)
	}
	if cost > r.Burst {
		return Outcome{Verdict: OverBudget}
	}
	// The principal's requests come first (the bucket, the quota, its
	// field limits), then the address's; uses[i] describes reqs[i+1].
	n := 1
	if r.quota != nil {
		n++
	}
	for _, c := range req.Fields {
		if pol.fields[c.Coordinate] != nil && c.Count > 0 {
			n++
		}
	}
	if n == 1 { // no quota, no limited field selected: the bucket alone
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
	for pass := range 2 { // the principal's field limits, then the address's
		for _, c := range req.Fields {
			fl := pol.fields[c.Coordinate]
			if fl == nil || c.Count <= 0 || (fl.ByIP && addr != key) != (pass == 1) {
				continue
			}
			k := own
			if pass == 1 {
				k = addr
			}
			reqs = append(reqs, limiter.Request{Key: k, Name: fl.budget, Limit: fl.Limit, Cost: c.Count})
			uses = append(uses, Use{Field: fl, Capacity: fl.Limit.Burst, Count: c.Count, Path: c.Path})
		}
		if pass == 0 {
			mineEnd = len(reqs)
		}
	}
	mine, theirs := reqs[:mineEnd], reqs[mineEnd:]
	o := Outcome{Limits: uses, groups: groups}
	// The address's field limits are taken first.
	if len(theirs) > 0 {
		if !e.decideGroup(ctx, r, theirs, ds[mineEnd:], &o, mineEnd-1) {
			return o
		}
	}
	if !e.decideGroup(ctx, r, mine, ds[:mineEnd], &o, -1) {
		e.giveBack(ctx, r, o.groups)
		o.groups = nil
		return o
	}
	o.Verdict, o.Charged = Admitted, cost
	ln := req.Lane
	if ln == nil {
		return o
	}
	lo, paid := e.payLane(ctx, key, ln, cost, &o)
	if paid {
		return o
	}
	if after, ok := e.giveBack(ctx, r, o.groups); ok {
		// The principal's group is the last: its decisions after the refund.
		o.Decision = after[0]
		for i := 1; i < len(after); i++ {
			o.Limits[i-1].Decision = after[i]
		}
	}
	o.groups = nil
	refusedByLane(&o, lo, ln)
	return o
}

// decideGroup takes the requests of one owner in one atomic step and
// records the result in o: the bucket's decision (when the group holds
// it), each other limit's in o.Limits (request i at o.Limits[offset+i];
// offset is -1 for the principal's group, whose request 0 is the bucket),
// and the verdict of a refusal. It reports whether everything was debited.
func (e *Engine) decideGroup(ctx context.Context, r *Rule, reqs []limiter.Request, ds []limiter.Decision, o *Outcome, offset int) bool {
	err := e.takeAll(ctx, r, reqs, ds, &o.Trace)
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
		o.groups = append(o.groups, takenGroup{from: from, reqs: reqs})
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
		o.Verdict = QuotaExceeded
		if o.ByLimit.Field != nil {
			o.Verdict = FieldLimited
		}
	}
	if !o.Never {
		o.RetryAfter = e.RetryAfter(wait)
	}
	return false
}

// giveBack refunds what the groups debited (a later budget refused) and
// returns the decisions of the last group after its refund. Refunds that
// fail return by refill.
func (e *Engine) giveBack(ctx context.Context, r *Rule, groups []takenGroup) (after []limiter.Decision, ok bool) {
	for _, g := range groups {
		ds := make([]limiter.Decision, len(g.reqs))
		err := e.stores.RefundAll(ctx, g.from, g.reqs, ds)
		if err != nil && !errors.Is(err, guard.ErrBreakerOpen) {
			e.refundFailed(ctx, r, err)
		}
		after, ok = ds, err == nil
	}
	return after, ok
}

// refundQuota gives amount back to the quota o debited with the bucket,
// as the bucket's refund does; field limits keep what they counted.
func (e *Engine) refundQuota(ctx context.Context, r *Rule, o *Outcome, amount int64) {
	if r.quota == nil || len(o.groups) == 0 {
		return
	}
	g := o.groups[len(o.groups)-1] // the principal's: the bucket, then the quota
	if len(g.reqs) < 2 || g.reqs[1].Name != quotaBudget {
		return
	}
	req := g.reqs[1]
	req.Cost = amount
	ds := make([]limiter.Decision, 1)
	if err := e.stores.RefundAll(ctx, g.from, []limiter.Request{req}, ds); err != nil {
		if !errors.Is(err, guard.ErrBreakerOpen) {
			e.refundFailed(ctx, r, err)
		}
		return
	}
	o.Limits[0].Decision = ds[0]
}
