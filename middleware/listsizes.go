package middleware

import (
	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/complexity"
)

// uncappedOptions are s's analyzer options with every cap lifted: what
// reads, for Dependencies.ListSizeRecorder, the responses of operations
// a cap refused and shadow mode let run. AbsoluteMaxDepth still bounds
// the walk.
func (s *settings) uncappedOptions() []complexity.Option {
	return append(s.relaxedOptions(), complexity.WithMaxCost(0), complexity.WithMaxBreadth(0))
}

// recordShadowed records the list sizes of the response of an operation
// the analyzer refused (a static cap: max_cost, max_depth, …) and shadow
// mode let run. It has no price to settle, yet its lists are the ones
// calibration needs most: the pages priced above the caps. The response
// is read by an analyzer without caps, its actual cost discarded.
func (e *costExtension) recordShadowed(st *requestState, opCtx *graphql.OperationContext, resp *graphql.Response) {
	op := opCtx.Operation
	if st.set.sizes == nil || op == nil || op.Operation == ast.Subscription || resp.HasNext != nil || len(resp.Data) == 0 {
		return
	}
	b, err := e.boundFor(&e.priced, st.set)
	if err != nil || b.uncapped == nil {
		return
	}
	_, _ = b.uncapped.ActualCost(opCtx.Doc, op, opCtx.Variables, resp.Data)
}
