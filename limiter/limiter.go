// Package limiter meters budgets: keys and integer costs go in, decisions
// come out. It knows nothing about GraphQL or HTTP; what a request's cost
// does to a principal's budgets is package budget's.
//
// This package holds the contract every store implements (Limit, Decision,
// Store, the sentinel errors) and the pure, clock-free arithmetic of each
// algorithm. The stores live in sub-packages: memorystore (the embedded
// default) and redisstore (each decision atomic in a Lua script, many to a
// script call, Cluster safe). limitertest holds the behaviour suite every
// store must pass.
//
// MultiTaker is the contract for the several budgets one request meets (a
// cost bucket, a quota, per-field limits): TakeAll debits them all or none,
// in one atomic step of the store (one lock set in memorystore, one script
// call in redisstore, where the budgets must share a Cluster slot). A
// Request names its budget by Key and Name; Name "" is Take's own budget.
// CheckTakeAll is the validation every store runs first, and Admits the
// rule ("a peek allows it and cost ≤ Remaining") by which a store can
// decide a cost without taking it.
//
// All arithmetic is integer and exact: time is counted in microseconds, and a
// bucket level is kept in units of 1/p of a token, where p is the refill
// period in microseconds divided by gcd(rate, period). A refill over e
// microseconds then adds exactly rate/g × e units, so no float ever drifts and
// Remaining is exact.
package limiter

import (
	"context"
	"errors"
	"time"
)

// Algorithm selects how a Limit meters cost.
type Algorithm uint8

const (
	// TokenBucket admits bursts up to Burst, refilled at Rate per Period.
	TokenBucket Algorithm = iota
	// LeakyBucketPolicing is a leaky bucket of size Burst draining at Rate per
	// Period that rejects what would overflow it.
	LeakyBucketPolicing
	// LeakyBucketShaping reserves a departure slot at a constant Rate per
	// Period and reports in Decision.Delay how long the caller must wait;
	// it rejects when the queue ahead would exceed Burst.
	LeakyBucketShaping
	// FixedWindow admits Rate per Period-aligned window (Burst is ignored).
	// It admits up to 2 × Rate across a window boundary.
	FixedWindow
	// SlidingLog admits Rate in any trailing Period, exactly, at the price of
	// one stored timestamp per admitted unit of cost.
	SlidingLog
	// SlidingCounter approximates a trailing window with two counters:
	// prev × (1 − elapsed/Period) + cur ≤ Rate.
	SlidingCounter
)

// String returns the algorithm's stable name, as used in configuration.
func (a Algorithm) String() string {
	switch a {
	case TokenBucket:
		return "token_bucket"
	case LeakyBucketPolicing:
		return "leaky_bucket_policing"
	case LeakyBucketShaping:
		return "leaky_bucket_shaping"
	case FixedWindow:
		return "fixed_window"
	case SlidingLog:
		return "sliding_log"
	case SlidingCounter:
		return "sliding_counter"
	}
	return "unknown"
}

// IsBucket reports whether a is one of the three bucket algorithms
// (TokenBucket, LeakyBucketPolicing, LeakyBucketShaping), which share one
// meter and one state (see BucketState and Limit.Bucket).
func (a Algorithm) IsBucket() bool {
	switch a {
	case TokenBucket, LeakyBucketPolicing, LeakyBucketShaping:
		return true
	}
	return false
}

// known reports whether a is one of the declared algorithms.
func (a Algorithm) known() bool {
	switch a {
	case TokenBucket, LeakyBucketPolicing, LeakyBucketShaping, FixedWindow, SlidingLog, SlidingCounter:
		return true
	}
	return false
}

// Limit describes one budget. Costs and sizes are whole tokens (points).
type Limit struct {
	Algorithm Algorithm
	// Burst is the bucket capacity (token and leaky buckets).
	Burst int64
	// Rate tokens are restored (or leak, or are allowed per window) every Period.
	Rate   int64
	Period time.Duration
}

// Capacity is what a Decision under l reports as its Limit: Burst for the
// bucket algorithms, Rate for the window algorithms. A cost above it can
// never be admitted.
func (l Limit) Capacity() int64 {
	if l.Algorithm.IsBucket() {
		return l.Burst
	}
	return l.Rate
}

// Decision is the outcome of one Take, Refund or peek.
type Decision struct {
	Allowed bool
	// Limit is the capacity the decision was made against: Burst for the
	// buckets, Rate for the window algorithms.
	Limit int64
	// Remaining is the whole tokens left after this decision, exactly.
	Remaining int64
	// RetryAfter is, for a rejection, the exact time until the same cost
	// would be admitted (never earlier). Zero when allowed.
	RetryAfter time.Duration
	// ResetAfter is the time until the budget is whole again (bucket full,
	// window empty).
	ResetAfter time.Duration
	// Delay is, for LeakyBucketShaping, how long the admitted caller must
	// wait before it may proceed (its reserved departure slot). Zero otherwise.
	Delay time.Duration
}

// Store debits costs from keyed budgets. Implementations are safe for
// concurrent use; each call is atomic for its key.
type Store interface {
	// Take debits cost from key's budget when it fits and reports the
	// decision. Cost 0 peeks without spending. A cost that can never fit
	// returns ErrCostExceedsCapacity together with a Decision whose Allowed
	// is false and RetryAfter is zero.
	Take(ctx context.Context, key string, limit Limit, cost int64) (Decision, error)
	// Refund gives amount back to key's budget, never above capacity.
	Refund(ctx context.Context, key string, limit Limit, amount int64) (Decision, error)
}

// Local is implemented by a store that declares where it keeps its state.
// A store whose Local reports true keeps it in this process's memory: it
// answers under a lock and never waits on a network, so whoever builds on
// it gives it no timeout, no circuit breaker and no over-limit cache (see
// limiter/stack). A store that does not implement Local is taken to be
// shared, reached over a network. A wrapper that embeds an in-memory store
// inherits its declaration; one that adds a network hop says false.
type Local interface {
	Local() bool
}

// IsLocal reports whether v declares itself local (Local).
func IsLocal(v any) bool {
	l, ok := v.(Local)
	return ok && l.Local()
}

var (
	// ErrCostExceedsCapacity: the cost is larger than the limit's capacity
	// and can never be admitted; retrying is pointless.
	ErrCostExceedsCapacity = errors.New("limiter: cost exceeds capacity")
	// ErrInvalidLimit: the Limit is malformed (see Limit.Validate).
	ErrInvalidLimit = errors.New("limiter: invalid limit")
	// ErrInvalidCost: a negative cost or refund amount.
	ErrInvalidCost = errors.New("limiter: invalid cost")
	// ErrRefundUnsupported: the algorithm cannot give tokens back.
	ErrRefundUnsupported = errors.New("limiter: refund not supported by this algorithm")
	// ErrLimitExceeded: Wait's request was rejected; the wrapped message and
	// the returned Decision say when to retry.
	ErrLimitExceeded = errors.New("limiter: limit exceeded")
)

// Clock tells the time. Stores take one so tests can inject time; production
// uses SystemClock. The memory store only ever uses differences between
// readings, so a Clock must be monotonic (time.Now's readings are).
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock with Go's monotonic reading.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
