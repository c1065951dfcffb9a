package overload_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/overload"
)

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeTimers is a limiter.Timer whose timers fire only when the test says.
// Each timer started is sent on started, so a test knows that a request
// has joined the queue (the timer starts after it has) without sleeping.
type fakeTimers struct {
	started chan *fakeTimer
}

type fakeTimer struct {
	d time.Duration
	c chan time.Time
}

func newFakeTimers() *fakeTimers { return &fakeTimers{started: make(chan *fakeTimer, 1024)} }

func (f *fakeTimers) timer(d time.Duration) (<-chan time.Time, func() bool) {
	t := &fakeTimer{d: d, c: make(chan time.Time, 1)}
	f.started <- t
	return t.c, func() bool { return true }
}

// next returns the next timer started, failing the test if none starts.
func (f *fakeTimers) next(t *testing.T) *fakeTimer {
	t.Helper()
	select {
	case ft := <-f.started:
		return ft
	case <-time.After(10 * time.Second): // a hang guard, not a timing
		t.Fatal("no request joined the queue")
		return nil
	}
}

// none fails the test if a timer was started.
func (f *fakeTimers) none(t *testing.T) {
	t.Helper()
	select {
	case <-f.started:
		t.Fatal("a request joined the queue")
	default:
	}
}

func (ft *fakeTimer) fire() { ft.c <- time.Time{} }

// newShedder builds a Shedder for cfg with a fake clock and fake timers.
func newShedder(t testing.TB, cfg overload.Config) (*overload.Shedder, *limitertest.FakeClock, *fakeTimers) {
	t.Helper()
	clock := limitertest.NewFakeClock(epoch)
	timers := newFakeTimers()
	if cfg.Clock == nil {
		cfg.Clock = clock
	}
	if cfg.Timer == nil {
		cfg.Timer = timers.timer
	}
	s, err := overload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, clock, timers
}

// eventually spins, yielding, until cond holds; it never sleeps and fails
// only if cond never holds (a hang guard, not a timing).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		runtime.Gosched()
	}
}

// holder keeps admitted permits so a test can set the in-flight count.
type holder struct {
	t       *testing.T
	s       *overload.Shedder
	permits []overload.Permit
}

// to admits or releases critical requests until n are in flight.
// When requests are queued, released slots go to them, so the count is
// checked only when nobody waits.
func (h *holder) to(n int) {
	h.t.Helper()
	queued := h.s.Waiting() > 0
	for len(h.permits) < n {
		p, err := h.s.Admit(h.t.Context(), overload.Critical, 0)
		if err != nil {
			h.t.Fatalf("critical refused at %d in flight: %v", len(h.permits), err)
		}
		h.permits = append(h.permits, p)
	}
	for len(h.permits) > n {
		h.permits[len(h.permits)-1].Ignore()
		h.permits = h.permits[:len(h.permits)-1]
	}
	if got := h.s.InFlight(); got != n && !queued {
		h.t.Fatalf("InFlight %d, want %d", got, n)
	}
}
