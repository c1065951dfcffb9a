package redisoverride_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/override"
	"github.com/costguard/costguard/override/overridetest"
	"github.com/costguard/costguard/override/redisoverride"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var prefixes atomic.Int64

// newStore returns a store under a prefix of its own, so that the cases
// share one Redis.
func newStore(t *testing.T, c redis.UniversalClient, maxOverrides int) override.Store {
	s, err := redisoverride.New(redisoverride.Config{
		Client: c, MaxOverrides: maxOverrides,
		Prefix: fmt.Sprintf("test%d", prefixes.Add(1)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// lose deletes the store's keys: what FLUSHALL or a restart without
// persistence does to it, on a server other tests share.
func lose(c redis.UniversalClient) overridetest.Option {
	return overridetest.WithDataLoss(func(t *testing.T, s override.Store) {
		if err := c.Del(context.Background(), s.(*redisoverride.Store).Keys()...).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSuiteStandalone(t *testing.T) {
	c := redistest.SharedServer(t).Client(t)
	overridetest.Run(t, func(t *testing.T, n int) override.Store { return newStore(t, c, n) }, lose(c))
}

// On a Cluster the three keys share one hash tag: every script runs on
// one node (a CROSSSLOT error would fail the suite).
func TestSuiteCluster(t *testing.T) {
	c := redistest.SharedCluster(t).Client(t)
	overridetest.Run(t, func(t *testing.T, n int) override.Store { return newStore(t, c, n) }, lose(c))
}

func TestKeysShareASlot(t *testing.T) {
	s, err := redisoverride.New(redisoverride.Config{Client: redis.NewClient(&redis.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"costguard:{overrides}:all", "costguard:{overrides}:expiry", "costguard:{overrides}:version"}
	if got := s.Keys(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("keys %v, want %v", got, want)
	}
}

func TestConfig(t *testing.T) {
	if _, err := redisoverride.New(redisoverride.Config{}); err == nil {
		t.Error("no client: accepted")
	}
	if _, err := redisoverride.New(redisoverride.Config{Client: redis.NewClient(&redis.Options{}), MaxOverrides: -1}); err == nil {
		t.Error("a negative cap: accepted")
	}
}
