package middleware_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/admin"
	"github.com/costguard/costguard/overload"
)

// Under store timeouts, the log's account of the fail-open fallback agrees
// with the counters: each line saying the fallback decides (at most one a
// minute) counts the decisions since the previous one, itself included,
// and when a line is written the counts add up to the fail-open decisions
// /admin/stats (and Prometheus) count, one per decision, however many
// store calls a decision made. A request on a
// lane with a budget of its own makes two (the plan's and the lane's),
// each timing out.
func TestFallbackLogsMatchCounters(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	cfg.Lanes = []middleware.Lane{
		{Name: "search", Priority: overload.Normal, Match: middleware.LaneMatch{REST: []string{"GET /api/search"}},
			Budget: &middleware.LaneBudget{Burst: 100, Rate: 100, Per: 100 * time.Second}},
		{Name: "rest", Priority: overload.Normal},
	}
	search := request{method: http.MethodGet, path: "/api/search", header: bearer(aliceKey)}
	broken := learn(t, &failingStore{hang: true}, &cfg, search)
	cfg.FailureMode = budget.FailOpen
	cfg.StoreTimeout = 5 * time.Millisecond
	logs := &countingHandler{}
	cfg.Logger = slog.New(logs)
	stats := admin.NewStats(clock.Now(), nil)
	cfg.Observer = middleware.ObserverFunc(stats.Add)
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	broken(h)
	learnt := stats.Report(clock.Now()).Fallbacks

	// lines returns the fallback_decisions of each line saying that the
	// fallback decides, and their sum.
	lines := func() (counts []int64, sum int64) {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		for _, r := range logs.records {
			if !strings.Contains(r.Message, "local fallback bucket") {
				continue
			}
			var n int64 = -1
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "fallback_decisions" {
					n = a.Value.Int64()
				}
				return true
			})
			counts = append(counts, n)
			sum += n
		}
		return counts, sum
	}
	check := func(step string, wantLines int) {
		t.Helper()
		counts, sum := lines()
		fallbacks := stats.Report(clock.Now()).Fallbacks - learnt
		if len(counts) != wantLines || sum != fallbacks {
			t.Errorf("%s: fallback lines %v (sum %d), want %d line(s) adding up to the %d fail-open decisions counted",
				step, counts, sum, wantLines, fallbacks)
		}
	}

	if w := do(t, h, search); w.Code != http.StatusOK {
		t.Fatalf("the first request in the outage: %d", w.Code)
	}
	check("one decision", 1)
	for range 3 {
		do(t, h, search)
		query(t, h, `{ user(login: "a") { login } }`, bearer(aliceKey))
	}
	if counts, _ := lines(); len(counts) != 1 {
		t.Errorf("six more decisions within the minute: fallback lines %v, want the first alone", counts)
	}
	clock.Advance(time.Minute)
	do(t, h, search)
	check("a minute later", 2)
	if got := stats.Report(clock.Now()).Fallbacks - learnt; got != 8 {
		t.Errorf("%d fail-open decisions counted, want 8", got)
	}
}
