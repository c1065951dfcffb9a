package spacesaving

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/costguard/costguard/internal/kept"
)

// A counter keeps a copy of its key, whether fresh or taken from another
// key: never the caller's memory.
func TestCounterKeepsACopy(t *testing.T) {
	s := New[struct{}](1)
	big := strings.Repeat("k", 1<<20)
	for _, key := range []string{big[:10], big[:20]} { // the second takes the first's counter
		s.Add(key, 1, nil)
		for _, c := range s.Counters() {
			if c.Key != key || kept.Shares(c.Key, big) {
				t.Fatalf("counter %q for %q shares the caller's memory: %v", c.Key, key, kept.Shares(c.Key, big))
			}
		}
	}
	for k := range s.index {
		if kept.Shares(k, big) {
			t.Fatal("the index holds the caller's memory")
		}
	}
}

// The heap holds its order and positions, and the bounds hold, on a random
// stream against exact totals.
func TestSummaryBounds(t *testing.T) {
	for _, capacity := range []int{1, 2, 7, 64} {
		r := rand.New(rand.NewPCG(uint64(capacity), 9))
		s := New[int](capacity)
		exact := map[string]int64{}
		var evicted int
		for i := range 20_000 {
			// A skewed stream: a few heavy keys among many light ones.
			key := fmt.Sprint("k", r.IntN(1+r.IntN(500)))
			w := int64(1 + r.IntN(10))
			exact[key] += w
			c, isNew := s.Add(key, w, func(old *Counter[int]) {
				evicted++
				if s.index[old.Key] != old {
					t.Fatalf("evicted %q is not its key's counter", old.Key)
				}
			})
			if isNew && c.Value != 0 {
				t.Fatalf("a new counter's value is %d, want zero", c.Value)
			}
			c.Value++
			if i%997 == 0 {
				checkHeap(t, s)
			}
		}
		checkHeap(t, s)
		var total int64
		for _, v := range exact {
			total += v
		}
		if s.Total() != total {
			t.Fatalf("capacity %d: Total %d, want %d", capacity, s.Total(), total)
		}
		bound := total / int64(capacity)
		if s.Floor() > bound {
			t.Errorf("capacity %d: floor %d above N/capacity %d", capacity, s.Floor(), bound)
		}
		for _, c := range s.Counters() {
			truth := exact[c.Key]
			if c.Estimate < truth || c.Estimate-c.Err > truth || c.Err > s.Floor() {
				t.Errorf("capacity %d: %q estimate %d err %d, true %d, floor %d", capacity, c.Key, c.Estimate, c.Err, truth, s.Floor())
			}
		}
		for k, v := range exact {
			if v > bound && s.index[k] == nil {
				t.Errorf("capacity %d: %q spent %d > N/capacity %d but holds no counter", capacity, k, v, bound)
			}
		}
		if capacity < 500 && evicted == 0 {
			t.Errorf("capacity %d: nothing evicted", capacity)
		}
		s.Reset()
		if s.Total() != 0 || len(s.Counters()) != 0 || s.Floor() != 0 {
			t.Errorf("after Reset: total %d, %d counters", s.Total(), len(s.Counters()))
		}
	}
}

func checkHeap(t *testing.T, s *Summary[int]) {
	t.Helper()
	for i, c := range s.heap {
		if c.at != i {
			t.Fatalf("counter %q at %d says %d", c.Key, i, c.at)
		}
		if i > 0 && s.heap[(i-1)/2].Estimate > c.Estimate {
			t.Fatalf("heap order broken at %d", i)
		}
	}
	if len(s.index) != len(s.heap) {
		t.Fatalf("%d keys indexed, %d counters", len(s.index), len(s.heap))
	}
}

func TestSaturatingAdd(t *testing.T) {
	const maxInt = 1<<63 - 1
	for _, tc := range []struct{ a, b, want int64 }{{1, 2, 3}, {maxInt, 1, maxInt}, {maxInt - 1, 1, maxInt}, {maxInt / 2, maxInt, maxInt}} {
		if got := SaturatingAdd(tc.a, tc.b); got != tc.want {
			t.Errorf("SaturatingAdd(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
