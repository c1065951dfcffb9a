package middleware

import (
	"context"
	"net/http"
	"strings"

	"github.com/99designs/gqlgen/graphql"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/internal/echo"
)

// HeaderGraphQLCost is the request header (Hot Chocolate's) that asks what
// an operation costs. Its value is one of "validate" or "report",
// exactly, in lower case (surrounding spaces are ignored); any other value,
// or the header sent twice, is refused with 400 INVALID_COST_HEADER. Without
// the header nothing changes.
const HeaderGraphQLCost = "GraphQL-Cost"

var canonicalGraphQLCost = http.CanonicalHeaderKey(HeaderGraphQLCost)

// The values of HeaderGraphQLCost.
const (
	// costValidate prices the operation and answers without running it or
	// debiting anything: 200, no data, extensions.cost with the price and
	// the bucket as it stands. Static caps refuse it as usual.
	costValidate = "validate"
	// costReport runs the operation as usual and adds the per-field
	// breakdown of its price to extensions.cost (Cost.Fields).
	costReport = "report"
)

// GraphQL error codes of the GraphQL-Cost header. Both are refused before
// the operation is priced, pay InvalidCost and answer 400 behind the
// GraphQL wrapper (422 without it, like the other protocol codes).
const (
	// CodeInvalidCostHeader: GraphQL-Cost is neither "validate" nor
	// "report", or is sent more than once.
	CodeInvalidCostHeader = "INVALID_COST_HEADER"
	// CodeCostReportDisabled: "GraphQL-Cost: report" from a principal whose
	// plan has DisableCostReport.
	CodeCostReportDisabled = "COST_REPORT_DISABLED"
)

// costMode is what a request's GraphQL-Cost header asks for.
type costMode uint8

const (
	modeRun      costMode = iota // no header: price, debit, run
	modeValidate                 // price only
	modeReport                   // run, and explain the price
)

// readCostHeader records in s what h's GraphQL-Cost header asks for, once
// per request (the wrapper reads it before gqlgen, the extension for an
// operation on a WebSocket). It returns the refusal of a value it does not
// accept, or of a report the plan forbids.
func (s *requestState) readCostHeader(h http.Header) *refusal {
	if s.ask.headerRead {
		return nil
	}
	s.ask.headerRead = true
	values := h[canonicalGraphQLCost] // h.Values, without canonicalizing the name on every request
	if len(values) == 0 {
		return nil
	}
	v := strings.TrimSpace(values[0])
	switch {
	case len(values) > 1:
		return refuse(http.StatusBadRequest, CodeInvalidCostHeader,
			"the %s header is sent %d times; send it once, as %q or %q", HeaderGraphQLCost, len(values), costValidate, costReport)
	case v == costValidate:
		s.ask.mode = modeValidate
	case v == costReport && s.plan.DisableCostReport:
		return refuse(http.StatusBadRequest, CodeCostReportDisabled,
			"cost reports (%s: %s) are disabled for plan %q", HeaderGraphQLCost, costReport, s.plan.Name())
	case v == costReport:
		s.ask.mode = modeReport
	default:
		return refuse(http.StatusBadRequest, CodeInvalidCostHeader,
			"the %s header is %q; the accepted values are %q (price the operation without running it) and %q (run it and explain its price)",
			HeaderGraphQLCost, echo.Cut(v), costValidate, costReport)
	}
	return nil
}

// validateResponse answers an operation sent with "GraphQL-Cost: validate"
// in its stead: the price and the bucket as the peek found it, no data.
// It returns nil for any other operation, which runs. st is the request's
// state (stateOf).
func (e *costExtension) validateResponse(ctx context.Context, st *requestState) *graphql.Response {
	if st.ask.mode != modeValidate {
		return nil
	}
	st.settle(ctx, e.l)
	resp := &graphql.Response{Extensions: map[string]any{CostExtensionKey: st.costReport()}}
	if st.conn != nil {
		st.end(ctx, e.l) // a WebSocket operation ends with its response
	}
	return resp
}

// InterceptOperation implements graphql.OperationInterceptor: an operation
// sent with "GraphQL-Cost: validate" is answered with its price and never
// executed (no resolver runs, no other extension's response hook either).
func (e *costExtension) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	st, ok := stateOf(ctx)
	if !ok || !e.owns(st) {
		return next(ctx)
	}
	if st.conn != nil {
		if refused := e.decideSocket(ctx, st, graphql.GetOperationContext(ctx)); refused != nil {
			return refused
		}
	}
	if st.ask.mode == modeValidate {
		return graphql.OneShot(e.validateResponse(ctx, st))
	}
	if st.sub != nil {
		return st.sub.stream(next(ctx))
	}
	return next(ctx)
}

// explain prices an admitted "GraphQL-Cost: report" operation a second
// time, with the breakdown (complexity.Analyzer.Explain, at most
// complexity.DefaultBreakdownLimit entries), for its response: pricing
// every request keeps none.
func (e *costExtension) explain(ctx context.Context, st *requestState, opCtx *graphql.OperationContext) {
	a, err := e.analyzer(st)
	if err == nil {
		var rep *complexity.Report
		if rep, err = a.Explain(opCtx.Doc, opCtx.Operation, opCtx.Variables); err == nil {
			st.mu.Lock()
			st.ask.fields, st.ask.truncated = rep.Fields, rep.FieldsTruncated
			st.mu.Unlock()
			return
		}
	}
	// The same operation was just priced by the same options: this is a bug.
	e.l.log.ErrorContext(ctx, "middleware: cannot explain the price of an admitted operation", "err", err)
}

// explained returns the breakdown explain recorded, if any.
func (s *requestState) explained() ([]complexity.FieldCost, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ask.fields, s.ask.truncated
}
