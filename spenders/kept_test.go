package spenders_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/spenders"
)

// What a Tracker keeps of a plan's name and a principal's key is a copy,
// bounded in bytes, never the caller's memory; a key cut short stays its
// principal's own, and the plan is found by the name it was added under.
func TestKeepsCopies(t *testing.T) {
	tr := newTracker(t, spenders.Config{})
	big := strings.Repeat("u", 1<<20)
	now := time.Unix(1_800_000_000, 0)
	plan := big[:300]
	tr.Add(now, plan, "user:"+big[:10], 5)
	tr.Add(now, plan, "user:"+big[:1000]+"a", 3)
	tr.Add(now, plan, "user:"+big[:1000]+"b", 2)
	for _, p := range tr.Plans() {
		if len(p) != kept.MaxName || kept.Shares(p, big) {
			t.Fatalf("plan of %d bytes, sharing the caller's memory: %v", len(p), kept.Shares(p, big))
		}
	}
	rep := top(t, tr, now, plan, "1m", 10)
	if len(rep.Spenders) != 3 {
		t.Fatalf("%d spenders: %+v", len(rep.Spenders), rep)
	}
	for _, sp := range rep.Spenders {
		if len(sp.Principal) > kept.MaxKey || kept.Shares(sp.Principal, big) {
			t.Fatalf("principal of %d bytes, sharing the caller's memory: %v", len(sp.Principal), kept.Shares(sp.Principal, big))
		}
	}
	if rep.Spenders[1].Principal == rep.Spenders[2].Principal || rep.Spenders[1].Points != 3 {
		t.Fatalf("two long keys merged: %+v", rep.Spenders)
	}
}

// A Tracker given a flood of distinct long keys on every plan it keeps
// holds no more than MaxBytes.
func TestMaxBytesHolds(t *testing.T) {
	cfg := spenders.Config{Capacity: 64, MaxPlans: 4}
	pad := strings.Repeat("k", 4<<10)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	tr := newTracker(t, cfg)
	now := time.Unix(1_800_000_000, 0)
	for i := range 20_000 {
		tr.Add(now, strconv.Itoa(i%6)+pad, strconv.Itoa(i)+pad, int64(i%5+1))
		now = now.Add(50 * time.Millisecond) // every slot of every window
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("held %d bytes, bound %d", held, spenders.MaxBytes(cfg))
	if held > spenders.MaxBytes(cfg) {
		t.Fatalf("the tracker holds %d bytes, above its bound of %d", held, spenders.MaxBytes(cfg))
	}
	runtime.KeepAlive(tr)
}
