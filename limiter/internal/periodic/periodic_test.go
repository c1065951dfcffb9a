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

// Kicks call f between ticks; kicks while one is pending add up to one
// call.
func TestLoopKick(t *testing.T) {
	tick := make(chan time.Time)
	l := New(time.Hour, tick)
	calls := make(chan struct{}, 10)
	release := make(chan struct{})
	go l.Run(func() {
		calls <- struct{}{}
		<-release
	})
	l.Kick()
	<-calls // f runs, held
	l.Kick()
	l.Kick()
	l.Kick()
	release <- struct{}{}
	<-calls // one call for the three kicks
	release <- struct{}{}
	tick <- time.Time{} // taken once f has returned: no pending kick is left
	<-calls
	release <- struct{}{}
	l.Stop()
	if n := len(calls); n != 0 {
		t.Fatalf("%d calls more than the kicks and the tick", n)
	}
}
