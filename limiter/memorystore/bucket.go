package memorystore

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/costguard/costguard/limiter"
)

// The bucket algorithms are the default and the hot path, so the store runs
// them itself on parameters validated once per Limit value, instead of
// through limiter.TakeBucket, which validates the Limit and recomputes
// gcd(Rate, Period) on every call; a quota's fixed window likewise. The
// arithmetic is limiter's, step for step (see limiter.TakeBucket and
// limiter.TakeFixedWindow); TestBucketFastPathMatchesLimiter,
// TestWindowFastPathMatchesLimiter and TestStoreMatchesLimiter check it
// against limiter's functions decision by decision. Calls the fast paths
// do not cover (negative costs, costs above Burst or a window's Rate,
// refunds under LeakyBucketShaping, invalid limits) take the generic path,
// so their errors are limiter's own.

// paramSlots is the number of entries of a Store's cache of validated
// limits. A deployment has a handful of plans, each with its bucket, its
// quota and its field limits; a collision only costs a revalidation.
const paramSlots = 32

// limitParams is a valid Limit and what the fast paths compute from it
// once: for a bucket, its scaled form as limiter.Limit.Bucket computes it
// (a bucket holds capacity units, a token is unit units, and refill units
// drain per µs); for a window, its period in µs.
type limitParams struct {
	limit                  limiter.Limit
	unit, refill, capacity int64
	// The two divisions of every bucket decision, by multiplication.
	perUnit, perRefill divisor
	period             int64 // Period in µs
}

// paramCache maps Limit values to their limitParams, lock-free. Entries
// are immutable once published.
type paramCache [paramSlots]atomic.Pointer[limitParams]

// get returns l's parameters, or nil when l is not a valid bucket limit.
func (c *paramCache) get(l limiter.Limit) *limitParams {
	if !l.Algorithm.IsBucket() {
		return nil
	}
	return c.valid(l)
}

// window returns l's parameters, or nil when l is not a valid fixed
// window.
func (c *paramCache) window(l limiter.Limit) *limitParams {
	if l.Algorithm != limiter.FixedWindow {
		return nil
	}
	return c.valid(l)
}

// valid returns l's parameters, or nil when l is invalid
// (limiter.Limit.Validate).
func (c *paramCache) valid(l limiter.Limit) *limitParams {
	if p := c[limitSlot(l)].Load(); p != nil && p.limit == l {
		return p
	}
	return c.fill(l)
}

// fill validates l and caches its parameters; nil when l is invalid.
func (c *paramCache) fill(l limiter.Limit) *limitParams {
	if l.Validate() != nil {
		return nil
	}
	p := &limitParams{limit: l, period: int64(l.Period / time.Microsecond)}
	if l.Algorithm.IsBucket() {
		b, err := l.Bucket() // Capacity and Refill are below 2^53
		if err != nil {
			return nil
		}
		p.unit, p.refill, p.capacity = b.Unit, b.Refill, b.Capacity
		p.perUnit, p.perRefill = newDivisor(b.Unit), newDivisor(b.Refill)
	}
	c[limitSlot(l)].Store(p)
	return p
}

// limitSlot spreads Limit values over the cache's slots.
func limitSlot(l limiter.Limit) uint64 {
	h := uint64(l.Burst)*0x9e3779b97f4a7c15 ^ uint64(l.Rate)*0xc2b2ae3d27d4eb4f ^
		uint64(l.Period)*0x165667b19e3779f9 ^ uint64(l.Algorithm)
	return (h ^ h>>29) % paramSlots
}

// step is limiter.TakeBucket, or limiter.RefundBucket when refund, on st's
// (Level, Last) = (a, b), for a cost in [0, Burst] or any refund ≥ 0 (not
// under LeakyBucketShaping). It updates st in place and fills in d, whose
// fields must be zero. One function, not four, because this is the hot
// path and calls are not free.
func (p *limitParams) step(d *limiter.Decision, st *entry, now, n int64, refund bool) {
	// Drain to now, as limiter does: the level read is clamped to
	// [0, capacity], times to [0, MaxNow], and a clock going back drains
	// nothing. elapsed ≥ ⌈level / refill⌉ is tested as the equivalent
	// elapsed × refill ≥ level, in 128 bits: a multiplication, no division.
	level := clamp(st.a, 0, p.capacity)
	last := clamp(st.b, 0, limiter.MaxNow)
	if now = clamp(now, 0, limiter.MaxNow); now > last {
		if hi, lo := bits.Mul64(uint64(now-last), uint64(p.refill)); hi != 0 || lo >= uint64(level) {
			level = 0
		} else {
			level -= int64(lo)
		}
		last = now
	}
	d.Allowed = true
	switch need := n * p.unit; { // n ≤ Burst or a refund: need < 2^53, or unused
	case refund && n >= p.limit.Burst:
		level = 0
	case refund:
		level = max(0, level-need)
	case level+need > p.capacity:
		d.Allowed = false
		d.RetryAfter = p.drainTime(level + need - p.capacity)
	default:
		if p.limit.Algorithm == limiter.LeakyBucketShaping && n > 0 {
			d.Delay = p.drainTime(level)
		}
		level += need
	}
	st.a, st.b = level, last
	d.Limit = p.limit.Burst
	d.Remaining = p.perUnit.floor(p.capacity - level)
	d.ResetAfter = p.drainTime(level)
}

// divisor divides by a fixed d in [1, 2^53) with a multiplication by its
// reciprocal m = ⌊(2^64 − 1) / d⌋ and one correction: for 0 ≤ x < 2^63 the
// high word of x × m is ⌊x / d⌋ or one less (x × m / 2^64 lies within
// 2x / 2^64 < 1 below x / d, and never above it), so a single comparison
// makes it exact.
type divisor struct{ d, m uint64 }

func newDivisor(d int64) divisor {
	return divisor{d: uint64(d), m: ^uint64(0) / uint64(d)}
}

// floor is ⌊x / d⌋ for 0 ≤ x < 2^63.
func (v divisor) floor(x int64) int64 {
	q, _ := bits.Mul64(uint64(x), v.m)
	if uint64(x)-q*v.d >= v.d {
		q++
	}
	return int64(q)
}

// ceil is ⌈x / d⌉ for 0 ≤ x < 2^62 (our values stay below 2^54).
func (v divisor) ceil(x int64) int64 { return v.floor(x + int64(v.d) - 1) }

func clamp(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }

// drainTime is how long units take to drain, ⌈units / refill⌉ µs, as
// limiter.Bucket.ResetAfter computes it, by multiplication.
func (p *limitParams) drainTime(units int64) time.Duration {
	return time.Duration(p.perRefill.ceil(units)) * time.Microsecond
}

// stepWindow is limiter.TakeFixedWindow, or limiter.RefundFixedWindow when
// refund, on st's (Window, Count) = (a, b), for a cost in [0, Rate] or any
// refund ≥ 0, on p, a fixed window's parameters. It updates st in place
// and fills in d, whose fields must be zero.
func (p *limitParams) stepWindow(d *limiter.Decision, st *entry, now, n int64, refund bool) {
	rate := p.limit.Rate
	// Roll to the window holding now: the stored count is clamped to
	// [0, Rate], and a clock going back stands at the stored window's
	// start.
	now = clamp(now, 0, limiter.MaxNow)
	w := now / p.period
	stored := clamp(st.a, 0, limiter.MaxNow/p.period)
	e := now - w*p.period
	if w < stored {
		w, e = stored, 0
	}
	count := clamp(st.b, 0, rate)
	if w != stored {
		count = 0 // a later window; what the earlier one held has expired
	}
	d.Allowed = true
	switch {
	case refund:
		count = max(0, count-n)
	case count+n > rate:
		d.Allowed = false
		d.RetryAfter = time.Duration(p.period-e) * time.Microsecond
	default:
		count += n
	}
	st.a, st.b = w, count
	st.setPrev(0)
	d.Limit = rate
	d.Remaining = rate - count
	if count > 0 {
		d.ResetAfter = time.Duration(p.period-e) * time.Microsecond
	}
}
