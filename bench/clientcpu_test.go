package main

import (
	"context"
	"os/exec"
	"testing"

	"github.com/go-redis/redis_rate/v10"

	"github.com/costguard/costguard/internal/testenv"
)

// BenchmarkClientCPU is one caller's all-admitted decisions against a
// throwaway redis-server, each limiter on a client of its own, as in the
// 1-caller Redis workload: costguard's production stack and redis_rate.
// Run under valgrind's callgrind it counts the client's instructions per
// decision (see BENCHMARKS.md, "Client CPU per decision"); as a plain
// benchmark it gives the round trip's wall time.
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
		b.Run(tc.name, func(b *testing.B) {
			decide, done := tc.make()
			defer done()
			names := keyNames("cpu:", keys)
			for _, k := range names[:10] { // the connection and the script
				if _, err := decide(ctx, k); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if ok, err := decide(ctx, names[i%keys]); err != nil || !ok {
					b.Fatalf("decision %d: %v, %v", i, ok, err)
				}
				i++
			}
		})
	}
}
