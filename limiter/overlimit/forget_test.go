package overlimit_test

import (
	"testing"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/overlimit"
)

// Forget drops every remembered rejection, plain and named: the next
// request goes to the store, which (its data lost) admits it.
func TestForget(t *testing.T) {
	s, next, clock := setupMulti(t)
	reqs := []limiter.Request{{Key: "k", Name: "field", Limit: tenPerSec, Cost: 10}}
	ds := make([]limiter.Decision, 1)
	for range 2 {
		if _, err := s.Take(ctx, "k", tenPerSec, 10); err != nil {
			t.Fatal(err)
		}
		if err := s.TakeAll(ctx, reqs, ds); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != 2 {
		t.Fatalf("Len = %d, want 2 remembered rejections", s.Len())
	}
	takes, alls := next.takes.Load(), next.all.Load()
	if d, _ := s.Take(ctx, "k", tenPerSec, 10); d.Allowed || next.takes.Load() != takes {
		t.Fatalf("before Forget: %+v, store asked %v; want a remembered rejection", d, next.takes.Load() != takes)
	}
	// The store loses its data: a fresh memory store on the same clock.
	fresh, err := memorystore.New(memorystore.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	next.counting.Store, next.multi = fresh, fresh
	s.Forget()
	if s.Len() != 0 {
		t.Fatalf("Len after Forget = %d", s.Len())
	}
	if d, err := s.Take(ctx, "k", tenPerSec, 10); err != nil || !d.Allowed || next.takes.Load() != takes+1 {
		t.Fatalf("after Forget: %+v, %v; want the store's admission", d, err)
	}
	if err := s.TakeAll(ctx, reqs, ds); err != nil || !ds[0].Allowed || next.all.Load() != alls+1 {
		t.Fatalf("TakeAll after Forget: %+v, %v; want the store's admission", ds, err)
	}
}

// A rejection the store decided before Forget is not remembered after it.
func TestRejectionRacingForgetIsNotRemembered(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	g := &gated{Store: newMemory(t, clock)}
	next := &counting{Store: g}
	s, err := overlimit.New(next, overlimit.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx, "k", tenPerSec, 10); err != nil {
		t.Fatal(err)
	}
	g.entered, g.release = make(chan struct{}), make(chan struct{})
	done := make(chan limiter.Decision)
	go func() {
		d, _ := s.Take(ctx, "k", tenPerSec, 5)
		done <- d
	}()
	<-g.entered // decided (rejected), not yet returned
	s.Forget()
	close(g.release)
	if d := <-done; d.Allowed {
		t.Fatalf("the held Take was admitted: %+v", d)
	}
	if s.Len() != 0 {
		t.Fatalf("the rejection decided before Forget was remembered (Len %d)", s.Len())
	}
}
