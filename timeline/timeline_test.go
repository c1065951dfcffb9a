package timeline_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/costguard/costguard/timeline"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func newTimeline(t testing.TB, cfg timeline.Config) *timeline.Timeline {
	t.Helper()
	tl, err := timeline.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func costs(es []timeline.Entry) string {
	s := ""
	for _, e := range es {
		s += fmt.Sprintf("%d ", e.Requested)
	}
	return s
}

func TestRecentWindowAndBounds(t *testing.T) {
	tl := newTimeline(t, timeline.Config{Window: 15 * time.Minute, PerPrincipal: 3, MaxEntries: 5, MaxPrincipals: 3})
	add := func(p string, at time.Duration, cost int64) {
		tl.Add(p, timeline.Entry{Time: t0.Add(at), Kind: "graphql", Requested: cost, Outcome: "admitted"})
	}
	add("user:alice", 0, 1)
	add("user:alice", time.Minute, 2)
	if got := costs(tl.Recent(t0.Add(time.Minute), "user:alice")); got != "1 2 " {
		t.Errorf("alice: %q", got)
	}
	// The window: at 15 min the first entry is out.
	if got := costs(tl.Recent(t0.Add(15*time.Minute), "user:alice")); got != "2 " {
		t.Errorf("alice after 15 minutes: %q", got)
	}
	// Per principal: the newest 3.
	add("user:alice", 2*time.Minute, 3)
	add("user:alice", 3*time.Minute, 4)
	if got := costs(tl.Recent(t0.Add(3*time.Minute), "user:alice")); got != "2 3 4 " {
		t.Errorf("alice, 3 kept: %q", got)
	}
	// In total 5: bob's 2 fit, carol's first drops alice (the least
	// recently active) whole.
	add("user:bob", 4*time.Minute, 10)
	add("user:bob", 5*time.Minute, 11)
	add("user:carol", 6*time.Minute, 20)
	if got := costs(tl.Recent(t0.Add(6*time.Minute), "user:alice")); got != "" {
		t.Errorf("alice after the total bound: %q", got)
	}
	if got := costs(tl.Recent(t0.Add(6*time.Minute), "user:bob")); got != "10 11 " {
		t.Errorf("bob: %q", got)
	}
	if e, p := tl.Len(); e != 3 || p != 2 {
		t.Errorf("held %d entries of %d principals, want 3 of 2", e, p)
	}
	// Principals bounded: dave, erin push bob out (carol is newer).
	add("user:dave", 7*time.Minute, 30)
	add("user:erin", 8*time.Minute, 40)
	if _, p := tl.Len(); p != 3 {
		t.Errorf("%d principals, want 3", p)
	}
	if got := costs(tl.Recent(t0.Add(8*time.Minute), "user:bob")); got != "" {
		t.Errorf("bob after the principals bound: %q", got)
	}
	if got := tl.Recent(t0, "nobody"); got == nil || len(got) != 0 {
		t.Errorf("unknown principal: %#v, want an empty list", got)
	}
}

// A million principals, one decision each, leave the timeline at its
// bounds.
func TestBoundedAtAMillionPrincipals(t *testing.T) {
	if testing.Short() {
		t.Skip("a million adds")
	}
	tl := newTimeline(t, timeline.Config{})
	for i := range 1_000_000 {
		tl.Add(fmt.Sprintf("ip:%d", i), timeline.Entry{Time: t0.Add(time.Duration(i) * time.Microsecond), Requested: 1})
	}
	if e, p := tl.Len(); e > timeline.DefaultMaxEntries || p > timeline.DefaultMaxPrincipals {
		t.Errorf("%d entries of %d principals, above %d and %d", e, p, timeline.DefaultMaxEntries, timeline.DefaultMaxPrincipals)
	}
}

func TestConfigRefused(t *testing.T) {
	for _, cfg := range []timeline.Config{
		{Window: -time.Second}, {PerPrincipal: -1}, {PerPrincipal: 10, MaxEntries: 5}, {MaxPrincipals: -1},
	} {
		if _, err := timeline.New(cfg); !errors.Is(err, timeline.ErrInvalidConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// BenchmarkAdd records one decision: among 1,000 principals (each keeps
// its ring), and among 50,000, more than the default 10,000 principals,
// so that every add drops the least recently active one.
func BenchmarkAdd(b *testing.B) {
	for _, n := range []int{1_000, 50_000} {
		b.Run(fmt.Sprintf("principals=%d", n), func(b *testing.B) {
			tl := newTimeline(b, timeline.Config{})
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("ip:%d", i)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				tl.Add(names[i%len(names)], timeline.Entry{Time: t0.Add(time.Duration(i) * time.Millisecond), Requested: 3})
				i++
			}
		})
	}
}

// An entry keeps its admission, its settlement and what stays debited,
// and its JSON names each: the dashboard draws the net points, with the
// charge and the refund beside them.
func TestEntryNetPoints(t *testing.T) {
	tl := newTimeline(t, timeline.Config{})
	tl.Add("user:alice", timeline.Entry{Time: t0, Kind: "graphql", Requested: 4101, Actual: 14, HasActual: true,
		Charged: 4101, Refunded: 4087, Net: 14, Outcome: "admitted"})
	got := tl.Recent(t0, "user:alice")
	if len(got) != 1 {
		t.Fatalf("%d entries, want 1", len(got))
	}
	b, err := json.Marshal(got[0])
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"time":"2026-12-03T12:00:00Z","kind":"graphql","plan":"","requested":4101,"actual":14,"has_actual":true,` +
		`"charged":4101,"refunded":4087,"excess":0,"net":14,"outcome":"admitted"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}
