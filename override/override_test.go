package override_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/override"
	"github.com/costguard/costguard/override/overridetest"
)

func TestMemorySuite(t *testing.T) {
	overridetest.Run(t, func(t *testing.T, n int) override.Store {
		m, err := override.NewMemory(n)
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
}

func intp(n int) *int { return &n }

func TestValidate(t *testing.T) {
	now := overridetest.T0
	for _, tc := range []struct {
		name string
		o    override.Override
		want string // "" for valid
	}{
		{"plan", override.Override{Plan: "pro"}, ""},
		{"limits", override.Override{Burst: 20000, Rate: 20000, Per: time.Hour}, ""},
		{"burst alone", override.Override{Burst: 5}, ""},
		{"no cap", override.Override{Concurrency: intp(0)}, ""},
		{"until ahead", override.Override{Plan: "pro", Until: now.Add(time.Second)}, ""},
		{"nothing", override.Override{}, `name a plan ("plan") or a limit`},
		{"until now", override.Override{Plan: "pro", Until: now}, "is not in the future"},
		{"negative burst", override.Override{Burst: -1}, "burst -1 is negative"},
		{"negative rate", override.Override{Rate: -1}, "rate -1 is negative"},
		{"negative per", override.Override{Per: -time.Second}, "per -1s is negative"},
		{"tiny per", override.Override{Per: time.Nanosecond}, "below a microsecond"},
		{"quota below burst", override.Override{Burst: 10, Quota: &override.Quota{Limit: 9}}, "quota limit 9 is below the burst 10"},
		{"zero quota", override.Override{Quota: &override.Quota{}}, "quota limit 0 must be positive"},
		{"negative concurrency", override.Override{Concurrency: intp(-1)}, "concurrency -1 is negative"},
		{"unprintable plan", override.Override{Plan: "pro\n"}, "printable ASCII"},
	} {
		err := tc.o.Validate(now)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !errors.Is(err, override.ErrInvalid) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
}

func TestJSON(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: `{"plan":"pro"}`, want: `{"plan":"pro"}`},
		{in: `{"burst":20000,"rate":20000,"per":"1h"}`, want: `{"burst":20000,"rate":20000,"per":"1h0m0s"}`},
		{in: `{"quota":100000}`, want: `{"quota":{"limit":100000}}`},
		{in: `{"quota":{"limit":5,"per":"24h"},"concurrency":0}`, want: `{"quota":{"limit":5,"per":"24h0m0s"},"concurrency":0}`},
		{in: `{"plan":"pro","until":"2026-12-31T23:59:59+01:00"}`, want: `{"plan":"pro","until":"2026-12-31T22:59:59Z"}`},
		{in: `{"plan":"pro","tier":"gold"}`, err: `unknown member "tier"`},
		{in: `{"per":"an hour"}`, err: `"per": "an hour" is not a duration`},
		{in: `{"until":"tomorrow"}`, err: `"until": "tomorrow" is not an RFC 3339 time`},
		{in: `{"burst":"many"}`, err: `"burst" must be a whole number`},
		{in: `{"burst":1.5}`, err: `"burst" must be a whole number`},
		{in: `{"quota":"lots"}`, err: `"quota" must be a whole number of points or {"limit": N, "per": "24h"}`},
		{in: `[1]`, err: `not a JSON object of an override`},
		{in: `{"plan":`, err: `not valid JSON`},
		{in: `{"plan":"a"} {"plan":"b"}`, err: `more than one JSON value`},
	} {
		o, err := override.Parse([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !errors.Is(err, override.ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an ErrInvalid saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		out, _ := json.Marshal(o)
		if string(out) != tc.want {
			t.Errorf("%s: marshals as %s, want %s", tc.in, out, tc.want)
		}
	}
}

func TestPrincipal(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	for in, want := range map[string]string{
		"alice":                  "user:alice",
		"user:alice":             "user:alice",
		"key:" + hex:             "key:" + hex,
		"ip:203.0.113.7":         "ip:203.0.113.7",
		"ip:2001:db8:1:2::/64":   "ip:2001:db8:1:2::/64",
		"key:ABC":                "",
		"ip:nowhere":             "",
		"user:":                  "",
		"":                       "",
		"bob\x00":                "",
		strings.Repeat("x", 600): "",
	} {
		got, err := override.Principal(in)
		if want == "" {
			if !errors.Is(err, override.ErrInvalidPrincipal) {
				t.Errorf("%q: %q, %v; want ErrInvalidPrincipal", in, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
}

// The snapshot follows the store on Refresh, and expiry is judged by the
// injected clock: an override stops applying at its Until, before any
// refresh, and the next refresh purges it from the store.
func TestWatcher(t *testing.T) {
	ctx := context.Background()
	clock := limitertest.NewFakeClock(overridetest.T0)
	m, _ := override.NewMemory(0)
	w, err := override.NewWatcher(ctx, m, override.WithClock(clock), override.WithPollInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Snapshot().Len() != 0 {
		t.Fatal("a new watcher holds overrides")
	}
	// A change made elsewhere (straight to the store) shows after Refresh.
	if _, err := m.Put(ctx, "user:bob", override.Override{Plan: "pro"}, clock.Now()); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Snapshot().Get("user:bob", clock.Now()); ok {
		t.Fatal("applied before a refresh")
	}
	if err := w.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if o, ok := w.Snapshot().Get("user:bob", clock.Now()); !ok || o.Plan != "pro" {
		t.Fatalf("after refresh: %v %v", o, ok)
	}
	// One made through the watcher applies at once.
	if err := w.Put(ctx, "user:alice", override.Override{Burst: 7, Until: clock.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Snapshot().Get("user:alice", clock.Now()); !ok {
		t.Fatal("not applied at once")
	}
	if err := w.Put(ctx, "user:carol", override.Override{}); !errors.Is(err, override.ErrInvalid) {
		t.Fatalf("an empty override: %v", err)
	}
	clock.Advance(time.Minute)
	if _, ok := w.Snapshot().Get("user:alice", clock.Now()); ok {
		t.Fatal("applies at its until")
	}
	if err := w.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	all, _, _ := m.Load(ctx)
	if _, ok := all["user:alice"]; ok || len(all) != 1 || w.Snapshot().Len() != 1 {
		t.Fatalf("not purged: store %v, snapshot of %d", all, w.Snapshot().Len())
	}
	if ok, err := w.Delete(ctx, "user:bob"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, ok := w.Snapshot().Get("user:bob", clock.Now()); ok {
		t.Fatal("a delete did not apply at once")
	}
}

// failing is a Store whose reads fail while down is set.
type failing struct {
	override.Store
	down bool
}

func (f *failing) Version(ctx context.Context) (override.Version, error) {
	if f.down {
		return override.Version{}, errors.New("store down")
	}
	return f.Store.Version(ctx)
}

// A store that cannot be read fails NewWatcher; one that fails later
// leaves the last snapshot in force.
func TestWatcherStoreFailure(t *testing.T) {
	ctx := context.Background()
	clock := limitertest.NewFakeClock(overridetest.T0)
	m, _ := override.NewMemory(0)
	f := &failing{Store: m, down: true}
	if _, err := override.NewWatcher(ctx, f, override.WithPollInterval(0)); err == nil {
		t.Fatal("a store that cannot be read: NewWatcher succeeded")
	}
	f.down = false
	w, err := override.NewWatcher(ctx, f, override.WithClock(clock), override.WithPollInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Put(ctx, "user:alice", override.Override{Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	f.down = true
	if err := w.Refresh(ctx); err == nil {
		t.Fatal("a failing store refreshed")
	}
	if _, ok := w.Snapshot().Get("user:alice", clock.Now()); !ok {
		t.Fatal("a failed refresh dropped the overrides in force")
	}
}

// The key Principal returns is a copy: stored as an override's key, it
// does not keep the request it was cut from alive.
func TestPrincipalIsACopy(t *testing.T) {
	path := "/admin/principals/user:alice/override" + strings.Repeat(" ", 1<<20)
	name := path[len("/admin/principals/"):strings.Index(path, "/override")]
	key, err := override.Principal(name)
	if err != nil || key != "user:alice" {
		t.Fatalf("%q, %v", key, err)
	}
	if kept.Shares(key, path) {
		t.Fatal("the key shares the request's memory")
	}
}
