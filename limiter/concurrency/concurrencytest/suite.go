// Package concurrencytest is the behaviour suite every concurrency.Slots
// must pass, and the hammer that checks exactness under concurrency.
//
// A store's test calls Run with a constructor that builds the store on the
// clock the suite hands it (a limitertest.FakeClock, which the suite moves;
// nothing sleeps):
//
//	func TestSuite(t *testing.T) {
//		concurrencytest.Run(t, func(t *testing.T, clock limiter.Clock) concurrency.Slots {
//			m, err := concurrency.NewMemory(concurrency.MemoryConfig{Clock: clock})
//			...
//			return m
//		})
//	}
//
// Each case uses its own key, unique per process, so the suite may share
// one Redis with other tests.
package concurrencytest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/limitertest"
)

// Start is the fake clock's reading when each case begins.
var Start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// NewSlots builds the store under test on clock.
type NewSlots func(t *testing.T, clock limiter.Clock) concurrency.Slots

type op uint8

const (
	acquire op = iota
	release
	refresh
)

// Lease references of a step other than an earlier step's index.
const (
	forged = -1 // a lease of the step's key that was never granted
	zero   = -2 // the zero Lease
)

// step is one call at a time since Start. A release or refresh names the
// lease by the index of the acquire step that granted it (or forged, zero).
type step struct {
	at    time.Duration
	op    op
	key   string // "" is "a"
	limit int64  // acquire
	ttl   time.Duration
	lease int // release, refresh

	// acquire: the decision's Allowed, Held and RetryAfter (Limit must be
	// limit, the lease's Key the key). release, refresh: allowed is the
	// reported held.
	allowed bool
	held    int64
	retry   time.Duration
}

func acq(at time.Duration, limit int64, ttl time.Duration, allowed bool, held int64, retry time.Duration) step {
	return step{at: at, op: acquire, limit: limit, ttl: ttl, allowed: allowed, held: held, retry: retry}
}

func acqKey(at time.Duration, key string, limit int64, ttl time.Duration, allowed bool, held int64, retry time.Duration) step {
	s := acq(at, limit, ttl, allowed, held, retry)
	s.key = key
	return s
}

func rel(at time.Duration, lease int, held bool) step {
	return step{at: at, op: release, lease: lease, allowed: held}
}

func ref(at time.Duration, lease int, ttl time.Duration, held bool) step {
	return step{at: at, op: refresh, lease: lease, ttl: ttl, allowed: held}
}

const (
	ms     = time.Millisecond
	sec    = time.Second
	minute = time.Minute
	usec   = time.Microsecond
)

// cases are the suite's scenarios.
var cases = []struct {
	name  string
	steps []step
}{
	{"limit admits exactly N", []step{
		acq(0, 3, minute, true, 1, 0),
		acq(0, 3, minute, true, 2, 0),
		acq(0, 3, minute, true, 3, 0),
		acq(0, 3, minute, false, 3, sec),
		acq(30*sec, 3, minute, false, 3, sec),
	}},
	{"limit of one", []step{
		acq(0, 1, minute, true, 1, 0),
		acq(0, 1, minute, false, 1, sec),
	}},
	{"release frees a slot", []step{
		acq(0, 2, minute, true, 1, 0),
		acq(0, 2, minute, true, 2, 0),
		acq(0, 2, minute, false, 2, sec),
		rel(ms, 0, true),
		acq(ms, 2, minute, true, 2, 0),
		acq(ms, 2, minute, false, 2, sec),
		rel(2*ms, 0, false), // released before
		acq(2*ms, 2, minute, false, 2, sec),
	}},
	{"releasing every lease empties the key", []step{
		acq(0, 2, minute, true, 1, 0),
		acq(0, 2, minute, true, 2, 0),
		rel(0, 0, true),
		rel(0, 1, true),
		acq(0, 2, minute, true, 1, 0),
	}},
	{"an expired lease frees a crashed holder's slot", []step{
		acq(0, 1, 10*sec, true, 1, 0),
		acq(10*sec-2*sec, 1, 10*sec, false, 1, sec),
		acq(10*sec-usec, 1, 10*sec, false, 1, usec),
		acq(10*sec, 1, 10*sec, true, 1, 0), // expired at exactly its expiry
	}},
	{"expiry frees only the expired leases", []step{
		acq(0, 3, sec, true, 1, 0),
		acq(500*ms, 3, sec, true, 2, 0),
		acq(600*ms, 3, minute, true, 3, 0),
		acq(1200*ms, 3, minute, true, 3, 0), // the first expired at 1 s
		acq(1200*ms, 3, minute, false, 3, 300*ms),
		acq(1500*ms, 3, minute, true, 3, 0), // the second at 1.5 s
	}},
	{"retry after is the earliest expiry when sooner than the hint", []step{
		acq(0, 2, 1500*ms, true, 1, 0),
		acq(200*ms, 2, 5*sec, true, 2, 0),
		acq(sec, 2, minute, false, 2, 500*ms),
		acq(1499*ms, 2, minute, false, 2, ms),
		acq(100*ms, 2, minute, false, 2, sec), // the clock stepped back: nothing expires
	}},
	{"keys are isolated", []step{
		acq(0, 1, minute, true, 1, 0),
		acq(0, 1, minute, false, 1, sec),
		acqKey(0, "b", 1, minute, true, 1, 0),
		acqKey(0, "b", 1, minute, false, 1, sec),
		rel(ms, 0, true),
		acqKey(ms, "b", 1, minute, false, 1, sec),
		acq(ms, 1, minute, true, 1, 0),
	}},
	{"releasing an expired lease frees nobody else's slot", []step{
		acq(0, 1, sec, true, 1, 0),
		acq(sec, 1, minute, true, 1, 0), // took the expired lease's slot
		rel(2*sec, 0, false),
		acq(2*sec, 1, minute, false, 1, sec),
	}},
	{"releasing an expired lease not yet forgotten", []step{
		acq(0, 2, sec, true, 1, 0),
		rel(5*sec, 0, false),
		acq(5*sec, 2, minute, true, 1, 0),
	}},
	{"releasing a lease never granted is harmless", []step{
		acq(0, 1, minute, true, 1, 0),
		rel(0, forged, false),
		rel(0, zero, false),
		acq(0, 1, minute, false, 1, sec),
		rel(0, 0, true),
	}},
	{"releasing on an unknown key is harmless", []step{
		{op: release, key: "never", lease: forged},
		acqKey(0, "never", 1, minute, true, 1, 0),
	}},
	{"refresh extends a held lease", []step{
		acq(0, 1, 10*sec, true, 1, 0),
		ref(9*sec, 0, 10*sec, true), // now expires at 19 s
		acq(15*sec, 1, minute, false, 1, sec),
		acq(18500*ms, 1, minute, false, 1, 500*ms),
		acq(19*sec, 1, minute, true, 1, 0),
	}},
	{"refresh may shorten a lease", []step{
		acq(0, 1, minute, true, 1, 0),
		ref(sec, 0, sec, true), // now expires at 2 s
		acq(1500*ms, 1, minute, false, 1, 500*ms),
		acq(2*sec, 1, minute, true, 1, 0),
	}},
	{"refresh of the latest lease of several", []step{
		acq(0, 2, 10*sec, true, 1, 0),
		acq(0, 2, 20*sec, true, 2, 0),
		ref(sec, 1, sec, true), // the latest now expires first, at 2 s
		acq(2*sec, 2, minute, true, 2, 0),
		acq(2*sec, 2, minute, false, 2, sec),
		acq(9500*ms, 2, minute, false, 2, 500*ms),
	}},
	{"refresh of an expired lease fails", []step{
		acq(0, 1, sec, true, 1, 0),
		ref(sec, 0, minute, false),
		acq(sec, 1, minute, true, 1, 0),
	}},
	{"refresh after the slot was retaken fails", []step{
		acq(0, 1, sec, true, 1, 0),
		acq(sec, 1, minute, true, 1, 0),
		ref(sec, 0, minute, false),
		acq(sec, 1, minute, false, 1, sec),
	}},
	{"refresh of a released or never granted lease fails", []step{
		acq(0, 2, minute, true, 1, 0),
		rel(0, 0, true),
		ref(0, 0, minute, false),
		ref(0, forged, minute, false),
		ref(0, zero, minute, false),
		acq(0, 2, minute, true, 1, 0),
	}},
	{"a lowered limit refuses until enough are released", []step{
		acq(0, 3, minute, true, 1, 0),
		acq(0, 3, minute, true, 2, 0),
		acq(0, 3, minute, true, 3, 0),
		acq(0, 2, minute, false, 3, sec),
		rel(0, 0, true),
		acq(0, 2, minute, false, 2, sec),
		rel(0, 1, true),
		acq(0, 2, minute, true, 2, 0),
		acq(0, 4, minute, true, 3, 0), // and a raised one admits at once
	}},
	{"the longest ttl", []step{
		acq(0, 1, concurrency.MaxTTL, true, 1, 0),
		acq(concurrency.MaxTTL-usec, 1, minute, false, 1, usec),
		acq(concurrency.MaxTTL, 1, minute, true, 1, 0),
	}},
}

var keySeq atomic.Int64

// uniqueKey returns a key no other case of this process, or of another
// process sharing a Redis, uses.
func uniqueKey(t *testing.T, suffix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("cctest:%s:%x:%d:%s", t.Name(), b, keySeq.Add(1), suffix)
}

// Run runs the behaviour suite against the Slots newSlots builds, one
// store per case, each on its own FakeClock starting at Start.
func Run(t *testing.T, newSlots NewSlots) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := limitertest.NewFakeClock(Start)
			s := newSlots(t, clock)
			runSteps(t, s, clock, c.steps)
		})
	}
	t.Run("invalid arguments", func(t *testing.T) { invalid(t, newSlots(t, limitertest.NewFakeClock(Start))) })
	t.Run("done context", func(t *testing.T) { doneContext(t, newSlots(t, limitertest.NewFakeClock(Start))) })
	t.Run("lease ids are unique", func(t *testing.T) { uniqueIDs(t, newSlots(t, limitertest.NewFakeClock(Start))) })
}

func runSteps(t *testing.T, s concurrency.Slots, clock *limitertest.FakeClock, steps []step) {
	t.Helper()
	ctx := context.Background()
	keys := map[string]string{}
	keyOf := func(k string) string {
		if k == "" {
			k = "a"
		}
		if _, ok := keys[k]; !ok {
			keys[k] = uniqueKey(t, k)
		}
		return keys[k]
	}
	leases := make([]concurrency.Lease, len(steps))
	for i, st := range steps {
		clock.Set(Start.Add(st.at))
		key := keyOf(st.key)
		var lease concurrency.Lease
		switch st.lease {
		case forged:
			lease = concurrency.Lease{Key: key, ID: concurrency.LeaseID{0xfe, 0xed}}
		case zero:
		default:
			lease = leases[st.lease]
		}
		switch st.op {
		case acquire:
			d, err := s.Acquire(ctx, key, st.limit, st.ttl)
			if err != nil {
				t.Fatalf("step %d: Acquire(%d, %v) at %v: %v", i, st.limit, st.ttl, st.at, err)
			}
			want := concurrency.Decision{Allowed: st.allowed, Limit: st.limit, Held: st.held, RetryAfter: st.retry}
			if st.allowed {
				want.Lease = concurrency.Lease{Key: key, ID: d.Lease.ID}
				if d.Lease.ID == (concurrency.LeaseID{}) {
					t.Errorf("step %d: granted the zero lease id", i)
				}
			}
			if d != want {
				t.Fatalf("step %d: Acquire(%d, %v) at %v:\n got %+v\nwant %+v", i, st.limit, st.ttl, st.at, d, want)
			}
			leases[i] = d.Lease
		case release:
			held, err := s.Release(ctx, lease)
			if err != nil || held != st.allowed {
				t.Fatalf("step %d: Release(step %d's lease) at %v: %v, %v; want %v", i, st.lease, st.at, held, err, st.allowed)
			}
		case refresh:
			held, err := s.Refresh(ctx, lease, st.ttl)
			if err != nil || held != st.allowed {
				t.Fatalf("step %d: Refresh(step %d's lease, %v) at %v: %v, %v; want %v", i, st.lease, st.ttl, st.at, held, err, st.allowed)
			}
		}
	}
}

// invalid: arguments out of bounds fail with the sentinel errors, a zero
// Decision, and change nothing.
func invalid(t *testing.T, s concurrency.Slots) {
	ctx := context.Background()
	key := uniqueKey(t, "a")
	for _, c := range []struct {
		limit int64
		ttl   time.Duration
		want  error
	}{
		{0, minute, concurrency.ErrInvalidLimit},
		{-1, minute, concurrency.ErrInvalidLimit},
		{concurrency.MaxLimit + 1, minute, concurrency.ErrInvalidLimit},
		{1, 0, concurrency.ErrInvalidTTL},
		{1, -sec, concurrency.ErrInvalidTTL},
		{1, concurrency.MaxTTL + 1, concurrency.ErrInvalidTTL},
	} {
		d, err := s.Acquire(ctx, key, c.limit, c.ttl)
		if !errors.Is(err, c.want) || d != (concurrency.Decision{}) {
			t.Errorf("Acquire(%d, %v): %+v, %v; want %v", c.limit, c.ttl, d, err, c.want)
		}
	}
	d, err := s.Acquire(ctx, key, 1, minute)
	if err != nil || !d.Allowed || d.Held != 1 {
		t.Fatalf("Acquire after the invalid calls: %+v, %v", d, err)
	}
	for _, ttl := range []time.Duration{0, -1, concurrency.MaxTTL + 1} {
		if held, err := s.Refresh(ctx, d.Lease, ttl); !errors.Is(err, concurrency.ErrInvalidTTL) || held {
			t.Errorf("Refresh(%v): %v, %v; want ErrInvalidTTL", ttl, held, err)
		}
	}
	if d, err := s.Acquire(ctx, key, concurrency.MaxLimit, minute); err != nil || !d.Allowed || d.Held != 2 {
		t.Fatalf("Acquire with MaxLimit: %+v, %v", d, err)
	}
}

// doneContext: a call whose ctx is done fails with its error and grants
// nothing.
func doneContext(t *testing.T, s concurrency.Slots) {
	key := uniqueKey(t, "a")
	d, err := s.Acquire(context.Background(), key, 1, minute)
	if err != nil || !d.Allowed {
		t.Fatalf("Acquire: %+v, %v", d, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d, err := s.Acquire(ctx, uniqueKey(t, "b"), 1, minute); !errors.Is(err, context.Canceled) || d.Allowed {
		t.Errorf("Acquire with a cancelled ctx: %+v, %v", d, err)
	}
	if _, err := s.Release(ctx, d.Lease); !errors.Is(err, context.Canceled) {
		t.Errorf("Release with a cancelled ctx: %v", err)
	}
	if _, err := s.Refresh(ctx, d.Lease, minute); !errors.Is(err, context.Canceled) {
		t.Errorf("Refresh with a cancelled ctx: %v", err)
	}
	// The lease is still held.
	if d2, err := s.Acquire(context.Background(), key, 1, minute); err != nil || d2.Allowed {
		t.Errorf("Acquire after the cancelled calls: %+v, %v", d2, err)
	}
	if held, err := s.Release(context.Background(), d.Lease); err != nil || !held {
		t.Errorf("Release: %v, %v", held, err)
	}
}

// uniqueIDs: every lease granted has its own id, on one key and across
// keys.
func uniqueIDs(t *testing.T, s concurrency.Slots) {
	ctx := context.Background()
	seen := map[concurrency.LeaseID]bool{}
	for k := range 4 {
		key := uniqueKey(t, fmt.Sprint(k))
		for range 50 {
			d, err := s.Acquire(ctx, key, 50, minute)
			if err != nil || !d.Allowed {
				t.Fatalf("Acquire: %+v, %v", d, err)
			}
			if seen[d.Lease.ID] {
				t.Fatalf("lease id %v granted twice", d.Lease.ID)
			}
			seen[d.Lease.ID] = true
		}
	}
}
