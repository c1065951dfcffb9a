package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
)

// everyLimit has one small limit per algorithm.
func everyLimit() []limiter.Limit {
	var ls []limiter.Limit
	for a := limiter.TokenBucket; a <= limiter.SlidingCounter; a++ {
		ls = append(ls, limiter.Limit{Algorithm: a, Burst: 3, Rate: 3, Period: time.Minute})
	}
	return ls
}

// TestClusterSpreadsIdentities: many identities, every algorithm, through a
// Cluster client: no CROSSSLOT or MOVED error reaches the caller, and the
// keys land on all three masters.
func TestClusterSpreadsIdentities(t *testing.T) {
	rdb := redistest.SharedCluster(t).Client(t).(*redis.ClusterClient)
	s := newStore(t, rdb, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const identities = 300
	for i := range identities {
		for _, l := range everyLimit() {
			if d, err := s.Take(ctx, fmt.Sprintf("user:%d", i), l, 1); err != nil || !d.Allowed {
				t.Fatalf("identity %d %s: %+v, %v", i, l.Algorithm, d, err)
			}
		}
	}

	prefix := strings.TrimSuffix(s.Key("", limiter.TokenBucket), ":{%}:token_bucket")
	var mu sync.Mutex
	perMaster := map[string]int{}
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		n := 0
		iter := node.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			n++
		}
		mu.Lock()
		perMaster[node.Options().Addr] = n
		mu.Unlock()
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for addr, n := range perMaster {
		if n == 0 {
			t.Errorf("master %s holds none of the keys: %v", addr, perMaster)
		}
		total += n
	}
	if want := identities * len(everyLimit()); total != want || len(perMaster) != redistest.ClusterSize {
		t.Errorf("keys per master %v: total %d over %d masters, want %d over %d", perMaster, total, len(perMaster), want, redistest.ClusterSize)
	}
	t.Logf("keys per master: %v", perMaster)
}

// TestTrickyIdentities: identities that could break a naive hash tag each
// get their own budget, and all of one identity's keys share one slot.
func TestTrickyIdentities(t *testing.T) {
	ids := []string{"", "a", "a}b", "a{b", "{x}", "x", "{", "}", "{}", "%", "%7B", "%7D", "%25",
		"a:b", "\x00", "\x00\x01\xfe\xff", strings.Repeat("k", 1024), strings.Repeat("k", 1024) + "!"}
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1, Rate: 1, Period: time.Hour}
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			rdb := target.client(t)
			s := newStore(t, rdb, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, id := range ids {
				if d, err := s.Take(ctx, id, l, 1); err != nil || !d.Allowed {
					t.Fatalf("first Take for %q: %+v, %v; another identity spent its budget", id, d, err)
				}
			}
			for _, id := range ids {
				if d, err := s.Take(ctx, id, l, 1); err != nil || d.Allowed {
					t.Fatalf("second Take for %q: %+v, %v; want a rejection", id, d, err)
				}
			}
			if target.name != "cluster" {
				return
			}
			for _, id := range ids {
				var slots []int64
				for a := limiter.TokenBucket; a <= limiter.SlidingCounter; a++ {
					slot, err := rdb.ClusterKeySlot(ctx, s.Key(id, a)).Result()
					if err != nil {
						t.Fatal(err)
					}
					slots = append(slots, slot)
				}
				for _, slot := range slots[1:] {
					if slot != slots[0] {
						t.Fatalf("keys of %q span slots %v; want one", id, slots)
					}
				}
			}
		})
	}
}

// TestClusterSlotMigration moves the slot holding a bucket to another
// master behind the client's back: the client's next call meets MOVED,
// which go-redis follows; the caller sees only the migrated bucket's
// decision.
func TestClusterSlotMigration(t *testing.T) {
	cl := redistest.SharedCluster(t)
	rdb := cl.Client(t).(*redis.ClusterClient)
	s := newStore(t, rdb, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	identity := uniquePrefix(t) // a slot no other test writes to
	key := s.Key(identity, limiter.TokenBucket)
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 3, Rate: 1, Period: time.Hour}

	if d, err := s.Take(ctx, identity, l, 2); err != nil || d.Remaining != 1 {
		t.Fatalf("Take before migration: %+v, %v", d, err)
	}
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	src, dst := ownerAndOther(t, ctx, cl, slot)
	migrateSlot(t, ctx, cl, slot, src, dst)

	// The bucket moved with its slot: 1 token left, so 2 is refused.
	d, err := s.Take(ctx, identity, l, 2)
	if err != nil || d.Allowed || d.Remaining != 1 {
		t.Fatalf("Take after migration: %+v, %v; want a rejection with 1 remaining", d, err)
	}
	if n, err := dst.Exists(ctx, key).Result(); err != nil || n != 1 {
		t.Fatalf("key on the new master: %d, %v", n, err)
	}
	// What the client met on the old master, and did not pass on.
	if err := src.Exists(ctx, key).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
		t.Fatalf("old master: %v; want MOVED", err)
	}
}

// ownerAndOther returns direct clients to the master owning slot and to
// another master.
func ownerAndOther(t *testing.T, ctx context.Context, cl *redistest.Cluster, slot int64) (src, dst *redis.Client) {
	t.Helper()
	for _, addr := range cl.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		if ownsSlot(t, ctx, c, slot) {
			src = c
		} else if dst == nil {
			dst = c
		}
	}
	if src == nil || dst == nil {
		t.Fatalf("slot %d: owner %v, other %v", slot, src, dst)
	}
	return src, dst
}

func ownsSlot(t *testing.T, ctx context.Context, c *redis.Client, slot int64) bool {
	t.Helper()
	ranges, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			return r.Nodes[0].Addr == c.Options().Addr
		}
	}
	t.Fatalf("slot %d unassigned", slot)
	return false
}

// migrateSlot moves slot from src to dst the way redis-cli --cluster
// reshard does, then tells every master the new owner, destination first
// (as the Cluster specification asks).
func migrateSlot(t *testing.T, ctx context.Context, cl *redistest.Cluster, slot int64, src, dst *redis.Client) {
	t.Helper()
	srcID, err := src.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dst.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	host, port, _ := strings.Cut(dst.Options().Addr, ":")
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
		must(err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(src.Do(ctx, args...).Err())
	}
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	for _, addr := range cl.Addrs() {
		if addr == src.Options().Addr || addr == dst.Options().Addr {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: addr})
		must(c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
		_ = c.Close()
	}
}
