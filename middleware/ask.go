package middleware

import (
	"context"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
)

// askState is what a request asks to learn about its price besides
// running: the GraphQL-Cost header (costheader.go) and the rate-limit
// field (ratelimitfield.go). Part of requestState.
type askState struct {
	// Written before execution starts (by the wrapper, or by the extension
	// before any resolver), read by the hooks after.
	headerRead bool     // the GraphQL-Cost header was read
	mode       costMode // what the header asks for
	dryRun     bool     // rateLimit(dryRun: true): no other root field runs

	// Under requestState.mu.
	rate      rateStatus             // what RateLimitFrom returns
	rateKnown bool                   // rate holds a bucket that was read
	fields    []complexity.FieldCost // the breakdown of a report
	truncated bool                   // fields stopped at the breakdown limit
}

// extensionAsk is the extension's part of it: built lazily, kept across
// requests.
type extensionAsk struct {
	// rateField is where the schema has the configured rate-limit field.
	rateField atomic.Pointer[rateLimitField]
}

// priceOnly decides an operation that asks for its price instead of
// running: "GraphQL-Cost: validate", or a selection of the rate-limit field
// with dryRun: true. It reads the bucket without spending from it (a
// peek), records the price and reports true; the caller then admits the
// operation, whose hooks answer it without running anything else. It
// reports false for any other operation, and for one whose price is above
// the plan's burst (unless the plan is Unlimited), which is refused (and
// pays InvalidCost) as if it were to run.
func (e *costExtension) priceOnly(ctx context.Context, st *requestState, opCtx *graphql.OperationContext, rep *complexity.Report, cost int64) bool {
	if st.ask.mode != modeValidate && !st.ask.dryRun { // decided with the lane
		return false
	}
	if cost > st.plan.Burst && !st.plan.Unlimited {
		return false
	}
	o := e.l.engine.Peek(ctx, budget.Request{Key: st.id.Key, Rule: st.plan.Rule})
	st.recordPeek(o, cost)
	st.noteRate(rep, cost, &o, e.l)
	return true
}

// recordPeek records the price of an operation that asked for it, and the
// bucket as the peek found it. Nothing was debited and nothing was refused,
// so there is no decision to report: no Event, no debug line.
func (s *requestState) recordPeek(o budget.Outcome, cost int64) {
	s.mu.Lock()
	s.outcome, s.cost, s.code = o, cost, ""
	s.phase = phaseReported
	s.mu.Unlock()
}
