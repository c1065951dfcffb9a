package overload_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/costguard/costguard/overload"
)

var features = []overload.Feature{{Name: "recommendations", At: 0.7}, {Name: "search", At: 0.85}}

// Load wobbling around a feature's threshold switches it off once and on
// once: hysteresis and the hold keep it from flapping.
func TestDegradationDoesNotFlap(t *testing.T) {
	s, clock, _ := newShedder(t, overload.Config{MaxInFlight: 64, Degradation: features})
	h := &holder{t: t, s: s}
	changes := 0
	last := false
	watch := func() {
		if d := s.Degraded("recommendations"); d != last {
			changes++
			last = d
		}
	}
	// Around the threshold, 44 ↔ 45 for 10s: off at the first 45.
	for range 100 {
		h.to(44)
		watch()
		h.to(45)
		watch()
		clock.Advance(100 * time.Millisecond)
	}
	if changes != 1 || !last {
		t.Fatalf("%d changes around the threshold, off=%v: want 1, off", changes, last)
	}
	// Just above the way back, 39 ↔ 44, long past the hold: stays off.
	for range 100 {
		h.to(39)
		watch()
		h.to(44)
		watch()
		clock.Advance(100 * time.Millisecond)
	}
	if changes != 1 {
		t.Fatalf("%d changes above the way back, want still 1", changes)
	}
	// Around the way back, 38 ↔ 44: on at the first 38, and stays on.
	for range 100 {
		h.to(38)
		watch()
		h.to(44)
		watch()
		clock.Advance(100 * time.Millisecond)
	}
	if changes != 2 || last {
		t.Fatalf("%d changes around the way back, off=%v: want 2, on", changes, last)
	}
	if s.Degraded("search") {
		t.Error("search off, never above 0.85")
	}
	h.to(0)
}

// Features go in list order as load rises and come back, last first, after
// the hold, by the injected clock.
func TestDegradationOrderAndHold(t *testing.T) {
	s, clock, _ := newShedder(t, overload.Config{MaxInFlight: 64, Degradation: features, Hold: 2 * time.Second})
	h := &holder{t: t, s: s}
	var seen [][]string
	note := func() {
		got := s.DegradedFeatures()
		if len(seen) == 0 || !slices.Equal(seen[len(seen)-1], got) {
			seen = append(seen, got)
		}
	}
	for n := 0; n <= 64; n++ {
		h.to(n)
		note()
	}
	clock.Advance(time.Second)
	h.to(0)
	note()
	if !s.Degraded("search") {
		t.Error("search back before its 2s hold")
	}
	clock.Advance(time.Second)
	h.to(1) // the next admission re-evaluates
	note()
	want := [][]string{{}, {"recommendations"}, {"recommendations", "search"}, {}}
	if len(seen) != len(want) {
		t.Fatalf("states %q, want %q", seen, want)
	}
	for i := range want {
		if !slices.Equal(seen[i], want[i]) {
			t.Fatalf("states %q, want %q", seen, want)
		}
	}
	h.to(0)
}

// The adaptive capacity and degradation meet: a smaller capacity is a
// higher load for the same requests.
func TestDegradationFollowsAdaptiveCapacity(t *testing.T) {
	s, _, _ := newShedder(t, overload.Config{MaxInFlight: 64, Adaptive: true, Degradation: features})
	h := &holder{t: t, s: s}
	h.to(40) // 40/64 = 0.625
	if s.Degraded("recommendations") {
		t.Fatal("off at 0.625")
	}
	p, _ := s.Admit(t.Context(), overload.Critical, 0)
	p.Drop() // capacity 64 → 57; 40/57 ≈ 0.70
	if s.Capacity() != 57 || !s.Degraded("recommendations") {
		t.Errorf("Capacity %d, recommendations off=%v: want 57, off", s.Capacity(), s.Degraded("recommendations"))
	}
	h.to(0)
}

type degraderFunc func(string) bool

func (f degraderFunc) Degraded(name string) bool { return f(name) }

func TestDegradedContext(t *testing.T) {
	s, _, _ := newShedder(t, overload.Config{MaxInFlight: 64, Degradation: features})
	h := &holder{t: t, s: s}
	h.to(50)
	var nilShedder *overload.Shedder
	tests := []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"nothing in the context", context.Background(), false},
		{"off", overload.WithDegradation(context.Background(), s), true},
		{"a nil Shedder", overload.WithDegradation(context.Background(), nilShedder), false},
		{"a nil Degrader", overload.WithDegradation(context.Background(), nil), false},
		{"another Degrader", overload.WithDegradation(context.Background(), degraderFunc(func(n string) bool { return n == "recommendations" })), true},
	}
	for _, tc := range tests {
		if got := overload.Degraded(tc.ctx, "recommendations"); got != tc.want {
			t.Errorf("%s: Degraded = %v, want %v", tc.name, got, tc.want)
		}
	}
	ctx := overload.WithDegradation(context.Background(), s)
	if overload.Degraded(ctx, "search") || overload.Degraded(ctx, "unlisted") {
		t.Error("search (below 0.85) or an unlisted feature reported off")
	}
	// The context sees the Shedder live, not a snapshot.
	h.to(0)
	if overload.Degraded(ctx, "recommendations") != true {
		t.Error("back before the hold")
	}
	// Without a degradation list nothing is ever off.
	plain, _, _ := newShedder(t, overload.Config{MaxInFlight: 4})
	if plain.Degraded("recommendations") || plain.DegradedFeatures() != nil {
		t.Error("a Shedder with no list degraded something")
	}
}
