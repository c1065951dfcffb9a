// Package overridetest is the behaviour suite every override.Store must
// pass: the memory store and the Redis store (standalone and Cluster) run
// the same cases, and a store that can lose its data (Redis) runs the
// data-loss cases too.
package overridetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/costguard/costguard/override"
)

// T0 is the time the suite's cases start at.
var T0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// Option adds cases to Run.
type Option func(*options)

type options struct {
	lose func(t *testing.T, s override.Store)
}

// WithDataLoss runs the data-loss cases: lose makes s lose every override
// and its version, as a FLUSHALL or a restart without persistence would.
func WithDataLoss(lose func(t *testing.T, s override.Store)) Option {
	return func(o *options) { o.lose = lose }
}

// Run runs the suite. newStore returns an empty store holding at most
// maxOverrides overrides.
func Run(t *testing.T, newStore func(t *testing.T, maxOverrides int) override.Store, opts ...Option) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	crud(t, newStore)
	lifetimes(t, newStore)
	watchers(t, newStore)
	if o.lose != nil {
		dataLoss(t, newStore, o.lose)
	}
}

// crud runs the store's own operations: put, load, delete, its cap.
func crud(t *testing.T, newStore func(t *testing.T, maxOverrides int) override.Store) {
	ctx := context.Background()
	four := 4
	limits := override.Override{Burst: 20000, Rate: 20000, Per: time.Hour, Quota: &override.Quota{Limit: 100000, Per: 24 * time.Hour}, Concurrency: &four}
	pro := override.Override{Plan: "pro"}
	t.Run("put, load, delete", func(t *testing.T) {
		s := newStore(t, 0)
		seen := versions{t: t}
		v0, err := s.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen.add("empty", v0)
		v, err := s.Put(ctx, "user:alice", pro, T0)
		if err != nil {
			t.Fatal(err)
		}
		seen.add("a put", v)
		if v, err = s.Put(ctx, "ip:203.0.113.7", limits, T0); err != nil {
			t.Fatal(err)
		}
		seen.add("a second put", v)
		all, lv, err := s.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if lv != v || len(all) != 2 || all["user:alice"].String() != pro.String() || all["ip:203.0.113.7"].String() != limits.String() {
			t.Fatalf("load: version %v (the put answered %v), %v", lv, v, all)
		}
		if got, _ := s.Version(ctx); got != v {
			t.Errorf("version %v, the put answered %v", got, v)
		}
		ok, v, err := s.Delete(ctx, "user:alice")
		if err != nil || !ok {
			t.Fatalf("delete: %v %v", ok, err)
		}
		seen.add("a delete", v)
		if got, _ := s.Version(ctx); got != v {
			t.Errorf("version %v, the delete answered %v", got, v)
		}
		ok, v2, err := s.Delete(ctx, "user:alice")
		if err != nil || ok {
			t.Fatalf("second delete: %v %v", ok, err)
		}
		if v2 != v {
			t.Errorf("deleting nothing moved the version %v -> %v", v, v2)
		}
		if got, _ := s.Version(ctx); got != v {
			t.Errorf("version %v after deleting nothing, was %v", got, v)
		}
		// Put again what was there: another change, another version.
		if v, err = s.Put(ctx, "user:alice", pro, T0); err != nil {
			t.Fatal(err)
		}
		seen.add("the same put again", v)
		if _, v, err = s.Delete(ctx, "user:alice"); err != nil {
			t.Fatal(err)
		}
		seen.add("the same delete again", v)
	})

	t.Run("cap", func(t *testing.T) {
		s := newStore(t, 2)
		for _, k := range []string{"user:a", "user:b"} {
			if _, err := s.Put(ctx, k, pro, T0); err != nil {
				t.Fatal(err)
			}
		}
		v, _ := s.Version(ctx)
		if _, err := s.Put(ctx, "user:c", pro, T0); !errors.Is(err, override.ErrFull) {
			t.Fatalf("a third override: %v, want ErrFull", err)
		}
		if got, _ := s.Version(ctx); got != v {
			t.Errorf("a refused put moved the version %v -> %v", v, got)
		}
		if _, err := s.Put(ctx, "user:a", limits, T0); err != nil {
			t.Fatalf("replacing one at the cap: %v", err)
		}
	})
}

// lifetimes runs expiry and the round trip of every field.
func lifetimes(t *testing.T, newStore func(t *testing.T, maxOverrides int) override.Store) {
	ctx := context.Background()
	four := 4
	limits := override.Override{Burst: 20000, Rate: 20000, Per: time.Hour, Quota: &override.Quota{Limit: 100000, Per: 24 * time.Hour}, Concurrency: &four}
	pro := override.Override{Plan: "pro"}
	t.Run("expiry", func(t *testing.T) {
		s := newStore(t, 2)
		soon := pro
		soon.Until = T0.Add(time.Minute)
		if _, err := s.Put(ctx, "user:a", soon, T0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, "user:b", pro, T0); err != nil {
			t.Fatal(err)
		}
		// Full until a's override expires; then a Put makes room.
		if _, err := s.Put(ctx, "user:c", pro, T0.Add(59*time.Second)); !errors.Is(err, override.ErrFull) {
			t.Fatalf("before expiry: %v, want ErrFull", err)
		}
		if _, err := s.Put(ctx, "user:c", pro, T0.Add(time.Minute)); err != nil {
			t.Fatalf("at expiry: %v", err)
		}
		all, _, _ := s.Load(ctx)
		if _, ok := all["user:a"]; ok || len(all) != 2 {
			t.Fatalf("after expiry: %v", all)
		}
		later := pro
		later.Until = T0.Add(time.Hour)
		v, err := s.Put(ctx, "user:b", later, T0)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.Purge(ctx, T0.Add(time.Hour-time.Millisecond)); err != nil || got != v {
			t.Errorf("a purge that removed nothing: version %v (was %v), %v", got, v, err)
		}
		if got, _ := s.Version(ctx); got != v {
			t.Errorf("a purge that removed nothing moved the version")
		}
		pv, err := s.Purge(ctx, T0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		all, v2, _ := s.Load(ctx)
		if _, ok := all["user:b"]; ok || v2 == v || v2 != pv {
			t.Fatalf("after purge: %v at version %v (was %v; the purge answered %v)", all, v2, v, pv)
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
		if _, err := s.Put(ctx, "key:"+hex64, o, T0); err != nil {
			t.Fatal(err)
		}
		all, _, _ := s.Load(ctx)
		got := all["key:"+hex64]
		if got.String() != o.String() || !got.Until.Equal(o.Until) {
			t.Errorf("got %v until %v, want %v until %v", got, got.Until, o, o.Until)
		}
	})
}

// watchers runs two watchers of one store.
func watchers(t *testing.T, newStore func(t *testing.T, maxOverrides int) override.Store) {
	ctx := context.Background()
	t.Run("two watchers", func(t *testing.T) {
		s := newStore(t, 0)
		w := twoWatchers(t, s)
		put(t, w[0], "user:carol")
		if got := held(w[0]); !slices.Equal(got, []string{"user:carol"}) {
			t.Fatalf("the watcher that put carol holds %v at once", got)
		}
		refresh(t, w[1])
		if got := held(w[1]); !slices.Equal(got, []string{"user:carol"}) {
			t.Fatalf("the other, after a poll, holds %v", got)
		}
		if ok, err := w[1].Delete(ctx, "user:carol"); err != nil || !ok {
			t.Fatal(ok, err)
		}
		put(t, w[1], "user:dave")
		if got := held(w[1]); !slices.Equal(got, []string{"user:dave"}) {
			t.Fatalf("the watcher that changed them holds %v at once", got)
		}
		refresh(t, w[0])
		if got := held(w[0]); !slices.Equal(got, []string{"user:dave"}) {
			t.Fatalf("the other, after a poll, holds %v", got)
		}
	})
}

// dataLoss runs the data-loss cases, for a store given WithDataLoss.
func dataLoss(t *testing.T, newStore func(t *testing.T, maxOverrides int) override.Store, lose func(t *testing.T, s override.Store)) {
	ctx := context.Background()
	pro := override.Override{Plan: "pro"}
	// A store that lost its data counts its changes again: the version
	// after as many changes as before the loss must still be another.
	t.Run("data loss: a new version", func(t *testing.T) {
		s := newStore(t, 0)
		seen := versions{t: t}
		v, err := s.Put(ctx, "user:carol", pro, T0)
		if err != nil {
			t.Fatal(err)
		}
		seen.add("carol's put", v)
		lose(t, s)
		if v, err = s.Version(ctx); err != nil {
			t.Fatal(err)
		}
		seen.add("the loss", v)
		if v, err = s.Put(ctx, "user:dave", pro, T0); err != nil {
			t.Fatal(err)
		}
		seen.add("dave's put after the loss", v)
		all, lv, _ := s.Load(ctx)
		if lv != v || len(all) != 1 {
			t.Errorf("load: %v at %v, the put answered %v", all, lv, v)
		}
	})

	// Carol, the loss, dave before any poll: the watcher that put dave
	// holds exactly dave at once, the other after one poll.
	t.Run("data loss: two watchers", func(t *testing.T) {
		s := newStore(t, 0)
		w := twoWatchers(t, s)
		put(t, w[0], "user:carol")
		refresh(t, w[1])
		lose(t, s)
		put(t, w[0], "user:dave")
		if got := held(w[0]); !slices.Equal(got, []string{"user:dave"}) {
			t.Errorf("the watcher that put dave after the loss holds %v at once", got)
		}
		refresh(t, w[1])
		if got := held(w[1]); !slices.Equal(got, []string{"user:dave"}) {
			t.Errorf("the other, after a poll, holds %v", got)
		}
	})
}

// versions fails its test when a version comes twice.
type versions struct {
	t    *testing.T
	seen map[override.Version]string
}

func (vs *versions) add(what string, v override.Version) {
	vs.t.Helper()
	if before, ok := vs.seen[v]; ok {
		vs.t.Errorf("%s left the version at %v, as %s did", what, v, before)
	}
	if vs.seen == nil {
		vs.seen = map[override.Version]string{}
	}
	vs.seen[v] = what
}

// twoWatchers returns two Watchers of s, as two processes would hold,
// polled by hand (each Refresh is one poll).
func twoWatchers(t *testing.T, s override.Store) [2]*override.Watcher {
	var out [2]*override.Watcher
	for i := range out {
		w, err := override.NewWatcher(context.Background(), s, override.WithPollInterval(0), override.WithClock(fixed{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		out[i] = w
	}
	return out
}

type fixed struct{}

func (fixed) Now() time.Time { return T0 }

func put(t *testing.T, w *override.Watcher, key string) {
	t.Helper()
	if err := w.Put(context.Background(), key, override.Override{Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
}

func refresh(t *testing.T, w *override.Watcher) {
	t.Helper()
	if err := w.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// held is the keys of the overrides w holds, sorted.
func held(w *override.Watcher) []string {
	var keys []string
	for k := range w.Snapshot().All() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
