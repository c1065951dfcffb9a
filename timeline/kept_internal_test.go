package timeline

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/kept"
)

// What Add keeps is copied and bounded: the principal's key, the
// operation and the names share nothing with what the caller passed,
// however large it was.
func TestAddKeepsCopies(t *testing.T) {
	tl, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Repeat("d", 1<<20)
	principal := "user:" + doc[:4000]
	now := time.Unix(1_800_000_000, 0)
	tl.Add(principal, Entry{Time: now, Kind: doc[:7], Operation: doc[:100], Plan: doc[:300], Outcome: doc[:8], Code: doc[:12]})
	for k := range tl.byKey {
		if len(k) > kept.MaxKey || kept.Shares(k, doc) || kept.Shares(k, principal) {
			t.Fatalf("the key held is %d bytes, shares the caller's: %v", len(k), kept.Shares(k, principal))
		}
	}
	got := tl.Recent(now, principal)
	if len(got) != 1 {
		t.Fatalf("recent: %d entries", len(got))
	}
	e := got[0]
	for _, s := range []string{e.Kind, e.Operation, e.Plan, e.Outcome, e.Code} {
		if kept.Shares(s, doc) {
			t.Fatalf("%.20q shares the caller's memory", s)
		}
	}
	if len(e.Operation) != kept.MaxOperation || len(e.Plan) != kept.MaxName {
		t.Fatalf("operation of %d bytes, plan of %d", len(e.Operation), len(e.Plan))
	}
}

// A timeline filled at both its bounds (every principal, every entry)
// with strings far longer than it keeps holds no more than MaxBytes.
func TestMaxBytesHolds(t *testing.T) {
	cfg := Config{PerPrincipal: 50, MaxEntries: 20_000, MaxPrincipals: 2_000}
	pad := strings.Repeat("p", 1<<10)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	tl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	for p := range cfg.MaxPrincipals {
		key := strconv.Itoa(p) + pad
		for i := range cfg.MaxEntries / cfg.MaxPrincipals {
			tl.Add(key, Entry{Time: now, Operation: strconv.Itoa(i) + pad, Plan: strconv.Itoa(p%2000) + pad, Kind: "graphql", Outcome: "admitted"})
		}
	}
	if entries, principals := tl.Len(); entries != cfg.MaxEntries || principals != cfg.MaxPrincipals {
		t.Fatalf("%d entries of %d principals", entries, principals)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("held %d bytes, bound %d", held, MaxBytes(cfg))
	if held > MaxBytes(cfg) {
		t.Fatalf("the timeline holds %d bytes, above its bound of %d", held, MaxBytes(cfg))
	}
	runtime.KeepAlive(tl)
}
