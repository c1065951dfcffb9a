package periodic

import (
	"testing"
	"time"
)

// Each tick calls f once; Stop waits for Run to return and may be repeated.
func TestLoop(t *testing.T) {
	tick := make(chan time.Time) // unbuffered: a send returns once the loop has it
	l := New(time.Hour, tick)
	calls := 0
	go l.Run(func() { calls++ })
	tick <- time.Time{}
	tick <- time.Time{}
	tick <- time.Time{} // the second call is done when the loop takes the third tick
	l.Stop()
	l.Stop()
	select {
	case <-l.Done():
	default:
		t.Fatal("Stop returned before Run")
	}
	if calls != 3 {
		t.Fatalf("%d calls, want 3", calls)
	}
}

// With no tick channel the loop runs on its own ticker.
func TestLoopTicker(t *testing.T) {
	l := New(time.Millisecond, nil)
	called := make(chan struct{}, 1)
	go l.Run(func() {
		select {
		case called <- struct{}{}:
		default:
		}
	})
	<-called
	l.Stop()
}
