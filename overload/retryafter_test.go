package overload_test

import (
	"math"
	"testing"
	"time"

	"github.com/costguard/costguard/overload"
)

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		longest time.Duration
		rand    float64
		want    int64
	}{
		{3 * time.Second, 0, 1}, // never below one second
		{3 * time.Second, 0.33, 1},
		{3 * time.Second, 0.34, 2},
		{3 * time.Second, 0.67, 3},
		{3 * time.Second, 0.999999, 3},    // never above the longest
		{2500 * time.Millisecond, 0.9, 3}, // the longest rounds up
		{10 * time.Second, 0.5, 6},
		{3 * time.Second, 1, 3}, // a rand out of range is kept in it
		{3 * time.Second, 7, 3},
		{3 * time.Second, -1, 1},
		{3 * time.Second, math.NaN(), 1},
		{3 * time.Second, math.Inf(1), 3},
	}
	for _, tc := range tests {
		got := overload.RetryAfter(tc.longest, func() float64 { return tc.rand })
		if got != tc.want {
			t.Errorf("RetryAfter(%v) with rand %v = %d, want %d", tc.longest, tc.rand, got, tc.want)
		}
	}
	never := func() float64 { panic("nothing to draw from") }
	for _, d := range []time.Duration{-time.Second, 0, time.Millisecond, time.Second} {
		if got := overload.RetryAfter(d, never); got != 1 {
			t.Errorf("RetryAfter(%v) = %d, want 1", d, got)
		}
	}

	// Every value of the range is reached, evenly.
	counts := map[int64]int{}
	for i := range 300 {
		counts[overload.RetryAfter(3*time.Second, func() float64 { return float64(i) / 300 })]++
	}
	if len(counts) != 3 || counts[1] != 100 || counts[2] != 100 || counts[3] != 100 {
		t.Errorf("RetryAfter over an even rand: %v, want 100 each of 1, 2, 3", counts)
	}

	// The Shedder's uses RetryAfterMax and Config.Rand.
	s, _, _ := newShedder(t, overload.Config{MaxInFlight: 4, RetryAfterMax: 10 * time.Second, Rand: func() float64 { return 0.95 }})
	if got := s.RetryAfter(); got != 10 {
		t.Errorf("Shedder.RetryAfter = %d, want 10", got)
	}
	// And the default Rand stays within the range.
	s, _, _ = newShedder(t, overload.Config{MaxInFlight: 4})
	for range 1000 {
		if got := s.RetryAfter(); got < 1 || got > 3 {
			t.Fatalf("default RetryAfter %d outside 1..3", got)
		}
	}
}
