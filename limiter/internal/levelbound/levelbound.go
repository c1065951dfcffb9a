// Package levelbound is what the local decorators know of a bucket they do
// not hold: limiter/overlimit answers a remembered rejection from it,
// limiter/splitbudget rejects against a lease without another round trip.
// A Decision reports whole tokens and whole microseconds, so the exact
// level (in the 1/p-token units of package limiter) is known only to
// within an interval; this package keeps the top of that interval, the
// fullest the bucket can be (limiter.Bucket.MaxLevel), and answers from
// it. Every answer therefore errs on the strict side: a Remaining never
// above the truth, a RetryAfter or ResetAfter never below it.
//
// Both decorators remember the store's last refusal the same way, as a
// Rejection, and answer from it until its RetryAfter has passed. It
// applies to TokenBucket and LeakyBucketPolicing (Applies), whose level
// only falls with time.
package levelbound

import (
	"time"

	"github.com/costguard/costguard/limiter"
)

// Bucket is a bucket Limit in the units of package limiter.
type Bucket = limiter.Bucket

// New returns the units of a bucket limit, or an error wrapping
// limiter.ErrInvalidLimit for an invalid limit or a window algorithm.
func New(l limiter.Limit) (Bucket, error) { return l.Bucket() }

// Applies reports whether a rejection under a can be remembered and
// answered from a level bound: TokenBucket and LeakyBucketPolicing, whose
// level only falls with time and whose admissions carry no reservation
// (LeakyBucketShaping's reserve a departure slot).
func Applies(a limiter.Algorithm) bool {
	return a.IsBucket() && a != limiter.LeakyBucketShaping
}

// Rejection is a remembered refusal: at At the bucket could not hold Cost
// more tokens, and it cannot before Retry microseconds have passed, since
// its level only falls; Level is the fullest it can have been at At
// (Bucket.MaxLevel). limiter/overlimit keeps one per rejected key,
// limiter/splitbudget one per lease the store refused to top up. It is
// never modified once made: a newer refusal replaces it.
type Rejection struct {
	Bucket Bucket
	Cost   int64
	At     time.Time
	Retry  int64 // µs
	Level  int64 // units
}

// Answer is the rejection of cost tokens (cost ≥ r.Cost, the caller's
// test) at now, or ok false once Retry has passed. elapsed is floored to
// the microsecond and a reading before At counts as no time passed: both
// can only make the answer stricter. The Decision carries Limit,
// Remaining and ResetAfter from the drained bound, and RetryAfter when
// cost ≤ Burst (a larger cost can never fit: the caller reports it).
func (r *Rejection) Answer(now time.Time, cost int64) (d limiter.Decision, ok bool) {
	elapsed := max(int64(now.Sub(r.At)/time.Microsecond), 0)
	if elapsed >= r.Retry {
		return limiter.Decision{}, false
	}
	b := r.Bucket
	// elapsed < Retry ≤ ResetAfter, so the drained level stays positive.
	level := b.Drain(r.Level, elapsed)
	d = limiter.Decision{
		Limit:      b.Burst,
		Remaining:  b.Remaining(level),
		ResetAfter: b.ResetAfter(level),
	}
	if cost <= b.Burst {
		d.RetryAfter = b.RetryAfter(level, cost)
	}
	return d, true
}

// Expires is when r stops holding: At plus Retry.
func (r *Rejection) Expires() time.Time {
	return r.At.Add(time.Duration(r.Retry) * time.Microsecond)
}
