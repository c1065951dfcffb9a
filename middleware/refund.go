package middleware

import (
	"context"
	"errors"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/guard"
)

// refund gives amount back to the store that took a decision's cost (tr's
// receipt), through the store's guard. It reports the bucket after the
// refund, and false when nothing was given back (the store failed: the
// points then return by refill, and a warning is logged at most once a
// minute per plan; or the store's breaker is open: skipped).
func (l *Limiter) refund(ctx context.Context, p *plan, tr guard.Trace, amount int64) (limiter.Decision, bool) {
	if !tr.Receipt.Taken() || amount <= 0 {
		return limiter.Decision{}, false
	}
	d, err := l.stores.Refund(ctx, tr.Receipt, p.limit, amount)
	if errors.Is(err, guard.ErrBreakerOpen) {
		return limiter.Decision{}, false // the points return by refill
	}
	if err != nil {
		l.refundFailed(ctx, p, err)
		return limiter.Decision{}, false
	}
	return d, true
}

// refundFailed logs a refund that failed, at most once a minute per plan.
func (l *Limiter) refundFailed(ctx context.Context, p *plan, err error) {
	if held, due := p.refundWarn.due(l.clock.Now().Sub(l.start)); due && ctx.Err() == nil {
		l.log.WarnContext(ctx, "middleware: giving points back failed; they return by refill",
			"err", err, "plan", p.name, "failures_since_last_warning", held+1)
	}
}

// settleActual prices what an executed operation's response holds (its
// actual cost: each list sized by the items it returned) and settles the
// debit with it. It runs in the response interceptor, so the headers and
// extensions.cost written afterwards include the settlement.
//
//   - Below the price, unless the plan keeps unused points, the part the
//     response did not use goes back to the budgets debited. A response
//     with errors is not refunded: a field that failed is null, and the
//     work its resolvers did before failing would otherwise come back
//     free. Its actual cost is still reported.
//   - Above the price (a list returned more than the size it was priced
//     at: an assumption the schema's data overran), the excess ran unpaid:
//     it is debited from the same budgets, errors or not, saturating at
//     empty and never refusing the response, whose work is done.
//
// An upload's cost is part of both the price and the actual cost: its
// bytes were read.
func (e *Extension) settleActual(ctx context.Context, st *requestState, opCtx *graphql.OperationContext, resp *graphql.Response) {
	st.mu.Lock()
	o, cost, costPlan := st.outcome, st.cost, st.costPlan
	st.mu.Unlock()
	op := opCtx.Operation
	if cost == 0 || o.verdict != admitted || op == nil || op.Operation == ast.Subscription || resp.HasNext != nil || len(resp.Data) == 0 {
		return // not executed as priced, or a stream: the requested cost stands
	}
	if o.charged == 0 && o.shadowed == 0 {
		return // a dry run: priced, not executed, nothing debited
	}
	if opCtx.DisableIntrospection && onlyIntrospection(opCtx.Doc, op.SelectionSet) {
		// gqlgen refused every __schema and __type it selected, and nothing
		// else was selected: an invalid request, which pays InvalidCost,
		// not the introspection cost of each alias. Read now, once every
		// extension has had its say on DisableIntrospection.
		e.refuseIntrospection(ctx, st, o, cost)
		return
	}
	var actual int64
	var err error
	if costPlan != nil {
		// The plan the request was priced through prices the response
		// without walking the operation again.
		actual, err = costPlan.ActualCost(opCtx.Variables, resp.Data)
	} else {
		var a *complexity.Analyzer
		if a, err = e.analyzer(st.set); err != nil {
			return
		}
		actual, err = a.ActualCost(opCtx.Doc, op, opCtx.Variables, resp.Data)
	}
	if err != nil {
		e.l.log.DebugContext(ctx, "middleware: cannot price the response; keeping the requested cost", "err", err)
		return
	}
	actual = max(actual, st.set.gql.MinCost)
	if up := st.uploadCost(); up > 0 {
		actual = min(actual, 1<<63-1-up) + up
	}
	var refunded, excess int64
	settles := o.shadowed == 0 && o.charged == cost
	switch {
	case settles && actual < cost && !st.plan.DisableRefund && len(resp.Errors) == 0:
		refunded = e.l.refundPaid(ctx, st, &o, cost-actual)
	case settles && actual > cost:
		excess = actual - cost
		e.l.takeExcess(ctx, st, &o, excess, opCtx.OperationName)
	}
	st.mu.Lock()
	st.outcome, st.actual, st.hasActual, st.refunded, st.excess = o, actual, true, refunded, excess
	st.mu.Unlock()
}

// refundPaid refunds amount of what request st paid to each budget it was
// debited from (its bucket, its quota, its lane's budget), updating o, and
// returns what its bucket took back (0 when the refund failed or was
// skipped).
func (l *Limiter) refundPaid(ctx context.Context, st *requestState, o *outcome, amount int64) (refunded int64) {
	if d, ok := l.refund(ctx, st.plan, o.trace, amount); ok {
		o.decision, refunded = d, amount
	}
	l.refundQuota(ctx, st.plan, o, amount)
	if ln := st.currentLane(); o.laneCharged == o.charged && ln != nil && ln.budget != nil {
		l.refund(ctx, ln.budget, o.laneTrace, amount)
	}
	return refunded
}

// takeExcess debits excess, what a response held beyond its price, from
// each budget the request was debited from (its bucket, its quota, its
// lane's budget), saturating at empty, and warns at most once a minute
// per plan that the schema's assumed sizes are below what it returns.
func (l *Limiter) takeExcess(ctx context.Context, st *requestState, o *outcome, excess int64, operation string) {
	p := st.plan
	if d, ok := l.stores.TakeSpent(ctx, o.trace.Receipt, limiter.Request{Key: o.trace.Receipt.Key, Limit: p.limit, Cost: excess}); ok {
		o.decision = d
	}
	if p.quota != nil && len(o.groups) > 0 {
		g := o.groups[len(o.groups)-1] // the principal's: the bucket, then the quota
		if len(g.reqs) >= 2 && g.reqs[1].Name == quotaBudget && len(o.limits) > 0 {
			req := g.reqs[1]
			req.Cost = excess
			if d, ok := l.stores.TakeSpent(ctx, g.from, req); ok {
				o.limits[0].d = d
			}
		}
	}
	if ln := st.currentLane(); o.laneCharged == o.charged && ln != nil && ln.budget != nil {
		l.stores.TakeSpent(ctx, o.laneTrace.Receipt, limiter.Request{Key: o.laneTrace.Receipt.Key, Limit: ln.budget.limit, Cost: excess})
	}
	if held, due := p.excessWarn.due(l.clock.Now().Sub(l.start)); due {
		l.log.WarnContext(ctx, "middleware: a response held more than its price (a list returned more items than the size it was priced at, an assumed size or a slicing argument its resolver ignored); the excess was debited after the response. Give the list a slicing argument or @listSize(assumedSize:) that bounds it",
			"plan", p.name, "operation", operation, "excess", excess, "excesses_since_last_warning", held+1)
	}
}

// refuseIntrospection settles an operation whose every root field gqlgen
// refused as introspection: it pays InvalidCost, the rest of its price
// goes back to the budgets debited, refunds on or off.
func (e *Extension) refuseIntrospection(ctx context.Context, st *requestState, o outcome, cost int64) {
	invalid := min(st.set.gql.InvalidCost, cost)
	var refunded int64
	if o.shadowed == 0 && o.charged == cost && cost > invalid {
		refunded = e.l.refundPaid(ctx, st, &o, cost-invalid)
	}
	st.mu.Lock()
	st.outcome, st.actual, st.hasActual, st.refunded = o, invalid, true, refunded
	st.mu.Unlock()
}

// onlyIntrospection reports whether a root selection set selects __schema
// or __type and nothing but them and __typename, through fragments too:
// what gqlgen refuses whole when introspection is off.
func onlyIntrospection(doc *ast.QueryDocument, set ast.SelectionSet) bool {
	found := false
	var walk func(ast.SelectionSet, int) bool
	walk = func(set ast.SelectionSet, depth int) bool {
		if depth > 64 {
			return false // a fragment cycle validation let through: not ours to follow
		}
		for _, sel := range set {
			switch sel := sel.(type) {
			case *ast.Field:
				switch sel.Name {
				case "__schema", "__type":
					found = true
				case "__typename":
				default:
					return false
				}
			case *ast.InlineFragment:
				if !walk(sel.SelectionSet, depth+1) {
					return false
				}
			case *ast.FragmentSpread:
				def := sel.Definition
				if def == nil && doc != nil {
					def = doc.Fragments.ForName(sel.Name)
				}
				if def == nil || !walk(def.SelectionSet, depth+1) {
					return false
				}
			}
		}
		return true
	}
	return walk(set, 0) && found
}
