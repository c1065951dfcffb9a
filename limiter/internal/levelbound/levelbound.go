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
// It applies to TokenBucket and LeakyBucketPolicing (and the arithmetic of
// LeakyBucketShaping), whose level only falls with time.
package levelbound

import "github.com/costguard/costguard/limiter"

// Bucket is a bucket Limit in the units of package limiter.
type Bucket = limiter.Bucket

// New returns the units of a bucket limit, or an error wrapping
// limiter.ErrInvalidLimit for an invalid limit or a window algorithm.
func New(l limiter.Limit) (Bucket, error) { return l.Bucket() }
