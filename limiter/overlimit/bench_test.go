package overlimit_test

import (
	"testing"
	"time"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/overlimit"
	"github.com/costguard/costguard/limiter/redisstore"
)

// botLimit is a small budget: nearly every call of the bot is rejected.
var botLimit = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}

// BenchmarkScrapeBot: 64 goroutines (GOMAXPROCS × 32) hammer one key, the
// store alone and behind the cache. Compare the pairs:
//
//	go test -run '^$' -bench ScrapeBot -benchtime 200ms ./limiter/overlimit/
func BenchmarkScrapeBot(b *testing.B) {
	stores := []struct {
		name string
		new  func(b *testing.B) limiter.Store
	}{
		{"memorystore", func(b *testing.B) limiter.Store { return newMemory(b, nil) }},
		{"redisstore", func(b *testing.B) limiter.Store {
			s, err := redisstore.New(redistest.SharedServer(b).Client(b), redisstore.Config{Prefix: uniquePrefix(b)})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	for _, st := range stores {
		for _, cached := range []bool{false, true} {
			name := st.name
			if cached {
				name = "overlimit+" + name
			}
			b.Run(name, func(b *testing.B) {
				var s limiter.Store = st.new(b)
				if cached {
					var err error
					if s, err = overlimit.New(s, overlimit.Config{}); err != nil {
						b.Fatal(err)
					}
				}
				b.SetParallelism(32)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := s.Take(ctx, "bot", botLimit, 1); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
