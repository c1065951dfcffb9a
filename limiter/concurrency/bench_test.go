package concurrency_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"golang.org/x/sync/semaphore"

	"github.com/costguard/costguard/limiter/concurrency"
)

// BenchmarkAcquireRelease measures one Acquire and one Release of Memory,
// on the system clock, against the named peer on the same workload:
// golang.org/x/sync/semaphore's TryAcquire(1) and Release(1) on one
// Weighted. The peer knows no keys, leases or expiry; the ratio is what
// those cost.
//
//   - serial: one goroutine, one key of limit 1. Its count drops to 0 on
//     every Release, so every Acquire stores the key afresh.
//   - serial_held: one goroutine, one key of limit 64 that already holds 8
//     leases: the key stays, and each call scans those leases.
//   - parallel: GOMAXPROCS goroutines on one key of limit MaxLimit (never
//     refused), all on one shard lock, as the peer's callers share its
//     mutex.
//   - parallel_keys: GOMAXPROCS goroutines, each on its own key (many
//     principals); the peer has one Weighted per goroutine.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	ttl := concurrency.DefaultTTL
	newMemory := func(b *testing.B) *concurrency.Memory {
		m, err := concurrency.NewMemory(concurrency.MemoryConfig{})
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	cycle := func(b *testing.B, m *concurrency.Memory, key string, limit int64) {
		d, err := m.Acquire(ctx, key, limit, ttl)
		if err != nil || !d.Allowed {
			b.Fatalf("Acquire: %+v, %v", d, err)
		}
		if held, err := m.Release(ctx, d.Lease); err != nil || !held {
			b.Fatalf("Release: %v, %v", held, err)
		}
	}
	b.Run("memory/serial", func(b *testing.B) {
		b.ReportAllocs()
		m := newMemory(b)
		for b.Loop() {
			cycle(b, m, "principal:0", 1)
		}
	})
	b.Run("semaphore/serial", func(b *testing.B) {
		b.ReportAllocs()
		w := semaphore.NewWeighted(1)
		for b.Loop() {
			if !w.TryAcquire(1) {
				b.Fatal("TryAcquire refused")
			}
			w.Release(1)
		}
	})
	b.Run("memory/serial_held", func(b *testing.B) {
		b.ReportAllocs()
		m := newMemory(b)
		for range 8 {
			if _, err := m.Acquire(ctx, "principal:0", 64, ttl); err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			cycle(b, m, "principal:0", 64)
		}
	})
	b.Run("memory/parallel", func(b *testing.B) {
		b.ReportAllocs()
		m := newMemory(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				cycle(b, m, "principal:0", concurrency.MaxLimit)
			}
		})
	})
	b.Run("semaphore/parallel", func(b *testing.B) {
		b.ReportAllocs()
		w := semaphore.NewWeighted(concurrency.MaxLimit)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !w.TryAcquire(1) {
					b.Error("TryAcquire refused")
					return
				}
				w.Release(1)
			}
		})
	})
	var next atomic.Int64
	b.Run("memory/parallel_keys", func(b *testing.B) {
		b.ReportAllocs()
		m := newMemory(b)
		b.RunParallel(func(pb *testing.PB) {
			key := "principal:" + strconv.FormatInt(next.Add(1), 10)
			for pb.Next() {
				cycle(b, m, key, 1)
			}
		})
	})
	b.Run("semaphore/parallel_keys", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			w := semaphore.NewWeighted(1)
			for pb.Next() {
				if !w.TryAcquire(1) {
					b.Error("TryAcquire refused")
					return
				}
				w.Release(1)
			}
		})
	})
}
