package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLossTracker(t *testing.T) {
	a1 := observation{node: "a", runID: "r1", epoch: "e1"}
	b1 := observation{node: "b", runID: "s1", epoch: "f1"}
	tests := []struct {
		name   string
		rounds [][]observation
		want   []string // substrings of the last round's reasons, in order; nil: none
	}{
		{name: "first round is the baseline", rounds: [][]observation{{a1, b1}}},
		{name: "unchanged", rounds: [][]observation{{a1, b1}, {a1, b1}}},
		{name: "restart: new run_id and token", rounds: [][]observation{{a1}, {{node: "a", runID: "r2", epoch: "e2"}}}, want: []string{"restarted"}},
		{name: "failover to a lagging replica: new run_id, old token", rounds: [][]observation{{a1}, {{node: "a", runID: "r2", epoch: "e1"}}}, want: []string{"restarted"}},
		{name: "flush: same run_id, new token", rounds: [][]observation{{a1}, {{node: "a", runID: "r1", epoch: "e9"}}}, want: []string{"flushed"}},
		{name: "a node down for a round is compared when back", rounds: [][]observation{{a1, b1}, {a1}, {a1, {node: "b", runID: "s2", epoch: "f2"}}}, want: []string{"restarted"}},
		{name: "a node down for a round and back unchanged", rounds: [][]observation{{a1, b1}, {b1}, {a1, b1}}},
		{name: "a new master after the baseline", rounds: [][]observation{{a1}, {a1, b1}}, want: []string{"new"}},
		{name: "nothing answered yet: no baseline", rounds: [][]observation{{}, {a1, b1}}},
		{name: "two nodes lost at once", rounds: [][]observation{{a1, b1}, {{node: "a", runID: "r1", epoch: "x"}, {node: "b", runID: "s9", epoch: "f1"}}}, want: []string{"flushed", "restarted"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tr lossTracker
			var got []string
			for _, r := range tc.rounds {
				got = tr.observe(r)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("lost = %q, want %d matching %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("reason %d = %q, want it to mention %q", i, got[i], w)
				}
			}
		})
	}
}

// The detector with a fake INFO source and a test-driven tick: listeners
// hear of a loss in the round that finds it, once, and not after stop or
// Close.
func TestLossDetector(t *testing.T) {
	var mu sync.Mutex
	obs := []observation{{node: "", runID: "r1", epoch: "e1"}}
	probes := 0
	tick := make(chan time.Time) // unbuffered: a send returns once the loop has it
	rounds := make(chan []string, 10)
	d := &lossDetector{
		interval: time.Hour,
		probe: func(ctx context.Context) []observation {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("probe without a deadline")
			}
			mu.Lock()
			defer mu.Unlock()
			probes++
			return append([]observation(nil), obs...)
		},
		tick:    tick,
		onRound: func(lost []string) { rounds <- lost },
	}
	var heard1, heard2 int
	var hmu sync.Mutex
	stop1 := d.listen(func() { hmu.Lock(); heard1++; hmu.Unlock() })
	d.listen(func() { hmu.Lock(); heard2++; hmu.Unlock() })
	round := func(o ...observation) []string {
		t.Helper()
		mu.Lock()
		obs = o
		mu.Unlock()
		tick <- time.Time{}
		return <-rounds
	}
	heard := func() (int, int) { hmu.Lock(); defer hmu.Unlock(); return heard1, heard2 }

	if lost := <-rounds; lost != nil { // the first round, at once
		t.Fatalf("baseline round lost %q", lost)
	}
	if lost := round(observation{runID: "r1", epoch: "e1"}); lost != nil {
		t.Fatalf("unchanged round lost %q", lost)
	}
	if lost := round(observation{runID: "r2", epoch: "e2"}); len(lost) != 1 {
		t.Fatalf("restart round lost %q", lost)
	}
	if a, b := heard(); a != 1 || b != 1 {
		t.Fatalf("listeners heard %d, %d times; want 1, 1", a, b)
	}
	if lost := round(observation{runID: "r2", epoch: "e2"}); lost != nil {
		t.Fatalf("round after the restart lost %q", lost)
	}
	stop1()
	stop1()
	round(observation{runID: "r2", epoch: "e3"})
	if a, b := heard(); a != 1 || b != 2 {
		t.Fatalf("after stop, listeners heard %d, %d times; want 1, 2", a, b)
	}
	d.close()
	d.close()
	if stop := d.listen(func() { t.Error("listener after close called") }); stop == nil {
		t.Fatal("nil stop")
	}
	if probes != 5 {
		t.Fatalf("%d probes, want one at start and one per tick (5)", probes)
	}
}

// No probe, no goroutine: a client that cannot be probed, or probing off.
func TestLossDetectorOff(t *testing.T) {
	for _, d := range []*lossDetector{
		{interval: time.Second},
		{interval: -1, probe: func(context.Context) []observation { t.Error("probed"); return nil }},
	} {
		d.listen(func() {})()
		if d.loop != nil {
			t.Fatal("loop started")
		}
		d.close()
	}
}

// tagInSlot finds a tag for every slot, within a bounded search.
func TestTagInSlot(t *testing.T) {
	var found [clusterSlots]bool
	left := clusterSlots
	i := 0
	for ; left > 0 && i < 1_000_000; i++ {
		s := slot("%e" + strconv.Itoa(i))
		if !found[s] {
			found[s], left = true, left-1
		}
	}
	if left > 0 {
		t.Fatalf("%d slots without a tag among the first %d", left, i)
	}
	t.Logf("every slot has a tag among the first %d", i)
	for _, s := range []uint16{0, 1, 5460, 5461, 16383} {
		if got := slot(tagInSlot(s)); got != s {
			t.Errorf("slot(tagInSlot(%d)) = %d", s, got)
		}
	}
}

func TestInfoField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\ntcp_port:6379\r\n"
	if v, ok := infoField(info, "run_id"); !ok || v != "abc123" {
		t.Fatalf("run_id = %q, %v", v, ok)
	}
	if _, ok := infoField(info, "nope"); ok {
		t.Fatal("found a missing field")
	}
}

// check is a round on demand: its listeners hear of a loss before it
// returns, and it fails when no node answered, or when probing is off.
func TestLossDetectorCheck(t *testing.T) {
	var obs []observation
	d := &lossDetector{interval: time.Hour, probe: func(context.Context) []observation { return obs }}
	heard := 0
	d.listeners = map[uint64]func(){0: func() { heard++ }} // no probe loop: the rounds are the test's
	ctx := context.Background()
	obs = []observation{{runID: "r1", epoch: "e1"}}
	if err := d.check(ctx); err != nil { // a baseline, whichever round comes first
		t.Fatal(err)
	}
	obs = nil
	if err := d.check(ctx); !errors.Is(err, ErrDataLossUnknown) {
		t.Errorf("no node answered: %v", err)
	}
	obs = []observation{{runID: "r2", epoch: "e2"}}
	if err := d.check(ctx); err != nil || heard != 1 {
		t.Errorf("restart: %v, heard %d; want nil, 1", err, heard)
	}
	for _, off := range []*lossDetector{{interval: time.Second}, {interval: -1, probe: d.probe}} {
		if err := off.check(ctx); !errors.Is(err, ErrDataLossUnknown) {
			t.Errorf("probing off: %v", err)
		}
	}
}
