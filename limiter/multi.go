package limiter

import (
	"context"
	"errors"
	"fmt"
)

// Request is one budget of a TakeAll.
type Request struct {
	// Key names the budget's owner (an identity), as Store.Take's key does.
	Key string
	// Name tells apart several budgets of one Key: "" is the budget
	// Take(Key, …) uses; any other name is a separate budget of the same
	// owner, stored next to it (in Redis, under the same hash tag).
	Name  string
	Limit Limit
	Cost  int64
}

// MultiTaker decides several budgets in one atomic step: the cost bucket,
// the quota and the per-field limits of one request, say.
type MultiTaker interface {
	// TakeAll debits every request's Cost when each fits, or none of them.
	//
	// decisions must have len(reqs); decisions[i] answers reqs[i]. When all
	// fit, each is Allowed and debited. Otherwise nothing is debited and
	// each decision describes its budget as it stands, so that what a
	// client is told matches what it has: a request that alone would fit
	// answers Allowed with what a peek (Cost 0) reports, and the refusing
	// ones answer as a Take of them alone would (not Allowed, with
	// RetryAfter). AllAllowed tells the two outcomes apart.
	//
	// A request whose Cost exceeds its capacity makes TakeAll return an
	// error wrapping ErrCostExceedsCapacity with nothing debited (that
	// decision Allowed false, RetryAfter 0; the others as above). Before
	// anything is decided, CheckTakeAll refuses the call with every
	// decision zero: an invalid Limit (ErrInvalidLimit), a negative Cost
	// (ErrInvalidCost), two requests naming the same (Key, Name)
	// (ErrDuplicateBudget), more than MaxTakeAll requests
	// (ErrTooManyBudgets). Cost 0 peeks. No requests: nothing to do, nil.
	TakeAll(ctx context.Context, reqs []Request, decisions []Decision) error
}

// MaxTakeAll is the most requests one TakeAll decides. Every store holds
// its locks (or Redis its one script) for the whole call, so the call is
// bounded; a GraphQL request meets a handful of budgets.
const MaxTakeAll = 64

var (
	// ErrDuplicateBudget: two requests of one TakeAll name the same
	// (Key, Name) budget. The call is refused, not merged: whether the
	// costs add up or the second sees the first is the caller's to say.
	ErrDuplicateBudget = errors.New("limiter: duplicate budget in TakeAll")
	// ErrTooManyBudgets: a TakeAll of more than MaxTakeAll requests.
	ErrTooManyBudgets = errors.New("limiter: too many budgets in TakeAll")
	// ErrTakeAllUnsupported: a decorator's TakeAll over a store that has
	// none (split-budget leases never have one: a lease is one budget's).
	ErrTakeAllUnsupported = errors.New("limiter: TakeAll not supported by this store")
)

// AllAllowed reports whether every decision is Allowed: after a TakeAll
// without error, whether it debited.
func AllAllowed(ds []Decision) bool {
	for i := range ds {
		if !ds[i].Allowed {
			return false
		}
	}
	return true
}

// CheckTakeAll is the validation every MultiTaker runs before deciding
// anything: decisions as long as reqs, at most MaxTakeAll requests, each
// Limit valid (Limit.Validate), each Cost non-negative, and no (Key, Name)
// twice. On error it zeroes decisions (when their lengths agree). The
// errors name the request by its index, never by its key.
func CheckTakeAll(reqs []Request, decisions []Decision) error {
	if len(decisions) != len(reqs) {
		return fmt.Errorf("limiter: TakeAll: %d decisions for %d requests", len(decisions), len(reqs))
	}
	err := checkRequests(reqs)
	if err != nil {
		clear(decisions)
	}
	return err
}

func checkRequests(reqs []Request) error {
	if len(reqs) > MaxTakeAll {
		return fmt.Errorf("%w: %d requests, at most %d", ErrTooManyBudgets, len(reqs), MaxTakeAll)
	}
	for i := range reqs {
		r := &reqs[i]
		if err := r.Limit.Validate(); err != nil {
			return fmt.Errorf("limiter: TakeAll request %d: %w", i, err)
		}
		if err := checkCost("cost", r.Cost); err != nil {
			return fmt.Errorf("limiter: TakeAll request %d: %w", i, err)
		}
	}
	// Quadratic, but over at most MaxTakeAll requests and with no
	// allocation; a TakeAll carries a handful.
	for i := 1; i < len(reqs); i++ {
		for j := range i {
			if reqs[i].Key == reqs[j].Key && reqs[i].Name == reqs[j].Name {
				return fmt.Errorf("%w: requests %d and %d", ErrDuplicateBudget, j, i)
			}
		}
	}
	return nil
}

// Admits reports whether a Take of cost would be admitted at the instant
// peek was decided, peek being the answer to a Take of cost 0 (a peek)
// under the same Limit: for every algorithm,
//
//	admit(cost) ⇔ peek.Allowed and cost ≤ peek.Remaining
//
// Buckets: Remaining = ⌊(C − L)/p⌋ and L + cost × p ≤ C ⇔ cost ≤
// ⌊(C − L)/p⌋ (a peek is always Allowed). FixedWindow: Remaining = Rate −
// Count. SlidingLog: Remaining = max(0, Rate − n), and a peek is refused
// only when n > Rate (a log written under a higher Rate), when nothing
// fits. SlidingCounter: with a = Rate − cur, admit ⇔ prev × (P − e) ≤
// (a − cost) × P ⇔ cost ≤ a − ⌈prev × (P − e)/P⌉ (the right side is an
// integer); a peek is refused exactly when that bound is negative, and
// otherwise it is Remaining. Remaining never exceeds the capacity, so a
// cost above it is never admitted.
//
// TestAdmitsMatchesTake checks the equivalence against the transition
// functions.
func Admits(peek Decision, cost int64) bool {
	return peek.Allowed && cost <= peek.Remaining
}
