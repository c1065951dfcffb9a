package client

import (
	"math"
	"time"
)

// The pacing rule's constants (see the package documentation).
const (
	// plentyShare: while the bucket, less the price, holds at least this
	// share of its limit, requests go out unpaced.
	plentyShare = 0.5
	// lowShare: an answer reporting less than this share of the limit
	// (or than twice its price, see pacer.low) halves the pacing rate.
	lowShare = 0.25
	// cutFactor is the multiplicative decrease.
	cutFactor = 0.5
	// growFills is how many times the bucket's fill time the pacing rate
	// takes to grow by the whole refill rate (the additive increase)
	// while the bucket is above plentyShare.
	growFills = 2
	// minRateShare floors the pacing rate, as a share of the refill rate.
	minRateShare = 1.0 / 256
	// jitterShare: every wait is lengthened by a random share of itself
	// of at most this much.
	jitterShare = 0.2
	// maxPolicies bounds the other policies a view keeps.
	maxPolicies = 16
)

// pacer is a Transport's view of the plan's bucket and its own pacing
// rate. It does no I/O and reads no clock: every method takes now.
type pacer struct {
	plan   Policy  // the plan's bucket (the first policy), as last reported
	known  bool    // plan holds a report with a limit and a refill rate
	rate   float64 // the refill rate, points per second
	exact  bool    // rate came from throttleStatus.restoreRate
	others map[string]Policy

	// share is the rate this Transport paces at, points per second,
	// while the bucket is below plentyShare.
	share float64
	// next is when the paced sends so far leave room for another (the
	// theoretical arrival time of a GCRA at share).
	next time.Time
	// inflight is the price of the requests sent and not yet answered.
	inflight int64
	// hold: nothing is sent before it (the Retry-After of a refusal that
	// applies to every request, signals.holds).
	hold time.Time
	// cut is when share was last halved; grown when it last grew.
	cut, grown time.Time
	// drain measures how fast the bucket is spent, by every client of
	// the key and by this Transport alone.
	drain drainMeter
}

// delay is how long a request of price points must wait at now before it
// is sent; 0: send it now.
func (p *pacer) delay(now time.Time, price int64) time.Duration {
	if now.Before(p.hold) {
		return p.hold.Sub(now)
	}
	price = max(price, 1)
	if !p.known || price > p.plan.Limit {
		return 0 // nothing to pace on, or it never fits: the server says so
	}
	if p.plenty(now, price) {
		return 0
	}
	// Never past the time the bucket would be full: points past it would
	// be lost.
	net := p.netRate()
	full := seconds((float64(p.plan.Limit) - p.estimate(now, net)) / net)
	if full <= 0 {
		return 0
	}
	if now.Before(p.next) {
		return min(p.next.Sub(now), full)
	}
	est := p.estimate(now, p.share)
	if est >= float64(price) {
		return 0
	}
	return min(seconds((float64(price)-est)/p.share), full)
}

// plenty reports whether the bucket, as projected at the refill rate the
// other clients leave, holds price and plentyShare of its limit besides,
// or is full.
func (p *pacer) plenty(now time.Time, price int64) bool {
	est := p.estimate(now, p.netRate())
	return est-float64(price) >= max(plentyShare*float64(p.plan.Limit), p.low(price)) || est >= float64(p.plan.Limit)
}

// low is the level below which an answer to a request of price points
// halves share: a quarter of the limit, or two such requests when more,
// up to three quarters of the limit.
func (p *pacer) low(price int64) float64 {
	limit := float64(p.plan.Limit)
	return min(max(lowShare*limit, 2*float64(price)), 0.75*limit)
}

// netRate is the refill rate the other clients of the key leave, as
// measured: the refill rate less their drain; at least share.
func (p *pacer) netRate() float64 {
	own, all := p.drain.rates()
	return max(p.rate-(all-own), p.share)
}

// estimate is the bucket at now as projected from the last report at
// rate points per second, less what is in flight.
func (p *pacer) estimate(now time.Time, rate float64) float64 {
	elapsed := max(now.Sub(p.plan.Updated).Seconds(), 0)
	return min(float64(p.plan.Limit), float64(p.plan.Remaining)+rate*elapsed) - float64(p.inflight)
}

// sent records a request of price points sent at now.
func (p *pacer) sent(now time.Time, price int64) {
	price = max(price, 1)
	p.inflight = satAdd(p.inflight, price)
	if !p.known {
		return
	}
	step := seconds(float64(price) / p.share)
	if p.plenty(now, 0) {
		p.next = now.Add(step) // unpaced sends do not queue up
		return
	}
	p.next = later(p.next, now).Add(step)
}

// answered records that a request of price points is no longer in
// flight.
func (p *pacer) answered(price int64) {
	p.inflight = max(p.inflight-max(price, 1), 0)
}

// observe reads the signals s of an answer received at now to a request
// of price points sent at sentAt.
func (p *pacer) observe(now, sentAt time.Time, price int64, s *signals) {
	price = max(price, s.price, 1)
	if s.holds() {
		p.hold = later(p.hold, now.Add(s.retryAfter))
	}
	wasKnown := p.known
	wasPlenty := p.known && float64(p.plan.Remaining) >= max(plentyShare*float64(p.plan.Limit), p.low(price))
	p.readPlan(now, s)
	p.readOthers(now, s)
	if !p.known {
		return
	}
	if !wasKnown {
		// The first answer: what the bucket lacks was spent lately, mostly
		// by others when it lacks more than this answer cost.
		used := float64(max(p.plan.Limit-p.plan.Remaining, s.spent()))
		p.share = max(p.rate*float64(s.spent())/used, p.rate*minRateShare)
	}
	p.drain.add(s.spent(), now, p.plan, p.rate)
	level, high := float64(p.plan.Remaining), max(plentyShare*float64(p.plan.Limit), p.low(price))
	switch {
	case s.refused || level < p.low(price):
		p.decrease(now, sentAt)
	case wasPlenty && level < high:
		p.share = max(min(p.share, p.fair()), p.rate*minRateShare) // entering the paced zone
	case level >= high:
		p.share = min(p.rate, p.share+p.rate*now.Sub(later(p.grown, sentAt)).Seconds()/p.growTime())
		p.grown = now
	default:
		p.grown = now
	}
}

// decrease halves share once per round trip: only for an answer to a
// request sent after the last cut, which the cut already slowed.
func (p *pacer) decrease(now, sentAt time.Time) {
	if sentAt.Before(p.cut) {
		return
	}
	p.share = max(min(p.share*cutFactor, p.fair()), p.rate*minRateShare)
	p.cut, p.grown = now, now
}

// fair is this Transport's part of the refill rate in proportion to its
// part of the bucket's drain (counting its refused requests at their
// price, as its demand): what it may spend if every client of the key
// scaled its spending alike to fit the refill. +Inf when the drain is
// not measured yet.
func (p *pacer) fair() float64 {
	own, all := p.drain.rates()
	if all <= 0 {
		return math.Inf(1)
	}
	return p.rate * min(own/all, 1)
}

// growTime is how long share takes to grow by the whole refill rate.
func (p *pacer) growTime() float64 {
	return growFills * float64(p.plan.Limit) / p.rate
}

// readPlan updates the plan's bucket from s: the first RateLimit-Policy
// item names it and gives its limit and fill time; X-RateLimit-*,
// extensions.cost's throttleStatus and the RateLimit item of the same name
// its remaining points.
func (p *pacer) readPlan(now time.Time, s *signals) {
	plan, rate := p.plan, 0.0
	if len(s.policies) > 0 {
		first := s.policies[0]
		plan.Name = first.name
		if first.q > 0 && first.w > 0 {
			plan.Limit, plan.Window = first.q, time.Duration(first.w)*time.Second
			rate = float64(first.q) / float64(first.w)
		}
	}
	if s.limit > 0 {
		plan.Limit = s.limit
	}
	remaining := s.remaining
	for _, it := range s.states {
		if it.name == plan.Name && remaining < 0 && it.r >= 0 {
			remaining = it.r
		}
		if it.name == plan.Name && s.reset.IsZero() && it.t >= 0 {
			plan.Reset = now.Add(time.Duration(it.t) * time.Second)
		}
	}
	if c := s.cost; c != nil && c.ThrottleStatus.MaximumAvailable > 0 {
		plan.Limit = c.ThrottleStatus.MaximumAvailable
		if r := c.ThrottleStatus.RestoreRate; r > 0 && !math.IsInf(r, 0) {
			rate, p.exact = r, true
		}
		if a := c.ThrottleStatus.CurrentlyAvailable; a != nil && remaining < 0 && *a >= 0 {
			remaining = *a
		}
	}
	if !s.reset.IsZero() {
		plan.Reset = s.reset
	}
	if remaining < 0 || plan.Limit <= 0 {
		return // nothing new about the bucket
	}
	plan.Remaining, plan.Updated = min(remaining, plan.Limit), now
	if rate > 0 && (!p.exact || s.cost != nil) {
		p.rate = rate
	}
	p.plan = plan
	if !p.known && p.rate > 0 {
		p.known, p.grown = true, now
	}
}

// readOthers keeps the view of the policies after the first.
func (p *pacer) readOthers(now time.Time, s *signals) {
	for i, it := range s.policies {
		if i == 0 || it.q < 0 {
			continue
		}
		o, ok := p.others[it.name]
		if !ok && len(p.others) >= maxPolicies {
			continue
		}
		o.Name, o.Limit, o.Window = it.name, it.q, time.Duration(max(it.w, 0))*time.Second
		o.Remaining, o.Updated = -1, now
		for _, st := range s.states {
			if st.name == it.name && st.r >= 0 {
				o.Remaining = st.r
				if st.t >= 0 {
					o.Reset = now.Add(time.Duration(st.t) * time.Second)
				}
			}
		}
		if p.others == nil {
			p.others = make(map[string]Policy)
		}
		p.others[it.name] = o
	}
}

// drainMeter measures, over windows of an eighth of the bucket's fill
// time (at least 50 ms, at most 10 s; the first one shorter), the rate at which
// the bucket is spent (by the movement of its remaining points) and the
// rate at which this Transport spends it (by its answers' costs), each
// kept as a moving average.
type drainMeter struct {
	start          time.Time // of the current window; zero: none yet
	startRemaining int64
	own            float64 // points this Transport spent in the window
	ownRate        float64 // points per second, averaged
	allRate        float64
}

// add records an answer received at now that spent points of plan,
// whose bucket refills at rate.
func (d *drainMeter) add(points int64, now time.Time, plan Policy, rate float64) {
	if d.start.IsZero() {
		d.start, d.startRemaining = now, plan.Remaining
		return
	}
	d.own += float64(points)
	elapsed := now.Sub(d.start).Seconds()
	if elapsed <= 0 || (d.allRate > 0 && elapsed < min(max(float64(plan.Limit)/rate/8, 0.05), 10)) {
		return // the first window ends at the second answer, to pace early
	}
	refilled := min(float64(d.startRemaining)+rate*elapsed, float64(plan.Limit))
	all := max(refilled-float64(plan.Remaining), 0) / elapsed
	own := d.own / elapsed
	if d.allRate == 0 {
		d.ownRate, d.allRate = own, all
	} else {
		d.ownRate, d.allRate = (d.ownRate+own)/2, (d.allRate+all)/2
	}
	d.start, d.startRemaining, d.own = now, plan.Remaining, 0
}

// rates are the averaged rates: this Transport's and everyone's.
func (d *drainMeter) rates() (own, all float64) {
	return d.ownRate, max(d.allRate, d.ownRate)
}

// seconds converts s seconds to a Duration, saturating.
func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/float64(time.Second) || math.IsNaN(s) {
		return math.MaxInt64
	}
	return time.Duration(math.Ceil(s * float64(time.Second)))
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// satAdd is a+b for non-negative a and b, saturating.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
