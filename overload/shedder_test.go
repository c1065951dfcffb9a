package overload_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/overload"
)

// At capacity 64 with the default shares, each priority is refused from
// ⌊share × 64⌋ in flight: sheddable at 32, normal at 51 (⌊51.2⌋), high at
// 57 (⌊57.6⌋), critical only at 64.
func TestThresholdsAtCapacity64(t *testing.T) {
	tests := []struct {
		p        overload.Priority
		inFlight int
		admitted bool
	}{
		{overload.Sheddable, 0, true},
		{overload.Sheddable, 31, true},
		{overload.Sheddable, 32, false},
		{overload.Sheddable, 63, false},
		{overload.Normal, 32, true},
		{overload.Normal, 50, true},
		{overload.Normal, 51, false},
		{overload.High, 51, true},
		{overload.High, 56, true},
		{overload.High, 57, false},
		{overload.Critical, 57, true},
		{overload.Critical, 63, true},
		{overload.Critical, 64, false},
	}
	s, _, timers := newShedder(t, overload.Config{MaxInFlight: 64})
	h := &holder{t: t, s: s}
	for _, tc := range tests {
		h.to(tc.inFlight)
		permit, err := s.Admit(t.Context(), tc.p, 0)
		if tc.admitted != (err == nil) || permit.Admitted() != tc.admitted {
			t.Errorf("%v at %d in flight: admitted=%v err=%v, want admitted=%v", tc.p, tc.inFlight, permit.Admitted(), err, tc.admitted)
		}
		if err != nil && !errors.Is(err, overload.ErrOverloaded) {
			t.Errorf("%v at %d in flight: %v, want ErrOverloaded", tc.p, tc.inFlight, err)
		}
		want := tc.inFlight
		if tc.admitted {
			want++
		}
		if got := s.InFlight(); got != want {
			t.Errorf("%v at %d in flight: InFlight %d after, want %d", tc.p, tc.inFlight, got, want)
		}
		permit.Done(time.Millisecond)
		if got := s.InFlight(); got != tc.inFlight {
			t.Errorf("%v at %d in flight: InFlight %d after release", tc.p, tc.inFlight, got)
		}
	}
	h.to(0)
	timers.none(t) // nothing ever queued
	if s.Capacity() != 64 || s.Load() != 0 {
		t.Errorf("Capacity %d Load %v", s.Capacity(), s.Load())
	}
	h.to(48)
	if s.Load() != 0.75 {
		t.Errorf("Load at 48/64 = %v", s.Load())
	}
}

// Thresholds round down, and critical always has the whole capacity.
func TestThresholdRounding(t *testing.T) {
	tests := []struct {
		capacity int
		shedAt   map[overload.Priority]float64
		want     [4]int // sheddable, normal, high, critical
	}{
		{64, nil, [4]int{32, 51, 57, 64}},
		{2, nil, [4]int{1, 1, 1, 2}},
		{10, nil, [4]int{5, 8, 9, 10}},
		{100, map[overload.Priority]float64{overload.Sheddable: 0.29}, [4]int{29, 80, 90, 100}}, // 0.29 × 100 is 28.999… in floats
		{3, map[overload.Priority]float64{overload.Sheddable: 1, overload.Normal: 1, overload.High: 1}, [4]int{3, 3, 3, 3}},
		{7, map[overload.Priority]float64{overload.Sheddable: 0.5, overload.Normal: 0.5, overload.High: 0.5}, [4]int{3, 3, 3, 7}},
	}
	for _, tc := range tests {
		s, _, _ := newShedder(t, overload.Config{MaxInFlight: tc.capacity, ShedAt: tc.shedAt})
		for i, p := range overload.Priorities() {
			if got := s.Threshold(p); got != tc.want[i] {
				t.Errorf("capacity %d %v: Threshold(%v) = %d, want %d", tc.capacity, tc.shedAt, p, got, tc.want[i])
			}
		}
		if got := s.Threshold(overload.Priority(9)); got != 0 {
			t.Errorf("Threshold of an invalid priority = %d", got)
		}
	}
}

// As load rises, the lowest priority goes first: in a mixed stream that
// never releases, sheddable is refused first, then normal, then high, then
// critical; every admission of a priority happened below its threshold and
// every refusal at or above it.
func TestLowestGoesFirst(t *testing.T) {
	s, _, _ := newShedder(t, overload.Config{MaxInFlight: 64})
	threshold := map[overload.Priority]int{overload.Sheddable: 32, overload.Normal: 51, overload.High: 57, overload.Critical: 64}
	var order []overload.Priority
	refused := map[overload.Priority]bool{}
	var held []overload.Permit
	for range 200 {
		for _, p := range []overload.Priority{overload.Critical, overload.High, overload.Normal, overload.Sheddable} {
			before := s.InFlight()
			permit, err := s.Admit(t.Context(), p, 0)
			if err != nil {
				if before < threshold[p] {
					t.Errorf("%v refused at %d in flight, below %d", p, before, threshold[p])
				}
				if !refused[p] {
					refused[p] = true
					order = append(order, p)
				}
				continue
			}
			if before >= threshold[p] {
				t.Errorf("%v admitted at %d in flight, at or above %d", p, before, threshold[p])
			}
			held = append(held, permit)
		}
	}
	want := overload.Priorities()
	if len(order) != len(want) {
		t.Fatalf("refused in order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Errorf("refused in order %v, want %v", order, want)
		}
	}
	if len(held) != 64 {
		t.Errorf("%d admitted, want 64", len(held))
	}
	for _, p := range held {
		p.Ignore()
	}
	if s.InFlight() != 0 {
		t.Errorf("InFlight %d after releasing all", s.InFlight())
	}
}

// A Permit releases its slot once, whichever method is called and however
// often; copies share that one release; the zero Permit does nothing.
func TestReleaseOnce(t *testing.T) {
	s, _, _ := newShedder(t, overload.Config{MaxInFlight: 4})
	a, _ := s.Admit(t.Context(), overload.Critical, 0)
	b, _ := s.Admit(t.Context(), overload.Critical, 0)
	if s.InFlight() != 2 {
		t.Fatalf("InFlight %d", s.InFlight())
	}
	copyOfA := a
	a.Done(time.Millisecond)
	a.Done(time.Millisecond)
	a.Drop()
	a.Ignore()
	copyOfA.Ignore()
	if s.InFlight() != 1 {
		t.Fatalf("InFlight %d after releasing a five times, want 1", s.InFlight())
	}
	// a's ticket is reused for c; a stale release of a must not free c.
	c, _ := s.Admit(t.Context(), overload.Critical, 0)
	a.Ignore()
	copyOfA.Done(0)
	if s.InFlight() != 2 {
		t.Fatalf("InFlight %d: a stale permit released another's slot", s.InFlight())
	}
	b.Done(-time.Second) // negative latency: released, not sampled
	c.Drop()
	if s.InFlight() != 0 {
		t.Fatalf("InFlight %d, want 0", s.InFlight())
	}
	var zero overload.Permit
	zero.Done(time.Second)
	zero.Drop()
	zero.Ignore()
	if zero.Admitted() || s.InFlight() != 0 {
		t.Error("the zero Permit did something")
	}
}

func TestInvalidLane(t *testing.T) {
	s, _, timers := newShedder(t, overload.Config{MaxInFlight: 4})
	tests := []struct {
		p     overload.Priority
		queue time.Duration
		want  error
	}{
		{overload.Priority(4), 0, overload.ErrInvalidPriority},
		{overload.Priority(200), time.Second, overload.ErrInvalidPriority},
		{overload.High, time.Second, overload.ErrInvalidQueue},
		{overload.Normal, time.Millisecond, overload.ErrInvalidQueue},
		{overload.Sheddable, time.Second, overload.ErrInvalidQueue},
		{overload.Critical, -time.Second, overload.ErrInvalidQueue},
	}
	for _, tc := range tests {
		if err := overload.ValidateLane(tc.p, tc.queue); !errors.Is(err, tc.want) {
			t.Errorf("ValidateLane(%v, %v) = %v, want %v", tc.p, tc.queue, err, tc.want)
		}
		permit, err := s.Admit(t.Context(), tc.p, tc.queue)
		if !errors.Is(err, tc.want) || permit.Admitted() {
			t.Errorf("Admit(%v, %v) = %v, %v, want %v", tc.p, tc.queue, permit.Admitted(), err, tc.want)
		}
	}
	for _, ok := range []struct {
		p     overload.Priority
		queue time.Duration
	}{{overload.Critical, 2 * time.Second}, {overload.Critical, 0}, {overload.Sheddable, 0}} {
		if err := overload.ValidateLane(ok.p, ok.queue); err != nil {
			t.Errorf("ValidateLane(%v, %v) = %v", ok.p, ok.queue, err)
		}
	}
	if s.InFlight() != 0 {
		t.Errorf("InFlight %d", s.InFlight())
	}
	timers.none(t)
}

// Many goroutines admit, queue, give up and release at random, some
// releasing twice. In flight never exceeds the capacity (each admitted
// request counts itself in, before it releases, so the count seen is a
// lower bound of the true one), and everything ends released.
func TestHammer(t *testing.T) {
	for _, adaptive := range []bool{false, true} {
		name := "static"
		if adaptive {
			name = "adaptive"
		}
		t.Run(name, func(t *testing.T) {
			const capacity = 8
			s, err := overload.New(overload.Config{
				MaxInFlight: capacity,
				MaxQueue:    16,
				Adaptive:    adaptive,
				Tuning:      overload.Tuning{ShortWindow: 2, LongWindow: 4},
				Degradation: []overload.Feature{{Name: "a", At: 0.5}, {Name: "b", At: 0.9}},
				Hold:        time.Nanosecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			var running, peak, admitted, shed, left atomic.Int64
			var wg sync.WaitGroup
			// All start at once, and each yields after every step: on a
			// loaded machine a goroutine could otherwise run its 500 steps
			// before the next one starts, never filling the slots.
			start := make(chan struct{})
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					r := rand.New(rand.NewPCG(uint64(g), 1))
					// Each goroutine holds up to two permits, so the 32 of
					// them keep the 8 slots full and the thresholds busy.
					var held []overload.Permit
					release := func(permit overload.Permit) {
						running.Add(-1)
						switch r.IntN(3) {
						case 0:
							permit.Done(time.Duration(r.IntN(1000)) * time.Microsecond)
						case 1:
							permit.Drop()
						default:
							permit.Ignore()
						}
						if r.IntN(4) == 0 {
							permit.Ignore() // harmless
						}
					}
					for range 500 {
						p := overload.Priorities()[r.IntN(4)]
						var queue time.Duration
						ctx, cancel := context.WithCancel(context.Background())
						if p == overload.Critical && r.IntN(2) == 0 {
							queue = time.Duration(r.IntN(50)) * time.Microsecond
							if r.IntN(4) == 0 {
								go cancel()
							}
						}
						permit, err := s.Admit(ctx, p, queue)
						cancel()
						if err != nil {
							if permit.Admitted() {
								t.Error("refused with a permit")
							}
							if errors.Is(err, context.Canceled) {
								left.Add(1)
							} else {
								shed.Add(1)
							}
						} else {
							admitted.Add(1)
							n := running.Add(1)
							for {
								old := peak.Load()
								if n <= old || peak.CompareAndSwap(old, n) {
									break
								}
							}
							if got := s.InFlight(); got > capacity {
								t.Errorf("InFlight %d above %d", got, capacity)
							}
							_ = overload.Degraded(overload.WithDegradation(ctx, s), "a")
							held = append(held, permit)
						}
						runtime.Gosched()
						if len(held) > 0 && (len(held) == 2 || r.IntN(2) == 0) {
							release(held[0])
							held = held[1:]
						}
					}
					for _, permit := range held {
						release(permit)
					}
				}()
			}
			close(start)
			wg.Wait()
			if peak.Load() > capacity {
				t.Errorf("%d running at once, above %d", peak.Load(), capacity)
			}
			// The shedder's own high-water mark is what ran at once, never
			// above capacity (the test's running count lags it: a permit is
			// counted in the shedder before the goroutine adds one).
			if p := s.Peak(); p < int(peak.Load()) || p > capacity {
				t.Errorf("Peak %d: the test saw %d at once, capacity %d", p, peak.Load(), capacity)
			}
			if s.InFlight() != 0 || s.Waiting() != 0 {
				t.Errorf("InFlight %d Waiting %d at the end, want 0 0", s.InFlight(), s.Waiting())
			}
			if admitted.Load() == 0 || shed.Load() == 0 {
				t.Errorf("admitted %d shed %d: the hammer did not reach capacity", admitted.Load(), shed.Load())
			}
			t.Logf("admitted %d, shed %d, left the queue %d, capacity at the end %d", admitted.Load(), shed.Load(), left.Load(), s.Capacity())
			if c := s.Capacity(); c < 1 || c > capacity {
				t.Errorf("Capacity %d out of bounds", c)
			}
		})
	}
}

// Admission, release, refusal and asking for a feature allocate nothing
// (the package documentation says so).
func TestNoAllocations(t *testing.T) {
	s, _, _ := newShedder(t, overload.Config{MaxInFlight: 4, Adaptive: true, Degradation: features})
	ctx := overload.WithDegradation(context.Background(), s)
	h := &holder{t: t, s: s}
	tests := []struct {
		name string
		f    func()
	}{
		{"admit and release", func() {
			p, _ := s.Admit(ctx, overload.Normal, 0)
			p.Done(time.Millisecond)
			p.Done(time.Millisecond)
		}},
		{"refuse", func() {
			h.to(2)
			if _, err := s.Admit(ctx, overload.Sheddable, 0); !errors.Is(err, overload.ErrOverloaded) {
				t.Fatal(err)
			}
		}},
		{"degraded", func() { _ = overload.Degraded(ctx, "search") }},
	}
	for _, tc := range tests {
		tc.f() // warm up
		if n := testing.AllocsPerRun(100, tc.f); n != 0 {
			t.Errorf("%s: %v allocations", tc.name, n)
		}
	}
	h.to(0)
}
