package lastknown

import (
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/limiter"
)

// A budget the store learns keeps a copy of its key, never the caller's
// memory.
func TestBudgetKeepsACopy(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("k", 1<<20)
	l := limiter.Limit{Burst: 10, Rate: 10, Period: time.Second}
	s.Observe(big[:40], l, 1, limiter.Decision{Allowed: true, Remaining: 9, Limit: 10})
	n := 0
	for i := range s.shards {
		for b := range s.shards[i].m {
			n++
			if kept.Shares(b.key, big) {
				t.Fatal("the store keeps the caller's memory")
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d budgets", n)
	}
}
