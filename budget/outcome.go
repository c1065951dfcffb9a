package budget

import (
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/guard"
)

// Verdict is what became of a request's cost.
type Verdict uint8

// The verdicts.
const (
	Admitted           Verdict = iota
	RateLimited                // not enough tokens now
	OverBudget                 // costs more than the plan's burst: never admitted
	Unavailable                // the store failed and the plan fails closed
	CapExceeded                // a static cap refused it before pricing; InvalidCost paid
	Invalid                    // the adapter refused it before pricing (its own status); InvalidCost paid
	Shed                       // the process was overloaded for its lane's priority; nothing paid
	ConcurrencyLimited         // the principal had its plan's requests in flight already; nothing paid
	QuotaExceeded              // the plan's quota cannot pay in this window; nothing paid
	FieldLimited               // a field limit cannot pay the selections; nothing paid
	RouteLimited               // the route's limit cannot pay the request; nothing paid
)

// The GraphQL error codes of the budget's refusals (errors[].extensions.code).
const (
	// CodeRateLimited: the bucket cannot pay now; 429 with Retry-After.
	CodeRateLimited = "RATE_LIMITED"
	// CodeMaxCostExceeded: the cost is above the plan's burst, so no
	// budget can ever pay it; 422. complexity.CodeMaxCostExceeded, the
	// code of a static cap on the price, is the same string.
	CodeMaxCostExceeded = "MAX_COST_EXCEEDED"
	// CodeRateLimiterUnavailable: the store failed and the plan fails
	// closed; 503 with Retry-After.
	CodeRateLimiterUnavailable = "RATE_LIMITER_UNAVAILABLE"
	// CodeQuotaExceeded: the plan's Quota cannot pay the cost in the
	// current window; 429, Retry-After is the window's end.
	CodeQuotaExceeded = "QUOTA_EXCEEDED"
	// CodeFieldRateLimited: the operation selects a field with a
	// FieldLimit more times than that limit has left; 429. The error's
	// path is the field's first selection and extensions.field its
	// coordinate. An operation selecting it more times than the limit at
	// all is never admitted (no Retry-After) and pays InvalidCost.
	CodeFieldRateLimited = "FIELD_RATE_LIMITED"
	// CodeRouteRateLimited: the request's route has a limit of its own
	// (a route limit) that cannot admit it now; 429 with Retry-After.
	CodeRouteRateLimited = "ROUTE_RATE_LIMITED"
	// CodeConcurrencyLimited: the principal already has its plan's
	// requests in flight; 429 with Retry-After, nothing debited.
	CodeConcurrencyLimited = "CONCURRENCY_LIMITED"
	// CodeOverloaded: the process has too many requests in flight for the
	// request's lane; 503 with Retry-After, nothing debited.
	CodeOverloaded = "OVERLOADED"
)

// Answer is what a client is told of a verdict: the GraphQL code (empty:
// the refusal carries its own) and HTTP status (0: the adapter's own), and
// the status and error code of a plain HTTP (REST) answer.
type Answer struct {
	Code       string
	Status     int
	RESTStatus int
	RESTCode   string
}

// HTTP statuses of the answers, written out so that the engine needs no
// transport.
const (
	statusTooManyRequests     = 429
	statusUnprocessableEntity = 422
	statusServiceUnavailable  = 503
)

// answers is the one table from a verdict to what a client is told.
var answers = [...]Answer{
	Admitted:    {},
	RateLimited: {CodeRateLimited, statusTooManyRequests, statusTooManyRequests, "rate_limited"},
	// A REST cost above the burst is refused at configuration; a custom
	// store with a smaller capacity still gets a 429, never a 200.
	OverBudget:  {CodeMaxCostExceeded, statusUnprocessableEntity, statusTooManyRequests, "rate_limited"},
	Unavailable: {CodeRateLimiterUnavailable, statusServiceUnavailable, statusServiceUnavailable, "rate_limiter_unavailable"},
	CapExceeded: {"", statusUnprocessableEntity, 0, ""},
	Invalid:     {},
	Shed:        {CodeOverloaded, statusServiceUnavailable, statusServiceUnavailable, "overloaded"},

	ConcurrencyLimited: {CodeConcurrencyLimited, statusTooManyRequests, statusTooManyRequests, "concurrency_limited"},
	QuotaExceeded:      {CodeQuotaExceeded, statusTooManyRequests, statusTooManyRequests, "quota_exceeded"},
	FieldLimited:       {CodeFieldRateLimited, statusTooManyRequests, statusTooManyRequests, "field_rate_limited"},
	RouteLimited:       {CodeRouteRateLimited, statusTooManyRequests, statusTooManyRequests, "route_rate_limited"},
}

// Answer is what a client is told of v.
func (v Verdict) Answer() Answer { return answers[v] }

// refusedForBudget reports whether v refuses a request because one of its
// budgets cannot pay for it (not a cap, a store failure or load): what an
// Unlimited plan lets through.
func (v Verdict) refusedForBudget() bool {
	switch v {
	case RateLimited, OverBudget, QuotaExceeded, FieldLimited, RouteLimited:
		return true
	}
	return false
}

// Class is a verdict as reported (a decision event's outcome, the outcome
// label of costguard_decisions_total), relied on by dashboards: new values
// may be added, none renamed.
type Class string

// The classes.
const (
	// ClassAdmitted: the cost was debited and the request ran.
	ClassAdmitted Class = "admitted"
	// ClassRateLimited: the budget could not pay now (429): the bucket,
	// the quota (QUOTA_EXCEEDED), a field limit (FIELD_RATE_LIMITED), a
	// route limit (ROUTE_RATE_LIMITED) or the concurrency cap
	// (CONCURRENCY_LIMITED).
	ClassRateLimited Class = "rate_limited"
	// ClassCostExceeded: a static cap refused the request, or its cost is
	// above the plan's burst (422, or 413 for a body too large).
	ClassCostExceeded Class = "cost_exceeded"
	// ClassUnavailable: the store failed and the plan fails closed (503).
	ClassUnavailable Class = "unavailable"
	// ClassShed: the process was overloaded for the request's lane (503).
	ClassShed Class = "shed"
	// ClassShadowRejected: Enforce would have refused the request; Shadow
	// let it run.
	ClassShadowRejected Class = "shadow_rejected"
)

// Class names v for a report.
func (v Verdict) Class() Class {
	switch v {
	case RateLimited, ConcurrencyLimited, QuotaExceeded, FieldLimited, RouteLimited:
		return ClassRateLimited
	case OverBudget, CapExceeded:
		return ClassCostExceeded
	case Unavailable:
		return ClassUnavailable
	case Shed:
		return ClassShed
	}
	return ClassAdmitted // Invalid too: its InvalidCost was paid; the adapter refused it
}

// Outcome is one decision, ready to be rendered: the verdict, the buckets
// as the decision left them, and what the store calls did.
type Outcome struct {
	Verdict Verdict
	// Decision is the plan's bucket after the decision; Known says it
	// describes the bucket, so headers can be sent.
	Decision limiter.Decision
	Known    bool
	// RetryAfter in whole seconds, jitter included (RateLimited,
	// Unavailable, QuotaExceeded, FieldLimited, RouteLimited,
	// ConcurrencyLimited).
	RetryAfter int64
	// Delay is how long an admitted request must wait before it runs: its
	// turn under a LeakyBucketShaping limit (at most that limit's
	// MaxDelay), 0 otherwise. The turn is taken: waiting less, or not
	// running at all, gives nothing back.
	Delay time.Duration
	// Shadowed is the refusal shadow mode turned into Admitted (Admitted:
	// none).
	Shadowed Verdict
	// Charged is what was debited from the plan's bucket; Refunded what
	// was given back to it since (Refund, Settle), and Excess what was
	// debited after the response beyond the price (Settle).
	Charged  int64
	Refunded int64
	Excess   int64
	// Trace is what the store calls took, for a report; its receipt says
	// where the bucket's points went.
	Trace guard.Trace
	// LaneCharged is what was debited from the lane's budget, LaneTrace
	// how; ByLane is the lane budget that refused the request (nil: none).
	LaneCharged int64
	LaneTrace   guard.Trace
	ByLane      *Rule
	// Limits are the budgets decided with the bucket (the quota, field
	// limits, the route limit), for the headers; ByLimit is the one that
	// refused, and Never says it never can pay (a field selected more
	// often than its limit).
	Limits  []Use
	ByLimit *Use
	Never   bool

	groups []takenGroup // what each TakeAll debited, to give back
}

// Use is one budget decided beside the plan's bucket.
type Use struct {
	// Quota is the plan's quota, Field the field limit or Route the route
	// limit.
	Quota *QuotaRule
	Field *FieldRule
	Route *RouteRule
	// ByAddr: this count is the client address's (ByIP, or the address's
	// count of ByBoth), not the principal's.
	ByAddr bool
	// Capacity is the most the budget holds.
	Capacity int64
	// Decision is the budget after the decision (Limit 0: not read).
	Decision limiter.Decision
	// Count and Path are the field's selections and its first selection.
	Count int64
	Path  []string
}

// bucket reports whether u describes the plan's bucket (none of Quota,
// Field and Route): the first budget of the principal's group, which
// Outcome.Limits leaves out.
func (u *Use) bucket() bool { return u.Quota == nil && u.Field == nil && u.Route == nil }

// refusal is the verdict of a request refused by u's budget.
func (u *Use) refusal() Verdict {
	switch {
	case u.Field != nil:
		return FieldLimited
	case u.Route != nil:
		return RouteLimited
	case u.Quota != nil:
		return QuotaExceeded
	}
	return RateLimited
}

// takenGroup is what one TakeAll debited: given back whole when a later
// budget refuses, in part by a refund after. reqs and ds are the group's
// requests and answers in the decision's own room, which both reuse: they
// answer in ds, and a quota's refund sets the quota's request to its
// amount.
type takenGroup struct {
	from guard.Receipt
	reqs []limiter.Request
	ds   []limiter.Decision
}

// mine reports whether g is the principal's group: the bucket, then the
// quota. The bucket's request is the one a decision names with no Name.
func (g *takenGroup) mine() bool { return g.reqs[0].Name == "" }
