package limiter

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
	p, err := l.bucketParams()
	if err != nil {
		return s, Decision{}, err
	}
	if err := checkCost("cost", cost); err != nil {
		return s, Decision{}, err
	}
	s = p.drain(s, clampNow(now))
	if cost > l.Burst {
		return s, p.decision(l, s, false), exceeds(cost, l.Burst)
	}
	need := cost * p.unit
	if s.Level+need > p.capacity {
		d := p.decision(l, s, false)
		d.RetryAfter = micros(ceilDiv(s.Level+need-p.capacity, p.refill))
		return s, d, nil
	}
	before := s.Level
	s.Level += need
	d := p.decision(l, s, true)
	if l.Algorithm == LeakyBucketShaping && cost > 0 {
		d.Delay = micros(ceilDiv(before, p.refill))
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
	p, err := l.bucketParams()
	if err != nil {
		return s, Decision{}, err
	}
	if err := checkCost("refund", amount); err != nil {
		return s, Decision{}, err
	}
	if l.Algorithm == LeakyBucketShaping {
		return s, Decision{}, errRefund(l.Algorithm)
	}
	s = p.drain(s, clampNow(now))
	if amount >= l.Burst {
		s.Level = 0
	} else {
		s.Level = max(0, s.Level-amount*p.unit)
	}
	return s, p.decision(l, s, true), nil
}

func (l Limit) bucketParams() (params, error) {
	switch l.Algorithm {
	case TokenBucket, LeakyBucketPolicing, LeakyBucketShaping:
		return l.params()
	}
	return params{}, wrongAlgorithm("bucket", l.Algorithm)
}

// drain brings s forward to now (already clamped). The product elapsed × r
// is only formed when it is below Level, so it stays below 2^53.
func (p params) drain(s BucketState, now int64) BucketState {
	level := clamp(s.Level, 0, p.capacity)
	last := clamp(s.Last, 0, MaxNow)
	if now <= last {
		return BucketState{Level: level, Last: last}
	}
	if elapsed := now - last; elapsed >= ceilDiv(level, p.refill) {
		level = 0
	} else {
		level -= elapsed * p.refill
	}
	return BucketState{Level: level, Last: now}
}

func (p params) decision(l Limit, s BucketState, allowed bool) Decision {
	return Decision{
		Allowed:    allowed,
		Limit:      l.Burst,
		Remaining:  (p.capacity - s.Level) / p.unit,
		ResetAfter: micros(ceilDiv(s.Level, p.refill)),
	}
}
