package logevery

import (
	"testing"
	"time"
)

func TestGate(t *testing.T) {
	var g Gate
	steps := []struct {
		at         time.Duration
		ok         bool
		suppressed int64
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{59 * time.Second, false, 0},
		{time.Minute, true, 2},
		{time.Minute, false, 0},
		{3 * time.Minute, true, 1},
	}
	for i, s := range steps {
		n, ok := g.Due(s.at)
		if ok != s.ok || n != s.suppressed {
			t.Errorf("step %d at %v: %d, %v; want %d, %v", i, s.at, n, ok, s.suppressed, s.ok)
		}
	}
}
