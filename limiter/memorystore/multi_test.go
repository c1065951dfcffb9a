package memorystore_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
)

// TestTakeAllFullStoresNothing: a TakeAll that must store a new budget in
// a full shard fails with ErrFull, having stored and debited nothing, even
// when a budget before it in the call found room (it is taken out again).
func TestTakeAllFullStoresNothing(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	s, err := memorystore.New(memorystore.Config{Clock: clock, MaxKeys: 2, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	slow := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 5, Rate: 1, Period: time.Hour}
	ds := make([]limiter.Decision, 3)
	// Two named budgets fill the shard's named table.
	if err := s.TakeAll(ctx, []limiter.Request{{Key: "k", Name: "a", Limit: slow, Cost: 1}, {Key: "k", Name: "b", Limit: slow, Cost: 1}}, ds[:2]); err != nil {
		t.Fatal(err)
	}
	reqs := []limiter.Request{
		{Key: "k", Limit: slow, Cost: 1},            // new plain key: room
		{Key: "k", Name: "a", Limit: slow, Cost: 1}, // held
		{Key: "k", Name: "c", Limit: slow, Cost: 1}, // new named: no room
	}
	if err := s.TakeAll(ctx, reqs, ds); !errors.Is(err, memorystore.ErrFull) {
		t.Fatalf("TakeAll: %v; want ErrFull", err)
	}
	for i, d := range ds {
		if d != (limiter.Decision{}) {
			t.Errorf("decision %d: %+v; want zero with ErrFull", i, d)
		}
	}
	if s.Len() != 2 {
		t.Errorf("Len %d after a failed TakeAll; want the 2 it held", s.Len())
	}
	if d, _ := s.Take(ctx, "k", slow, 0); d.Remaining != 5 {
		t.Errorf("plain budget: %+v; want untouched", d)
	}
	peek := make([]limiter.Decision, 1)
	if err := s.TakeAll(ctx, []limiter.Request{{Key: "k", Name: "a", Limit: slow}}, peek); err != nil || peek[0].Remaining != 4 {
		t.Errorf("budget a: %+v, %v; want Remaining 4 (debited once, by the first call)", peek[0], err)
	}
}

// TestNamedBudgetsMeetNoPlainKey: a plain key spelling any encoding of an
// (owner, name) pair is still its own budget.
func TestNamedBudgetsMeetNoPlainKey(t *testing.T) {
	s := newTestStore(t, limitertest.NewFakeClock(t0)).(*memorystore.Store)
	ctx := context.Background()
	ds := make([]limiter.Decision, 1)
	if err := s.TakeAll(ctx, []limiter.Request{{Key: "k", Name: "n", Limit: bucket, Cost: 4}}, ds); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k\x00n", "kn", "k:n", "k\x00n\x001", "n"} {
		if d, err := s.Take(ctx, k, bucket, 0); err != nil || d.Remaining != 10 {
			t.Errorf("plain key %q: %+v, %v; want a whole budget", k, d, err)
		}
	}
	if err := s.TakeAll(ctx, []limiter.Request{{Key: "kn", Name: "", Limit: bucket}, {Key: "k", Name: "n", Limit: bucket}}, make([]limiter.Decision, 2)); err != nil {
		t.Fatal(err)
	}
}

// TestTakeAllSweeps: named budgets whole again are swept like plain keys.
func TestTakeAllSweeps(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	s := newTestStore(t, clock).(*memorystore.Store)
	ctx := context.Background()
	reqs := []limiter.Request{{Key: "k", Name: "a", Limit: bucket, Cost: 3}, {Key: "k", Limit: bucket, Cost: 1}}
	if err := s.TakeAll(ctx, reqs, make([]limiter.Decision, 2)); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 2 {
		t.Fatalf("Len %d, want 2", s.Len())
	}
	// A peek once whole drops the budget on the spot, as Take does.
	clock.Advance(time.Second)
	reqs[0].Cost, reqs[1].Cost = 0, 0
	if err := s.TakeAll(ctx, reqs, make([]limiter.Decision, 2)); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 {
		t.Fatalf("Len %d after whole budgets were peeked, want 0", s.Len())
	}
}

// TestTakeAllManyShards locks the shards of many owners at once, from
// goroutines whose calls overlap in different orders: no deadlock, and
// the shared budget is spent exactly by the admissions.
func TestTakeAllManyShards(t *testing.T) {
	s := newTestStore(t, limitertest.NewFakeClock(t0)).(*memorystore.Store)
	ctx := context.Background()
	shared := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 200, Period: time.Hour}
	done := make(chan int64)
	for w := range 4 {
		go func() {
			var n int64
			for i := range 100 {
				reqs := []limiter.Request{{Key: "shared", Limit: shared, Cost: 1}}
				for j := range 12 { // owners in shards spread over the store, ordered per worker
					reqs = append(reqs, limiter.Request{Key: "owner" + strconv.Itoa((w*7+j*(w+1)+i)%40), Name: strconv.Itoa(j), Limit: bucket})
				}
				ds := make([]limiter.Decision, len(reqs))
				if err := s.TakeAll(ctx, reqs, ds); err != nil {
					t.Error(err)
				}
				if limiter.AllAllowed(ds) {
					n++
				}
			}
			done <- n
		}()
	}
	var admitted int64
	for range 4 {
		admitted += <-done
	}
	if d, _ := s.Take(ctx, "shared", shared, 0); d.Remaining != 200-admitted || admitted != 200 {
		t.Fatalf("shared budget %+v after %d admissions; want all 200 spent", d, admitted)
	}
}

// BenchmarkTakeAll measures a TakeAll of three budgets of one owner (a
// cost bucket, a fixed-window quota and a per-field bucket) against three
// Takes of the same budgets.
func BenchmarkTakeAll(b *testing.B) {
	ctx := context.Background()
	quota := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 1 << 40, Period: time.Hour}
	s, err := memorystore.New(memorystore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	keys := benchKeyNames(benchKeys)
	b.Run("take_all_3", func(b *testing.B) {
		ds := make([]limiter.Decision, 3)
		reqs := make([]limiter.Request, 3)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := keys[i%benchKeys]
			reqs[0] = limiter.Request{Key: k, Limit: benchLimit, Cost: 1}
			reqs[1] = limiter.Request{Key: k, Name: "quota", Limit: quota, Cost: 1}
			reqs[2] = limiter.Request{Key: k, Name: "field:search", Limit: benchLimit, Cost: 1}
			if err := s.TakeAll(ctx, reqs, ds); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("take_all_2", func(b *testing.B) { // a bucket and a quota: the middleware's common case
		ds := make([]limiter.Decision, 2)
		reqs := make([]limiter.Request, 2)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := keys[i%benchKeys]
			reqs[0] = limiter.Request{Key: k, Limit: benchLimit, Cost: 1}
			reqs[1] = limiter.Request{Key: k, Name: "quota", Limit: quota, Cost: 1}
			if err := s.TakeAll(ctx, reqs, ds); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("take_3", func(b *testing.B) {
		names := make([][3]string, benchKeys)
		for i, k := range keys {
			names[i] = [3]string{k, k + ":quota", k + ":field:search"}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := &names[i%benchKeys]
			for j, l := range [3]limiter.Limit{benchLimit, quota, benchLimit} {
				if _, err := s.Take(ctx, k[j], l, 1); err != nil {
					b.Fatal(err)
				}
			}
			i++
		}
	})
	b.Run("parallel_take_all_3", func(b *testing.B) {
		var worker atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ds := make([]limiter.Decision, 3)
			reqs := make([]limiter.Request, 3)
			i := int(worker.Add(1)) * 7919
			for pb.Next() {
				k := keys[i%benchKeys]
				reqs[0] = limiter.Request{Key: k, Limit: benchLimit, Cost: 1}
				reqs[1] = limiter.Request{Key: k, Name: "quota", Limit: quota, Cost: 1}
				reqs[2] = limiter.Request{Key: k, Name: "field:search", Limit: benchLimit, Cost: 1}
				if err := s.TakeAll(ctx, reqs, ds); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}
