package overload

import "time"

// outcome is what a released permit tells the adaptive capacity.
type outcome uint8

const (
	ignored   outcome = iota // no sample: Permit.Ignore, or a negative latency
	completed                // a latency sample: Permit.Done
	dropped                  // an overload signal: Permit.Drop
)

// aimd is the adaptive capacity: additive increase, multiplicative
// decrease, driven by a latency gradient (see the package documentation).
// next moves it by one sample; nothing in it reads a clock or touches
// shared memory. The Shedder keeps it under its mutex, and counts the
// epochs: the decreases. A permit carries the epoch it was admitted in;
// only a permit admitted since the last decrease may cause the next, so a
// burst of slow responses that were all in flight together counts once.
type aimd struct {
	min, max int64
	t        tuning

	limit       int64
	good        int64   // uncongested samples since the last change
	short, long float64 // moving averages of latency, in nanoseconds
	seeded      bool    // short and long hold at least one sample
}

func newAIMD(s settings) *aimd {
	return &aimd{min: s.min, max: s.max, t: s.tuning, limit: s.max}
}

// next applies one released permit, admitted in epoch, to a whose current
// epoch is now, and returns the new limit and whether it was a decrease
// (which ends the epoch).
//
//   - A completed sample of latency x moves the averages:
//     short += (x − short) / ShortWindow, long += (x − long) / LongWindow
//     (the first sample sets both).
//   - Congestion is a dropped permit, or a completed one where both x and
//     short exceed the ceiling: Tolerance × long, or Target when one is
//     set and lower.
//   - On congestion from a permit of the current epoch, the limit becomes
//     max(MinInFlight, ⌊limit × Backoff⌋) and the count of good samples
//     restarts. Congestion from an older epoch changes nothing.
//   - Otherwise the sample is good; after limit good samples in a row
//     the limit grows by one, up to MaxInFlight.
func (a *aimd) next(epoch, now uint64, o outcome, latency time.Duration) (limit int64, decreased bool) {
	congested := o == dropped
	if o == completed {
		x := float64(latency)
		if a.seeded {
			a.short += (x - a.short) / float64(a.t.short)
			a.long += (x - a.long) / float64(a.t.long)
		} else {
			a.short, a.long, a.seeded = x, x, true
		}
		// Both the sample and the short average must be slow: the average
		// keeps one outlier from counting, the sample keeps the average's
		// lag from counting once responses are fast again.
		ceiling := a.t.tolerance * a.long
		if a.t.target > 0 {
			ceiling = min(ceiling, a.t.target)
		}
		congested = a.short > ceiling && x > ceiling
	}
	switch {
	case o == ignored:
	case congested:
		if epoch == now {
			a.limit = max(a.min, a.limit*a.t.backoff/ppm)
			a.good = 0
			return a.limit, true
		}
	default:
		a.good++
		if a.good >= a.limit {
			a.good = 0
			a.limit = min(a.limit+1, a.max)
		}
	}
	return a.limit, false
}
