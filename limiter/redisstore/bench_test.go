package redisstore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
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
	// The default prefix: keys like costguard:{user:12345}:token_bucket, as
	// in production (the server is the benchmark's own).
	s, err := redisstore.New(rdb, redisstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
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
		// MEMORY USAGE: what Redis attributes to the key itself (its name,
		// value and main-dictionary entry), a mean over every 100th key.
		var usage, sampled int64
		for i := int64(0); i < bytesPerKeyKeys; i += 100 {
			n, err := rdb.MemoryUsage(ctx, s.Key("user:"+strconv.FormatInt(i, 10), limiter.TokenBucket)).Result()
			if err != nil {
				b.Fatal(err)
			}
			usage += n
			sampled++
		}
		b.ReportMetric(float64(usage)/float64(sampled), "usage-bytes/key")
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

// BenchmarkCoalescing measures decisions per second at 1, 8 and 64
// concurrent callers, coalescing on (the default, and with MaxInFlight 1,
// 2 and 4) and off, against the shared standalone
// server and Cluster: token buckets over 10,000 keys, all admitted, time
// from Redis TIME. Besides ns/op it reports decisions/s, Redis script calls
// per decision (INFO commandstats deltas, summed over the masters) and
// round trips per decision (counted by a hook on every node's client: one
// command or one pipeline sent to one node).
func BenchmarkCoalescing(b *testing.B) {
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1 << 30, Rate: 1 << 30, Period: time.Second} // never rejects
	type target struct {
		name    string
		connect func(b *testing.B, hook redis.Hook) (redis.UniversalClient, []*redis.Client)
	}
	targets := []target{
		{"standalone", func(b *testing.B, hook redis.Hook) (redis.UniversalClient, []*redis.Client) {
			srv := redistest.SharedServer(b)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 128})
			b.Cleanup(func() { _ = rdb.Close() })
			rdb.AddHook(hook)
			stats := redis.NewClient(&redis.Options{Addr: srv.Addr()}) // not hooked
			b.Cleanup(func() { _ = stats.Close() })
			return rdb, []*redis.Client{stats}
		}},
		{"cluster", func(b *testing.B, hook redis.Hook) (redis.UniversalClient, []*redis.Client) {
			cl := redistest.SharedCluster(b)
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 128})
			b.Cleanup(func() { _ = rdb.Close() })
			rdb.OnNewNode(func(node *redis.Client) { node.AddHook(hook) })
			var masters []*redis.Client
			for _, addr := range cl.Addrs() {
				m := redis.NewClient(&redis.Options{Addr: addr})
				b.Cleanup(func() { _ = m.Close() })
				masters = append(masters, m)
			}
			return rdb, masters
		}},
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			var trips roundTrips
			rdb, masters := tg.connect(b, &trips)
			for _, mode := range []struct {
				name string
				cfg  redisstore.Config
			}{
				{"coalesced", redisstore.Config{}},
				{"coalesced_inflight1", redisstore.Config{MaxInFlight: 1}},
				{"coalesced_inflight2", redisstore.Config{MaxInFlight: 2}},
				{"coalesced_inflight4", redisstore.Config{MaxInFlight: 4}},
				{"uncoalesced", redisstore.Config{DisableCoalescing: true}},
			} {
				cfg := mode.cfg
				cfg.Prefix = uniquePrefix(b)
				s, err := redisstore.New(rdb, cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close() })
				for _, callers := range []int{1, 8, 64} {
					b.Run(fmt.Sprintf("%s/callers_%d", mode.name, callers), func(b *testing.B) {
						benchCallers(b, s, l, callers, &trips, masters)
					})
				}
			}
		})
	}
}

// benchCallers runs b.N Takes from callers goroutines over 10,000 keys.
func benchCallers(b *testing.B, s *redisstore.Store, l limiter.Limit, callers int, trips *roundTrips, masters []*redis.Client) {
	ctx := context.Background()
	// Warm up: connections for every caller, the script cached everywhere.
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			if _, err := s.Take(ctx, "warm:"+strconv.Itoa(i), l, 0); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	scripts0, usec0 := scriptStats(b, ctx, masters)
	trips0 := trips.n.Load()
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if _, err := s.Take(ctx, "bench:"+strconv.FormatInt(i%10_000, 10), l, 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "decisions/s")
	scripts, usec := scriptStats(b, ctx, masters)
	b.ReportMetric(float64(scripts-scripts0)/n, "scripts/decision")
	b.ReportMetric(float64(usec-usec0)/n, "redis-µs/decision")
	b.ReportMetric(float64(trips.n.Load()-trips0)/n, "roundtrips/decision")
}

// roundTrips is a go-redis hook counting commands and pipelines sent.
type roundTrips struct{ n atomic.Int64 }

var _ redis.Hook = (*roundTrips)(nil)

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// scriptCalls sums EVALSHA and EVAL calls over the given servers, from INFO
// commandstats.
func scriptCalls(tb testing.TB, ctx context.Context, servers []*redis.Client) int64 {
	tb.Helper()
	calls, _ := scriptStats(tb, ctx, servers)
	return calls
}

// scriptStats sums EVALSHA and EVAL calls, and the µs Redis spent in them,
// over the given servers, from INFO commandstats.
func scriptStats(tb testing.TB, ctx context.Context, servers []*redis.Client) (calls, usec int64) {
	tb.Helper()
	for _, srv := range servers {
		info, err := srv.Info(ctx, "commandstats").Result()
		if err != nil {
			tb.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			_, stats, ok := strings.Cut(line, "cmdstat_evalsha:")
			if !ok {
				_, stats, ok = strings.Cut(line, "cmdstat_eval:")
			}
			if !ok {
				continue
			}
			for _, field := range strings.Split(stats, ",") {
				name, v, _ := strings.Cut(field, "=")
				if name != "calls" && name != "usec" {
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					tb.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				if name == "calls" {
					calls += n
				} else {
					usec += n
				}
			}
		}
	}
	return calls, usec
}

// instantRedis answers every script call at once, without a network: each
// key admitted. It isolates the client's own cost per decision.
type instantRedis struct{ redis.Scripter }

func (instantRedis) Process(_ context.Context, cmd redis.Cmder) error {
	keys := cmd.Args()[2].(int)
	reply := admittedRecord
	if keys > 1 {
		reply = strings.Repeat(admittedRecord, keys)
	}
	cmd.(interface{ SetVal(any) }).SetVal(reply)
	return nil
}

// admittedRecord is one key's record of a script reply: status 0,
// allowed 1, remaining 1, retry 0, reset 1, delay 0 (see batch.lua).
var admittedRecord = func() string {
	var b []byte
	for _, v := range []uint64{0, 1, 1, 0, 1, 0} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return string(b)
}()

// BenchmarkClientOverhead is one caller's Take against instantRedis: the
// client's own cost per decision, without the network. "coalesced" is the
// default store with a ctx that never ends: the call runs inline, in the
// caller's goroutine. "coalesced_handoff" is the same store with a ctx
// that can be cancelled: the call goes to the sender goroutine and back.
// "uncoalesced" is DisableCoalescing.
func BenchmarkClientOverhead(b *testing.B) {
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1 << 30, Rate: 1 << 30, Period: time.Second}
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, mode := range []struct {
		name string
		cfg  redisstore.Config
		ctx  context.Context
	}{
		{"coalesced", redisstore.Config{}, context.Background()},
		{"coalesced_handoff", redisstore.Config{}, cancellable},
		{"uncoalesced", redisstore.Config{DisableCoalescing: true}, context.Background()},
	} {
		b.Run(mode.name, func(b *testing.B) {
			s, err := redisstore.New(instantRedis{}, mode.cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Take(mode.ctx, "user:42", l, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAcquireRelease is one concurrency slot taken and given back
// (Acquire, then Release: two script calls, two round trips) on a private
// standalone server and on the shared 3-master Cluster, against the floor
// of the same workload: two PINGs, two round trips that do nothing.
// "take_refund" is the budget store's own pair, Take then Refund of one
// token, uncoalesced, for comparison. parallel runs 8 goroutines per
// GOMAXPROCS, each on its own identity.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	srv := redistest.StartServer(b)
	targets := []struct {
		name string
		rdb  func(b *testing.B) redis.UniversalClient
	}{
		{"standalone", func(b *testing.B) redis.UniversalClient { return srv.Client(b) }},
		{"cluster", func(b *testing.B) redis.UniversalClient { return redistest.SharedCluster(b).Client(b) }},
	}
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1 << 30, Rate: 1 << 30, Period: time.Second}
	var next atomic.Int64
	for _, target := range targets {
		workloads := []struct {
			name string
			op   func(b *testing.B, rdb redis.UniversalClient, s *redisstore.Store, key string)
		}{
			{"acquire_release", func(b *testing.B, _ redis.UniversalClient, s *redisstore.Store, key string) {
				d, err := s.Acquire(ctx, key, 1, time.Minute)
				if err != nil || !d.Allowed {
					b.Fatalf("Acquire: %+v, %v", d, err)
				}
				if held, err := s.Release(ctx, d.Lease); err != nil || !held {
					b.Fatalf("Release: %v, %v", held, err)
				}
			}},
			{"take_refund", func(b *testing.B, _ redis.UniversalClient, s *redisstore.Store, key string) {
				if _, err := s.Take(ctx, key, l, 1); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Refund(ctx, key, l, 1); err != nil {
					b.Fatal(err)
				}
			}},
			{"ping_ping", func(b *testing.B, rdb redis.UniversalClient, _ *redisstore.Store, _ string) {
				for range 2 {
					if err := rdb.Ping(ctx).Err(); err != nil {
						b.Fatal(err)
					}
				}
			}},
		}
		for _, w := range workloads {
			b.Run(target.name+"/"+w.name+"/serial", func(b *testing.B) {
				rdb := target.rdb(b)
				s := newStoreWith(b, rdb, nil, redisstore.Config{DisableCoalescing: true})
				for b.Loop() {
					w.op(b, rdb, s, "user:42")
				}
			})
			b.Run(target.name+"/"+w.name+"/parallel", func(b *testing.B) {
				rdb := target.rdb(b)
				s := newStoreWith(b, rdb, nil, redisstore.Config{DisableCoalescing: true})
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					key := "user:" + strconv.FormatInt(next.Add(1), 10)
					for pb.Next() {
						w.op(b, rdb, s, key)
					}
				})
			})
		}
	}
}
