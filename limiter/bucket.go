package limiter

import "time"

// BucketState is one key's state under TokenBucket, LeakyBucketPolicing and
// LeakyBucketShaping. The zero value is a fresh key: a full token bucket, an
// empty leaky bucket.
//
// The three algorithms share one meter. Level is the water in a leaky bucket
// of capacity C = Burst × p units that drains r units per microsecond
// (p = Period_µs / g, r = Rate / g, g = gcd(Rate, Period_µs)); read as a
// token bucket, Level is the tokens missing, and C − Level are the tokens
// present. Policing admits exactly the sequences a token bucket with the
// same Limit admits (the classic equivalence); shaping admits the same and
// also reports how long the admitted caller must queue.
type BucketState struct {
	// Level is in units of 1/p token, 0 ≤ Level ≤ C.
	Level int64
	// Last is when Level was computed, in µs since the Unix epoch.
	Last int64
}

// TakeBucket is the state transition of the three bucket algorithms: it
// drains s to now and tries to add cost whole tokens. now is in µs since
// the Unix epoch. The arithmetic, all on integers:
//
//	elapsed = max(0, now − Last)                  // a clock going back adds nothing
//	Level   = 0 if elapsed ≥ ⌈Level / r⌉, else Level − elapsed × r
//	Last    = max(Last, now)
//	need    = cost × p
//	admit  ⇔ Level + need ≤ C;  then Level += need
//
// The Decision (times in µs, then as Durations):
//
//	Limit      = Burst
//	Remaining  = ⌊(C − Level) / p⌋               // after this decision
//	ResetAfter = ⌈Level / r⌉                      // until full (token) / empty (leaky)
//	RetryAfter = ⌈(Level + need − C) / r⌉         // rejections only; exact, never early
//	Delay      = ⌈Level_before / r⌉               // LeakyBucketShaping admissions only
//
// Cost 0 peeks: Allowed is true and nothing is added. A cost above Burst
// returns ErrCostExceedsCapacity with Allowed false and RetryAfter 0. A
// negative cost returns ErrInvalidCost and an invalid Limit ErrInvalidLimit,
// both with a zero Decision and s unchanged. The state read is sanitised
// (Level clamped to [0, C], Last to [0, MaxNow]) so a stale or foreign
// state cannot produce a negative Remaining. After a peek, a rejection or
// ErrCostExceedsCapacity the returned state is s drained to now, which is
// equivalent to s: a store need not write it back.
func TakeBucket(l Limit, s BucketState, now, cost int64) (BucketState, Decision, error) {
	b, err := l.Bucket()
	if err != nil {
		return s, Decision{}, err
	}
	if err := checkCost("cost", cost); err != nil {
		return s, Decision{}, err
	}
	s = b.drainState(s, clampNow(now))
	if cost > b.Burst {
		return s, b.decision(s, false), ExceedsCapacity(cost, b.Burst)
	}
	if retry := b.RetryAfter(s.Level, cost); retry > 0 {
		d := b.decision(s, false)
		d.RetryAfter = retry
		return s, d, nil
	}
	before := s.Level
	s.Level += cost * b.Unit
	d := b.decision(s, true)
	if l.Algorithm == LeakyBucketShaping && cost > 0 {
		d.Delay = b.ResetAfter(before) // the time the water ahead takes to drain
	}
	return s, d, nil
}

// RefundBucket gives amount whole tokens back, never beyond a full token
// bucket (an empty leaky bucket): Level = max(0, Level − amount × p) after
// draining to now. Amount 0 peeks. It returns ErrRefundUnsupported for
// LeakyBucketShaping: an admitted caller's departure slot has already spaced
// the callers queued behind it, and handing it back would let later callers
// depart closer together than Rate allows. Refund decisions report Allowed
// true.
func RefundBucket(l Limit, s BucketState, now, amount int64) (BucketState, Decision, error) {
	b, err := l.Bucket()
	if err != nil {
		return s, Decision{}, err
	}
	if err := checkCost("refund", amount); err != nil {
		return s, Decision{}, err
	}
	if l.Algorithm == LeakyBucketShaping {
		return s, Decision{}, errRefund(l.Algorithm)
	}
	s = b.drainState(s, clampNow(now))
	if amount >= b.Burst {
		s.Level = 0
	} else {
		s.Level = max(0, s.Level-amount*b.Unit)
	}
	return s, b.decision(s, true), nil
}

// Bucket is the scaled form of a bucket Limit, in the units of the
// arithmetic above: a token is Unit units (p = Period_µs / g), the level
// drains Refill units per microsecond (r = Rate / g), and a bucket holds
// at most Capacity units (C = Burst × p), g = gcd(Rate, Period_µs). Every
// store and decorator derives these numbers here, through Limit.Bucket;
// the methods are the formulas of TakeBucket, for a level in [0, C].
type Bucket struct {
	Burst, Unit, Refill, Capacity int64
}

// Bucket returns the scaled form of a bucket limit, or an error wrapping
// ErrInvalidLimit for an invalid limit or a window algorithm.
func (l Limit) Bucket() (Bucket, error) {
	if !l.Algorithm.IsBucket() {
		return Bucket{}, wrongAlgorithm("bucket", l.Algorithm)
	}
	p, err := l.params()
	return p.bucket, err
}

// Drain is level after elapsed microseconds with nothing taken: 0 once
// elapsed ≥ ⌈level / r⌉, else level − elapsed × r. The product is formed
// only when it is below level, so it stays below 2^53. A negative elapsed
// (a clock going back) drains nothing.
func (b Bucket) Drain(level, elapsed int64) int64 {
	if elapsed <= 0 {
		return level
	}
	if elapsed >= ceilDiv(level, b.Refill) {
		return 0
	}
	return level - elapsed*b.Refill
}

// Remaining is the whole tokens present at level: ⌊(C − level) / p⌋.
func (b Bucket) Remaining(level int64) int64 {
	return (b.Capacity - min(level, b.Capacity)) / b.Unit
}

// ResetAfter is how long a bucket at level takes to be whole again (full
// as a token bucket, empty as a leaky one): ⌈level / r⌉ µs.
func (b Bucket) ResetAfter(level int64) time.Duration {
	return micros(ceilDiv(max(level, 0), b.Refill))
}

// RetryAfter is how long until cost tokens fit in a bucket at level:
// ⌈(level + cost × p − C) / r⌉ µs, zero when they fit now. cost must be in
// [0, Burst].
func (b Bucket) RetryAfter(level, cost int64) time.Duration {
	over := level + cost*b.Unit - b.Capacity
	if over <= 0 {
		return 0
	}
	return micros(ceilDiv(over, b.Refill))
}

// MaxLevel works backwards from a Decision to the bucket it describes: the
// fullest the bucket can have been when d was decided, d being the answer
// to a Take of cost (0 for a peek or a Refund). A Decision reports whole
// tokens and whole microseconds, so each field only caps the level:
//
//	ResetAfter = ⌈L / r⌉ µs           ⇒  L ≤ ResetAfter × r
//	Remaining  = ⌊(C − L) / p⌋         ⇒  L ≤ C − Remaining × p
//	RetryAfter = ⌈(L + cost×p − C) / r⌉ (rejections)
//	                                   ⇒  L ≤ RetryAfter × r + C − cost × p
//
// and the true level is at most the smallest cap, so answers computed from
// it err on the strict side. Fields outside their possible range are
// ignored, so a foreign decision cannot overflow.
func (b Bucket) MaxLevel(d Decision, cost int64) int64 {
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

// drainState brings s forward to now (already clamped), sanitising the
// state read: Level clamped to [0, C], Last to [0, MaxNow].
func (b Bucket) drainState(s BucketState, now int64) BucketState {
	level := clamp(s.Level, 0, b.Capacity)
	last := clamp(s.Last, 0, MaxNow)
	if now <= last {
		return BucketState{Level: level, Last: last}
	}
	return BucketState{Level: b.Drain(level, now-last), Last: now}
}

func (b Bucket) decision(s BucketState, allowed bool) Decision {
	return Decision{
		Allowed:    allowed,
		Limit:      b.Burst,
		Remaining:  b.Remaining(s.Level),
		ResetAfter: b.ResetAfter(s.Level),
	}
}
