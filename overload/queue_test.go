package overload_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/costguard/costguard/overload"
)

// result is how a queued Admit ended.
type result struct {
	name   string
	permit overload.Permit
	err    error
}

// queueUp starts a critical Admit with a queue of 2s in a goroutine and
// returns once it has joined the queue (its timer has started).
func queueUp(t *testing.T, ctx context.Context, s *overload.Shedder, timers *fakeTimers, name string, out chan<- result) *fakeTimer {
	t.Helper()
	go func() {
		p, err := s.Admit(ctx, overload.Critical, 2*time.Second)
		out <- result{name, p, err}
	}()
	ft := timers.next(t)
	if ft.d != 2*time.Second {
		t.Errorf("%s waits on a timer of %v, want the queue time 2s", name, ft.d)
	}
	return ft
}

func receive(t *testing.T, out <-chan result) result {
	t.Helper()
	select {
	case r := <-out:
		return r
	case <-time.After(10 * time.Second): // a hang guard, not a timing
		t.Fatal("no queued request finished")
		return result{}
	}
}

func nothingFinished(t *testing.T, out <-chan result) {
	t.Helper()
	select {
	case r := <-out:
		t.Fatalf("%s finished early: %v", r.name, r.err)
	default:
	}
}

// Queued critical requests get the freed slots one by one, oldest first,
// and the slot passes straight from the releaser to the waiter: in flight
// stays at the capacity.
func TestQueueFIFO(t *testing.T) {
	s, _, timers := newShedder(t, overload.Config{MaxInFlight: 4})
	h := &holder{t: t, s: s}
	h.to(4)
	out := make(chan result, 4)
	names := []string{"first", "second", "third"}
	for _, n := range names {
		queueUp(t, t.Context(), s, timers, n, out)
	}
	if s.Waiting() != 3 {
		t.Fatalf("Waiting %d, want 3", s.Waiting())
	}
	// While anyone waits, nothing else is admitted, critical included.
	for _, p := range overload.Priorities() {
		if _, err := s.Admit(t.Context(), p, 0); !errors.Is(err, overload.ErrOverloaded) {
			t.Errorf("%v admitted past the queue: %v", p, err)
		}
	}
	var got []overload.Permit
	for i, want := range names {
		nothingFinished(t, out)
		h.to(3 - i) // release one held slot
		r := receive(t, out)
		if r.name != want || r.err != nil || !r.permit.Admitted() {
			t.Fatalf("woken %s (%v), want %s", r.name, r.err, want)
		}
		got = append(got, r.permit)
		if s.InFlight() != 4 || s.Waiting() != 2-i {
			t.Errorf("after waking %s: InFlight %d Waiting %d", want, s.InFlight(), s.Waiting())
		}
	}
	for _, p := range got {
		p.Done(time.Millisecond)
	}
	h.to(0)
	if s.InFlight() != 0 || s.Waiting() != 0 {
		t.Errorf("InFlight %d Waiting %d at the end", s.InFlight(), s.Waiting())
	}
}

// A client that leaves while queued gets its context's error, leaves the
// queue, and takes no slot; the one behind it moves up.
func TestQueueCancel(t *testing.T) {
	s, _, timers := newShedder(t, overload.Config{MaxInFlight: 2})
	h := &holder{t: t, s: s}
	h.to(2)
	out := make(chan result, 2)
	ctx, cancel := context.WithCancel(t.Context())
	queueUp(t, ctx, s, timers, "leaves", out)
	queueUp(t, t.Context(), s, timers, "stays", out)
	cancel()
	r := receive(t, out)
	if r.name != "leaves" || !errors.Is(r.err, context.Canceled) || errors.Is(r.err, overload.ErrOverloaded) || r.permit.Admitted() {
		t.Fatalf("%s: %v admitted=%v, want context.Canceled and no permit", r.name, r.err, r.permit.Admitted())
	}
	if s.Waiting() != 1 || s.InFlight() != 2 {
		t.Fatalf("after the cancel: Waiting %d InFlight %d, want 1 2", s.Waiting(), s.InFlight())
	}
	h.to(1)
	r = receive(t, out)
	if r.name != "stays" || r.err != nil {
		t.Fatalf("%s: %v", r.name, r.err)
	}
	r.permit.Ignore()
	h.to(0)
	if s.InFlight() != 0 || s.Waiting() != 0 {
		t.Errorf("InFlight %d Waiting %d: a slot leaked", s.InFlight(), s.Waiting())
	}

	// A context already done never queues.
	h.to(2)
	done, stop := context.WithCancel(t.Context())
	stop()
	if _, err := s.Admit(done, overload.Critical, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("done context: %v", err)
	}
	timers.none(t)
	// But one that is admitted at once does not look at ctx at all.
	h.to(1)
	p, err := s.Admit(done, overload.Critical, time.Second)
	if err != nil {
		t.Errorf("free slot with a done context: %v", err)
	}
	p.Ignore()
	h.to(0)
}

// When the queue time passes without a slot, the request is shed with
// ErrOverloaded and leaves the queue.
func TestQueueTimeout(t *testing.T) {
	s, _, timers := newShedder(t, overload.Config{MaxInFlight: 2})
	h := &holder{t: t, s: s}
	h.to(2)
	out := make(chan result, 2)
	first := queueUp(t, t.Context(), s, timers, "first", out)
	queueUp(t, t.Context(), s, timers, "second", out)
	first.fire()
	r := receive(t, out)
	if r.name != "first" || !errors.Is(r.err, overload.ErrOverloaded) || r.permit.Admitted() {
		t.Fatalf("%s: %v, want ErrOverloaded", r.name, r.err)
	}
	if s.Waiting() != 1 || s.InFlight() != 2 {
		t.Fatalf("Waiting %d InFlight %d, want 1 2", s.Waiting(), s.InFlight())
	}
	h.to(1)
	if r := receive(t, out); r.name != "second" || r.err != nil {
		t.Fatalf("%s: %v", r.name, r.err)
	} else {
		r.permit.Ignore()
	}
	h.to(0)
	if s.InFlight() != 0 || s.Waiting() != 0 {
		t.Errorf("InFlight %d Waiting %d", s.InFlight(), s.Waiting())
	}
}

// MaxQueue bounds the waiters: one more is shed at once.
func TestQueueFull(t *testing.T) {
	s, _, timers := newShedder(t, overload.Config{MaxInFlight: 2, MaxQueue: 1})
	h := &holder{t: t, s: s}
	h.to(2)
	out := make(chan result, 1)
	queueUp(t, t.Context(), s, timers, "queued", out)
	if _, err := s.Admit(t.Context(), overload.Critical, 2*time.Second); !errors.Is(err, overload.ErrOverloaded) {
		t.Errorf("beyond MaxQueue: %v, want ErrOverloaded", err)
	}
	timers.none(t)
	h.to(1)
	receive(t, out).permit.Ignore()
	h.to(0)

	// The default MaxQueue is MaxInFlight.
	s, _, timers = newShedder(t, overload.Config{MaxInFlight: 2})
	h = &holder{t: t, s: s}
	h.to(2)
	out = make(chan result, 2)
	queueUp(t, t.Context(), s, timers, "a", out)
	queueUp(t, t.Context(), s, timers, "b", out)
	if _, err := s.Admit(t.Context(), overload.Critical, time.Second); !errors.Is(err, overload.ErrOverloaded) {
		t.Errorf("third waiter at the default MaxQueue 2: %v", err)
	}
	timers.none(t)
	h.to(0)
	receive(t, out).permit.Ignore()
	receive(t, out).permit.Ignore()
	if s.InFlight() != 0 {
		t.Errorf("InFlight %d", s.InFlight())
	}
}

// A critical request with a queue that finds a free slot is admitted at
// once, without waiting.
func TestQueueNotNeeded(t *testing.T) {
	s, _, timers := newShedder(t, overload.Config{MaxInFlight: 2})
	p, err := s.Admit(t.Context(), overload.Critical, 2*time.Second)
	if err != nil || !p.Admitted() {
		t.Fatal(err)
	}
	timers.none(t)
	p.Ignore()
}
