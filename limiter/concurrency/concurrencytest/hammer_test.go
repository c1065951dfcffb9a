package concurrencytest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/concurrency/concurrencytest"
)

// cheat grants every Acquire: Hammer must catch it.
type cheat struct{}

func (cheat) Acquire(_ context.Context, key string, limit int64, _ time.Duration) (concurrency.Decision, error) {
	return concurrency.Decision{Allowed: true, Lease: concurrency.Lease{Key: key, ID: concurrency.LeaseID{1}}, Limit: limit, Held: 1}, nil
}

func (cheat) Release(context.Context, concurrency.Lease) (bool, error) { return true, nil }

func (cheat) Refresh(context.Context, concurrency.Lease, time.Duration) (bool, error) {
	return true, nil
}

// recorder is a testing.TB that keeps failures instead of failing. Hammer
// reports from its goroutines, so it locks.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Errorf(f string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(f, args...))
}
func (r *recorder) Fatalf(f string, args ...any) { r.Errorf(f, args...) }
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errors) > 0
}

// TestHammerCatchesOvershoot: a caller holding its slot yields the
// processor, so another caller's Acquire runs while it is counted in
// flight; with a store that grants everything the counter passes the
// limit.
func TestHammerCatchesOvershoot(t *testing.T) {
	r := &recorder{TB: t}
	res := concurrencytest.Hammer(r, []concurrency.Slots{cheat{}}, "k", 1, 16, 200)
	if len(r.errors) == 0 || res.MaxInFlight <= 1 {
		t.Fatalf("Hammer on a grant-everything store: %+v, no error; want overshoot errors", res)
	}
}
