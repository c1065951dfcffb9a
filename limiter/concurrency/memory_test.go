package concurrency_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/concurrency/concurrencytest"
	"github.com/costguard/costguard/limiter/limitertest"
)

func newMemory(t testing.TB, cfg concurrency.MemoryConfig) *concurrency.Memory {
	t.Helper()
	m, err := concurrency.NewMemory(cfg)
	if err != nil {
		t.Fatalf("NewMemory: %v", err)
	}
	return m
}

func TestMemorySuite(t *testing.T) {
	concurrencytest.Run(t, func(t *testing.T, clock limiter.Clock) concurrency.Slots {
		return newMemory(t, concurrency.MemoryConfig{Clock: clock})
	})
}

// TestMemoryHammer: many goroutines on one key never hold more than the
// limit at once, and all of them get their slots.
func TestMemoryHammer(t *testing.T) {
	for _, c := range []struct {
		limit   int64
		callers int
	}{{1, 8}, {5, 16}, {5, 3}, {32, 64}} {
		// The fake clock stands still: no lease expires during the run.
		m := newMemory(t, concurrency.MemoryConfig{Clock: limitertest.NewFakeClock(concurrencytest.Start)})
		r := concurrencytest.Hammer(t, []concurrency.Slots{m}, "k", c.limit, c.callers, 300)
		if want := int64(c.callers * 300); r.Acquired != want {
			t.Errorf("limit %d, %d callers: %d acquired, want %d", c.limit, c.callers, r.Acquired, want)
		}
		t.Logf("limit %d, %d callers: %+v", c.limit, c.callers, r)
		if m.Len() != 0 {
			t.Errorf("limit %d: %d keys held after every lease was released", c.limit, m.Len())
		}
	}
}

// TestMemorySystemClock: the default clock works, and a key vanishes with
// its last lease.
func TestMemorySystemClock(t *testing.T) {
	m := newMemory(t, concurrency.MemoryConfig{})
	ctx := context.Background()
	d, err := m.Acquire(ctx, "k", 1, time.Minute)
	if err != nil || !d.Allowed {
		t.Fatalf("Acquire: %+v, %v", d, err)
	}
	if d2, err := m.Acquire(ctx, "k", 1, time.Minute); err != nil || d2.Allowed || d2.RetryAfter != concurrency.RetryHint {
		t.Fatalf("second Acquire: %+v, %v", d2, err)
	}
	if m.Len() != 1 {
		t.Fatalf("Len %d, want 1", m.Len())
	}
	if held, err := m.Release(ctx, d.Lease); err != nil || !held {
		t.Fatalf("Release: %v, %v", held, err)
	}
	if m.Len() != 0 {
		t.Fatalf("Len %d after the last release, want 0", m.Len())
	}
}

func TestMemoryConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  concurrency.MemoryConfig
		msg  string // empty: valid
	}{
		{"zero value", concurrency.MemoryConfig{}, ""},
		{"explicit", concurrency.MemoryConfig{MaxKeys: 10, Shards: 10}, ""},
		{"small MaxKeys lowers the default Shards", concurrency.MemoryConfig{MaxKeys: 3}, ""},
		{"negative MaxKeys", concurrency.MemoryConfig{MaxKeys: -1}, "MaxKeys must not be negative (got -1)"},
		{"negative Shards", concurrency.MemoryConfig{Shards: -2}, "Shards must not be negative (got -2)"},
		{"more shards than keys", concurrency.MemoryConfig{MaxKeys: 4, Shards: 8}, "Shards (8) exceeds MaxKeys (4)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := concurrency.NewMemory(c.cfg)
			if c.msg == "" {
				if err != nil {
					t.Fatalf("NewMemory: %v", err)
				}
				return
			}
			if !errors.Is(err, concurrency.ErrInvalidConfig) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("NewMemory: %v; want ErrInvalidConfig mentioning %q", err, c.msg)
			}
		})
	}
}

// TestMemoryFull: a full shard refuses a new key while every key holds a
// live lease, and takes the place of a key whose leases have all expired;
// keys already held never meet ErrFull.
func TestMemoryFull(t *testing.T) {
	ctx := context.Background()
	clock := limitertest.NewFakeClock(concurrencytest.Start)
	m := newMemory(t, concurrency.MemoryConfig{Clock: clock, MaxKeys: 2, Shards: 1})
	a, err := m.Acquire(ctx, "a", 2, time.Second)
	if err != nil || !a.Allowed {
		t.Fatalf("Acquire a: %+v, %v", a, err)
	}
	if d, err := m.Acquire(ctx, "b", 2, time.Minute); err != nil || !d.Allowed {
		t.Fatalf("Acquire b: %+v, %v", d, err)
	}
	d, err := m.Acquire(ctx, "c", 2, time.Minute)
	if !errors.Is(err, concurrency.ErrFull) || d != (concurrency.Decision{}) {
		t.Fatalf("Acquire c in a full store: %+v, %v; want ErrFull", d, err)
	}
	if d, err := m.Acquire(ctx, "a", 2, time.Minute); err != nil || !d.Allowed || d.Held != 2 {
		t.Fatalf("Acquire a again in a full store: %+v, %v", d, err)
	}
	// a's leases expire at 1 s and 1 min, b's at 1 min: at 30 s every
	// key still holds a live lease.
	clock.Advance(30 * time.Second)
	if d, err := m.Acquire(ctx, "c", 2, time.Minute); !errors.Is(err, concurrency.ErrFull) {
		t.Fatalf("Acquire c while a and b hold live leases: %+v, %v; want ErrFull", d, err)
	}
	clock.Advance(30 * time.Second) // a lease expires at its expiry
	if d, err := m.Acquire(ctx, "c", 2, time.Minute); err != nil || !d.Allowed || d.Held != 1 {
		t.Fatalf("Acquire c once a key's leases have expired: %+v, %v", d, err)
	}
	if m.Len() != 2 {
		t.Fatalf("Len %d, want 2", m.Len())
	}
	if held, err := m.Release(ctx, a.Lease); err != nil || held {
		t.Fatalf("Release of a reclaimed key's lease: %v, %v; want not held", held, err)
	}
}

// TestMemoryFullAfterRelease: a key whose only lease was released makes
// room at once, and one whose latest lease was refreshed shorter is
// reclaimed at its new expiry.
func TestMemoryFullAfterRelease(t *testing.T) {
	ctx := context.Background()
	clock := limitertest.NewFakeClock(concurrencytest.Start)
	m := newMemory(t, concurrency.MemoryConfig{Clock: clock, MaxKeys: 1, Shards: 1})
	a, err := m.Acquire(ctx, "a", 1, time.Minute)
	if err != nil || !a.Allowed {
		t.Fatalf("Acquire a: %+v, %v", a, err)
	}
	if _, err := m.Release(ctx, a.Lease); err != nil {
		t.Fatal(err)
	}
	b, err := m.Acquire(ctx, "b", 2, time.Minute)
	if err != nil || !b.Allowed {
		t.Fatalf("Acquire b after a's release: %+v, %v", b, err)
	}
	b2, err := m.Acquire(ctx, "b", 2, time.Hour)
	if err != nil || !b2.Allowed {
		t.Fatalf("Acquire b: %+v, %v", b2, err)
	}
	if held, err := m.Refresh(ctx, b2.Lease, time.Second); err != nil || !held {
		t.Fatalf("Refresh: %v, %v", held, err)
	}
	clock.Advance(time.Minute + time.Nanosecond)
	if d, err := m.Acquire(ctx, "c", 1, time.Minute); err != nil || !d.Allowed {
		t.Fatalf("Acquire c once b's leases expired (the latest refreshed to 1 s): %+v, %v", d, err)
	}
}
