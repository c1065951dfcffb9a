package admin_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/admin"
	"github.com/costguard/costguard/spenders"
)

const token = "s3cret-admin-token"

// newAPI serves the admin API of a limiter with plans free, pro and anon
// on a real listener.
func newAPI(t *testing.T, cfg admin.Config) (*httptest.Server, *middleware.Limiter) {
	t.Helper()
	lim, err := middleware.New(middleware.Dependencies{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, middleware.Policy{
		Plans: map[string]budget.Plan{
			"free": {Burst: 100, Rate: 100, Per: 100 * time.Second},
			"pro":  {Burst: 1000, Rate: 1000, Per: 100 * time.Second},
			"anon": {Burst: 20, Rate: 20, Per: 100 * time.Second},
		},
		AnonymousPlan: "anon",
		APIKeys:       map[string]identity.APIKey{"alice-key": {Principal: "alice", Plan: "free"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := admin.New(lim, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, lim
}

func call(t *testing.T, srv *httptest.Server, method, path, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if method != http.MethodGet && method != http.MethodHead {
		req.Header.Set("Content-Type", "application/json") // as a script sends it
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestAdminAPI(t *testing.T) {
	srv, _ := newAPI(t, admin.Config{TokenSHA256: admin.HashToken(token)})
	ok := "Bearer " + token
	for _, tc := range []struct {
		name, method, path, auth, body string
		status                         int
		want                           string // the body, or a part of it for errors
	}{
		{"no token", "GET", "/admin/principals/alice?plan=free", "", "", 401, `{"error":"a bearer token is required (Authorization: Bearer <token>)"}`},
		{"wrong token", "GET", "/admin/principals/alice?plan=free", "Bearer nope", "", 401, "bearer token is required"},
		{"basic auth", "PUT", "/admin/principals/alice/override", "Basic " + token, `{"plan":"pro"}`, 401, "bearer token is required"},
		{"no override yet", "GET", "/admin/principals/alice?plan=free", ok, "", 200,
			`{"principal":"user:alice","plan":"free","override":null,"policies":[{"name":"free","limit":100,"remaining":100,"reset_seconds":0}]}`},
		{"plan needed", "GET", "/admin/principals/alice", ok, "", 400, "say which plan it is on (?plan=<name>)"},
		{"unknown plan to read", "GET", "/admin/principals/alice?plan=gold", ok, "", 400, `no such plan \"gold\"`},
		{"bad principal", "GET", "/admin/principals/key:xyz?plan=free", ok, "", 400, "SHA-256"},
		{"not JSON", "PUT", "/admin/principals/alice/override", ok, `plan=pro`, 400, `{"error":"override: invalid override: the body is not valid JSON"}`},
		{"empty", "PUT", "/admin/principals/alice/override", ok, ``, 400, "not valid JSON"},
		{"nothing in it", "PUT", "/admin/principals/alice/override", ok, `{}`, 400, "name a plan"},
		{"unknown member", "PUT", "/admin/principals/alice/override", ok, `{"tier":"gold"}`, 400, `unknown member \"tier\"`},
		{"bad per", "PUT", "/admin/principals/alice/override", ok, `{"burst":5,"per":"soon"}`, 400, `\"per\": \"soon\" is not a duration`},
		{"bad until", "PUT", "/admin/principals/alice/override", ok, `{"plan":"pro","until":"friday"}`, 400, "RFC 3339"},
		{"past until", "PUT", "/admin/principals/alice/override", ok, `{"plan":"pro","until":"2001-01-01T00:00:00Z"}`, 400, "not in the future"},
		{"unknown plan", "PUT", "/admin/principals/alice/override", ok, `{"plan":"gold"}`, 400, `no such plan \"gold\" (the plans are \"anon\", \"free\", \"pro\")`},
		{"a burst past exact arithmetic", "PUT", "/admin/principals/alice/override", ok, `{"burst":9223372036854775807,"rate":1,"per":"1h"}`, 400, "exceeds 2^53-1"},
		{"a quota past exact arithmetic", "PUT", "/admin/principals/alice/override", ok, `{"plan":"pro","quota":{"limit":9223372036854775807,"per":"24h"}}`, 400, `override on plan \"pro\": quota: limiter: invalid limit`},
		{"a fractional burst", "PUT", "/admin/principals/alice/override", ok, `{"burst":1e30}`, 400, `\"burst\" must be a whole number`},
		{"too large", "PUT", "/admin/principals/alice/override", ok, `{"plan":"` + strings.Repeat("p", admin.MaxBodyBytes) + `"}`, 413, "larger than"},
		{"delete nothing", "DELETE", "/admin/principals/alice/override", ok, "", 404, "has no override"},
		{"set a plan", "PUT", "/admin/principals/alice/override", ok, `{"plan":"pro","until":"2999-01-01T00:00:00Z"}`, 200,
			`{"principal":"user:alice","override":{"plan":"pro","until":"2999-01-01T00:00:00Z"}}`},
		{"read it", "GET", "/admin/principals/alice", ok, "", 200,
			`{"principal":"user:alice","plan":"pro","override":{"plan":"pro","until":"2999-01-01T00:00:00Z"},"policies":[{"name":"pro","limit":1000,"remaining":1000,"reset_seconds":0}]}`},
		{"set limits", "PUT", "/admin/principals/user:alice/override", ok, `{"burst":20000,"rate":20000,"per":"1h","concurrency":4}`, 200,
			`{"principal":"user:alice","override":{"burst":20000,"rate":20000,"per":"1h0m0s","concurrency":4}}`},
		{"read them", "GET", "/admin/principals/alice?plan=free", ok, "", 200,
			`{"principal":"user:alice","plan":"free","override":{"burst":20000,"rate":20000,"per":"1h0m0s","concurrency":4},"policies":[{"name":"override:free","limit":20000,"remaining":20000,"reset_seconds":0}]}`},
		{"an IPv6 /64, escaped", "PUT", "/admin/principals/ip:2001:db8:1:2::%2F64/override", ok, `{"plan":"free"}`, 200,
			`{"principal":"ip:2001:db8:1:2::/64","override":{"plan":"free"}}`},
		{"delete", "DELETE", "/admin/principals/alice/override", ok, "", 204, ""},
		{"gone", "GET", "/admin/principals/alice?plan=free", ok, "", 200,
			`{"principal":"user:alice","plan":"free","override":null,"policies":[{"name":"free","limit":100,"remaining":100,"reset_seconds":0}]}`},
		{"other routes", "GET", "/admin/principals", ok, "", 404, "404 page not found"},
	} {
		status, body := call(t, srv, tc.method, tc.path, tc.auth, tc.body)
		if status != tc.status || (tc.want == "" && body != "") || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s\nwant %d %s", tc.name, status, body, tc.status, tc.want)
		}
	}
}

func TestAdminNoToken(t *testing.T) {
	if _, err := admin.New(nil, admin.Config{}); !errors.Is(err, admin.ErrNoToken) {
		t.Errorf("no token: %v, want ErrNoToken", err)
	}
	if _, err := admin.New(nil, admin.Config{TokenSHA256: "abc"}); err == nil {
		t.Error("a token hash that is not one: accepted")
	}
	srv, _ := newAPI(t, admin.Config{NoToken: true})
	if status, body := call(t, srv, "PUT", "/admin/principals/alice/override", "", `{"plan":"pro"}`); status != 200 {
		t.Errorf("NoToken: %d %s", status, body)
	}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// GET /admin/top lists each plan's biggest spenders over a window, behind
// the token like every route.
func TestTopSpenders(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 30, 0, time.UTC)
	tr, err := spenders.New(spenders.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tr.Add(t0, "free", "user:alice", 40)
	tr.Add(t0, "free", "user:bob", 70)
	tr.Add(t0, "free", "user:alice", 45)
	tr.Add(t0, "anon", "ip:192.0.2.1", 5)
	srv, _ := newAPI(t, admin.Config{TokenSHA256: admin.HashToken(token), Spenders: tr, Clock: fixedClock(t0)})
	ok := "Bearer " + token
	for _, tc := range []struct {
		name, path, auth string
		status           int
		want             string
	}{
		{"no token", "/admin/top", "", 401, `{"error":"a bearer token is required (Authorization: Bearer <token>)"}`},
		{"one plan", "/admin/top?plan=free&window=1m&limit=1", ok, 200,
			`{"window":"1m","reports":[{"plan":"free","window":"1m","total_points":155,"error_bound":0,"cut":70,"spenders":[{"principal":"user:alice","points":85,"error":0}]}]}`},
		{"every plan", "/admin/top?window=15m", ok, 200,
			`{"window":"15m","reports":[{"plan":"anon","window":"15m","total_points":5,"error_bound":0,"cut":0,"spenders":[{"principal":"ip:192.0.2.1","points":5,"error":0}]},` +
				`{"plan":"free","window":"15m","total_points":155,"error_bound":0,"cut":0,"spenders":[{"principal":"user:alice","points":85,"error":0},{"principal":"user:bob","points":70,"error":0}]}]}`},
		{"a plan without spenders", "/admin/top?plan=pro", ok, 200,
			`{"window":"1m","reports":[{"plan":"pro","window":"1m","total_points":0,"error_bound":0,"cut":0,"spenders":[]}]}`},
		{"unknown window", "/admin/top?window=5m", ok, 400, `{"error":"spenders: unknown window: \"5m\" (known: 1m, 15m)"}`},
		{"bad limit", "/admin/top?limit=0", ok, 400, `{"error":"limit must be a whole number from 1 to 1000"}`},
	} {
		status, body := call(t, srv, "GET", tc.path, tc.auth, "")
		if status != tc.status || body != tc.want {
			t.Errorf("%s: %d %s\nwant %d %s", tc.name, status, body, tc.status, tc.want)
		}
	}
	// Without Spenders the route does not exist.
	plain, _ := newAPI(t, admin.Config{TokenSHA256: admin.HashToken(token)})
	if status, _ := call(t, plain, "GET", "/admin/top", ok, ""); status != 404 {
		t.Errorf("without Spenders: %d, want 404", status)
	}
}
