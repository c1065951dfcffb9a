package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/admin"
)

// history reads GET /admin/stats/history.
func history(t *testing.T, get func() (int, string)) admin.HistoryReport {
	t.Helper()
	code, body := get()
	if code != http.StatusOK {
		t.Fatalf("/admin/stats/history: %d %s", code, body)
	}
	var r admin.HistoryReport
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// GET /admin/stats/history answers the last 15 minutes of the counters,
// one sample per 10 seconds of the decisions' times, from the server's
// start: a reader that arrives after an incident sees it.
func TestStatsHistory(t *testing.T) {
	since := time.Date(2026, 12, 3, 12, 0, 3, 0, time.UTC)
	clock := limitertest.NewFakeClock(since)
	stats := admin.NewStats(since, nil)
	srv, _ := newAPI(t, admin.Config{TokenSHA256: admin.HashToken(token), Stats: stats, Clock: clock})
	get := func() (int, string) { return call(t, srv, "GET", "/admin/stats/history", "Bearer "+token, "") }
	if code, _ := call(t, srv, "GET", "/admin/stats/history", "", ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", code)
	}

	// At the start: one sample, empty, from the start to now.
	code, body := get()
	want := `{"since":"2026-12-03T12:00:03Z","now":"2026-12-03T12:00:03Z","interval_seconds":10,"samples":[` +
		`{"start":"2026-12-03T12:00:03Z","end":"2026-12-03T12:00:03Z","decisions":{},"refusals":{},"requested_points":0,"actual_points":0,"actual_runs":0,"fallbacks":0,"breaker_changes":0}]}`
	if code != http.StatusOK || body != want {
		t.Fatalf("got %d %s\nwant 200 %s", code, body, want)
	}

	at := func(d time.Duration) time.Time { return since.Add(d) }
	stats.Add(&middleware.Event{Time: at(2 * time.Second), Plan: "free", Outcome: budget.ClassAdmitted, RequestedCost: 10, ActualCost: 4, HasActualCost: true})
	stats.Add(&middleware.Event{Time: at(9 * time.Second), Plan: "anon", Outcome: budget.ClassRateLimited, Code: "RATE_LIMITED", RequestedCost: 3, Fallback: true, BreakerChanged: true})
	stats.Add(&middleware.Event{Time: at(16 * time.Second), Plan: "anon", Outcome: budget.ClassShed})
	stats.Add(&middleware.Event{Plan: "anon", Outcome: budget.ClassShed}) // no time: in the totals only
	clock.Set(at(22 * time.Second))
	code, body = get()
	want = `{"since":"2026-12-03T12:00:03Z","now":"2026-12-03T12:00:25Z","interval_seconds":10,"samples":[` +
		`{"start":"2026-12-03T12:00:03Z","end":"2026-12-03T12:00:10Z","decisions":{"admitted":1},"refusals":{},"requested_points":10,"actual_points":4,"actual_runs":1,"fallbacks":0,"breaker_changes":0},` +
		`{"start":"2026-12-03T12:00:10Z","end":"2026-12-03T12:00:20Z","decisions":{"rate_limited":1,"shed":1},"refusals":{"RATE_LIMITED":1,"shed":1},"requested_points":3,"actual_points":0,"actual_runs":0,"fallbacks":1,"breaker_changes":1},` +
		`{"start":"2026-12-03T12:00:20Z","end":"2026-12-03T12:00:25Z","decisions":{},"refusals":{},"requested_points":0,"actual_points":0,"actual_runs":0,"fallbacks":0,"breaker_changes":0}]}`
	if code != http.StatusOK || body != want {
		t.Fatalf("got %d %s\nwant 200 %s", code, body, want)
	}

	// An incident at 12:05: 40 refusals under 20 codes in one interval.
	// The sample names 15 codes and counts the rest as (other).
	for i := range 40 {
		stats.Add(&middleware.Event{Time: at(5*time.Minute + time.Duration(i)*time.Millisecond), Plan: "anon",
			Outcome: budget.ClassCostExceeded, Code: fmt.Sprintf("CODE_%02d", i%20)})
	}
	// Opened at 12:14:59: every interval since the start, 90 of them, the
	// incident among them.
	clock.Set(time.Date(2026, 12, 3, 12, 14, 59, 0, time.UTC))
	r := history(t, get)
	if len(r.Samples) != admin.HistorySamples || !r.Samples[0].Start.Equal(since) {
		t.Fatalf("%d samples from %v, want %d from the start", len(r.Samples), r.Samples[0].Start, admin.HistorySamples)
	}
	var incident *admin.Sample
	for i := range r.Samples {
		if r.Samples[i].Start.Equal(time.Date(2026, 12, 3, 12, 5, 0, 0, time.UTC)) {
			incident = &r.Samples[i]
		}
	}
	if incident == nil || incident.Decisions["cost_exceeded"] != 40 || len(incident.Refusals) != admin.MaxHistoryCodes ||
		incident.Refusals["CODE_00"] != 2 || incident.Refusals["(other)"] != 10 {
		t.Fatalf("the incident's sample: %+v", incident)
	}

	// At 12:20:05 the oldest kept is 12:05:10: the incident has aged out,
	// and a decision of 12:15:00 took the slot of 12:00:00; one reported
	// late for 12:00:05 is left out of the history.
	stats.Add(&middleware.Event{Time: time.Date(2026, 12, 3, 12, 15, 0, 0, time.UTC), Outcome: budget.ClassAdmitted})
	stats.Add(&middleware.Event{Time: at(2 * time.Second), Outcome: budget.ClassAdmitted})
	clock.Set(time.Date(2026, 12, 3, 12, 20, 5, 0, time.UTC))
	r = history(t, get)
	var total int64
	for _, s := range r.Samples {
		for _, n := range s.Decisions {
			total += n
		}
	}
	if len(r.Samples) != admin.HistorySamples || r.Samples[0].Start != time.Date(2026, 12, 3, 12, 5, 10, 0, time.UTC) || total != 1 {
		t.Fatalf("%d samples from %v counting %d decisions, want %d from 12:05:10 counting 1", len(r.Samples), r.Samples[0].Start, total, admin.HistorySamples)
	}
	// The totals count every decision.
	if rep := stats.Report(clock.Now()); rep.Decisions["admitted"] != 3 || rep.Decisions["shed"] != 2 {
		t.Errorf("totals: %v", rep.Decisions)
	}
}

// The history's memory is the documented bound, on a 64-bit machine.
func TestHistoryBytes(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the documented figure is a 64-bit machine's")
	}
	if admin.HistoryBytes != 609_120 {
		t.Errorf("HistoryBytes = %s, the docs say 609,120", strconv.FormatInt(admin.HistoryBytes, 10))
	}
}

// A history filled to its bounds, every sample with the most codes it
// counts, each longer than it keeps, and every outcome, holds its heap
// under HistoryBytes and the refusals' table bound beside it: it keeps
// copies, never the events' strings.
func TestHistoryHeapBound(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	stats := admin.NewStats(time.Unix(0, 0), nil)
	t0 := time.Unix(1_800_000_000, 0)
	for i := range admin.HistorySamples {
		at := t0.Add(time.Duration(i) * admin.HistoryInterval)
		for j := range admin.MaxHistoryCodes + 4 {
			code := fmt.Sprintf("%04d-%02d", i, j) + big[:2000]
			stats.Add(&middleware.Event{Time: at, Outcome: classes[j%len(classes)], Code: code, Plan: "p"})
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(stats)
	runtime.KeepAlive(big)
	const refusals = admin.MaxRefusalKeys * (2*256 + 128) // the refusals' table, filled too
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("history and refusals filled: %d bytes (bound %d + %d)", grew, admin.HistoryBytes, refusals)
	if grew > admin.HistoryBytes+refusals {
		t.Errorf("the heap grew %d bytes, above the bound %d", grew, admin.HistoryBytes+refusals)
	}
}

// classes are the outcomes the library reports.
var classes = []budget.Class{budget.ClassRateLimited, budget.ClassCostExceeded, budget.ClassUnavailable,
	budget.ClassShed, budget.ClassShadowRejected, budget.ClassAdmitted}
