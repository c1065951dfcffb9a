package memorystore_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/memorystore"
)

// The workload both limiters run: a token bucket of 1,000 refilled at a
// million per second (so most calls are admitted and the bucket math runs
// in full), cost 1, on the wall clock.
var benchLimit = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1000, Rate: 1_000_000, Period: time.Second}

const (
	benchKeys  = 10_000  // many_keys and parallel cycle through these
	memoryKeys = 100_000 // bytes_per_key inserts these
)

func benchKeyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "principal:" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkMemoryStore measures Store.Take; compare with BenchmarkXTimeRate.
func BenchmarkMemoryStore(b *testing.B) {
	ctx := context.Background()
	newStore := func(b *testing.B, maxKeys int) *memorystore.Store {
		s, err := memorystore.New(memorystore.Config{MaxKeys: maxKeys})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}
	b.Run("single_key", func(b *testing.B) {
		s := newStore(b, 0)
		for b.Loop() {
			if _, err := s.Take(ctx, "principal:0", benchLimit, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("many_keys", func(b *testing.B) {
		s, keys := newStore(b, 0), benchKeyNames(benchKeys)
		i := 0
		for b.Loop() {
			if _, err := s.Take(ctx, keys[i%benchKeys], benchLimit, 1); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		s, keys := newStore(b, 0), benchKeyNames(benchKeys)
		var worker atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(worker.Add(1)) * 7919
			for pb.Next() {
				if _, err := s.Take(ctx, keys[i%benchKeys], benchLimit, 1); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
	b.Run("bytes_per_key", func(b *testing.B) {
		keys := benchKeyNames(memoryKeys)
		var perKey float64
		for b.Loop() {
			perKey = heapPerKey(func() any {
				s := newStore(b, 2*memoryKeys) // room for uneven shards: no eviction
				for _, k := range keys {
					if _, err := s.Take(ctx, k, benchLimit, 1); err != nil {
						b.Fatal(err)
					}
				}
				if s.Len() != memoryKeys {
					b.Fatalf("Len %d, want %d", s.Len(), memoryKeys)
				}
				return s
			})
		}
		b.ReportMetric(perKey, "bytes/key")
	})
}

// BenchmarkFullStore measures Take of a key the store does not hold, in a
// store whose every shard is full (MaxKeys 100,000: 64 shards of 1,562):
//
//   - whole: every held budget is whole again (benchLimit refills a point
//     in a microsecond), so each new key takes the place of the earliest
//     whole one;
//   - refused: no held budget is whole (a point an hour), so each new key
//     is refused with ErrFull: the cost of a flood of fresh identities.
//
// Compare with BenchmarkMemoryStore/many_keys, a Take of a held key.
func BenchmarkFullStore(b *testing.B) {
	ctx := context.Background()
	hourly := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1000, Rate: 1, Period: time.Hour}
	const full = memoryKeys / memorystore.DefaultShards * memorystore.DefaultShards
	// fill stores keys under l until every shard is full.
	fill := func(b *testing.B, l limiter.Limit) *memorystore.Store {
		s, err := memorystore.New(memorystore.Config{MaxKeys: memoryKeys})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		for i := 0; s.Len() < full; i++ {
			_, err := s.Take(ctx, "held:"+strconv.Itoa(i), l, 1)
			if err != nil && !errors.Is(err, memorystore.ErrFull) {
				b.Fatal(err)
			}
		}
		return s
	}
	// Twice MaxKeys names: the earliest whole key goes first, so a name
	// comes round again after its key has been replaced.
	fresh := benchKeyNames(2 * memoryKeys)
	b.Run("whole", func(b *testing.B) {
		s := fill(b, benchLimit)
		i := 0
		for b.Loop() {
			d, err := s.Take(ctx, fresh[i%len(fresh)], benchLimit, 1)
			if err != nil || !d.Allowed {
				b.Fatalf("%+v, %v", d, err)
			}
			i++
		}
		if s.Len() != full {
			b.Fatalf("Len %d, want %d", s.Len(), full)
		}
	})
	b.Run("refused", func(b *testing.B) {
		s := fill(b, hourly)
		i := 0
		for b.Loop() {
			if _, err := s.Take(ctx, fresh[i%len(fresh)], hourly, 1); !errors.Is(err, memorystore.ErrFull) {
				b.Fatalf("Take: %v, want ErrFull", err)
			}
			i++
		}
	})
}

// xtimeKeyed is the usual way to key golang.org/x/time/rate: one Limiter per
// key in a map behind a mutex.
type xtimeKeyed struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func (x *xtimeKeyed) allow(key string) bool {
	x.mu.Lock()
	l, ok := x.m[key]
	if !ok {
		l = rate.NewLimiter(rate.Limit(benchLimit.Rate), int(benchLimit.Burst))
		x.m[key] = l
	}
	x.mu.Unlock()
	return l.Allow()
}

// BenchmarkXTimeRate is golang.org/x/time/rate on BenchmarkMemoryStore's
// workload.
func BenchmarkXTimeRate(b *testing.B) {
	b.Run("single_key", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(benchLimit.Rate), int(benchLimit.Burst))
		for b.Loop() {
			l.Allow()
		}
	})
	b.Run("many_keys", func(b *testing.B) {
		x, keys := &xtimeKeyed{m: map[string]*rate.Limiter{}}, benchKeyNames(benchKeys)
		i := 0
		for b.Loop() {
			x.allow(keys[i%benchKeys])
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		x, keys := &xtimeKeyed{m: map[string]*rate.Limiter{}}, benchKeyNames(benchKeys)
		var worker atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(worker.Add(1)) * 7919
			for pb.Next() {
				x.allow(keys[i%benchKeys])
				i++
			}
		})
	})
	b.Run("bytes_per_key", func(b *testing.B) {
		keys := benchKeyNames(memoryKeys)
		var perKey float64
		for b.Loop() {
			perKey = heapPerKey(func() any {
				x := &xtimeKeyed{m: map[string]*rate.Limiter{}}
				for _, k := range keys {
					x.allow(k)
				}
				return x
			})
		}
		b.ReportMetric(perKey, "bytes/key")
	})
}

// heapPerKey is the live heap that build adds, divided by memoryKeys. The
// key strings exist before and after, so only the limiter's own copies and
// structures count.
func heapPerKey(build func() any) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return float64(after.HeapAlloc-before.HeapAlloc) / memoryKeys
}
