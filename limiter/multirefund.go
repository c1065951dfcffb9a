package limiter

import "context"

// MultiRefunder gives points back to budgets a TakeAll debited, named ones
// included: the unused part of a request's cost, or the whole of it when a
// later step refused the request.
type MultiRefunder interface {
	// RefundAll gives each request's Cost back to its budget, never beyond
	// a whole budget, as Store.Refund does (Name "" is the budget Refund
	// uses). decisions must have len(reqs); decisions[i] answers reqs[i].
	// The refunds are independent, not one atomic step: each only gives
	// back, so no interleaving can admit more than the budgets allow. It
	// returns the first error; the other refunds are still made.
	RefundAll(ctx context.Context, reqs []Request, decisions []Decision) error
}
