package limiter

import (
	"fmt"
	"time"
)

// Bounds that keep every intermediate value of the arithmetic below 2^53, so
// a Redis Lua script (whose numbers are doubles) computes exactly what the Go
// code computes.
const (
	// MaxSafeInteger is 2^53 − 1, the largest integer a double holds exactly.
	// Scaled limit values (capacity in units, Rate × Period) must not exceed it.
	MaxSafeInteger = 1<<53 - 1
	// MaxNow is the latest time, in microseconds since the Unix epoch, that
	// the arithmetic accepts (early in the year 2112). Later readings are
	// clamped to it, earlier-than-epoch readings to zero.
	MaxNow = 1<<52 - 1
	// MaxPeriod is the longest Period (2^50 µs, about 35.7 years). With
	// now ≤ MaxNow, the end of any window stays below 2^53.
	MaxPeriod = time.Duration(1<<50) * time.Microsecond
	// MaxLogRate caps Rate for SlidingLog, which stores one timestamp per
	// admitted unit of cost: it bounds the memory and time of one key.
	MaxLogRate = 1 << 20
)

// Validate reports whether l is well formed. Every error wraps
// ErrInvalidLimit and names the offending field:
//
//   - Algorithm must be one of the declared constants.
//   - Period must be positive, a whole number of microseconds, and at most
//     MaxPeriod.
//   - Rate must be at least 1 and at most MaxSafeInteger.
//   - Burst must be at least 1 for the three bucket algorithms; the window
//     algorithms ignore it but still reject a negative value.
//   - Buckets: Burst × p ≤ MaxSafeInteger, where p = Period_µs / gcd(Rate,
//     Period_µs) is the number of units per token.
//   - SlidingCounter: Rate × Period_µs ≤ MaxSafeInteger (its comparison is
//     done on those products).
//   - SlidingLog: Rate ≤ MaxLogRate.
func (l Limit) Validate() error {
	_, err := l.params()
	return err
}

// params is the validated, scaled form of a Limit.
type params struct {
	period int64  // P: Period in µs
	bucket Bucket // the bucket algorithms only (see Limit.Bucket)
}

func (l Limit) params() (params, error) {
	if !l.Algorithm.known() {
		return params{}, fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, l.Algorithm)
	}
	name := l.Algorithm.String()
	switch {
	case l.Period <= 0:
		return params{}, fmt.Errorf("%w: %s: period must be positive (got %v)", ErrInvalidLimit, name, l.Period)
	case l.Period%time.Microsecond != 0:
		return params{}, fmt.Errorf("%w: %s: period %v is not a whole number of microseconds", ErrInvalidLimit, name, l.Period)
	case l.Period > MaxPeriod:
		return params{}, fmt.Errorf("%w: %s: period %v exceeds the maximum %v", ErrInvalidLimit, name, l.Period, MaxPeriod)
	case l.Rate < 1:
		return params{}, fmt.Errorf("%w: %s: rate must be at least 1 (got %d)", ErrInvalidLimit, name, l.Rate)
	case l.Rate > MaxSafeInteger:
		return params{}, fmt.Errorf("%w: %s: rate %d exceeds 2^53-1", ErrInvalidLimit, name, l.Rate)
	case l.Burst < 0:
		return params{}, fmt.Errorf("%w: %s: burst must not be negative (got %d)", ErrInvalidLimit, name, l.Burst)
	}
	p := params{period: int64(l.Period / time.Microsecond)}
	switch {
	case l.Algorithm.IsBucket():
		if l.Burst < 1 {
			return params{}, fmt.Errorf("%w: %s: burst must be at least 1 (got %d)", ErrInvalidLimit, name, l.Burst)
		}
		g := gcd(l.Rate, p.period)
		unit := p.period / g
		if l.Burst > MaxSafeInteger/unit {
			return params{}, fmt.Errorf("%w: %s: burst %d × %d units per token exceeds 2^53-1; lower the burst or pick a rate that divides the period more evenly",
				ErrInvalidLimit, name, l.Burst, unit)
		}
		p.bucket = Bucket{Burst: l.Burst, Unit: unit, Refill: l.Rate / g, Capacity: l.Burst * unit}
	case l.Algorithm == SlidingCounter:
		if l.Rate > MaxSafeInteger/p.period {
			return params{}, fmt.Errorf("%w: %s: rate %d × period %dµs exceeds 2^53-1; use a shorter period or fixed_window",
				ErrInvalidLimit, name, l.Rate, p.period)
		}
	case l.Algorithm == SlidingLog:
		if l.Rate > MaxLogRate {
			return params{}, fmt.Errorf("%w: %s: rate %d exceeds %d stored timestamps per key; use sliding_counter for high volumes",
				ErrInvalidLimit, name, l.Rate, MaxLogRate)
		}
	}
	return p, nil
}

// checkCost rejects negative costs and refund amounts.
func checkCost(what string, n int64) error {
	if n < 0 {
		return fmt.Errorf("%w: negative %s %d", ErrInvalidCost, what, n)
	}
	return nil
}

// ExceedsCapacity is the error every store returns for a cost that can
// never fit: it wraps ErrCostExceedsCapacity and names both numbers.
func ExceedsCapacity(cost, capacity int64) error {
	return fmt.Errorf("%w: cost %d, capacity %d", ErrCostExceedsCapacity, cost, capacity)
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

func clamp(v, lo, hi int64) int64 {
	return max(lo, min(v, hi))
}

// clampNow keeps a time reading inside the arithmetic's domain [0, MaxNow].
func clampNow(now int64) int64 {
	return clamp(now, 0, MaxNow)
}

// micros converts a count of microseconds to a Duration. Every caller passes
// a value below 2^53, far from Duration's limit.
func micros(us int64) time.Duration {
	return time.Duration(us) * time.Microsecond
}

// wrongAlgorithm is the error of a transition function handed a Limit of
// another algorithm.
func wrongAlgorithm(want string, got Algorithm) error {
	if !got.known() {
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, got)
	}
	return fmt.Errorf("%w: a %s limit passed to the %s functions", ErrInvalidLimit, got, want)
}

func errRefund(a Algorithm) error {
	return fmt.Errorf("%w: %s", ErrRefundUnsupported, a)
}
