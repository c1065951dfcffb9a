package admin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/admin"
)

// A refusal's code and plan are counted under copies cut to
// kept.MaxName bytes, never the Event's memory.
func TestStatsKeepCopies(t *testing.T) {
	stats := admin.NewStats(time.Unix(0, 0), nil)
	big := strings.Repeat("c", 1<<20)
	stats.Add(&middleware.Event{Outcome: budget.ClassRateLimited, Code: big[:20], Plan: big[:1000]})
	rep := stats.Report(time.Unix(1, 0))
	if len(rep.Refusals) != 1 {
		t.Fatalf("refusals: %+v", rep.Refusals)
	}
	r := rep.Refusals[0]
	if r.Code != big[:20] || len(r.Plan) != kept.MaxName || kept.Shares(r.Code, big) || kept.Shares(r.Plan, big) {
		t.Fatalf("code %.20q and plan of %d bytes share the event's memory: %v %v", r.Code, len(r.Plan), kept.Shares(r.Code, big), kept.Shares(r.Plan, big))
	}
}
