package middleware

import (
	"math"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/seconds"
)

func TestHeaderArithmetic(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{-time.Second, 0}, {0, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2}, {math.MaxInt64, 9223372037}} {
		if got := seconds.Ceil(tc.d); got != tc.want {
			t.Errorf("seconds.Ceil(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	for _, tc := range []struct {
		burst, rate int64
		per         time.Duration
		want        int64
	}{
		{5000, 5000, time.Hour, 3600},
		{100, 100, 100 * time.Second, 100},
		{7, 3, 7 * time.Second, 17}, // 16.33 s
		{1, 3, time.Second, 1},      // a third of a second, rounded up
		{math.MaxInt64, 1, time.Hour, math.MaxInt64},
		{1 << 40, 1 << 40, time.Hour, 3600}, // burst × period overflows int64
	} {
		if got := fillSeconds(tc.burst, tc.rate, tc.per); got != tc.want {
			t.Errorf("fillSeconds(%d, %d, %v) = %d, want %d", tc.burst, tc.rate, tc.per, got, tc.want)
		}
	}
	now := time.Unix(1000, 0)
	if got := unixCeil(now, 1500*time.Millisecond); got != 1002 {
		t.Errorf("unixCeil = %d, want 1002", got)
	}
	if got := unixCeil(now, 0); got != 1000 {
		t.Errorf("unixCeil = %d, want 1000", got)
	}
	if got := sfString(`a"b\c`); got != `"a\"b\\c"` {
		t.Errorf("sfString = %s", got)
	}
}
