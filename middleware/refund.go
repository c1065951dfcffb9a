package middleware

import (
	"context"
	"errors"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
)

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
func (e *costExtension) settleActual(ctx context.Context, st *requestState, opCtx *graphql.OperationContext, resp *graphql.Response) {
	// The outcome is copied only to be settled: most responses leave it
	// as it is.
	st.mu.Lock()
	verdict, charged, shadowed := st.outcome.Verdict, st.outcome.Charged, st.outcome.Shadowed
	cost, costPlan, ln := st.cost, st.costPlan, st.lane
	st.mu.Unlock()
	op := opCtx.Operation
	if cost == 0 && shadowed != 0 {
		e.recordShadowed(st, opCtx, resp) // a static cap shadow mode let run
		return
	}
	if cost == 0 || verdict != budget.Admitted || op == nil || op.Operation == ast.Subscription || resp.HasNext != nil {
		return // not executed as priced, or a stream: the requested cost stands
	}
	if charged == 0 && shadowed == 0 {
		return // a dry run: priced, not executed, nothing debited
	}
	// gqlgen refused every __schema and __type it selected, and nothing
	// else was selected (an invalid request, which pays InvalidCost, not
	// the introspection cost of each alias: read now, once every
	// extension has had its say on DisableIntrospection); or the executor
	// said the operation never ran.
	if notExecuted(resp.Errors) || (len(resp.Data) != 0 && opCtx.DisableIntrospection && onlyIntrospection(opCtx.Doc, op.SelectionSet)) {
		st.mu.Lock()
		o := st.outcome
		st.mu.Unlock()
		e.refundUnexecuted(ctx, st, o, cost)
		return
	}
	if len(resp.Data) == 0 {
		return // nothing to price the response by: the requested cost stands
	}
	var actual int64
	var err error
	if costPlan != nil {
		// The plan the request was priced through prices the response
		// without walking the operation again.
		actual, err = costPlan.ActualCost(opCtx.Variables, resp.Data)
	} else {
		var a *complexity.Analyzer
		if a, err = e.analyzer(st); err != nil {
			return
		}
		actual, err = a.ActualCost(opCtx.Doc, op, opCtx.Variables, resp.Data)
	}
	if err != nil {
		e.l.log.DebugContext(ctx, "middleware: cannot price the response; keeping the requested cost", "err", err)
		return
	}
	actual = max(actual, st.set.gql.MinCost)
	if st.upload != nil {
		if up := st.uploadCost(); up > 0 {
			actual = min(actual, 1<<63-1-up) + up
		}
	}
	st.mu.Lock()
	if actual == cost {
		// Engine.Settle would return the outcome as it is.
		st.actual, st.hasActual, st.refunded, st.excess = actual, true, st.outcome.Refunded, st.outcome.Excess
		st.mu.Unlock()
		return
	}
	o := st.outcome
	st.mu.Unlock()
	o = e.l.engine.Settle(ctx, st.request(ln, cost, nil), o, actual, len(resp.Errors) == 0, opCtx.OperationName)
	refunded, excess := o.Refunded, o.Excess
	st.mu.Lock()
	st.outcome, st.actual, st.hasActual, st.refunded, st.excess = o, actual, true, refunded, excess
	st.mu.Unlock()
}

// ErrNotExecuted, wrapped by an error of a response (gqlerror.Error's Err),
// says that none of the operation ran: its executor failed before doing
// any of its work (a proxy whose upstream could not be reached, a
// resolver that refuses before reading anything). The operation then pays
// InvalidCost, as a request refused before it ran, and the rest of its
// price goes back to the budgets it was debited from, refunds on or off.
// Clients cannot set it: an error's Err is not part of a request.
var ErrNotExecuted = errors.New("middleware: the operation was not executed")

// notExecuted reports whether errs hold ErrNotExecuted.
func notExecuted(errs gqlerror.List) bool {
	for _, ge := range errs {
		if ge != nil && ge.Err != nil && errors.Is(ge.Err, ErrNotExecuted) {
			return true
		}
	}
	return false
}

// refundUnexecuted settles an operation that did not run (every root field
// gqlgen refused as introspection, or ErrNotExecuted): it pays
// InvalidCost, the rest of its price goes back to the budgets debited,
// refunds on or off.
func (e *costExtension) refundUnexecuted(ctx context.Context, st *requestState, o budget.Outcome, cost int64) {
	invalid := min(st.set.gql.InvalidCost, cost)
	var refunded int64
	if o.Shadowed == budget.Admitted && o.Charged == cost && cost > invalid {
		o = e.l.engine.Refund(ctx, st.request(st.currentLane(), cost, nil), o, cost-invalid)
		refunded = o.Refunded
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
