package spenders_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/costguard/costguard/spenders"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func newTracker(t testing.TB, cfg spenders.Config) *spenders.Tracker {
	t.Helper()
	tr, err := spenders.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func top(t testing.TB, tr *spenders.Tracker, at time.Time, plan, window string, limit int) spenders.Report {
	t.Helper()
	rep, err := tr.Top(at, plan, window, limit)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Below capacity the summaries are exact, and the windows slide with the
// injected clock: the 1-minute window forgets what its six 10-second slots
// no longer hold, the 15-minute one keeps it.
func TestWindowsSlide(t *testing.T) {
	tr := newTracker(t, spenders.Config{})
	tr.Add(t0, "free", "ip:1", 30)
	tr.Add(t0.Add(5*time.Second), "free", "ip:2", 50)
	tr.Add(t0.Add(20*time.Second), "free", "ip:1", 40)
	tr.Add(t0.Add(20*time.Second), "pro", "user:alice", 900)
	tr.Add(t0, "free", "ip:3", 0)  // ignored
	tr.Add(t0, "free", "ip:4", -5) // ignored

	tests := []struct {
		at     time.Duration
		plan   string
		window string
		want   []spenders.Spender
		total  int64
	}{
		{25 * time.Second, "free", "1m", []spenders.Spender{{"ip:1", 70, 0}, {"ip:2", 50, 0}}, 120},
		{25 * time.Second, "pro", "1m", []spenders.Spender{{"user:alice", 900, 0}}, 900},
		// At 60 s the slot of [0, 10 s) has left the 1-minute window.
		{60 * time.Second, "free", "1m", []spenders.Spender{{"ip:1", 40, 0}}, 40},
		{60 * time.Second, "free", "15m", []spenders.Spender{{"ip:1", 70, 0}, {"ip:2", 50, 0}}, 120},
		{15 * time.Minute, "free", "15m", []spenders.Spender{}, 0},
		{25 * time.Second, "gold", "1m", []spenders.Spender{}, 0},
	}
	for _, tt := range tests {
		rep := top(t, tr, t0.Add(tt.at), tt.plan, tt.window, 10)
		if fmt.Sprint(rep.Spenders) != fmt.Sprint(tt.want) || rep.Total != tt.total || rep.Bound != 0 {
			t.Errorf("%s %s at %v: %v, total %d, bound %d; want %v, total %d, bound 0",
				tt.plan, tt.window, tt.at, rep.Spenders, rep.Total, rep.Bound, tt.want, tt.total)
		}
	}
	if rep := top(t, tr, t0.Add(25*time.Second), "free", "1m", 1); len(rep.Spenders) != 1 || rep.Spenders[0].Principal != "ip:1" {
		t.Errorf("limit 1: %v", rep.Spenders)
	}
	if _, err := tr.Top(t0, "free", "5m", 10); !errors.Is(err, spenders.ErrUnknownWindow) {
		t.Errorf("window 5m: %v, want ErrUnknownWindow", err)
	}
}

// The error bound holds on a stream of a million distinct principals with
// a few heavy spenders among them, spread over the 1-minute window's
// slots: every reported Points − Error ≤ truth ≤ Points, Error ≤ Bound ≤
// Total / Capacity, and every principal above Bound is reported.
func TestErrorBoundAtAMillionPrincipals(t *testing.T) {
	if testing.Short() {
		t.Skip("a million adds")
	}
	const capacity = 256
	tr := newTracker(t, spenders.Config{Capacity: capacity})
	rng := rand.New(rand.NewPCG(1, 2))
	truth := map[string]int64{}
	heavy := []string{"key:heavy-a", "key:heavy-b", "key:heavy-c"}
	const n = 1_000_000
	for i := range n {
		at := t0.Add(time.Duration(i) * 59 * time.Second / n) // within one minute
		p, w := fmt.Sprintf("ip:%d", i), int64(1+rng.IntN(20))
		if i%50 == 0 {
			p, w = heavy[i/50%len(heavy)], 30
		}
		truth[p] += w
		tr.Add(at, "free", p, w)
	}
	rep := top(t, tr, t0.Add(59*time.Second), "free", "1m", 1000)
	var total int64
	for _, w := range truth {
		total += w
	}
	if rep.Total != total {
		t.Fatalf("total %d, want %d", rep.Total, total)
	}
	if rep.Bound > total/capacity {
		t.Errorf("bound %d above total / capacity = %d", rep.Bound, total/capacity)
	}
	reported := map[string]bool{}
	for _, s := range rep.Spenders {
		reported[s.Principal] = true
		if tv := truth[s.Principal]; s.Points-s.Error > tv || tv > s.Points || s.Error > rep.Bound {
			t.Errorf("%s: points %d, error %d, bound %d; truth %d", s.Principal, s.Points, s.Error, rep.Bound, tv)
		}
	}
	for p, tv := range truth {
		if tv > rep.Bound && !reported[p] {
			t.Errorf("%s spent %d > bound %d and is not reported", p, tv, rep.Bound)
		}
	}
	for i, h := range heavy {
		if rep.Spenders[i].Principal != h && rep.Spenders[i].Principal != heavy[(i+1)%3] && rep.Spenders[i].Principal != heavy[(i+2)%3] {
			t.Errorf("top %d is %s, want a heavy spender", i, rep.Spenders[i].Principal)
		}
	}
	t.Logf("%d principals, %d points: bound %d (total / capacity %d); top %v", len(truth), total, rep.Bound, total/capacity, rep.Spenders[:3])
}

// Memory stays bounded whatever the number of principals: a million
// distinct ones over the windows of a plan leave the heap where a few
// thousand leave it.
func TestMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a million adds")
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	tr := newTracker(t, spenders.Config{})
	before := heap()
	for i := range 1_000_000 {
		tr.Add(t0.Add(time.Duration(i)*time.Millisecond), "free", fmt.Sprintf("ip:%d", i), 1)
	}
	grown := int64(heap()) - int64(before)
	// 21 slots × 256 counters, each a counter, a map entry and its
	// principal's string: under 200 bytes each.
	const most = 21 * spenders.DefaultCapacity * 200
	if grown > most {
		t.Errorf("a million principals grew the heap by %d bytes, want at most %d", grown, most)
	}
	runtime.KeepAlive(tr)
	t.Logf("heap grew %d bytes for a million principals (bound %d)", grown, most)
}

// Plans past MaxPlans count as Other.
func TestMaxPlans(t *testing.T) {
	tr := newTracker(t, spenders.Config{MaxPlans: 2})
	for i, plan := range []string{"a", "b", "c", "d"} {
		tr.Add(t0, plan, "p", int64(i+1))
	}
	if got := fmt.Sprint(tr.Plans()); got != "[a b other]" {
		t.Errorf("plans %s, want [a b other]", got)
	}
	if rep := top(t, tr, t0, spenders.Other, "1m", 5); rep.Total != 7 {
		t.Errorf("other's total %d, want 3 + 4", rep.Total)
	}
}

func TestConfigRefused(t *testing.T) {
	for _, cfg := range []spenders.Config{
		{Capacity: -1},
		{MaxPlans: -1},
		{Windows: []spenders.Window{}},
		{Windows: []spenders.Window{{time.Minute, 7 * time.Second}}},
		{Windows: []spenders.Window{{time.Minute, 0}}},
		{Windows: []spenders.Window{{time.Hour, time.Millisecond}}},
		{Windows: []spenders.Window{{time.Minute, time.Second}, {time.Minute, 10 * time.Second}}},
	} {
		if _, err := spenders.New(cfg); !errors.Is(err, spenders.ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestWindowName(t *testing.T) {
	for w, want := range map[time.Duration]string{
		time.Minute: "1m", 15 * time.Minute: "15m", time.Hour: "1h", 90 * time.Second: "1m30s", 10 * time.Second: "10s",
	} {
		if got := (spenders.Window{Length: w, Slot: w}).Name(); got != want {
			t.Errorf("%v: %q, want %q", w, got, want)
		}
	}
}

func BenchmarkAdd(b *testing.B) {
	tr := newTracker(b, spenders.Config{})
	names := make([]string, 100_000)
	for i := range names {
		names[i] = fmt.Sprintf("ip:%d", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tr.Add(t0.Add(time.Duration(i)*time.Microsecond), "free", names[i%len(names)], 7)
		i++
	}
}

// Reports of three processes merge into one that keeps the bounds: each
// listed principal's truth lies in [Points − Error, Points], and one not
// listed spent at most Cut.
func TestMergeKeepsTheBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	truth := map[string]int64{}
	var reports []spenders.Report
	for range 3 {
		tr := newTracker(t, spenders.Config{Capacity: 16})
		for i := range 20_000 {
			p, w := fmt.Sprintf("ip:%d", rng.IntN(5_000)), int64(1+rng.IntN(5))
			if i%7 == 0 {
				p, w = fmt.Sprintf("key:heavy-%d", rng.IntN(4)), 20
			}
			truth[p] += w
			tr.Add(t0.Add(time.Duration(i)*time.Millisecond), "free", p, w)
		}
		reports = append(reports, top(t, tr, t0.Add(20*time.Second), "free", "1m", 8))
	}
	m := spenders.Merge(5, reports...)
	var total int64
	for _, w := range truth {
		total += w
	}
	if m.Total != total || m.Plan != "free" || m.Window != "1m" || len(m.Spenders) != 5 {
		t.Fatalf("merged %s/%s: total %d (want %d), %d spenders", m.Plan, m.Window, m.Total, total, len(m.Spenders))
	}
	listed := map[string]bool{}
	for _, s := range m.Spenders {
		listed[s.Principal] = true
		if tv := truth[s.Principal]; s.Points-s.Error > tv || tv > s.Points {
			t.Errorf("%s: [%d, %d], truth %d", s.Principal, s.Points-s.Error, s.Points, tv)
		}
	}
	for p, tv := range truth {
		if !listed[p] && tv > m.Cut {
			t.Errorf("%s spent %d, above the cut %d, and is not listed", p, tv, m.Cut)
		}
	}
	for i := range 4 {
		if p := fmt.Sprintf("key:heavy-%d", i); !listed[p] {
			t.Errorf("%s is not among the merged top", p)
		}
	}
	if e := spenders.Merge(3); e.Spenders == nil || len(e.Spenders) != 0 {
		t.Errorf("merging nothing: %+v", e)
	}
}
