package seconds

import (
	"testing"
	"time"
)

func TestCeil(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Nanosecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{90 * time.Minute, 5400},
	} {
		if got := Ceil(tc.d); got != tc.want {
			t.Errorf("Ceil(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}
