package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/concurrency/concurrencytest"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/redisstore"
)

// TestConcurrencySuite: the concurrency behaviour suite, on the suite's
// fake clock passed to the script, against standalone and Cluster.
func TestConcurrencySuite(t *testing.T) {
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			rdb := target.client(t)
			concurrencytest.Run(t, func(t *testing.T, clock limiter.Clock) concurrency.Slots {
				return newStore(t, rdb, clock)
			})
		})
	}
}

// TestConcurrencyAcrossProcesses: three stores, each with its own client
// (three gateway processes), hammer one key with a limit of 5 on Redis
// TIME: never more than 5 callers in flight, and every caller gets all its
// slots.
func TestConcurrencyAcrossProcesses(t *testing.T) {
	const (
		limit   = 5
		callers = 12
		rounds  = 60
	)
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			var slots []concurrency.Slots
			for range 3 {
				s, err := redisstore.New(target.client(t), redisstore.Config{Prefix: prefix})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				slots = append(slots, s)
			}
			r := concurrencytest.Hammer(t, slots, "user:42", limit, callers, rounds)
			if r.Acquired != callers*rounds {
				t.Errorf("%d leases granted, want %d", r.Acquired, callers*rounds)
			}
			t.Logf("%+v", r)
		})
	}
}

// TestConcurrencyExpiry: a lease never released expires after its TTL on
// Redis's own clock, its slot comes back, releasing it afterwards frees
// nobody else's slot, and the key vanishes once every lease is gone. The
// test polls; it asserts no timing beyond the TTL bounds. Standalone and
// Cluster wait out their TTLs in parallel.
func TestConcurrencyExpiry(t *testing.T) {
	const ttl = 300 * time.Millisecond
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			rdb := target.client(t)
			s := newStore(t, rdb, nil) // Redis TIME, default margin
			ctx := context.Background()
			key := s.ConcurrencyKey("crashed")

			crashed, err := s.Acquire(ctx, "crashed", 1, ttl)
			if err != nil || !crashed.Allowed {
				t.Fatalf("Acquire: %+v, %v", crashed, err)
			}
			maxTTL := ttl + redisstore.DefaultExpiryMargin
			if pttl := rdb.PTTL(ctx, key).Val(); pttl <= 0 || pttl > maxTTL {
				t.Fatalf("PTTL %v, want in (0, %v]", pttl, maxTTL)
			}
			var next concurrency.Decision
			poll(t, 10*time.Second, func() bool {
				next, err = s.Acquire(ctx, "crashed", 1, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if !next.Allowed && (next.RetryAfter <= 0 || next.RetryAfter > ttl) {
					t.Fatalf("refusal with RetryAfter %v, want in (0, %v]", next.RetryAfter, ttl)
				}
				return next.Allowed
			})
			if held, err := s.Release(ctx, crashed.Lease); err != nil || held {
				t.Fatalf("Release of the expired lease: %v, %v; want not held", held, err)
			}
			if held, err := s.Refresh(ctx, crashed.Lease, time.Minute); err != nil || held {
				t.Fatalf("Refresh of the expired lease: %v, %v; want not held", held, err)
			}
			if d, err := s.Acquire(ctx, "crashed", 1, time.Minute); err != nil || d.Allowed || d.Held != 1 {
				t.Fatalf("Acquire after releasing the expired lease: %+v, %v; want the new holder's slot kept", d, err)
			}
			if held, err := s.Release(ctx, next.Lease); err != nil || !held {
				t.Fatalf("Release: %v, %v", held, err)
			}
			if n := rdb.Exists(ctx, key).Val(); n != 0 {
				t.Fatalf("key still present after its last lease was released")
			}

			// A key whose leases all expire unreleased vanishes on its own.
			if d, err := s.Acquire(ctx, "forgotten", 3, ttl); err != nil || !d.Allowed {
				t.Fatalf("Acquire: %+v, %v", d, err)
			}
			poll(t, 10*time.Second, func() bool { return rdb.Exists(ctx, s.ConcurrencyKey("forgotten")).Val() == 0 })
		})
	}
}

// poll calls done every 20 ms until it reports true, failing t after
// limit.
func poll(t *testing.T, limit time.Duration, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("not done after %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConcurrencyKeys: the key layout docs/redis.md documents, in the slot
// of the identity's budgets, holding a ZSET of lease ids scored by expiry.
func TestConcurrencyKeys(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for identity, want := range map[string]string{
		"user42": "costguard:{user42}:concurrency",
		"a}b":    "costguard:{a%7Db}:concurrency",
		"":       "costguard:{%}:concurrency",
	} {
		if got := s.ConcurrencyKey(identity); got != want {
			t.Errorf("ConcurrencyKey(%q) = %q, want %q", identity, got, want)
		}
	}

	crdb := redistest.SharedCluster(t).Client(t)
	cs := newStore(t, crdb, limitertest.NewFakeClock(concurrencytest.Start))
	ctx := context.Background()
	for _, identity := range []string{"user:42", "{x}", strings.Repeat("long", 100)} {
		key := cs.ConcurrencyKey(identity)
		if got, want := crdb.ClusterKeySlot(ctx, key).Val(), redisstore.Slot(identity); got != want {
			t.Errorf("%q: CLUSTER KEYSLOT %d, want the identity's slot %d", identity, got, want)
		}
		d, err := cs.Acquire(ctx, identity, 2, time.Minute)
		if err != nil || !d.Allowed {
			t.Fatalf("Acquire(%q): %+v, %v", identity, d, err)
		}
		members, err := crdb.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err != nil || len(members) != 1 {
			t.Fatalf("ZRANGE %s: %v, %v", key, members, err)
		}
		wantScore := concurrencytest.Start.Add(time.Minute).UnixMicro()
		if members[0].Member != d.Lease.ID.String() || int64(members[0].Score) != wantScore {
			t.Errorf("%s holds %v; want member %s scored %d", key, members[0], d.Lease.ID, wantScore)
		}
	}
}

// TestConcurrencyWrongType: a key of another type fails the call with a
// redis.Error and grants nothing.
func TestConcurrencyWrongType(t *testing.T) {
	rdb := redistest.SharedServer(t).Client(t)
	s := newStore(t, rdb, nil)
	ctx := context.Background()
	if err := rdb.Set(ctx, s.ConcurrencyKey("k"), "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	d, err := s.Acquire(ctx, "k", 1, time.Minute)
	var rerr redis.Error
	if !errors.As(err, &rerr) || d.Allowed || !strings.HasPrefix(err.Error(), "redisstore: concurrency acquire: ") {
		t.Fatalf("Acquire on a string key: %+v, %v; want a wrapped redis.Error", d, err)
	}
	lease := concurrency.Lease{Key: "k", ID: concurrency.LeaseID{1}}
	if held, err := s.Release(ctx, lease); !errors.As(err, &rerr) || held {
		t.Errorf("Release on a string key: %v, %v", held, err)
	}
	if held, err := s.Refresh(ctx, lease, time.Minute); !errors.As(err, &rerr) || held {
		t.Errorf("Refresh on a string key: %v, %v", held, err)
	}
}

// TestConcurrencyRetryIsIdempotent: the script run twice with one lease id,
// as a client's retry would, grants the lease again without a second slot.
func TestConcurrencyRetryIsIdempotent(t *testing.T) {
	rdb := redistest.SharedServer(t).Client(t)
	s := newStore(t, rdb, nil)
	ctx := context.Background()
	id := concurrency.LeaseID{0xab, 0xcd}
	for i := range 2 {
		d, err := redisstore.AcquireWithID(ctx, s, "k", id, 1, time.Minute)
		if err != nil || !d.Allowed || d.Held != 1 || d.Lease.ID != id {
			t.Fatalf("run %d: %+v, %v; want the lease granted, held 1", i, d, err)
		}
	}
	if d, err := s.Acquire(ctx, "k", 1, time.Minute); err != nil || d.Allowed || d.Held != 1 {
		t.Fatalf("Acquire with another id: %+v, %v; want refused, held 1", d, err)
	}
}

// TestConcurrencyScriptFlushed: a server without the script cached runs it
// through EVAL.
func TestConcurrencyScriptFlushed(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	s := newStore(t, rdb, nil)
	ctx := context.Background()
	for range 2 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		d, err := s.Acquire(ctx, "k", 2, time.Minute)
		if err != nil || !d.Allowed {
			t.Fatalf("Acquire after SCRIPT FLUSH: %+v, %v", d, err)
		}
	}
}

// TestConcurrencyFailsClosed: validation comes before any round trip; with
// Redis unreachable a call fails with a wrapped error and grants nothing;
// a closed store refuses every call.
func TestConcurrencyFailsClosed(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Acquire(ctx, "k", 0, time.Minute); !errors.Is(err, concurrency.ErrInvalidLimit) {
		t.Errorf("Acquire(limit 0): %v, want ErrInvalidLimit", err)
	}
	if _, err := s.Refresh(ctx, concurrency.Lease{Key: "k", ID: concurrency.LeaseID{1}}, 0); !errors.Is(err, concurrency.ErrInvalidTTL) {
		t.Errorf("Refresh(ttl 0): %v, want ErrInvalidTTL", err)
	}
	d, err := s.Acquire(ctx, "k", 1, time.Minute)
	if err == nil || d.Allowed || !strings.HasPrefix(err.Error(), "redisstore: concurrency acquire: ") {
		t.Errorf("Acquire with Redis unreachable: %+v, %v; want a redisstore error and no grant", d, err)
	}
	if _, err := s.Release(ctx, concurrency.Lease{Key: "k", ID: concurrency.LeaseID{1}}); err == nil {
		t.Errorf("Release with Redis unreachable: no error")
	}
	_ = s.Close()
	if d, err := s.Acquire(ctx, "k", 1, time.Minute); !errors.Is(err, redisstore.ErrClosed) || d.Allowed {
		t.Errorf("Acquire after Close: %+v, %v; want ErrClosed", d, err)
	}
	if _, err := s.Release(ctx, concurrency.Lease{}); !errors.Is(err, redisstore.ErrClosed) {
		t.Errorf("Release after Close: %v; want ErrClosed", err)
	}
}
