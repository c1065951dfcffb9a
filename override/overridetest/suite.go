// Package overridetest is the behaviour suite every override.Store must
// pass: the memory store and the Redis store (standalone and Cluster) run
// the same cases.
package overridetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/costguard/costguard/override"
)

// T0 is the time the suite's cases start at.
var T0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// Run runs the suite. newStore returns an empty store holding at most
// maxOverrides overrides.
func Run(t *testing.T, newStore func(t *testing.T, maxOverrides int) override.Store) {
	ctx := context.Background()
	four := 4
	pro := override.Override{Plan: "pro"}
	limits := override.Override{Burst: 20000, Rate: 20000, Per: time.Hour, Quota: &override.Quota{Limit: 100000, Per: 24 * time.Hour}, Concurrency: &four}

	t.Run("put, load, delete", func(t *testing.T) {
		s := newStore(t, 0)
		v0, err := s.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "user:alice", pro, T0); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "ip:203.0.113.7", limits, T0); err != nil {
			t.Fatal(err)
		}
		all, v, err := s.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v <= v0 || len(all) != 2 || all["user:alice"].String() != pro.String() || all["ip:203.0.113.7"].String() != limits.String() {
			t.Fatalf("load: version %d (was %d), %v", v, v0, all)
		}
		if got, _ := s.Version(ctx); got != v {
			t.Errorf("version %d, load said %d", got, v)
		}
		ok, err := s.Delete(ctx, "user:alice")
		if err != nil || !ok {
			t.Fatalf("delete: %v %v", ok, err)
		}
		if got, _ := s.Version(ctx); got <= v {
			t.Errorf("a delete left the version at %d", got)
		}
		v2, _ := s.Version(ctx)
		if ok, err := s.Delete(ctx, "user:alice"); err != nil || ok {
			t.Fatalf("second delete: %v %v", ok, err)
		}
		if got, _ := s.Version(ctx); got != v2 {
			t.Errorf("deleting nothing moved the version %d -> %d", v2, got)
		}
	})

	t.Run("cap", func(t *testing.T) {
		s := newStore(t, 2)
		for _, k := range []string{"user:a", "user:b"} {
			if err := s.Put(ctx, k, pro, T0); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Put(ctx, "user:c", pro, T0); !errors.Is(err, override.ErrFull) {
			t.Fatalf("a third override: %v, want ErrFull", err)
		}
		if err := s.Put(ctx, "user:a", limits, T0); err != nil {
			t.Fatalf("replacing one at the cap: %v", err)
		}
	})

	t.Run("expiry", func(t *testing.T) {
		s := newStore(t, 2)
		soon := pro
		soon.Until = T0.Add(time.Minute)
		if err := s.Put(ctx, "user:a", soon, T0); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "user:b", pro, T0); err != nil {
			t.Fatal(err)
		}
		// Full until a's override expires; then a Put makes room.
		if err := s.Put(ctx, "user:c", pro, T0.Add(59*time.Second)); !errors.Is(err, override.ErrFull) {
			t.Fatalf("before expiry: %v, want ErrFull", err)
		}
		if err := s.Put(ctx, "user:c", pro, T0.Add(time.Minute)); err != nil {
			t.Fatalf("at expiry: %v", err)
		}
		all, _, _ := s.Load(ctx)
		if _, ok := all["user:a"]; ok || len(all) != 2 {
			t.Fatalf("after expiry: %v", all)
		}
		later := pro
		later.Until = T0.Add(time.Hour)
		if err := s.Put(ctx, "user:b", later, T0); err != nil {
			t.Fatal(err)
		}
		v, _ := s.Version(ctx)
		if err := s.Purge(ctx, T0.Add(time.Hour-time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Version(ctx); got != v {
			t.Errorf("a purge that removed nothing moved the version")
		}
		if err := s.Purge(ctx, T0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		all, v2, _ := s.Load(ctx)
		if _, ok := all["user:b"]; ok || v2 <= v {
			t.Fatalf("after purge: %v at version %d (was %d)", all, v2, v)
		}
		got := all["user:c"]
		if got.Plan != "pro" || !got.Until.IsZero() {
			t.Errorf("user:c: %+v", got)
		}
	})

	t.Run("round trip of every field", func(t *testing.T) {
		s := newStore(t, 0)
		o := limits
		o.Plan = "pro"
		o.Until = T0.Add(36 * time.Hour)
		if err := s.Put(ctx, "key:"+hex64, o, T0); err != nil {
			t.Fatal(err)
		}
		all, _, _ := s.Load(ctx)
		got := all["key:"+hex64]
		if got.String() != o.String() || !got.Until.Equal(o.Until) {
			t.Errorf("got %v until %v, want %v until %v", got, got.Until, o, o.Until)
		}
	})
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
