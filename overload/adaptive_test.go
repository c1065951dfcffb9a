package overload_test

import (
	"testing"
	"time"

	"github.com/costguard/costguard/overload"
)

// Through the Shedder: a slow burst of 50 requests, all in flight
// together, cuts the capacity once (64 → 57); a slow request admitted
// after the cut cuts it again (→ 51); the thresholds follow; then steady
// fast traffic brings it back one step per capacity's worth of requests.
func TestAdaptiveCapacity(t *testing.T) {
	s, _, _ := newShedder(t, overload.Config{MaxInFlight: 64, Adaptive: true})
	run := func(latency time.Duration) {
		t.Helper()
		p, err := s.Admit(t.Context(), overload.Critical, 0)
		if err != nil {
			t.Fatal(err)
		}
		p.Done(latency)
	}
	for range 20 {
		run(10 * time.Millisecond)
	}
	if s.Capacity() != 64 {
		t.Fatalf("Capacity %d after fast requests, want 64 (it starts at MaxInFlight)", s.Capacity())
	}

	burst := make([]overload.Permit, 50)
	for i := range burst {
		burst[i], _ = s.Admit(t.Context(), overload.Critical, 0)
	}
	for _, p := range burst {
		p.Done(200 * time.Millisecond)
	}
	if s.Capacity() != 57 {
		t.Fatalf("Capacity %d after one slow burst, want 57", s.Capacity())
	}
	run(200 * time.Millisecond)
	if s.Capacity() != 51 {
		t.Fatalf("Capacity %d after a slow request of the next epoch, want 51", s.Capacity())
	}
	want := map[overload.Priority]int{overload.Sheddable: 25, overload.Normal: 40, overload.High: 45, overload.Critical: 51}
	for p, n := range want {
		if got := s.Threshold(p); got != n {
			t.Errorf("Threshold(%v) at capacity 51 = %d, want %d", p, got, n)
		}
	}

	// Recovery: every 51 good samples add one, then every 52, …
	steps := 0
	for s.Capacity() < 64 && steps < 100_000 {
		run(10 * time.Millisecond)
		steps++
	}
	if s.Capacity() != 64 {
		t.Fatalf("Capacity %d after %d fast requests, want back to 64", s.Capacity(), steps)
	}
	// From 51 to 64 takes 51 + 52 + … + 63 = 741 good samples. The short
	// average is still high for a while, but fast samples are not
	// congestion: recovery starts at once.
	if steps != 741 {
		t.Errorf("%d requests to recover, want 741", steps)
	}
	for range 1000 {
		run(10 * time.Millisecond)
	}
	if s.Capacity() != 64 {
		t.Errorf("Capacity %d, above MaxInFlight or not back", s.Capacity())
	}

	// Ignore and a negative latency feed nothing; Drop is congestion.
	p, _ := s.Admit(t.Context(), overload.Normal, 0)
	p.Ignore()
	p, _ = s.Admit(t.Context(), overload.Normal, 0)
	p.Done(-time.Hour)
	if s.Capacity() != 64 {
		t.Errorf("Capacity %d after Ignore", s.Capacity())
	}
	p, _ = s.Admit(t.Context(), overload.Normal, 0)
	p.Drop()
	if s.Capacity() != 57 {
		t.Errorf("Capacity %d after Drop, want 57", s.Capacity())
	}
}

// Without Adaptive, latencies and drops change nothing.
func TestStaticCapacity(t *testing.T) {
	s, _, _ := newShedder(t, overload.Config{MaxInFlight: 64})
	for range 100 {
		p, _ := s.Admit(t.Context(), overload.Critical, 0)
		p.Drop()
		p, _ = s.Admit(t.Context(), overload.Critical, 0)
		p.Done(time.Hour)
	}
	if s.Capacity() != 64 {
		t.Errorf("static Capacity moved to %d", s.Capacity())
	}
}

// A capacity that shrinks below the requests running interrupts none of
// them: new ones wait for enough to finish, and a queued critical request
// gets a slot only under the new capacity.
func TestAdaptiveShrinkBelowRunning(t *testing.T) {
	s, _, timers := newShedder(t, overload.Config{MaxInFlight: 10, Adaptive: true})
	h := &holder{t: t, s: s}
	h.to(9)
	p, _ := s.Admit(t.Context(), overload.Critical, 0)
	p.Drop() // 10 → 9, with 9 in flight
	if s.Capacity() != 9 || s.InFlight() != 9 || s.Load() != 1 {
		t.Fatalf("Capacity %d InFlight %d Load %v", s.Capacity(), s.InFlight(), s.Load())
	}
	out := make(chan result, 1)
	queueUp(t, t.Context(), s, timers, "waiter", out)
	// A drop from a request admitted before the cut does not cut again;
	// its slot goes to the waiter.
	old := h.permits[8]
	h.permits = h.permits[:8]
	old.Drop()
	if s.Capacity() != 9 {
		t.Fatalf("Capacity %d: a permit from before the cut cut again", s.Capacity())
	}
	r := receive(t, out)
	if r.err != nil || s.InFlight() != 9 {
		t.Fatalf("waiter: %v, InFlight %d", r.err, s.InFlight())
	}
	r.permit.Drop() // admitted after the cut: 9 → 8, with 8 still running
	if s.Capacity() != 8 || s.InFlight() != 8 {
		t.Fatalf("Capacity %d InFlight %d, want 8 8", s.Capacity(), s.InFlight())
	}
	if _, err := s.Admit(t.Context(), overload.Critical, 0); err == nil {
		t.Error("admitted at capacity")
	}
	h.to(0)
}
