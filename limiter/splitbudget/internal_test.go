package splitbudget

import (
	"context"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/memorystore"
)

// The settle loop gives leases back on each tick, and Close stops it: the
// goroutine has exited when Close returns.
func TestSettleLoop(t *testing.T) {
	mem, err := memorystore.New(memorystore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	tick := make(chan time.Time) // unbuffered: a send returns once the loop has it
	s, err := newStore(mem, Config{LeaseFraction: 0.1}, tick)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 100, Rate: 1, Period: time.Hour}
	if _, err := s.Take(ctx, "k", l, 4); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 1 {
		t.Fatalf("Len %d, want 1", s.Len())
	}
	tick <- time.Time{}
	tick <- time.Time{} // the first settle is done when the loop takes the second tick
	if d, _ := mem.Take(ctx, "k", l, 0); d.Remaining != 96 || s.Len() != 0 {
		t.Fatalf("after a tick: the store holds %d, %d leases; want 96 and 0", d.Remaining, s.Len())
	}
	if _, err := s.Take(ctx, "k", l, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.settler.Done():
	default:
		t.Fatal("the settle loop is still running after Close")
	}
	if d, _ := mem.Take(ctx, "k", l, 0); d.Remaining != 95 {
		t.Fatalf("after Close the store holds %d, want 95", d.Remaining)
	}
}
