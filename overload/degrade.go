package overload

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costguard/costguard/limiter"
)

// degradation switches the features of the degradation list off and on as
// load moves. Because the list is ordered and features go off in its order
// and come back in reverse, its whole state is one number: how many
// features, from the front of the list, are off. Readers load it
// atomically; writers hold mu.
type degradation struct {
	features []feature
	index    map[string]int // name → position in features
	hold     time.Duration
	clock    limiter.Clock

	off atomic.Int64 // features[:off] are switched off

	mu    sync.Mutex
	since []time.Time // since[i]: when features[i] was last switched off
}

func newDegradation(s settings, clock limiter.Clock) *degradation {
	if len(s.features) == 0 {
		return nil
	}
	d := &degradation{
		features: s.features,
		index:    make(map[string]int, len(s.features)),
		hold:     s.hold,
		clock:    clock,
		since:    make([]time.Time, len(s.features)),
	}
	for i, f := range s.features {
		d.index[f.name] = i
	}
	return d
}

// degraded reports whether the named feature is switched off: one map
// lookup and one atomic load. A name not on the list is never off.
func (d *degradation) degraded(name string) bool {
	i, ok := d.index[name]
	return ok && int64(i) < d.off.Load()
}

// observe re-evaluates the features for n requests in flight out of
// capacity c. It is called at every admission and release, so it does
// the least it can: it reads the clock and takes the lock only when the
// next feature to go is at its threshold, or the last one gone is below
// its way back. A concurrent update already under way stands for this one.
func (d *degradation) observe(n, c int64) {
	k := d.off.Load()
	goes := k < int64(len(d.features)) && offAt(d.features[k], n, c)
	returns := k > 0 && onAt(d.features[k-1], n, c)
	if !goes && !returns {
		return
	}
	if !d.mu.TryLock() {
		return
	}
	defer d.mu.Unlock()
	d.off.Store(int64(step(d.features, d.since, int(d.off.Load()), n, c, d.clock.Now(), d.hold)))
}

// offAt reports whether f is to go off at n in flight out of c: load at
// or above its At, computed exactly as n × 10⁶ ≥ At(ppm) × c.
func offAt(f feature, n, c int64) bool { return n*ppm >= f.off*c }

// onAt reports whether load is below f's way back, At − Hysteresis.
func onAt(f feature, n, c int64) bool { return n*ppm < f.on*c }

// step is the state machine of the degradation list, for n in flight out
// of c at now: with features[:k] off, it switches off, in list order, every
// further feature whose threshold load has reached; otherwise it brings
// back, last first, every feature that is below its way back and has been
// off for at least hold. It records switch-off times in since and returns
// the new k.
func step(features []feature, since []time.Time, k int, n, c int64, now time.Time, hold time.Duration) int {
	if k < len(features) && offAt(features[k], n, c) {
		for k < len(features) && offAt(features[k], n, c) {
			since[k] = now
			k++
		}
		return k
	}
	for k > 0 && onAt(features[k-1], n, c) && now.Sub(since[k-1]) >= hold {
		k--
	}
	return k
}

// Degrader answers whether a named feature is switched off. A Shedder is
// one; tests and callers with their own policy may pass another.
type Degrader interface {
	Degraded(feature string) bool
}

type degraderKey struct{}

// WithDegradation returns a copy of ctx that carries d, for resolvers and
// handlers to ask with Degraded.
func WithDegradation(ctx context.Context, d Degrader) context.Context {
	return context.WithValue(ctx, degraderKey{}, d)
}

// Degraded reports whether the feature named is switched off, according to
// the Degrader ctx carries; false when ctx carries none. It is cheap
// enough to ask in every resolver: a context lookup, then, for a Shedder,
// a map lookup and an atomic load.
func Degraded(ctx context.Context, feature string) bool {
	d, _ := ctx.Value(degraderKey{}).(Degrader)
	return d != nil && d.Degraded(feature)
}
