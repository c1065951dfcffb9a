package middleware_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/challenge"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/overload"
)

// testChallenger is a proof-of-work challenger asking for bits.
func testChallenger(t *testing.T, bits int) *challenge.PoW {
	t.Helper()
	pow, err := challenge.NewPoW(challenge.Config{Secret: []byte(strings.Repeat("s", 32)), Bits: bits})
	if err != nil {
		t.Fatal(err)
	}
	return pow
}

// The three lanes over the test schema.
func testLanes() []middleware.Lane {
	return []middleware.Lane{
		{Name: "checkout", Priority: overload.Critical, Queue: 2 * time.Second,
			Match: middleware.LaneMatch{GraphQL: []string{"Mutation.createIssue"}, REST: []string{"POST /api/orders"}}},
		{Name: "authenticated", Priority: overload.Normal, Match: middleware.LaneMatch{Authenticated: true}},
		{Name: "anonymous", Priority: overload.Sheddable, Match: middleware.LaneMatch{Anonymous: true}, Challenge: middleware.ChallengePoW},
	}
}

// The first lane whose match holds takes a request; the lane is in its
// decision event.
func TestLanesClassify(t *testing.T) {
	cfg := testConfig(t, newClock())
	cfg.Lanes = testLanes()
	cfg.Challenger = testChallenger(t, 8)
	rec := &recorder{}
	cfg.Observer = rec
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	anon := "192.0.2.44:1"

	for _, tc := range []struct {
		name string
		run  func()
		lane string
	}{
		{"mutation by a principal", func() { query(t, h, mutation11, bearer(aliceKey)) }, "checkout"},
		{"mutation through a fragment", func() {
			query(t, h, `mutation { ...M } fragment M on Mutation { createIssue(repo: "r", title: "t") { id } }`, bearer(aliceKey))
		}, "checkout"},
		{"anonymous mutation", func() {
			do(t, h, request{path: "/graphql", body: `{"query":"mutation { createIssue(repo: \"r\", title: \"t\") { id } }"}`, remoteAddr: anon})
		}, "checkout"},
		{"query by a principal", func() { query(t, h, `{ viewer { login } }`, bearer(aliceKey)) }, "authenticated"},
		{"anonymous query", func() {
			do(t, h, request{path: "/graphql", body: `{"query":"{ viewer { login } }"}`, remoteAddr: anon})
		}, "anonymous"},
		{"REST order", func() { do(t, h, request{method: http.MethodPost, path: "/api/orders", header: bearer(aliceKey)}) }, "checkout"},
		{"REST GET of orders is not the pattern", func() { do(t, h, request{method: http.MethodGet, path: "/api/orders", header: bearer(aliceKey)}) }, "authenticated"},
		{"anonymous REST", func() { do(t, h, request{method: http.MethodGet, path: "/api/x", remoteAddr: anon}) }, "anonymous"},
		{"refused before parsing", func() { query(t, h, "{ viewer(", bearer(aliceKey)) }, "authenticated"},
	} {
		tc.run()
		got := rec.take()
		if len(got) != 1 || got[0].Lane != tc.lane {
			t.Errorf("%s: events %+v, want one in lane %q", tc.name, got, tc.lane)
		}
	}
}

// A request no lane matches goes to the last lane; a plan match narrows.
func TestLanesFallThroughToTheLast(t *testing.T) {
	cfg := testConfig(t, newClock())
	cfg.Lanes = []middleware.Lane{
		{Name: "free-users", Priority: overload.High, Match: middleware.LaneMatch{Plans: []string{"free"}, Authenticated: true}},
		{Name: "search", Priority: overload.Normal, Match: middleware.LaneMatch{REST: []string{"GET /api/search"}}},
		{Name: "rest", Priority: overload.Sheddable, Match: middleware.LaneMatch{GraphQL: []string{"Query.nothing"}}},
	}
	rec := &recorder{}
	cfg.Observer = rec
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	do(t, h, request{method: http.MethodGet, path: "/api/search", header: bearer(aliceKey)})
	do(t, h, request{method: http.MethodGet, path: "/api/search", remoteAddr: "192.0.2.1:1"})
	do(t, h, request{method: http.MethodGet, path: "/api/other", remoteAddr: "192.0.2.1:1"})
	var lanes []string
	for _, e := range rec.take() {
		lanes = append(lanes, e.Lane)
	}
	if want := []string{"free-users", "search", "rest"}; len(lanes) != 3 || lanes[0] != want[0] || lanes[1] != want[1] || lanes[2] != want[2] {
		t.Errorf("lanes %v, want %v", lanes, want)
	}
}

func TestLanesInvalid(t *testing.T) {
	for name, lanes := range map[string][]middleware.Lane{
		"no name":             {{Priority: overload.Normal}},
		"twice":               {{Name: "a", Priority: overload.Normal}, {Name: "a", Priority: overload.Normal}},
		"bad priority":        {{Name: "a", Priority: 99}},
		"queue not critical":  {{Name: "a", Priority: overload.High, Queue: time.Second}},
		"negative queue":      {{Name: "a", Priority: overload.Critical, Queue: -time.Second}},
		"bad challenge":       {{Name: "a", Priority: overload.Normal, Challenge: "captcha"}},
		"both kinds of user":  {{Name: "a", Priority: overload.Normal, Match: middleware.LaneMatch{Authenticated: true, Anonymous: true}}},
		"bad coordinate":      {{Name: "a", Priority: overload.Normal, Match: middleware.LaneMatch{GraphQL: []string{"createIssue"}}}},
		"bad pattern":         {{Name: "a", Priority: overload.Normal, Match: middleware.LaneMatch{REST: []string{"GET api"}}}},
		"budget without rate": {{Name: "a", Priority: overload.Normal, Budget: &middleware.LaneBudget{Burst: 10, Per: time.Second}}},
		"unknown plan":        {{Name: "a", Priority: overload.Normal, Match: middleware.LaneMatch{Plans: []string{"gold"}}}},
	} {
		cfg := testConfig(t, newClock())
		cfg.Lanes = lanes
		if _, err := middleware.New(cfg.Dependencies, cfg.Policy); !errors.Is(err, middleware.ErrInvalidConfig) {
			t.Errorf("%s: New error %v, want ErrInvalidConfig", name, err)
		}
	}
}

// A lane's budget is debited on top of the plan's: a request pays both or
// neither, and refunds of unused cost reach both.
func TestLaneBudget(t *testing.T) {
	cfg := withRefunds(testConfig(t, newClock()))
	cfg.Lanes = []middleware.Lane{
		{Name: "search", Priority: overload.Normal, Match: middleware.LaneMatch{REST: []string{"GET /api/search"}},
			Budget: &middleware.LaneBudget{Burst: 20, Rate: 20, Per: 100 * time.Second}},
		{Name: "writes", Priority: overload.High, Match: middleware.LaneMatch{GraphQL: []string{"Mutation.createIssue"}},
			Budget: &middleware.LaneBudget{Burst: 11, Rate: 1, Per: time.Hour}},
		{Name: "reads", Priority: overload.Normal, Match: middleware.LaneMatch{GraphQL: []string{"Query.user"}},
			Budget: &middleware.LaneBudget{Burst: 70, Rate: 1, Per: time.Hour}},
		{Name: "rest", Priority: overload.Normal},
	}
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	search := request{method: http.MethodGet, path: "/api/search", header: bearer(aliceKey)}
	for i := range 2 {
		if w := do(t, h, search); w.Code != http.StatusOK {
			t.Fatalf("search %d: %d", i+1, w.Code)
		}
	}
	w := do(t, h, search)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Errorf("search past the lane's budget: %d %v", w.Code, w.Header())
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "80" {
		t.Errorf("plan bucket after the lane refused: %s left, want 80 (its debit given back)", got)
	}
	if w := do(t, h, request{method: http.MethodGet, path: "/api/other", header: bearer(aliceKey)}); w.Code != http.StatusOK {
		t.Errorf("another route: %d", w.Code)
	}

	// The mutation lane holds one createIssue (11 points).
	if w, _ := query(t, h, mutation11, bearer(aliceKey)); w.Code != http.StatusOK {
		t.Fatalf("first mutation: %d %s", w.Code, w.Body)
	}
	w, resp := query(t, h, mutation11, bearer(aliceKey))
	if w.Code != http.StatusTooManyRequests || resp.code() != budget.CodeRateLimited || !strings.Contains(resp.Errors[0].Message, `lane "writes"`) {
		t.Errorf("second mutation: %d %+v", w.Code, resp.Errors)
	}

	// Reads: 61 priced, 1 actual (the test schema answers null): both
	// buckets get 60 back, so the lane's 70 pays for a second read.
	for i := range 3 {
		if w, resp := query(t, h, query61, bearer(aliceKey)); w.Code != http.StatusOK {
			t.Fatalf("read %d: %d %+v", i+1, w.Code, resp.Errors)
		}
	}
}
