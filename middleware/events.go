package middleware

import (
	"context"
	"log/slog"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter/guard"
)

// Observer receives one Event for every decision the Limiter makes, once
// the request's outcome is final: for an executed GraphQL operation, after
// its actual cost is known; for a subscription, its subscribe when it is
// admitted (whether or not events follow), then each event's debit, before
// the event is sent. It is the library's one telemetry hook: a
// metrics adapter (package middleware/prommetrics for Prometheus), a log
// or an audit trail implements it. ObserveDecision is called on the
// request's goroutine, so it must be quick and safe for concurrent use;
// it must not keep e's address.
type Observer interface {
	ObserveDecision(e *Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(e *Event)

// ObserveDecision calls f(e).
func (f ObserverFunc) ObserveDecision(e *Event) { f(e) }

// Kind says which adapter decided: the GraphQL extension or the REST
// wrapper. Its values are the kind label of the metrics.
type Kind string

// The kinds of decision.
const (
	KindGraphQL Kind = "graphql"
	KindREST    Kind = "rest"
	// KindSubscriptionEvent is the debit of one event of a GraphQL
	// subscription, before it is sent (its subscribe is KindGraphQL).
	KindSubscriptionEvent Kind = "subscription_event"
)

// Event describes one decision. Fields that do not apply are zero.
type Event struct {
	// Time is when the decision was made, by the Limiter's clock.
	Time time.Time
	// Plan is the name of the principal's plan: the policy in force (see
	// Override).
	Plan string
	// PrincipalPlan is the plan the principal is on by its identity (its
	// API key's, its user's, the anonymous plan), whatever override
	// applied: Plan when none did, else the plan the override replaced or
	// changed (Plan being then the override's plan, or "override:" and a
	// plan's name). What an admin lookup of the principal needs.
	PrincipalPlan string
	// Lane is the name of the request's lane (Policy.Lanes); empty when
	// no lanes are configured.
	Lane string
	// Key is the bucket key of the principal ("user:…", "key:<sha256 of
	// the API key>", "ip:…"): never a raw API key, but it may name a user
	// or an address, so hash it before logging it (identity.HashKey).
	Key  string
	Kind Kind
	// Operation is the GraphQL operation's name (at most 64 bytes; "" for
	// an anonymous operation, a REST request, or a document refused before
	// it was parsed). The client chooses it: bound its cardinality before
	// using it as a label.
	Operation string
	// Outcome is what became of the request. In shadow mode a refusal
	// enforce mode would have made is budget.ClassShadowRejected, and
	// Refused says what it would have been.
	Outcome budget.Class
	// Refused is, for budget.ClassShadowRejected, the outcome enforce mode
	// would have given (budget.ClassRateLimited or ClassCostExceeded).
	Refused budget.Class
	// Code is the GraphQL extensions.code or REST error code of a refusal
	// ("RATE_LIMITED", "MAX_DEPTH_EXCEEDED", "rate_limited", …).
	Code string
	// RequestedCost is the cost the request was priced at: the static
	// price of a GraphQL operation (0 when it could not be priced), a REST
	// route's cost.
	RequestedCost int64
	// Charged is what was debited from the budget: RequestedCost when
	// admitted, the GraphQL InvalidCost for a request refused before it
	// could run, 0 when nothing was debited.
	Charged int64
	// ActualCost is, when HasActualCost, the cost of a GraphQL operation
	// recomputed from the response it produced; Refunded is the part of
	// RequestedCost given back to the budget, and Excess what was debited
	// after the response beyond RequestedCost (ActualCost − RequestedCost)
	// when the response held more than its price: a list returned more
	// items than the size it was priced at.
	ActualCost    int64
	HasActualCost bool
	Refunded      int64
	Excess        int64
	// StoreDuration is the time spent in store calls for this decision,
	// and StoreResult how the last one ended ("" when none was made: a
	// request refused before it reached the store, or answered by a local
	// cache).
	StoreDuration time.Duration
	StoreResult   guard.Result
	// Fallback: the decision was made by the fail-open local bucket because
	// the store failed or its breaker was open.
	Fallback bool
	// Breaker is the state of the store's circuit breaker after the
	// decision ("" when the Limiter has none: the in-memory store), and
	// BreakerChanged says this decision's store call moved it there.
	Breaker        guard.BreakerState
	BreakerChanged bool
	// Remaining is the whole points left in the bucket after the decision,
	// and Limit the bucket's capacity it was decided against (the plan's
	// burst, or an override's), when Known.
	Remaining int64
	Limit     int64
	Known     bool
	// Policy names the budget that refused the request (or, in shadow
	// mode, would have), as RateLimit-Policy names it: the plan's name for
	// its bucket, the quota's name, a field limit's coordinate, a route
	// limit's pattern, or "lane:" and the lane's name for a lane budget.
	// Empty when no budget refused.
	Policy string
	// Override is the per-principal override that applied
	// (Limiter.SetOverride), in its canonical form ("plan=pro",
	// "burst=20000 rate=20000 per=1h0m0s"); empty when none did. Plan is
	// then the policy in force: the override's plan, or "override:" and
	// the plan's name when it replaced limits.
	Override string
	// RouteLimit is the pattern of the route limit decided with the
	// request (RESTOptions.RouteLimits), whether it admitted or refused;
	// empty when none applied.
	RouteLimit string
	// Delay is how long an admitted request was told to wait for its turn
	// under a leaky_bucket_shaping limit before it ran (0: none).
	Delay time.Duration

	gone bool // the client left before anything was decided: not reported
}

// Net is what stayed debited for the request once it was settled:
// Charged − Refunded + Excess (what top spenders and
// costguard_net_points_total count).
func (e *Event) Net() int64 { return e.Charged - e.Refunded + e.Excess }

// observing reports whether anyone listens to decisions: the Observer, or
// the debug log.
func (l *Limiter) observing(ctx context.Context) bool {
	return l.observer != nil || l.log.Enabled(ctx, slog.LevelDebug)
}

// newEvent describes outcome o of a request of kind by id on plan p.
func (l *Limiter) newEvent(kind Kind, id identity.Identity, p *plan, ln *lane, o budget.Outcome, requested int64, code string) Event {
	e := Event{
		Time:          l.clock.Now(),
		Plan:          p.Name(),
		PrincipalPlan: p.principalPlan(),
		Lane:          ln.name(),
		Key:           id.Key,
		Kind:          kind,
		Outcome:       o.Verdict.Class(),
		Code:          code,
		RequestedCost: requested,
		Charged:       o.Charged,
		StoreDuration: o.Trace.Took,
		StoreResult:   o.Trace.Result,
		Fallback:      o.Trace.Fallback,
		Breaker:       l.stores.BreakerState(),
	}
	e.BreakerChanged = o.Trace.BreakerChanged
	if o.Shadowed != 0 {
		e.Outcome, e.Refused = budget.ClassShadowRejected, o.Shadowed.Class()
	}
	if o.Known {
		e.Remaining, e.Known, e.Limit = max(o.Decision.Remaining, 0), true, o.Decision.Limit
	}
	e.Policy = refusingPolicy(p, o)
	e.Override = p.Override()
	for i := range o.Limits {
		if rt := o.Limits[i].Route; rt != nil {
			e.RouteLimit = rt.Route
			break
		}
	}
	e.Delay = o.Delay
	e.gone = o.Trace.Gone
	return e
}

// refusingPolicy names the budget that refused o (Event.Policy).
func refusingPolicy(p *plan, o budget.Outcome) string {
	v := o.Verdict
	if o.Shadowed != 0 {
		v = o.Shadowed
	}
	switch {
	case o.ByLane != nil:
		return o.ByLane.Name()
	case o.ByLimit != nil && o.ByLimit.Field != nil:
		return o.ByLimit.Field.Coord
	case o.ByLimit != nil && o.ByLimit.Route != nil:
		return o.ByLimit.Route.Route
	case o.ByLimit != nil && o.ByLimit.Quota != nil:
		return o.ByLimit.Quota.Name
	case v == budget.RateLimited || v == budget.OverBudget:
		return p.Name()
	}
	return ""
}

// report hands e to the Observer and, at debug level, to the log, which
// names the principal by a hash of its key, never the key.
func (l *Limiter) report(ctx context.Context, e *Event) {
	if e.gone {
		return
	}
	if e.Fallback {
		l.fallbackDecided(ctx)
	}
	if l.observer != nil {
		l.observer.ObserveDecision(e)
	}
	if l.log.Enabled(ctx, slog.LevelDebug) {
		l.log.LogAttrs(ctx, slog.LevelDebug, "middleware: decision",
			slog.String("principal", identity.HashKey(e.Key)),
			slog.String("plan", e.Plan),
			slog.String("lane", e.Lane),
			slog.String("kind", string(e.Kind)),
			slog.String("outcome", string(e.Outcome)),
			slog.Int64("cost", e.RequestedCost),
			slog.Int64("charged", e.Charged),
			slog.String("code", e.Code),
			slog.Int64("refunded", e.Refunded),
			slog.Int64("excess", e.Excess),
			slog.String("policy", e.Policy),
			slog.String("override", e.Override),
			slog.Bool("fallback", e.Fallback))
	}
}

// fallbackDecided logs, at most once a minute, that the fail-open local
// fallback decided a request: one reported decision with Event.Fallback.
// The line counts the decisions since the previous line, itself included,
// so the counts of the lines logged add up to what an Observer counting
// Event.Fallback (costguard_fallback_decisions_total, /admin/stats's
// fallbacks) has counted when the last one is written.
func (l *Limiter) fallbackDecided(ctx context.Context) {
	if held, due := l.fallbackWarn.Due(l.clock.Now().Sub(l.start)); due {
		l.log.WarnContext(ctx, "middleware: rate-limit store unavailable; deciding through the local fallback bucket",
			"fallback_decisions", held+1)
	}
}
