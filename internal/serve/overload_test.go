package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/challenge"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/overload"
)

// testSecret is a challenge.secret of the minimum length.
const testSecret = "0123456789abcdef0123456789abcdef"

// overloadExample writes out the overload keys as scripts outside the
// repository write them, with a real secret and a demo latency.
const overloadExample = `
lanes:
  - {name: checkout, priority: critical, match: {graphql: ["Mutation.createIssue"], rest: ["POST /api/orders"]}, queue: 2s}
  - {name: authenticated, priority: normal, match: {authenticated: true}}
  - {name: anonymous, priority: sheddable, match: {anonymous: true}, challenge: pow}
overload: {max_in_flight: 64, shed_at: {sheddable: 0.5, normal: 0.8, high: 0.9}, adaptive: false}
concurrency: {per_principal: 100}
degradation: [{name: recommendations, at: 0.7}, {name: search, at: 0.85}]
challenge: {secret: "` + testSecret + `", bits: 16}
demo_latency: 50ms
`

// overloadExample is the defaults but for the two example values (a
// secret, and the demo's latency) and the checkout lane, which by default
// takes authenticated requests only: an anonymous client cannot take the
// critical lane and its queue.
func TestOverloadExampleIsTheDefaults(t *testing.T) {
	got, err := parseConfig([]byte(overloadExample))
	require.NoError(t, err)
	want := defaultConfig()
	want.Challenge.Secret = testSecret
	want.DemoLatency = 50 * time.Millisecond
	want.Lanes[0].Match.Authenticated = false
	assert.Equal(t, withLibraryDefaults(want), withLibraryDefaults(got))
	assert.Zero(t, defaultConfig().DemoLatency, "the default adds no latency")
}

func TestOverloadDefaultsMapOntoMiddleware(t *testing.T) {
	d, m := defaultConfig().limiterConfig()
	assert.Equal(t, []middleware.Lane{
		{Name: "checkout", Priority: overload.Critical, Queue: 2 * time.Second,
			Match: middleware.LaneMatch{GraphQL: []string{"Mutation.createIssue"}, REST: []string{"POST /api/orders"}, Authenticated: true}},
		{Name: "authenticated", Priority: overload.Normal, Match: middleware.LaneMatch{Authenticated: true}},
		{Name: "anonymous", Priority: overload.Sheddable, Match: middleware.LaneMatch{Anonymous: true},
			Challenge: middleware.ChallengePoW},
	}, m.Lanes)
	assert.Equal(t, &overload.Config{
		MaxInFlight: 64,
		ShedAt:      nil, // the library's overload.DefaultShedAt
		Adaptive:    false,
		Degradation: []overload.Feature{{Name: "recommendations", At: 0.7}, {Name: "search", At: 0.85}},
	}, d.Overload)
	assert.Equal(t, middleware.ConcurrencyOptions{PerPrincipal: 100}, m.Concurrency)
	for name, p := range m.Plans {
		assert.Zero(t, p.MaxConcurrent, "plan %s inherits concurrency.per_principal", name)
	}
	assert.Nil(t, d.Challenger, "the server adds the challenger: its secret may be drawn at start")

	// The server builds the challenger, with a random secret it never logs,
	// and says once that tokens verify only in this process.
	var logs bytes.Buffer
	s, cleanup, err := newServer(defaultConfig(), deps{logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cleanup()) })
	require.NotNil(t, s.challenger)
	assert.Equal(t, 16, s.challenger.Bits())
	assert.Equal(t, 1, strings.Count(logs.String(), "challenge tokens verify only in this process"), logs.String())

	// Without a lane asking for it there is no challenger, and no log line.
	cfg := defaultConfig()
	cfg.Lanes[2].Challenge = ""
	logs.Reset()
	s, cleanup, err = newServer(cfg, deps{logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cleanup()) })
	assert.Nil(t, s.challenger)
	assert.NotContains(t, logs.String(), "challenge")
}

func TestOverloadKeysParse(t *testing.T) {
	cfg, err := parseConfig([]byte(`
plans:
  anon: {burst: 500, rate: 500, per: 1h}
  free: {burst: 5000, rate: 5000, per: 1h, concurrency: {per_principal: 5}}
  pro:  {burst: 50000, rate: 50000, per: 1h, concurrency: {per_principal: -1}}
  team: {burst: 50000, rate: 50000, per: 1h, concurrency: {per_principal: 0}}
concurrency: {per_principal: 20}
overload: {max_in_flight: 10, shed_at: {sheddable: 0.3}, adaptive: true}
degradation: []
`))
	require.NoError(t, err)
	d, m := cfg.limiterConfig()
	assert.Equal(t, 0, m.Plans["anon"].MaxConcurrent, "unset: concurrency.per_principal")
	assert.Equal(t, 5, m.Plans["free"].MaxConcurrent)
	assert.Equal(t, middleware.None, m.Plans["pro"].MaxConcurrent, "-1 in the file: no cap")
	assert.Equal(t, 0, m.Plans["team"].MaxConcurrent, "0 in the file, as in Go: the top-level cap")
	assert.Equal(t, 20, m.Concurrency.PerPrincipal)
	assert.Equal(t, map[overload.Priority]float64{overload.Sheddable: 0.3}, d.Overload.ShedAt,
		"a priority the file leaves out is left to the library, which gives it its default")
	assert.True(t, d.Overload.Adaptive)
	assert.Equal(t, 10, d.Overload.MaxInFlight)
	assert.Empty(t, d.Overload.Degradation)
	_, cleanup, err := newServer(cfg, deps{logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, cleanup())
}

func TestOverloadKeyErrors(t *testing.T) {
	lanes := func(third string) string {
		return "lanes:\n  - {name: checkout, priority: critical}\n  - {name: authenticated, priority: normal}\n  - " + third + "\n"
	}
	tests := []struct{ name, src, want string }{
		{"bad challenge", lanes("{name: anonymous, priority: sheddable, challenge: captcha}"), `line 4: lanes[2].challenge: lane "anonymous": challenge "captcha" is not "pow"`},
		{"challenge not a string", lanes("{name: anonymous, priority: sheddable, challenge: [pow]}"), "line 4: lanes[2].challenge: a list is not a string"},
		{"queue without unit", lanes("{name: anonymous, priority: critical, queue: 2}"), "line 4: lanes[2].queue: 2 is not a duration"},
		{"queue on a sheddable lane", lanes("{name: anonymous, priority: sheddable, queue: 1s}"), `line 4: lanes[2].queue: lane "anonymous": overload: invalid queue: a sheddable lane may not queue (1s); only critical lanes wait`},
		{"negative queue", lanes("{name: anonymous, priority: critical, queue: -1s}"), `line 4: lanes[2].queue: lane "anonymous": overload: invalid queue: -1s is negative`},
		{"lane budget with a plan's key", "lanes:\n  - {name: search, priority: normal, budget: {burst: 20, rate: 20, per: 1h, mode: shadow}}\n",
			"line 2: lanes[0].budget.mode: unknown key"},
		{"zero max_in_flight", "overload: {max_in_flight: 0}", "line 1: overload: Overload: overload: invalid config: MaxInFlight 0 is not between 1 and 1048576"},
		{"fractional max_in_flight", "overload: {max_in_flight: 6.5}", "line 1: overload.max_in_flight: 6.5 is not a whole number"},
		{"max_in_flight too small for the lanes", "overload: {max_in_flight: 1}", "line 1: overload: Overload: overload: invalid config: MaxInFlight 1 leaves priority sheddable no slot"},
		{"shed_at above 1", "overload: {shed_at: {normal: 1.2}}", "line 1: overload: Overload: overload: invalid config: ShedAt[normal] 1.2 is not in (0, 1]"},
		{"shed_at zero", "overload: {shed_at: {sheddable: 0}}", "ShedAt[sheddable] 0 is not in (0, 1]"},
		{"shed_at unknown priority", "overload: {shed_at: {urgent: 0.5}}", `overload: invalid priority "urgent"`},
		{"shed_at critical below 1", "overload: {shed_at: {critical: 0.9}}", "ShedAt[critical] 0.9: critical may always use the whole capacity (1)"},
		{"shed_at out of order", "overload: {shed_at: {normal: 0.95}}", "ShedAt[normal] 0.95 is above ShedAt[high] 0.9: a lower priority must be shed first"},
		{"shed_at not a number", "overload: {shed_at: {normal: lots}}", `overload.shed_at.normal: "lots" is not a number`},
		{"adaptive not a bool", "overload: {adaptive: sometimes}", `overload.adaptive: "sometimes" is not true or false`},
		{"negative concurrency", "concurrency: {per_principal: -2}", "line 1: concurrency.per_principal: Concurrency.PerPrincipal -2 is negative (None: no cap)"},
		{"plan concurrency", "plans:\n  anon: {burst: 1, rate: 1, per: 1h, concurrency: {per_principal: -2}}", `line 2: plans.anon.concurrency: plan "anon": MaxConcurrent -2; it must be positive`},
		{"feature without a name", "degradation: [{at: 0.5}]", "Degradation[0] has no name"},
		{"feature twice", "degradation: [{name: a, at: 0.5}, {name: a, at: 0.6}]", `Degradation[1]: feature "a" is listed twice`},
		{"feature at above 1", "degradation: [{name: a, at: 1.5}]", `Degradation[0] "a": At 1.5 is not in (0, 1]`},
		{"feature at within the hysteresis", "degradation: [{name: a, at: 0.05}]", `Degradation[0] "a": At 0.05 is not above Hysteresis 0.1`},
		{"features out of order", "degradation: [{name: a, at: 0.8}, {name: b, at: 0.6}]", `Degradation[1] "b": At 0.6 is below the 0.8 of "a" before it`},
		{"feature key", "degradation: [{name: a, when: 0.5}]", "line 1: degradation[0].when: unknown key"},
		{"bits too many", "challenge: {bits: 40}", "challenge: challenge: invalid config: Bits 40 is not between 1 and 32"},
		{"short secret", `challenge: {secret: "s3cret-short"}`, "challenge: challenge: invalid config: Secret is 12 bytes, want at least 32"},
		{"secret not a string", "challenge: {secret: [a]}", "line 1: challenge.secret: a list is not a string"},
		{"negative demo_latency", "demo_latency: -5ms", "demo_latency is -5ms; it must not be negative"},
		{"demo_latency without unit", "demo_latency: 50", "line 1: demo_latency: 50 is not a duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := startErr(t, tt.src)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "s3cret", "the secret leaked into an error")
		})
	}
}

// The secret is never printed: not by fmt, not in a log line.
func TestChallengeSecretNeverPrinted(t *testing.T) {
	cfg, err := parseConfig([]byte(`challenge: {secret: "` + testSecret + `"}`))
	require.NoError(t, err)
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		assert.NotContains(t, fmt.Sprintf(verb, cfg), testSecret, verb)
	}
	var logs bytes.Buffer
	_, cleanup, err := newServer(cfg, deps{logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	require.NoError(t, cleanup())
	assert.NotContains(t, logs.String(), testSecret)
	assert.NotContains(t, logs.String(), "random", "a configured secret is used as is")
}

// holdHook blocks every Query.repository resolver until release is closed
// (or its request ends), and reports each one that entered: a test fills
// the server with requests in flight without sleeping.
type holdHook struct {
	entered chan struct{}
	release chan struct{}
}

func newHoldHook() *holdHook {
	return &holdHook{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (h *holdHook) onResolve(ctx context.Context, field string) {
	if field != "Query.repository" {
		return
	}
	h.entered <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
	}
}

// httpCall is one request to a running server; the body is read whole.
type httpCall struct {
	method, path, apiKey, body string
	header                     http.Header
}

func (c httpCall) send(t *testing.T, base string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if c.body != "" {
		rd = strings.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(t.Context(), c.method, base+c.path, rd)
	require.NoError(t, err)
	for k, v := range c.header {
		req.Header[k] = v
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func gqlCall(t *testing.T, apiKey, query string) httpCall {
	return httpCall{method: http.MethodPost, path: "/graphql", apiKey: apiKey, body: graphQLBody(t, query)}
}

// Under load, over real HTTP: with three of four slots held by requests in
// flight, anonymous requests are shed with a challenge, a client that
// solves it is admitted, checkout still gets in, recommendations come back
// empty and the REST search answers 503 degraded.
//
// The thresholds, at max_in_flight 4: sheddable ⌊0.5 × 4⌋ = 2, normal and
// high 4 (shed_at 1), critical 4. recommendations go off at 2 in flight,
// search at 3. The limiter's clock is fake, so a feature switched off stays
// off (its hold never passes) and nothing here depends on timing.
func TestOverloadOverHTTP(t *testing.T) {
	cfg := defaultConfig()
	cfg.Overload.MaxInFlight = 4
	cfg.Overload.ShedAt = map[overload.Priority]float64{overload.Sheddable: 0.5, overload.Normal: 1, overload.High: 1}
	cfg.Degradation = []overload.Feature{{Name: "recommendations", At: 0.5}, {Name: "search", At: 0.75}}
	cfg.Challenge = challengeConfig{Secret: testSecret, Bits: 8} // cheap work for a test
	require.NoError(t, cfg.validate())

	hold := newHoldHook()
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	h, cleanup, err := newServer(cfg, deps{
		clock:    clock,
		logger:   slog.New(slog.DiscardHandler),
		resolver: graph.NewResolver(graph.WithOnResolve(hold.onResolve)),
	})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	released := false
	t.Cleanup(func() {
		if !released {
			close(hold.release) // a failed check must not leave the held requests hanging
		}
		srv.Close()
		require.NoError(t, cleanup())
	})

	// Three of alice's requests in flight, held in their resolver.
	const held = 3
	statuses := make(chan int, held)
	for range held {
		go func() {
			c := gqlCall(t, demoAPIKey, `{ repository(name: "hello-world") { name } }`)
			req, _ := http.NewRequestWithContext(context.WithoutCancel(t.Context()), c.method, srv.URL+c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+demoAPIKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	for range held {
		<-hold.entered
	}

	// An anonymous GraphQL request is shed, with a challenge.
	resp, body := gqlCall(t, "", `{ user(login: "octocat") { login } }`).send(t, srv.URL)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
	assert.Equal(t, "OVERLOADED", decodeGraphQL(t, body).code())
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	header := resp.Header.Get(challenge.HeaderChallenge)
	require.NotEmpty(t, header)

	// So is an anonymous REST request.
	resp, body = httpCall{method: http.MethodGet, path: "/api/users/octocat"}.send(t, srv.URL)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), `"error":"overloaded"`)
	assert.NotEmpty(t, resp.Header.Get(challenge.HeaderChallenge))

	// The client solves the challenge and is admitted, at normal priority.
	token, bits, err := challenge.ParseChallenge(header)
	require.NoError(t, err)
	assert.Equal(t, 8, bits)
	answer := http.Header{challenge.HeaderChallengeResponse: {token + ":" + challenge.Solve(token, bits)}}
	solved := gqlCall(t, "", `{ user(login: "octocat") { login } }`)
	solved.header = answer
	resp, body = solved.send(t, srv.URL)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.JSONEq(t, `{"user":{"login":"octocat"}}`, string(decodeGraphQL(t, body).Data))

	// A token is good once.
	resp, body = solved.send(t, srv.URL)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)

	// Checkout (createIssue from a key, the critical lane) still gets in;
	// an anonymous createIssue is the anonymous lane's, and is shed.
	resp, body = gqlCall(t, demoAPIKey, `mutation { createIssue(repo: "hello-world", title: "Under load") { title } }`).send(t, srv.URL)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.JSONEq(t, `{"createIssue":{"title":"Under load"}}`, string(decodeGraphQL(t, body).Data))
	resp, body = gqlCall(t, "", `mutation { createIssue(repo: "hello-world", title: "Under load") { title } }`).send(t, srv.URL)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)

	// Recommendations are switched off: an empty list, not an error.
	resp, body = gqlCall(t, demoAPIKey, `{ user(login: "octocat") { login recommendations { name } } }`).send(t, srv.URL)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	r := decodeGraphQL(t, body)
	assert.Empty(t, r.Errors)
	assert.JSONEq(t, `{"user":{"login":"octocat","recommendations":[]}}`, string(r.Data))

	// The REST search answers 503 degraded, with Retry-After.
	resp, body = httpCall{method: http.MethodGet, path: "/api/search?q=octo", apiKey: demoAPIKey}.send(t, srv.URL)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
	var degraded degradedBody
	require.NoError(t, json.Unmarshal(body, &degraded))
	assert.Equal(t, "degraded", degraded.Error)
	assert.GreaterOrEqual(t, degraded.RetryAfterSeconds, int64(1))
	assert.Equal(t, fmt.Sprint(degraded.RetryAfterSeconds), resp.Header.Get("Retry-After"))

	// The held requests finish, admitted.
	close(hold.release)
	released = true
	for range held {
		assert.Equal(t, http.StatusOK, <-statuses)
	}
}

// Without load nothing is degraded: recommendations list repositories and
// the search answers.
func TestNoDegradationWithoutLoad(t *testing.T) {
	srv := httptest.NewServer(newTestServer(t, defaultConfig(), deps{logger: slog.New(slog.DiscardHandler)}).h)
	t.Cleanup(srv.Close)
	resp, body := gqlCall(t, demoAPIKey, `{ user(login: "octocat") { recommendations { name } } }`).send(t, srv.URL)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), "wonderland")
	resp, body = httpCall{method: http.MethodGet, path: "/api/search?q=octo", apiKey: demoAPIKey}.send(t, srv.URL)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), `"results"`)
}

// lanes[i].budget maps onto the lane's own bucket and is checked key by key.
func TestLaneBudgetKey(t *testing.T) {
	cfg, err := parseConfig([]byte("lanes:\n  - {name: search, priority: normal, match: {rest: [\"GET /api/search\"]}, budget: {burst: 20, rate: 20, per: 1h}}\n  - {name: rest, priority: normal}\n"))
	require.NoError(t, err)
	b := limiterPolicy(cfg).Lanes[0].Budget
	require.NotNil(t, b)
	require.Equal(t, middleware.LaneBudget{Burst: 20, Rate: 20, Per: time.Hour}, *b)
	err = startErr(t, "lanes:\n  - {name: search, priority: normal, budget: {burst: 20, rate: 0, per: 1h}}\n")
	require.ErrorContains(t, err, `line 2: lanes[0].budget.rate: lane "search": budget burst (20), rate (0) and per (1h0m0s) must be positive`)
	err = startErr(t, "lanes:\n  - {name: search, priority: normal, budget: {burst: 20, per: 1h}}\n")
	require.ErrorContains(t, err, "line 2: lanes[0].budget.rate: lane \"search\": budget burst (20), rate (0) and per (1h0m0s) must be positive")

	ts := newTestServer(t, cfg, deps{})
	for i := range 2 {
		w := ts.do(alice, http.MethodGet, "/api/search?q=octo", nil)
		require.Equal(t, http.StatusOK, w.Code, "search %d", i+1)
	}
	w := ts.do(alice, http.MethodGet, "/api/search?q=octo", nil)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "the lane's 20 points are spent")
	require.Equal(t, "4980", w.Header().Get(middleware.HeaderXRateLimitRemaining), "the plan's debit was given back")
}
