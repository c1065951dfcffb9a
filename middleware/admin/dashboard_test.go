package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/admin"
	"github.com/costguard/costguard/overload"
)

// The dashboard's page and assets are served without a token (they hold
// no figure), with a policy that lets the page reach only its own origin;
// its data routes still ask for one.
func TestDashboardServed(t *testing.T) {
	stats := admin.NewStats(time.Unix(0, 0), nil)
	srv, _ := newAPI(t, admin.Config{TokenSHA256: admin.HashToken(token), Stats: stats})
	for path, typ := range map[string]string{
		"/admin/":                     "text/html",
		"/admin/assets/dashboard.js":  "text/javascript",
		"/admin/assets/dashboard.css": "text/css",
		"/admin/assets/icon.svg":      "image/svg+xml",
	} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), typ) {
			t.Errorf("%s: %d %q, want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), typ)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
	}
	if code, _ := call(t, srv, "GET", "/admin/assets/nope.js", "", ""); code != http.StatusUnauthorized {
		t.Errorf("an unknown asset without a token: %d, want 401 (only the dashboard's files are open)", code)
	}
	if code, _ := call(t, srv, "POST", "/admin/", "", ""); code != http.StatusUnauthorized {
		t.Errorf("POST /admin/ without a token: %d, want 401", code)
	}
	if code, _ := call(t, srv, "GET", "/admin/stats", "", ""); code != http.StatusUnauthorized {
		t.Errorf("/admin/stats without a token: %d, want 401", code)
	}
	if code, _ := call(t, srv, "GET", "/admin/stats", "Bearer "+token, ""); code != http.StatusOK {
		t.Errorf("/admin/stats with the token: %d, want 200", code)
	}
}

// The page and its script name no other origin: every URL they hold is
// relative.
func TestDashboardNoExternalURL(t *testing.T) {
	srv, _ := newAPI(t, admin.Config{NoToken: true})
	abs := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+`)
	for _, path := range []string{"/admin/", "/admin/assets/dashboard.js", "/admin/assets/dashboard.css"} {
		_, body := call(t, srv, "GET", path, "", "")
		for _, m := range abs.FindAllString(body, -1) {
			if m != "http://www.w3.org" { // the SVG namespace, a name and never fetched
				t.Errorf("%s names %q", path, m)
			}
		}
	}
}

// /admin/stats counts decisions by outcome, refusals by code and plan,
// points, the breaker and the requests in flight; the refusals' pairs are
// bounded.
func TestStats(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	stats := admin.NewStats(now.Add(-time.Hour), func() (middleware.Load, bool) {
		return middleware.Load{InFlight: 2, Peak: 7, Capacity: 8, Lanes: []middleware.LaneLoad{
			{Lane: "checkout", Priority: overload.Critical, InFlight: 0, ShedAt: 8},
			{Lane: "anonymous", Priority: overload.Sheddable, InFlight: 2, ShedAt: 4},
		}}, true
	})
	srv, _ := newAPI(t, admin.Config{NoToken: true, Stats: stats, Clock: fixedClock(now)})
	stats.Add(&middleware.Event{Plan: "free", Outcome: budget.ClassAdmitted, RequestedCost: 10, ActualCost: 4, HasActualCost: true, Breaker: guard.BreakerClosed})
	stats.Add(&middleware.Event{Plan: "free", Outcome: budget.ClassAdmitted, RequestedCost: 10})
	stats.Add(&middleware.Event{Plan: "anon", Outcome: budget.ClassRateLimited, Code: "rate_limited", RequestedCost: 1, Breaker: guard.BreakerOpen, BreakerChanged: true, Fallback: true})
	stats.Add(&middleware.Event{Plan: "anon", Outcome: budget.ClassShed})
	code, body := call(t, srv, "GET", "/admin/stats", "", "")
	want := `{"since":"2026-01-02T02:04:05Z","now":"2026-01-02T03:04:05Z","decisions":{"admitted":2,"rate_limited":1,"shed":1},` +
		`"refusals":[{"code":"rate_limited","plan":"anon","count":1},{"code":"shed","plan":"anon","count":1}],` +
		`"requested_points":21,"actual_points":4,"actual_runs":1,"fallbacks":1,"breaker":"open","breaker_changes":1,"in_flight":{"now":2,"peak":7,"capacity":8,"lanes":[` +
		`{"lane":"checkout","priority":"critical","now":0,"shed_at":8},{"lane":"anonymous","priority":"sheddable","now":2,"shed_at":4}]}}`
	if code != http.StatusOK || body != want {
		t.Fatalf("got %d %s\nwant 200 %s", code, body, want)
	}

	for i := range admin.MaxRefusalKeys + 10 {
		stats.Add(&middleware.Event{Plan: fmt.Sprint("p", i), Outcome: budget.ClassCostExceeded, Code: "cost_exceeded"})
	}
	var r admin.StatsReport
	_, body = call(t, srv, "GET", "/admin/stats", "", "")
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Refusals) != admin.MaxRefusalKeys+1 {
		t.Errorf("%d refusal pairs, want %d and (other)", len(r.Refusals), admin.MaxRefusalKeys)
	}
	var other int64
	for _, x := range r.Refusals {
		if x.Code == "(other)" {
			other = x.Count
		}
	}
	if other != 12 {
		t.Errorf("(other) counts %d, want 12", other)
	}
}

// The dashboard's script only reads: its fetch calls name no method (GET),
// so the JSON body type asked of every other method never concerns it,
// and it is answered under the listener's own name and origin.
func TestDashboardOnlyReads(t *testing.T) {
	srv, _ := newAPI(t, admin.Config{NoToken: true})
	code, js := call(t, srv, "GET", "/admin/assets/dashboard.js", "", "")
	if code != http.StatusOK || !strings.Contains(js, "fetch(") {
		t.Fatalf("dashboard.js: %d", code)
	}
	if m := regexp.MustCompile(`(?i)\bmethod\b`).FindString(js); m != "" {
		t.Errorf("dashboard.js names a request method (%q): a write must send Content-Type: application/json", m)
	}
}

// Before the server has answered, the page shows no figure: every one is
// "–", not a 0 that reads as data (a page without its token yet, or whose
// server does not answer, stays so).
func TestDashboardDashBeforeData(t *testing.T) {
	srv, _ := newAPI(t, admin.Config{NoToken: true})
	_, page := call(t, srv, "GET", "/admin/", "", "")
	figures := regexp.MustCompile(`<(b|span|dd) id="([a-z-]+)"[^>]*>([^<]*)</(b|span|dd)>`).FindAllStringSubmatch(page, -1)
	if len(figures) < 10 {
		t.Fatalf("%d figures found in the page", len(figures))
	}
	for _, f := range figures {
		if id, v := f[2], f[3]; id != "status" && v != "–" {
			t.Errorf("#%s shows %q before any data, want –", id, v)
		}
	}
}
