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
	"github.com/costguard/costguard/limiter/redisstore"
)

var tenPerSecond = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}

// TestRedisErrorsSurface: whatever goes wrong in Redis comes back as a
// wrapped error with no admission, never as a panic or a silent allow.
func TestRedisErrorsSurface(t *testing.T) {
	rdb := redistest.SharedServer(t).Client(t)
	s := newStore(t, rdb, nil)
	ctx := context.Background()

	t.Run("wrong type", func(t *testing.T) {
		if err := rdb.Set(ctx, s.Key("wrongtype", limiter.TokenBucket), "not a hash", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		d, err := s.Take(ctx, "wrongtype", tenPerSecond, 1)
		if err == nil || d.Allowed || !strings.HasPrefix(err.Error(), "redisstore: token_bucket take: ") || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("Take on a string key: %+v, %v; want a wrapped WRONGTYPE error", d, err)
		}
	})

	t.Run("wrong types in one script call", func(t *testing.T) {
		// Three messages of different lengths among good keys: each key
		// gets its own, exactly as a call of it alone does.
		spoil := map[string]func(key string) error{
			"short": func(k string) error { return rdb.Set(ctx, k, "x", time.Minute).Err() },
			"list":  func(k string) error { return rdb.RPush(ctx, k, "a").Err() },
			"long":  func(k string) error { return rdb.Set(ctx, k, "a longer string", time.Minute).Err() },
		}
		for id, f := range spoil {
			if err := f(s.Key(id, limiter.TokenBucket)); err != nil {
				t.Fatal(err)
			}
		}
		ids := []string{"good1", "short", "good2", "list", "long", "good3"}
		calls := make([]redisstore.BatchCall, len(ids))
		for i, id := range ids {
			calls[i] = redisstore.BatchCall{Identity: id, Limit: tenPerSecond, N: 1}
		}
		ds, errs := redisstore.RoundTrip(ctx, s, calls)
		for i, id := range ids {
			if spoil[id] == nil {
				if errs[i] != nil || !ds[i].Allowed || ds[i].Remaining != 9 {
					t.Errorf("%s: %+v, %v; want admitted, 9 left", id, ds[i], errs[i])
				}
				continue
			}
			_, alone := s.Take(ctx, id, tenPerSecond, 1)
			var rerr redis.Error
			if errs[i] == nil || ds[i].Allowed || !errors.As(errs[i], &rerr) || errs[i].Error() != alone.Error() {
				t.Errorf("%s: %+v, %v; want %v, as alone", id, ds[i], errs[i], alone)
			}
		}
	})

	t.Run("cancelled context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		for a := limiter.TokenBucket; a <= limiter.SlidingCounter; a++ {
			l := tenPerSecond
			l.Algorithm = a
			d, err := s.Take(cctx, "cancelled", l, 1)
			if !errors.Is(err, context.Canceled) || d.Allowed {
				t.Fatalf("%s: Take with a cancelled ctx: %+v, %v; want context.Canceled", a, d, err)
			}
		}
	})

	t.Run("deadline", func(t *testing.T) {
		dctx, cancel := context.WithDeadline(ctx, time.Unix(0, 0))
		defer cancel()
		if _, err := s.Refund(dctx, "deadline", tenPerSecond, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Refund past its deadline: %v; want context.DeadlineExceeded", err)
		}
	})
}

// TestServerDownAndBack: a stopped server fails calls; a restarted one (its
// script cache empty) serves them again through the EVAL fallback.
func TestServerDownAndBack(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	s := newStore(t, rdb, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if d, err := s.Take(ctx, "k", tenPerSecond, 4); err != nil || !d.Allowed {
		t.Fatalf("Take: %+v, %v", d, err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	d, err := s.Take(ctx, "k", tenPerSecond, 1)
	if err == nil || d.Allowed || !strings.HasPrefix(err.Error(), "redisstore: ") {
		t.Fatalf("Take with the server down: %+v, %v; want a redisstore error and no admission", d, err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if n := cachedScripts(t, ctx, rdb); n != "0" {
		t.Fatalf("%s cached scripts after restart, want 0", n)
	}
	// The data went with the old process: a fresh, full bucket.
	if d, err := s.Take(ctx, "k", tenPerSecond, 1); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Fatalf("Take after restart: %+v, %v; want allowed with 9 remaining", d, err)
	}
	if n := cachedScripts(t, ctx, rdb); n != "1" {
		t.Fatalf("%s cached scripts after the EVAL fallback, want 1", n)
	}
}

// cachedScripts reads how many scripts the server has cached.
func cachedScripts(t *testing.T, ctx context.Context, rdb redis.UniversalClient) string {
	t.Helper()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if n, ok := strings.CutPrefix(line, "number_of_cached_scripts:"); ok {
			return n
		}
	}
	t.Fatalf("INFO memory has no number_of_cached_scripts:\n%s", info)
	return ""
}
