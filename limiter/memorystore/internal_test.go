package memorystore

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/internal/shardmap"
	"github.com/costguard/costguard/limiter/limitertest"
)

var t0 = time.Unix(1_893_456_000, 0)

// sweepers counts live sweeper goroutines.
func sweepers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "memorystore.(*Store).sweepLoop")
}

// TestCloseStopsSweeper checks New starts exactly one goroutine and Close
// ends it before returning (give or take its final instructions).
func TestCloseStopsSweeper(t *testing.T) {
	before := sweepers()
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; sweepers() != before+1; i++ { // let the new goroutine get going
		if i == 1000 {
			t.Fatalf("%d sweepers after New, want %d", sweepers(), before+1)
		}
		runtime.Gosched()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.sweeper.Done():
	default:
		t.Fatal("Close returned before the sweeper exited")
	}
	// The goroutine has closed done; let it finish returning.
	for i := 0; sweepers() > before; i++ {
		if i == 1000 {
			t.Fatalf("%d sweepers still running after Close, want %d", sweepers(), before)
		}
		runtime.Gosched()
	}
}

// TestSweeperDropsWholeBudgets drives the sweeper with a hand-made tick.
func TestSweeperDropsWholeBudgets(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	tick := make(chan time.Time)
	s, err := newStore(Config{Clock: clock, Shards: 4}, tick)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.Take(ctx, k, l, 5); err != nil { // whole after 500 ms
			t.Fatal(err)
		}
	}
	if _, err := s.Take(ctx, "d", l, 10); err != nil { // whole after 1 s
		t.Fatal(err)
	}
	clock.Advance(600 * time.Millisecond)
	tick <- time.Time{}
	tick <- time.Time{} // accepted only once the first sweep is over
	if n := s.Len(); n != 1 {
		t.Fatalf("Len %d after the sweep, want 1 (d is still being refilled)", n)
	}
	clock.Advance(400 * time.Millisecond)
	tick <- time.Time{}
	tick <- time.Time{}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len %d, want 0", n)
	}
}

// TestSweeperFollowsMovedTimes checks the sweeper, which walks the shards'
// heaps, drops a key whose budget became whole later than first written
// (spent again) only once it is whole, and one that became whole sooner
// (refunded) as soon as it is.
func TestSweeperFollowsMovedTimes(t *testing.T) {
	clock := limitertest.NewFakeClock(t0)
	tick := make(chan time.Time)
	s, err := newStore(Config{Clock: clock, Shards: 1}, tick)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}
	sweep := func(at time.Duration, want int) {
		t.Helper()
		clock.Set(t0.Add(at))
		tick <- time.Time{}
		tick <- time.Time{} // accepted only once the first sweep is over
		if n := s.Len(); n != want {
			t.Fatalf("at +%v: Len %d after the sweep, want %d", at, n, want)
		}
	}
	for _, k := range []string{"spent", "refunded"} {
		if _, err := s.Take(ctx, k, l, 5); err != nil { // whole at 500 ms
			t.Fatal(err)
		}
	}
	clock.Set(t0.Add(100 * time.Millisecond))
	if _, err := s.Refund(ctx, "refunded", l, 3); err != nil { // 4 − 3 missing: whole at 200 ms
		t.Fatal(err)
	}
	clock.Set(t0.Add(400 * time.Millisecond))
	if _, err := s.Take(ctx, "spent", l, 5); err != nil { // 1 + 5 missing: whole at 1 s
		t.Fatal(err)
	}
	sweep(200*time.Millisecond-time.Microsecond, 2)
	sweep(200*time.Millisecond, 1) // refunded is whole
	sweep(time.Second-time.Microsecond, 1)
	sweep(time.Second, 0)
}

// TestNowMatchesUnixMicro checks the store's time equals the clock's
// UnixMicro for a clock without monotonic readings, whatever the origin's
// sub-microsecond part and in either direction.
func TestNowMatchesUnixMicro(t *testing.T) {
	for _, origin := range []time.Duration{0, 1, 700, 999} {
		clock := limitertest.NewFakeClock(t0.Add(origin))
		s, err := New(Config{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []time.Duration{0, 1, 299, 300, 301, 1000, 123_456_789, -1, -701, -1_000_001, 90 * 24 * time.Hour} {
			at := t0.Add(d)
			clock.Set(at)
			if got, want := s.now(), at.UnixMicro(); got != want {
				t.Errorf("origin +%dns, clock +%v: now %d, want %d", origin, d, got, want)
			}
		}
		s.Close()
	}
}

// TestNowIsMonotonic checks the store takes differences of the monotonic
// reading: a wall-clock jump of the origin reading does not show.
func TestNowIsMonotonic(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prev := s.now()
	for range 1000 {
		n := s.now()
		if n < prev {
			t.Fatalf("time went back: %d after %d", n, prev)
		}
		prev = n
	}
	if !strings.Contains(s.origin.String(), " m=") { // how Time prints a monotonic reading
		t.Fatal("SystemClock's origin has no monotonic reading")
	}
}

// TestDefaults pins the defaults New applies and docs/limiter.md states.
func TestDefaults(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := Config{Clock: limiter.SystemClock{}, MaxKeys: 100_000, Shards: 64, SweepInterval: time.Minute}
	if size := s.shards.Size(); s.cfg != want || size != (shardmap.Size{MaxKeys: 100_000, Shards: 64}) {
		t.Fatalf("defaults %+v (map %+v), want %+v", s.cfg, size, want)
	}
	small, err := New(Config{MaxKeys: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if size := small.shards.Size(); small.cfg.Shards != 10 || size.Shards != 10 || size.PerShard() != 1 {
		t.Fatalf("MaxKeys 10: %d shards (map %+v), want 10 of 1 key", small.cfg.Shards, size)
	}

	for file, phrases := range map[string][]string{
		"../../docs/limiter.md": {"| `MaxKeys` | 100,000 |", "| `Shards` | 64 (or `MaxKeys` if smaller) |", "| `SweepInterval` | 1 minute |", "at most 8 heap steps", "`memorystore.ErrFull`"},
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range phrases {
			if !strings.Contains(string(b), p) {
				t.Errorf("%s no longer says %q: update it or the defaults", file, p)
			}
		}
	}
	if shardmap.Sample != 8 {
		t.Errorf("shardmap.Sample is %d; docs/limiter.md says 8", shardmap.Sample)
	}
}
