package limitertest

import (
	"context"
	"math/bits"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
)

// HammerResult is what Hammer observed.
type HammerResult struct {
	// Admitted and Rejected are sums of cost.
	Admitted, Rejected int64
	// Calls is the number of Take calls made.
	Calls int64
	// Elapsed is the clock time between the first and the last call.
	Elapsed time.Duration
	// Bound is MaxAdmitted over Elapsed: Admitted must not exceed it.
	Bound int64
}

const (
	// hammerStep is how far Hammer moves a fake clock at a time.
	hammerStep = 15 * time.Millisecond
	// perStep bounds each caller's calls per fake-clock instant, so fast
	// stores do not run through all their calls at one instant.
	perStep = 3
)

// Hammer runs callers goroutines that each make calls Take calls on key
// concurrently (costs cycling 1, 2, 3, capped at the limit's capacity),
// then fails t if the admitted cost exceeds MaxAdmitted over the clock
// time the calls spanned: zero overshoot allowed. key should be fresh.
// The run is a number of calls, not a duration: it does as much on a slow
// machine as on a fast one.
//
// With a clock that has an Advance(time.Duration) time.Time method (a
// *FakeClock), Hammer moves it itself by 15 ms each time the callers have
// made about one call apiece at the current instant; each makes at most
// three there, then waits for the clock to move, so each caller's calls
// span at least calls/3 steps and nothing sleeps. With a real clock the
// calls take the time they take.
func Hammer(t testing.TB, store limiter.Store, key string, limit limiter.Limit, callers, calls int, clock limiter.Clock) HammerResult {
	t.Helper()
	if callers < 1 || calls < 1 {
		t.Fatalf("limitertest: Hammer needs callers ≥ 1 and calls ≥ 1 (got %d, %d)", callers, calls)
	}
	if err := limit.Validate(); err != nil {
		t.Fatalf("limitertest: Hammer: %v", err)
	}
	maxCost := min(3, limit.Capacity())
	ctx := context.Background()
	fake, _ := clock.(interface {
		Advance(time.Duration) time.Time
	})
	p := &pacer{active: callers}
	p.moved.L, p.counted.L = &p.mu, &p.mu

	type tally struct{ admitted, rejected, calls int64 }
	var (
		tallies  = make([]tally, callers)
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	start := clock.Now()
	for i := range callers {
		wg.Go(func() {
			if fake != nil {
				defer p.done()
			}
			tl := &tallies[i]
			seen, used := int64(-1), 0
			for n := range int64(calls) {
				if fake != nil {
					seen, used = p.wait(seen, used)
				}
				if firstErr.Load() != nil {
					return
				}
				cost := 1 + (int64(i)+n)%maxCost
				d, err := store.Take(ctx, key, limit, cost)
				tl.calls++
				if err != nil {
					if firstErr.CompareAndSwap(nil, &err) && fake != nil {
						p.stop()
					}
					return
				}
				if d.Allowed {
					tl.admitted += cost
				} else {
					tl.rejected += cost
				}
				if fake != nil {
					p.count()
				}
			}
		})
	}
	if fake != nil {
		p.run(fake)
	}
	wg.Wait()
	last := clock.Now()

	if p := firstErr.Load(); p != nil {
		t.Fatalf("limitertest: Hammer: Take(%q): %v", key, *p)
	}
	var r HammerResult
	for _, tl := range tallies {
		r.Admitted += tl.admitted
		r.Rejected += tl.rejected
		r.Calls += tl.calls
	}
	// Sub uses monotonic readings when the clock has them, so a wall-clock
	// step during the run does not distort the bound.
	r.Elapsed = last.Sub(start)
	r.Bound = MaxAdmitted(limit, start, start.Round(0).Add(r.Elapsed))
	t.Logf("hammer %s: %d callers, %d calls, admitted %d, rejected %d, bound %d over %v",
		limit.Algorithm, callers, r.Calls, r.Admitted, r.Rejected, r.Bound, r.Elapsed)
	if r.Admitted > r.Bound {
		t.Errorf("limitertest: Hammer: admitted %d > bound %d over %v: overshoot of %d",
			r.Admitted, r.Bound, r.Elapsed, r.Admitted-r.Bound)
	}
	if r.Admitted == 0 {
		t.Errorf("limitertest: Hammer: nothing admitted in %d calls on a fresh key", r.Calls)
	}
	return r
}

// pacer moves Hammer's fake clock: callers block, not spin, while they wait
// for it to move, so the store (a Redis server on the same cores) gets the
// CPU.
type pacer struct {
	mu sync.Mutex
	// moved wakes the callers waiting for the clock to move; counted wakes
	// run when a call returned or a caller finished.
	moved, counted sync.Cond
	instant        int64 // how many times the clock moved
	made, base     int64 // calls returned; made when the clock last moved
	active         int   // callers still running
	stopped        bool
}

// wait returns once the caller, who made used calls at instant seen, may
// make one more, and the instant and count to pass next time.
func (p *pacer) wait(seen int64, used int) (int64, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.stopped && p.instant == seen && used == perStep {
		p.moved.Wait()
	}
	if p.instant != seen {
		seen, used = p.instant, 0
	}
	return seen, used + 1
}

// count records a returned call.
func (p *pacer) count() {
	p.mu.Lock()
	p.made++
	if p.made-p.base >= int64(p.active) {
		p.counted.Signal()
	}
	p.mu.Unlock()
}

// done records a caller that made its last call.
func (p *pacer) done() {
	p.mu.Lock()
	p.active--
	p.counted.Signal()
	p.mu.Unlock()
}

// stop ends the run early (a Take failed).
func (p *pacer) stop() {
	p.mu.Lock()
	p.stopped = true
	p.moved.Broadcast()
	p.counted.Signal()
	p.mu.Unlock()
}

// run moves the clock each time the callers still running have made
// about one call apiece since the last move, until none is left. A caller
// waits only once its perStep ≥ 1 calls at this instant have returned, all
// counted since the move, so the target is always reached.
func (p *pacer) run(clock interface{ Advance(time.Duration) time.Time }) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for p.active > 0 && !p.stopped && p.made-p.base < int64(p.active) {
			p.counted.Wait()
		}
		if p.active == 0 || p.stopped {
			return
		}
		p.base = p.made
		clock.Advance(hammerStep)
		p.instant++
		p.moved.Broadcast()
	}
}

// MaxAdmitted is the most cost a fresh key may admit to calls whose store
// times lie in [start, end] (read with microsecond precision, as the stores
// do):
//
//   - buckets: Burst + ⌊Rate × E / P⌋, E = end − start in µs;
//   - FixedWindow and SlidingCounter: Rate × the number of Period-aligned
//     windows [start, end] touches (neither admits more than Rate into one
//     window);
//   - SlidingLog: Rate × ⌈(E + 1) / P⌉ (no half-open interval of length P
//     holds more than Rate).
//
// It returns 0 for an invalid limit or end before start. It saturates at
// math.MaxInt64.
func MaxAdmitted(limit limiter.Limit, start, end time.Time) int64 {
	if limit.Validate() != nil {
		return 0
	}
	s, e := start.UnixMicro(), end.UnixMicro()
	if e < s {
		return 0
	}
	period := int64(limit.Period / time.Microsecond)
	switch a := limit.Algorithm; {
	case a.IsBucket():
		hi, lo := bits.Mul64(uint64(limit.Rate), uint64(e-s))
		if hi >= uint64(period) {
			return 1<<63 - 1
		}
		q, _ := bits.Div64(hi, lo, uint64(period))
		return satAdd(limit.Burst, q)
	case a == limiter.FixedWindow, a == limiter.SlidingCounter:
		return satMul(limit.Rate, uint64(floorDiv(e, period)-floorDiv(s, period)+1))
	default: // SlidingLog
		return satMul(limit.Rate, uint64((e-s)/period+1))
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func satAdd(a int64, b uint64) int64 {
	if b > uint64(1<<63-1-a) {
		return 1<<63 - 1
	}
	return a + int64(b)
}

func satMul(a int64, b uint64) int64 {
	hi, lo := bits.Mul64(uint64(a), b)
	if hi != 0 || lo > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(lo)
}
