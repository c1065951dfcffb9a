package splitbudget_test

import (
	"testing"
	"time"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/limiter/splitbudget"
)

// BenchmarkAdmitted: 64 goroutines (GOMAXPROCS × 32) spend from one key
// whose budget never runs out, on Redis directly and through leases of
// 5 % of the burst:
//
//	go test -run '^$' -bench Admitted -benchtime 200ms ./limiter/splitbudget/
func BenchmarkAdmitted(b *testing.B) {
	roomy := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1_000_000, Rate: 1_000_000_000, Period: time.Second}
	for _, split := range []bool{false, true} {
		name := "redisstore"
		if split {
			name = "splitbudget+redisstore"
		}
		b.Run(name, func(b *testing.B) {
			rs, err := redisstore.New(redistest.SharedServer(b).Client(b), redisstore.Config{Prefix: "cgbench-split-" + randomHex(b)})
			if err != nil {
				b.Fatal(err)
			}
			next := &counting{Store: rs}
			var s limiter.Store = next
			if split {
				s = newSplit(b, next, splitbudget.Config{SettleInterval: splitbudget.DefaultSettleInterval})
			}
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					d, err := s.Take(ctx, "k", roomy, 1)
					if err != nil || !d.Allowed {
						b.Errorf("%+v, %v", d, err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(next.calls())/float64(b.N), "store-calls/op")
		})
	}
}
