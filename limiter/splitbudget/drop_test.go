package splitbudget_test

import (
	"context"
	"testing"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/splitbudget"
)

// Drop discards the leases and what they remembered, giving nothing back:
// the store's data is lost, and its new budgets are whole.
func TestDrop(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	next := &counting{Store: newMemory(t, clock)}
	s := newSplit(t, next, splitbudget.Config{Clock: clock}) // leases of 5 of slow's 100
	// 97 requests take the store's 100 tokens in 20 leases; the lease
	// holds 3, so a request of 4 is refused, and the refusal remembered.
	for i := range 97 {
		if d, err := s.Take(ctx, "k", slow, 1); err != nil || !d.Allowed {
			t.Fatalf("take %d: %+v, %v", i, d, err)
		}
	}
	if d, err := s.Take(ctx, "k", slow, 4); err != nil || d.Allowed {
		t.Fatalf("take of 4: %+v, %v; want a refusal", d, err)
	}
	takes := next.takes.Load()
	if d, _ := s.Take(ctx, "k", slow, 4); d.Allowed || next.takes.Load() != takes {
		t.Fatalf("before Drop: %+v, store asked %v; want the remembered refusal", d, next.takes.Load() != takes)
	}
	const held = 3
	// The store loses its data.
	next.Store = newMemory(t, clock)
	s.Drop()
	if s.Len() != 0 {
		t.Fatalf("Len after Drop = %d", s.Len())
	}
	if got := s.Stats().Dropped; got != held {
		t.Fatalf("Dropped = %d, want the %d tokens the lease held", got, held)
	}
	if d, err := s.Take(ctx, "k", slow, 1); err != nil || !d.Allowed || next.takes.Load() != takes+1 {
		t.Fatalf("after Drop: %+v, %v; want a new lease from the store", d, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if refunds := next.refunds.Load(); refunds != 1 {
		t.Fatalf("%d refunds; want only the new lease's, at Close", refunds)
	}
	if d, _ := next.Store.Take(ctx, "k", slow, 0); d.Remaining != 99 {
		t.Fatalf("new data set: %d left, want 99 (one spent, nothing of the old leases given back)", d.Remaining)
	}
}

// A lease dropped while it is topped up gives nothing back when the
// store answers.
func TestDropDuringTopUp(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	g := &gatedTake{Store: newMemory(t, clock)}
	next := &counting{Store: g}
	s := newSplit(t, next, splitbudget.Config{Clock: clock})
	g.entered, g.release = make(chan struct{}), make(chan struct{})
	done := make(chan limiter.Decision)
	go func() {
		d, _ := s.Take(ctx, "k", slow, 1)
		done <- d
	}()
	<-g.entered // the lease's Take decided, not yet returned
	s.Drop()
	close(g.release)
	if d := <-done; !d.Allowed {
		t.Fatalf("the request in flight: %+v; want it admitted", d)
	}
	g.entered = nil
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); next.refunds.Load() != 0 || st.Dropped != 4 {
		t.Fatalf("%d refunds, %+v; want none and 4 tokens dropped", next.refunds.Load(), st)
	}
}

// gatedTake holds each Take after the store decided it, while entered is
// set.
type gatedTake struct {
	limiter.Store
	entered chan struct{}
	release chan struct{}
}

func (g *gatedTake) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	d, err := g.Store.Take(ctx, key, l, cost)
	if g.entered != nil {
		g.entered <- struct{}{}
		<-g.release
	}
	return d, err
}
