// Package levelbound works backwards from a bucket Decision to the bucket
// it describes. A Decision reports whole tokens and whole microseconds, so
// the exact level (in the 1/p-token units of package limiter) is known only
// to within an interval; this package keeps the top of that interval, the
// fullest the bucket can be, and answers from it. Every answer therefore
// errs on the strict side: a Remaining never above the truth, a RetryAfter
// or ResetAfter never below it.
//
// The local decorators use it: limiter/overlimit to answer a remembered
// rejection, limiter/splitbudget to reject against a lease without another
// round trip. It applies to TokenBucket and LeakyBucketPolicing (and the
// arithmetic of LeakyBucketShaping), whose level only falls with time.
package levelbound

import (
	"fmt"
	"time"

	"github.com/costguard/costguard/limiter"
)

// Bucket is a bucket Limit in the units of package limiter: a token is Unit
// units (p), the level drains Refill units per microsecond (r) and holds at
// most Capacity units (C = Burst × p).
type Bucket struct {
	Burst, Unit, Refill, Capacity int64
}

// New returns the units of a bucket limit, or an error wrapping
// limiter.ErrInvalidLimit for an invalid limit or a window algorithm.
func New(l limiter.Limit) (Bucket, error) {
	if err := l.Validate(); err != nil {
		return Bucket{}, err
	}
	switch l.Algorithm {
	case limiter.TokenBucket, limiter.LeakyBucketPolicing, limiter.LeakyBucketShaping:
	default:
		return Bucket{}, fmt.Errorf("%w: %s is not a bucket algorithm", limiter.ErrInvalidLimit, l.Algorithm)
	}
	period := int64(l.Period / time.Microsecond)
	g := gcd(l.Rate, period)
	unit := period / g
	return Bucket{Burst: l.Burst, Unit: unit, Refill: l.Rate / g, Capacity: l.Burst * unit}, nil
}

// MaxLevel is the fullest the bucket can have been when d was decided, d
// being the answer to a Take of cost (0 for a peek or a Refund). Each
// field of d caps the level:
//
//	ResetAfter = ⌈L / r⌉ µs           ⇒  L ≤ ResetAfter × r
//	Remaining  = ⌊(C − L) / p⌋         ⇒  L ≤ C − Remaining × p
//	RetryAfter = ⌈(L + cost×p − C) / r⌉ (rejections)
//	                                   ⇒  L ≤ RetryAfter × r + C − cost × p
//
// and the true level is at most the smallest cap. Fields outside their
// possible range are ignored, so a foreign decision cannot overflow.
func (b Bucket) MaxLevel(d limiter.Decision, cost int64) int64 {
	level := b.Capacity
	full := ceilDiv(b.Capacity, b.Refill) // ResetAfter of a full bucket, µs
	if z := d.ResetAfter.Microseconds(); z >= 0 && z <= full {
		level = min(level, z*b.Refill)
	}
	if g := d.Remaining; g >= 0 && g <= b.Burst {
		level = min(level, b.Capacity-g*b.Unit)
	}
	if r := d.RetryAfter.Microseconds(); !d.Allowed && r > 0 && r <= full && cost >= 1 && cost <= b.Burst {
		level = min(level, r*b.Refill+b.Capacity-cost*b.Unit)
	}
	return max(level, 0)
}

// Drain is level after elapsed microseconds with nothing taken: it never
// falls below 0, and elapsed × r is formed only when it is below level.
func (b Bucket) Drain(level, elapsed int64) int64 {
	if elapsed <= 0 {
		return level
	}
	if elapsed >= ceilDiv(level, b.Refill) {
		return 0
	}
	return level - elapsed*b.Refill
}

// RetryAfter is how long until cost tokens fit in a bucket at level: zero
// when they fit now. cost must be in [0, Burst].
func (b Bucket) RetryAfter(level, cost int64) time.Duration {
	over := level + cost*b.Unit - b.Capacity
	if over <= 0 {
		return 0
	}
	return micros(ceilDiv(over, b.Refill))
}

// Remaining is the whole tokens present at level.
func (b Bucket) Remaining(level int64) int64 {
	return (b.Capacity - min(level, b.Capacity)) / b.Unit
}

// ResetAfter is how long until a bucket at level is whole again.
func (b Bucket) ResetAfter(level int64) time.Duration {
	return micros(ceilDiv(max(level, 0), b.Refill))
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ceilDiv is ⌈a / b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	return (a + b - 1) / b
}

func micros(us int64) time.Duration {
	return time.Duration(us) * time.Microsecond
}
