package middleware

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/middleware/breaker"
)

// refunder is the store method a refund needs: limiter.Store has it, a
// Take-only Store does not (and then nothing is refunded).
type refunder interface {
	Refund(ctx context.Context, key string, limit limiter.Limit, amount int64) (limiter.Decision, error)
}

// refund gives amount back to the store that took a decision's cost, under
// the store timeout. It reports the bucket after the refund, and false when
// nothing was given back (the store has no Refund, or it failed: the
// points then return by refill, and a warning is logged at most once a
// minute per plan), or the store's breaker is open (skipped).
func (l *Limiter) refund(ctx context.Context, p *plan, tr storeTrace, amount int64) (limiter.Decision, bool) {
	r, ok := tr.from.(refunder)
	if !ok || amount <= 0 {
		return limiter.Decision{}, false
	}
	remote := l.remote(tr.from)
	t := breaker.Ticket{Allowed: true}
	if remote {
		if t = l.allowStore(nil); !t.Allowed {
			return limiter.Decision{}, false // the breaker is open: the points return by refill
		}
	}
	tctx, cancel := l.storeContext(ctx)
	d, err := r.Refund(tctx, tr.key, p.limit, amount)
	cancel()
	if remote {
		l.storeDone(ctx, t, err, nil)
	}
	if err != nil {
		l.refundFailed(ctx, p, err)
		return limiter.Decision{}, false
	}
	if remote && l.remember {
		l.stores.Fallback().Observe(tr.key, p.limit, 0, d)
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
// actual cost: each list sized by the items it returned) and, unless the
// plan keeps unused points, gives the part of the debit the response did
// not use back to the bucket. It runs in the response interceptor, so the
// headers and extensions.cost written afterwards include the refund.
//
// A response with errors is not refunded: a field that failed is null, and
// the work its resolvers did before failing would otherwise come back
// free. Its actual cost is still reported.
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
	actual := cost
	if cost > st.set.gql.MinCost {
		// At MinCost the actual cost is MinCost whatever the response holds
		// (it is clamped to [MinCost, cost]): no need to read it.
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
		actual = min(max(actual, st.set.gql.MinCost), cost)
	}
	var refunded int64
	if o.shadowed == 0 && o.charged == cost && actual < cost && !st.plan.DisableRefund && len(resp.Errors) == 0 {
		if d, ok := e.l.refund(ctx, st.plan, o.trace, cost-actual); ok {
			o.decision, refunded = d, cost-actual
		}
		e.l.refundQuota(ctx, st.plan, &o, cost-actual)
		if ln := st.currentLane(); o.laneCharged == cost && ln != nil && ln.budget != nil {
			e.l.refund(ctx, ln.budget, o.laneTrace, cost-actual)
		}
	}
	st.mu.Lock()
	st.outcome, st.actual, st.hasActual, st.refunded = o, actual, true, refunded
	st.mu.Unlock()
}
