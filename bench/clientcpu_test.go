package main

import (
	"context"
	"os/exec"
	"sync/atomic"
	"testing"

	"github.com/go-redis/redis_rate/v10"

	"github.com/costguard/costguard/internal/testenv"
)

// BenchmarkClientCPU is all-admitted decisions against a throwaway
// redis-server, each limiter on a client of its own, as in the Redis
// workloads: costguard's production stack and redis_rate, from one caller
// (callers_1) and from 8 goroutines per GOMAXPROCS (callers_8 with
// GOMAXPROCS=1). Run under valgrind's callgrind it counts the client's
// instructions per decision (see BENCHMARKS.md, "Client CPU per
// decision"); as a plain benchmark it gives the wall time.
func BenchmarkClientCPU(b *testing.B) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Missing(b, "redis-server missing: a Redis benchmark")
	}
	ctx := context.Background()
	srv, err := startRedis(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	const keys = 1000
	for _, tc := range []struct {
		name string
		make func() (decideFunc, func())
	}{
		{"costguard", func() (decideFunc, func()) {
			rdb := newClient(srv.addr)
			s, err := newOursRedis(rdb, "cpu")
			if err != nil {
				b.Fatal(err)
			}
			return storeDecide(s, admittedLimit), func() { rdb.Close() }
		}},
		{"redis_rate", func() (decideFunc, func()) {
			rdb := newClient(srv.addr)
			return redisRateDecide(redis_rate.NewLimiter(rdb), admittedLimit), func() { rdb.Close() }
		}},
	} {
		decide, done := tc.make()
		defer done()
		names := keyNames("cpu:", keys)
		for _, k := range names[:10] { // the connection and the script
			if _, err := decide(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(tc.name+"/callers_1", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if ok, err := decide(ctx, names[i%keys]); err != nil || !ok {
					b.Fatalf("decision %d: %v, %v", i, ok, err)
				}
				i++
			}
		})
		b.Run(tc.name+"/callers_8", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1)) * 7919 // spread the callers over the keys
				for pb.Next() {
					if ok, err := decide(ctx, names[i%keys]); err != nil || !ok {
						b.Errorf("decision: %v, %v", ok, err)
						return
					}
					i++
				}
			})
		})
	}
}
