package opcosts_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/opcosts"
)

// The name a Tracker keeps is a copy of at most MaxNameBytes, never the
// caller's memory: a name cut from a 1 MB document does not keep it.
func TestNameIsACopy(t *testing.T) {
	tr, err := opcosts.New(opcosts.Config{Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Repeat("N", 1<<20)
	for _, name := range []string{doc[:10], doc[:100]} { // the second takes the first's place
		tr.Add(t0, opcosts.Decision{Operation: name, Requested: 1})
		r := tr.Report(10)
		if len(r.Operations) != 1 {
			t.Fatalf("%d operations", len(r.Operations))
		}
		got := r.Operations[0].Name
		if got != kept.Cut(name, opcosts.MaxNameBytes) || kept.Shares(got, doc) {
			t.Fatalf("kept %.20q of %d bytes, sharing the caller's memory: %v", got, len(got), kept.Shares(got, doc))
		}
	}
}

// A Tracker given a flood of distinct long names holds no more than
// MaxBytes.
func TestMaxBytesHolds(t *testing.T) {
	cfg := opcosts.Config{Capacity: 1000}
	pad := strings.Repeat("n", 4<<10)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	tr, err := opcosts.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20_000 {
		tr.Add(t0, opcosts.Decision{Operation: strconv.Itoa(i) + pad, Requested: int64(i%7 + 1), Actual: 3, HasActual: true})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("held %d bytes, bound %d", held, opcosts.MaxBytes(cfg))
	if held > opcosts.MaxBytes(cfg) {
		t.Fatalf("the tracker holds %d bytes, above its bound of %d", held, opcosts.MaxBytes(cfg))
	}
	runtime.KeepAlive(tr)
}
