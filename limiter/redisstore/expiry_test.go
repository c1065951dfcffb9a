package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/redisstore"
)

// TestExpiry: a written key lives until its budget is whole again plus the
// margin; a whole budget leaves no key at all.
func TestExpiry(t *testing.T) {
	rdb := redistest.SharedServer(t).Client(t)
	ctx := context.Background()
	start := time.Date(2030, 1, 1, 0, 15, 0, 0, time.UTC)
	for a := limiter.TokenBucket; a <= limiter.SlidingCounter; a++ {
		t.Run(a.String(), func(t *testing.T) {
			clock := limitertest.NewFakeClock(start)
			s := newStore(t, rdb, clock) // margin testMargin (1 h)
			key := s.Key("user", a)
			l := limiter.Limit{Algorithm: a, Burst: 10, Rate: 10, Period: time.Hour}

			if _, err := s.Take(ctx, "user", l, 0); err != nil {
				t.Fatal(err)
			}
			if n := rdb.Exists(ctx, key).Val(); n != 0 {
				t.Fatalf("a peek at a fresh key created it")
			}
			d, err := s.Take(ctx, "user", l, 5)
			if err != nil || !d.Allowed || d.ResetAfter <= 0 {
				t.Fatalf("Take: %+v, %v", d, err)
			}
			// PEXPIRE was ⌈ResetAfter⌉ ms + margin when set; the upper bound
			// is exact, the lower one leaves the test half of ResetAfter.
			maxTTL := (d.ResetAfter + time.Millisecond - 1).Truncate(time.Millisecond) + testMargin
			ttl := rdb.PTTL(ctx, key).Val()
			if ttl > maxTTL || ttl <= testMargin+d.ResetAfter/2 {
				t.Fatalf("PTTL %v, want ResetAfter %v + margin %v", ttl, d.ResetAfter, testMargin)
			}

			if a == limiter.LeakyBucketShaping {
				return // no refunds
			}
			if _, err := s.Refund(ctx, "user", l, 10); err != nil {
				t.Fatal(err)
			}
			if n := rdb.Exists(ctx, key).Val(); n != 0 {
				t.Fatalf("key still present after a refund made the budget whole")
			}
		})
	}

	t.Run("default margin with Redis TIME", func(t *testing.T) {
		s, err := redisstore.New(rdb, redisstore.Config{Prefix: uniquePrefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Hour}
		d, err := s.Take(ctx, "user", l, 1)
		if err != nil {
			t.Fatal(err)
		}
		maxTTL := (d.ResetAfter + time.Millisecond - 1).Truncate(time.Millisecond) + redisstore.DefaultExpiryMargin
		if ttl := rdb.PTTL(ctx, s.Key("user", l.Algorithm)).Val(); ttl <= 0 || ttl > maxTTL {
			t.Fatalf("PTTL %v, want at most %v", ttl, maxTTL)
		}
	})
}
