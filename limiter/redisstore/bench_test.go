package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
)

// bytesPerKeyKeys is how many token-bucket keys BenchmarkRedisBytesPerKey
// writes.
const bytesPerKeyKeys = 100_000

// BenchmarkRedisBytesPerKey writes 100k token-bucket keys (identities
// "user:0" … "user:99999", default prefix, each with a TTL) into a private
// redis-server and reports INFO memory's used_memory delta per key. One
// iteration is the whole measurement; run with -benchtime=1x.
func BenchmarkRedisBytesPerKey(b *testing.B) {
	srv := redistest.StartServer(b)
	rdb := srv.Client(b)
	s := newStore(b, rdb, nil)
	ctx := context.Background()
	// One token takes 14.4 min to refill: no key expires during the run.
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 100, Rate: 100, Period: 24 * time.Hour}

	for b.Loop() {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		before := usedMemory(b, ctx, rdb)
		var (
			wg   sync.WaitGroup
			next atomic.Int64
		)
		for range 8 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < bytesPerKeyKeys; i = next.Add(1) - 1 {
					if _, err := s.Take(ctx, "user:"+strconv.FormatInt(i, 10), l, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		after := usedMemory(b, ctx, rdb)
		if n, err := rdb.DBSize(ctx).Result(); err != nil || n != bytesPerKeyKeys {
			b.Fatalf("DBSIZE %d, %v; want %d", n, err, bytesPerKeyKeys)
		}
		b.ReportMetric(float64(after-before)/bytesPerKeyKeys, "bytes/key")
	}
}

func usedMemory(tb testing.TB, ctx context.Context, rdb redis.UniversalClient) int64 {
	tb.Helper()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatalf("no used_memory in INFO memory")
	return 0
}

// BenchmarkTake is one decision's round trip through the store: one key,
// and 10k keys, against the shared standalone server and Cluster.
func BenchmarkTake(b *testing.B) {
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1 << 30, Rate: 1 << 30, Period: time.Second} // never rejects
	targets := []struct {
		name   string
		client func(b *testing.B) redis.UniversalClient
	}{
		{"standalone", func(b *testing.B) redis.UniversalClient { return redistest.SharedServer(b).Client(b) }},
		{"cluster", func(b *testing.B) redis.UniversalClient { return redistest.SharedCluster(b).Client(b) }},
	}
	for _, target := range targets {
		b.Run(target.name, func(b *testing.B) {
			s := newStore(b, target.client(b), nil)
			ctx := context.Background()
			b.Run("single_key", func(b *testing.B) {
				for b.Loop() {
					if _, err := s.Take(ctx, "bench", l, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("parallel_10k_keys", func(b *testing.B) {
				var n atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := "bench:" + strconv.FormatInt(n.Add(1)%10_000, 10)
						if _, err := s.Take(ctx, key, l, 1); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		})
	}
}
