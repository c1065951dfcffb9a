package middleware_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
)

// Documents past one structural cap each of relaxPlanConfig, and one past
// the breadth cap, which no plan lifts.
const (
	relaxDeep       = `{ user(login: "a") { repos(first: 1) { owner { repos(first: 1) { name } } } } }`
	relaxAliases    = `{ a: viewer { login } b: viewer { login } c: viewer { login } }`
	relaxSelections = `{ viewer { login name } user(login: "a") { login name } rateLimit { limit cost remaining } }`
	relaxBreadth    = `{ user(login: "a") { repos(first: 999999999) { name } } }`
)

// relaxPlanConfig is testConfig with small structural caps, alice's plan
// ("free") lifting them and the anonymous plan not.
func relaxPlanConfig(t *testing.T) config {
	cfg := testConfig(t, newClock())
	p := cfg.Plans["free"]
	p.RelaxStructuralLimits = true
	cfg.Plans["free"] = p
	cfg.GraphQL.MaxDepth = 3
	cfg.GraphQL.MaxAliases = 2
	cfg.GraphQL.MaxSelections = 9
	return cfg
}

// relaxRequest sends q by POST or GET with header and decodes the answer.
func relaxRequest(t *testing.T, h http.Handler, get bool, q string, header http.Header) (*http.Response, gqlResponse) {
	t.Helper()
	req := request{path: "/graphql", header: header}
	if get {
		req.method, req.path = http.MethodGet, "/graphql?"+url.Values{"query": {q}}.Encode()
	} else {
		body, _ := json.Marshal(map[string]any{"query": q})
		req.body = string(body)
	}
	w := do(t, h, req)
	var resp gqlResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatalf("response is not JSON: %v\n%s", err, w.Body.String())
	}
	return w.Result(), resp
}

// A plan with RelaxStructuralLimits runs what the structural caps refuse
// to another plan (depth, aliases), over POST and GET, and pays its price;
// the breadth cap still refuses it, and so do the document bounds, which
// guard the parser before anything is priced (any text may come on a
// plan, unlike a trusted document).
func TestPlanRelaxesStructuralLimits(t *testing.T) {
	tests := []struct {
		name, doc string
		// strict is the code the anonymous plan gets; relaxed alice's
		// ("": the operation runs).
		strict, relaxed string
	}{
		{"depth", relaxDeep, "MAX_DEPTH_EXCEEDED", ""},
		{"aliases", relaxAliases, "MAX_ALIASES_EXCEEDED", ""},
		{"selections", relaxSelections, "MAX_SELECTIONS_EXCEEDED", "MAX_SELECTIONS_EXCEEDED"},
		{"breadth", relaxBreadth, "MAX_BREADTH_EXCEEDED", "MAX_BREADTH_EXCEEDED"},
	}
	for _, tc := range tests {
		for _, get := range []bool{false, true} {
			name := tc.name + "/POST"
			if get {
				name = tc.name + "/GET"
			}
			t.Run(name, func(t *testing.T) {
				lim := newLimiter(t, relaxPlanConfig(t))
				schema := newTestSchema()
				h := graphQLServer(lim, schema)

				w, resp := relaxRequest(t, h, get, tc.doc, nil)
				if resp.code() != tc.strict || w.StatusCode == http.StatusOK {
					t.Errorf("anonymous plan: status %d code %q, want %s", w.StatusCode, resp.code(), tc.strict)
				}
				w, resp = relaxRequest(t, h, get, tc.doc, bearer(aliceKey))
				if tc.relaxed != "" {
					if resp.code() != tc.relaxed {
						t.Errorf("relaxed plan: status %d code %q, want %s", w.StatusCode, resp.code(), tc.relaxed)
					}
					return
				}
				if w.StatusCode != http.StatusOK || len(resp.Errors) != 0 || resp.Extensions.Cost == nil {
					t.Fatalf("relaxed plan: status %d errors %+v", w.StatusCode, resp.Errors)
				}
				cost := resp.Extensions.Cost.RequestedQueryCost
				if remaining := w.Header.Get(middleware.HeaderXRateLimitRemaining); cost <= 0 || remaining != strconv.FormatInt(100-int64(cost), 10) {
					t.Errorf("relaxed plan: requested %d, %s left of 100: it must pay its price", cost, remaining)
				}
				if schema.resolvers.Load() == 0 {
					t.Error("relaxed plan: no resolver ran")
				}
			})
		}
	}
}

// The switch is reloadable: turned on for the anonymous plan, its
// requests run past the caps; turned off for alice's, hers are refused.
func TestPlanRelaxReload(t *testing.T) {
	cfg := relaxPlanConfig(t)
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())
	if _, resp := relaxRequest(t, h, false, relaxDeep, nil); resp.code() != "MAX_DEPTH_EXCEEDED" {
		t.Fatalf("before the reload, anonymous: code %q", resp.code())
	}
	next := cfg
	next.Plans = testPlans()
	p := next.Plans["anon"]
	p.RelaxStructuralLimits = true
	next.Plans["anon"] = p
	if err := lim.Reload(next.Policy); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if w, resp := relaxRequest(t, h, false, relaxDeep, nil); w.StatusCode != http.StatusOK || len(resp.Errors) != 0 {
		t.Errorf("after the reload, anonymous: status %d errors %+v", w.StatusCode, resp.Errors)
	}
	for _, doc := range []string{relaxDeep, relaxSelections} {
		if _, resp := relaxRequest(t, h, false, doc, bearer(aliceKey)); resp.code() == "" {
			t.Errorf("after the reload, alice: %s ran", doc)
		}
	}
}

// Over a WebSocket the operation's plan is the connection's: the relaxed
// plan runs the deep document and pays for it, the anonymous plan is
// refused it, and breadth still refuses on the relaxed plan.
func TestPlanRelaxOverWebSocket(t *testing.T) {
	a := newAdopter(t, config{Policy: middleware.Policy{
		Plans: map[string]budget.Plan{
			"anon": {Burst: adopterBurst, Rate: adopterBurst, Per: time.Hour, DisableRefund: true},
			"pro":  {Burst: adopterBurst, Rate: adopterBurst, Per: time.Hour, DisableRefund: true, RelaxStructuralLimits: true},
		},
		AnonymousPlan: "anon",
		GraphQL:       middleware.GraphQLOptions{MaxDepth: 3},
	}}, nil)
	bad := strings.Replace(deepDoc, "first: 2) { name", "first: 999999999) { name", 1)
	for _, tc := range []struct {
		name, key, doc, code string
	}{
		{"anonymous, deep", "", deepDoc, "MAX_DEPTH_EXCEEDED"},
		{"relaxed, deep", adopterKey, deepDoc, ""},
		{"relaxed, broad", adopterKey, bad, "MAX_BREADTH_EXCEEDED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var header http.Header
			if tc.key != "" {
				header = bearer(tc.key)
			}
			before := a.remaining(tc.key)
			s := a.dial(protoTransportWS, header, nil)
			s.start("1", tc.doc)
			m := s.next()
			if tc.code != "" {
				if codes := errorCodes(t, m); !slices.Contains(codes, tc.code) {
					t.Errorf("%s %s: codes %v, want %s", m.Type, m.Payload, codes, tc.code)
				}
				return
			}
			if m.Type != "next" {
				t.Fatalf("%s %s, want next", m.Type, m.Payload)
			}
			r := decode(t, m.Payload)
			if len(r.Errors) != 0 || r.Extensions.Cost == nil || r.Extensions.Cost.RequestedQueryCost <= 0 {
				t.Fatalf("response %s", m.Payload)
			}
			if got, cost := a.remaining(tc.key), int64(r.Extensions.Cost.RequestedQueryCost); got != before-cost {
				t.Errorf("budget %d after the operation, want %d - %d", got, before, cost)
			}
		})
	}
}
