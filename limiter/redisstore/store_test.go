package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// testMargin keeps keys alive in real time while a test's fake clock stands
// still; expiry itself is tested with real time.
const testMargin = time.Hour

// uniquePrefix returns a key prefix no other test or process uses, so tests
// can share one Redis.
func uniquePrefix(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "cgtest-" + hex.EncodeToString(b[:])
}

// newStore builds a store with coalescing on (the default), closed when t
// ends.
func newStore(t testing.TB, rdb redis.Scripter, clock limiter.Clock) *redisstore.Store {
	t.Helper()
	return newStoreWith(t, rdb, clock, redisstore.Config{})
}

func newStoreWith(t testing.TB, rdb redis.Scripter, clock limiter.Clock, cfg redisstore.Config) *redisstore.Store {
	t.Helper()
	cfg.Prefix, cfg.Clock = uniquePrefix(t), clock
	if clock != nil {
		cfg.ExpiryMargin = testMargin
	}
	s, err := redisstore.New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// modes are the store configurations the suite runs under.
var modes = []struct {
	name string
	cfg  redisstore.Config
}{
	{"coalesced", redisstore.Config{}},
	{"uncoalesced", redisstore.Config{DisableCoalescing: true}},
}

// targets are the Redis deployments every Redis test runs against.
var targets = []struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
	addrs  func(t *testing.T) []string // every master
}{
	{"standalone",
		func(t *testing.T) redis.UniversalClient { return redistest.SharedServer(t).Client(t) },
		func(t *testing.T) []string { return []string{redistest.SharedServer(t).Addr()} }},
	{"cluster",
		func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t).Client(t) },
		func(t *testing.T) []string { return redistest.SharedCluster(t).Addrs() }},
}

// masterClients returns a client for each address, closed when t ends.
func masterClients(t *testing.T, addrs []string) []*redis.Client {
	t.Helper()
	var cs []*redis.Client
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// TestSuite runs in parallel with the other suites and its four
// deployments in parallel with each other: every case has its own store,
// key prefix and fake clock on the shared servers.
func TestSuite(t *testing.T) {
	t.Parallel()
	for _, target := range targets {
		for _, mode := range modes {
			t.Run(target.name+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				rdb := target.client(t)
				limitertest.Run(t, func(t *testing.T, clock limiter.Clock) limiter.Store {
					return newStoreWith(t, rdb, clock, mode.cfg)
				})
			})
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	tests := []struct {
		name   string
		client redis.Scripter
		cfg    redisstore.Config
	}{
		{"nil client", nil, redisstore.Config{}},
		{"open brace in prefix", rdb, redisstore.Config{Prefix: "a{b"}},
		{"close brace in prefix", rdb, redisstore.Config{Prefix: "a}b"}},
		{"negative margin", rdb, redisstore.Config{ExpiryMargin: -time.Second}},
		{"negative batch size", rdb, redisstore.Config{MaxBatchSize: -1}},
		{"batch size too large", rdb, redisstore.Config{MaxBatchSize: redisstore.MaxMaxBatchSize + 1}},
		{"negative batch wait", rdb, redisstore.Config{MaxBatchWait: -time.Microsecond}},
		{"batch wait too long", rdb, redisstore.Config{MaxBatchWait: redisstore.MaxMaxBatchWait + time.Microsecond}},
		{"negative in flight", rdb, redisstore.Config{MaxInFlight: -1}},
		{"too many in flight", rdb, redisstore.Config{MaxInFlight: redisstore.MaxMaxInFlight + 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := redisstore.New(tt.client, tt.cfg)
			if !errors.Is(err, redisstore.ErrInvalidConfig) || s != nil {
				t.Fatalf("New: %v, %v; want ErrInvalidConfig", s, err)
			}
			if !strings.HasPrefix(err.Error(), "redisstore: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// docs/redis.md documents this layout and default prefix.
	if got, want := s.Key("user42", limiter.TokenBucket), "costguard:{user42}:token_bucket"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	if redisstore.DefaultExpiryMargin != time.Second {
		t.Errorf("DefaultExpiryMargin = %v; docs/redis.md says 1s", redisstore.DefaultExpiryMargin)
	}
	if redisstore.MaxRawIdentity != 128 {
		t.Errorf("MaxRawIdentity = %d; docs/redis.md says 128", redisstore.MaxRawIdentity)
	}
	// docs/redis.md documents the coalescing defaults and bounds.
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"DefaultMaxBatchSize", redisstore.DefaultMaxBatchSize, 64},
		{"MaxMaxBatchSize", redisstore.MaxMaxBatchSize, 1024},
		{"MaxScriptKeys", redisstore.MaxScriptKeys, 64},
		{"MaxMaxBatchWait", redisstore.MaxMaxBatchWait, 10 * time.Millisecond},
		{"DefaultMaxInFlight", redisstore.DefaultMaxInFlight, 1},
		{"DefaultMultiNodeMaxInFlight", redisstore.DefaultMultiNodeMaxInFlight, 4},
		{"MaxMaxInFlight", redisstore.MaxMaxInFlight, 64},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v; docs/redis.md says %v", c.name, c.got, c.want)
		}
	}
}

// TestMaxInFlightDefault: one round trip in flight for a client of one
// server; several for a Cluster or Ring, whose batches span nodes; an
// explicit value is kept whatever the client.
func TestMaxInFlightDefault(t *testing.T) {
	// No client below connects: New sends nothing.
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	for _, c := range []redis.UniversalClient{single, cluster, ring} {
		t.Cleanup(func() { _ = c.Close() })
	}
	for _, c := range []struct {
		name   string
		client redis.Scripter
		cfg    redisstore.Config
		want   int
	}{
		{"client", single, redisstore.Config{}, redisstore.DefaultMaxInFlight},
		{"cluster", cluster, redisstore.Config{}, redisstore.DefaultMultiNodeMaxInFlight},
		{"ring", ring, redisstore.Config{}, redisstore.DefaultMultiNodeMaxInFlight},
		{"cluster, explicit", cluster, redisstore.Config{MaxInFlight: 1}, 1},
		{"client, explicit", single, redisstore.Config{MaxInFlight: 3}, 3},
		{"uncoalesced", cluster, redisstore.Config{DisableCoalescing: true}, 0},
	} {
		s, err := redisstore.New(c.client, c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := redisstore.MaxInFlight(s); got != c.want {
			t.Errorf("%s: MaxInFlight %d, want %d", c.name, got, c.want)
		}
		_ = s.Close()
	}
}

// TestValidationBeforeRedis: malformed calls fail without a round trip, so
// they fail the same way with Redis down.
func TestValidationBeforeRedis(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 2, Rate: 1, Period: time.Second}
	if _, err := s.Take(ctx, "k", limiter.Limit{}, 1); !errors.Is(err, limiter.ErrInvalidLimit) {
		t.Errorf("Take(zero limit): %v, want ErrInvalidLimit", err)
	}
	if _, err := s.Take(ctx, "k", ok, -1); !errors.Is(err, limiter.ErrInvalidCost) {
		t.Errorf("Take(-1): %v, want ErrInvalidCost", err)
	}
	shaping := ok
	shaping.Algorithm = limiter.LeakyBucketShaping
	if _, err := s.Refund(ctx, "k", shaping, 1); !errors.Is(err, limiter.ErrRefundUnsupported) {
		t.Errorf("Refund(shaping): %v, want ErrRefundUnsupported", err)
	}
	// A valid call needs Redis: it fails closed with a wrapped error.
	d, err := s.Take(ctx, "k", ok, 1)
	if err == nil || d.Allowed || !strings.HasPrefix(err.Error(), "redisstore: token_bucket take: ") {
		t.Errorf("Take with Redis unreachable: %+v, %v; want a redisstore error and no admission", d, err)
	}
}
