package budget

import (
	"testing"
	"time"
)

func TestRetryAfterJitter(t *testing.T) {
	e := &Engine{jitter: 0.5}
	tests := []struct {
		wait time.Duration
		rand float64
		want int64
	}{
		{0, 0.99, 1},                       // never below one second
		{1500 * time.Millisecond, 0, 2},    // rounded up, jitter adds nothing
		{1500 * time.Millisecond, 0.99, 2}, // 2 + floor(0.99 × 0.5 × 2)
		{10 * time.Second, 0.5, 12},        // 10 + floor(2.5)
		{10 * time.Second, 0.999999, 14},   // never reaches 10 × 1.5 = 15
	}
	for _, tc := range tests {
		e.rand = func() float64 { return tc.rand }
		if got := e.RetryAfter(tc.wait); got != tc.want {
			t.Errorf("RetryAfter(%v) with rand %v = %d, want %d", tc.wait, tc.rand, got, tc.want)
		}
	}
	e.jitter = 0
	e.rand = func() float64 { panic("jitter 0 must not draw") }
	if got := e.RetryAfter(2 * time.Second); got != 2 {
		t.Errorf("no jitter: %d", got)
	}
}
