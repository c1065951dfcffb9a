package opcosts_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/costguard/costguard/opcosts"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func TestCounts(t *testing.T) {
	tr, err := opcosts.New(opcosts.Config{Capacity: 2})
	if err != nil {
		t.Fatal(err)
	}
	tr.Add(t0, opcosts.Decision{Operation: "Repos", Requested: 61, Actual: 14, HasActual: true})
	tr.Add(t0, opcosts.Decision{Operation: "Repos", Requested: 61, Actual: 61, HasActual: true})
	tr.Add(t0, opcosts.Decision{Operation: "Repos", Requested: 61, Refused: true})
	tr.Add(t0, opcosts.Decision{Requested: 3, Actual: 1, HasActual: true}) // anonymous
	tr.Add(t0, opcosts.Decision{Operation: "Never", Requested: 0})         // not priced: not counted
	rep := tr.Report(10)
	if len(rep.Operations) != 2 {
		t.Fatalf("%d operations, want 2: %+v", len(rep.Operations), rep.Operations)
	}
	r := rep.Operations[0]
	if r.Name != "Repos" || r.Runs != 2 || r.Refused != 1 || r.RequestedPoints != 122 || r.ActualPoints != 75 {
		t.Errorf("Repos: %+v", r)
	}
	// 61 is in (50, 100]: bucket 6; 14 in (10, 20]: bucket 4.
	if r.RequestedHistogram[6] != 2 || r.ActualHistogram[4] != 1 || r.ActualHistogram[6] != 1 {
		t.Errorf("Repos histograms: %v %v", r.RequestedHistogram, r.ActualHistogram)
	}
	if a := rep.Operations[1]; a.Name != opcosts.Anonymous || a.Runs != 1 || a.ActualPoints != 1 {
		t.Errorf("anonymous: %+v", a)
	}
	// A third name takes the place of the cheapest (the anonymous one),
	// whose figures go to Other.
	tr.Add(t0.Add(time.Minute), opcosts.Decision{Operation: "Search", Requested: 10, Actual: 10, HasActual: true})
	rep = tr.Report(10)
	if rep.Operations[1].Name != "Search" || rep.Operations[1].Runs != 1 || !rep.Operations[1].Since.Equal(t0.Add(time.Minute)) {
		t.Errorf("Search: %+v", rep.Operations[1])
	}
	if rep.Other.Runs != 1 || rep.Other.RequestedPoints != 3 {
		t.Errorf("other: %+v", rep.Other)
	}
	if rep = tr.Report(1); len(rep.Operations) != 1 {
		t.Errorf("limit 1: %d operations", len(rep.Operations))
	}
}

// A flood of distinct names, each priced low, never takes the place of an
// operation that requested more than the flood's total over the capacity.
func TestHeavyOperationsKeepTheirPlace(t *testing.T) {
	tr, err := opcosts.New(opcosts.Config{Capacity: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100_000 {
		if i%10 == 0 {
			tr.Add(t0, opcosts.Decision{Operation: "Checkout", Requested: 50})
		}
		tr.Add(t0, opcosts.Decision{Operation: fmt.Sprintf("Flood%d", i), Requested: 1, Refused: true})
	}
	rep := tr.Report(10)
	if rep.Operations[0].Name != "Checkout" {
		t.Fatalf("top is %s, want Checkout", rep.Operations[0].Name)
	}
	if len(rep.Operations) != 10 {
		t.Errorf("%d operations kept, want 10", len(rep.Operations))
	}
}

func TestConfigRefused(t *testing.T) {
	for _, c := range []int{-1, 10_001} {
		if _, err := opcosts.New(opcosts.Config{Capacity: c}); !errors.Is(err, opcosts.ErrInvalidConfig) {
			t.Errorf("capacity %d: %v", c, err)
		}
	}
}

func BenchmarkAdd(b *testing.B) {
	tr, _ := opcosts.New(opcosts.Config{})
	names := make([]string, 50)
	for i := range names {
		names[i] = fmt.Sprintf("Op%d", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tr.Add(t0, opcosts.Decision{Operation: names[i%len(names)], Requested: 61, Actual: 14, HasActual: true})
		i++
	}
}
