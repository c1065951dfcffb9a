package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/challenge"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/overload"
)

// queueWatch is the overload queue's timer for a test: it never fires, so
// a critical request that queues waits until a slot frees, however long
// that takes, and each request that queues reports its lane's queue time.
// A request answered while every slot is held was never queued.
type queueWatch struct {
	queued chan time.Duration
}

func newQueueWatch() *queueWatch { return &queueWatch{queued: make(chan time.Duration, 64)} }

func (q *queueWatch) timer(d time.Duration) (<-chan time.Time, func() bool) {
	q.queued <- d
	return nil, func() bool { return true }
}

// answerGuard bounds the wait for an answer that needs no slot to come
// free: a request still unanswered by then is queued (queueWatch's timer
// never fires). It only guards against a hang; nothing is timed.
const answerGuard = 10 * time.Second

// gqlAnswer is what a GraphQL request sent from a goroutine got back.
type gqlAnswer struct {
	name   string
	status int
	header http.Header
	body   []byte
	err    error
}

// gqlPost is one GraphQL request, safe to send from any goroutine (it does
// not touch t).
type gqlPost struct {
	name, apiKey, costHeader, query string
	vars                            map[string]any
}

func (p gqlPost) send(ctx context.Context, base string) gqlAnswer {
	payload := map[string]any{"query": p.query}
	if p.vars != nil {
		payload["variables"] = p.vars
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return gqlAnswer{name: p.name, err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/graphql", bytes.NewReader(body))
	if err != nil {
		return gqlAnswer{name: p.name, err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if p.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.apiKey)
	}
	if p.costHeader != "" {
		req.Header.Set(middleware.HeaderGraphQLCost, p.costHeader)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return gqlAnswer{name: p.name, err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return gqlAnswer{name: p.name, status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// sendAll sends every post at once and returns their answers, failing the
// test if one is still unanswered after answerGuard.
func sendAll(t *testing.T, base string, posts []gqlPost) []gqlAnswer {
	t.Helper()
	answers := make(chan gqlAnswer, len(posts))
	for _, p := range posts {
		go func() { answers <- p.send(t.Context(), base) }()
	}
	got := make([]gqlAnswer, 0, len(posts))
	guard := time.NewTimer(answerGuard)
	defer guard.Stop()
	for range posts {
		select {
		case a := <-answers:
			got = append(got, a)
		case <-guard.C:
			var waiting []string
			for _, p := range posts {
				if !slices.ContainsFunc(got, func(a gqlAnswer) bool { return a.name == p.name }) {
					waiting = append(waiting, p.name)
				}
			}
			t.Fatalf("unanswered while every slot was held, so queued for a slot: %q", waiting)
		}
	}
	return got
}

// dryRunsOfCreateIssue are six operations that name checkout's root field,
// createIssue, and run nothing: skipped or excluded (literally, from a
// variable, through an inline fragment, through a fragment spread), or
// dry runs (rateLimit(dryRun: true), GraphQL-Cost: validate).
func dryRunsOfCreateIssue(apiKey string) []gqlPost {
	const create = `createIssue(repo: "hello-world", title: "Dry")`
	who := "anonymous"
	if apiKey != "" {
		who = "demo key"
	}
	posts := []gqlPost{
		{name: "@skip(if: true)", apiKey: apiKey, query: `mutation { ` + create + ` @skip(if: true) { id } }`},
		{name: "@include(if: $on), on false", apiKey: apiKey, vars: map[string]any{"on": false},
			query: `mutation($on: Boolean!) { ` + create + ` @include(if: $on) { id } }`},
		{name: "inline fragment @skip", apiKey: apiKey, query: `mutation { ... @skip(if: true) { ` + create + ` { id } } }`},
		{name: "fragment spread @include(if: false)", apiKey: apiKey,
			query: `mutation { ...Open @include(if: false) } fragment Open on Mutation { ` + create + ` { id } }`},
		{name: "rateLimit(dryRun: true)", apiKey: apiKey, query: `mutation { ` + create + ` { id } rateLimit(dryRun: true) { cost } }`},
		{name: "GraphQL-Cost: validate", apiKey: apiKey, costHeader: "validate", query: `mutation { ` + create + ` { id } }`},
	}
	for i := range posts {
		posts[i].name = who + ", " + posts[i].name
	}
	return posts
}

// checkShedOrPriceOnly checks a dry run's answer: shed (503 OVERLOADED)
// or priced without running (200 with no issue in its data).
func checkShedOrPriceOnly(t *testing.T, a gqlAnswer) {
	t.Helper()
	require.NoError(t, a.err, a.name)
	r := decodeGraphQL(t, a.body)
	switch a.status {
	case http.StatusServiceUnavailable:
		assert.Equal(t, budget.CodeOverloaded, r.code(), "%s: %s", a.name, a.body)
	case http.StatusOK:
		assert.NotContains(t, string(r.Data), `"createIssue":{`, "%s ran: %s", a.name, a.body)
		assert.NotNil(t, r.Extensions.Cost, "%s: a 200 without its price: %s", a.name, a.body)
	default:
		t.Errorf("%s: %d %s, want 503 OVERLOADED or a price-only 200", a.name, a.status, a.body)
	}
}

// Dry runs must not crowd out the work a lane protects, over HTTP against
// the example server's default lanes: with every slot held (max_in_flight
// 4), a dry run that names checkout's createIssue but runs nothing would,
// if it took the critical lane, fill its queue and get a real checkout
// shed at once. An anonymous client's six dry runs, and the demo key's, are
// answered while every slot is still held (none starts the queue's timer),
// pay nothing, and leave the queue to the key's real createIssue, which
// waits in it for the next free slot and runs. An anonymous createIssue is
// the anonymous lane's, never checkout's.
//
// queueWatch's timer never fires: a request that queued could only be
// answered once a slot frees, and the test frees none until the dry runs
// have all been answered. Nothing here depends on timing.
func TestDryRunsTakeNoCriticalSlot(t *testing.T) {
	cfg := defaultConfig() // checkout: a key's createIssue, critical, queue 2s
	cfg.Overload.MaxInFlight = 4
	// Normal may use every slot, so that four of alice's requests fill
	// them; critical may still queue.
	cfg.Overload.ShedAt = map[overload.Priority]float64{overload.Sheddable: 0.5, overload.Normal: 1, overload.High: 1}
	cfg.Challenge = challengeConfig{Secret: testSecret, Bits: 8}
	require.NoError(t, cfg.validate())

	hold, queue := newHoldHook(), newQueueWatch()
	var created atomic.Int64 // createIssue resolver calls: issues opened
	res := graph.NewResolver(graph.WithOnResolve(func(ctx context.Context, field string) {
		if field == "Mutation.createIssue" {
			created.Add(1)
		}
		hold.onResolve(ctx, field)
	}))
	h, cleanup, err := newServer(cfg, deps{
		clock:      limitertest.NewFakeClock(time.Unix(1_800_000_000, 0)),
		logger:     slog.New(slog.DiscardHandler),
		resolver:   res,
		queueTimer: queue.timer,
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

	// Four of alice's requests hold every slot, in their resolver.
	const held = 4
	heldAnswers := make(chan gqlAnswer, held)
	for range held {
		go func() {
			heldAnswers <- gqlPost{name: "held", apiKey: demoAPIKey, query: `{ repository(name: "hello-world") { name } }`}.
				send(context.WithoutCancel(t.Context()), srv.URL)
		}()
	}
	for range held {
		<-hold.entered
	}

	// Twelve dry runs at once, six anonymous and six from the demo key:
	// each is answered with every slot still held, so none queued.
	anonymousDry := dryRunsOfCreateIssue("")
	for _, a := range sendAll(t, srv.URL, append(anonymousDry, dryRunsOfCreateIssue(demoAPIKey)...)) {
		checkShedOrPriceOnly(t, a)
		t.Logf("%s: %d %s", a.name, a.status, decodeGraphQL(t, a.body).code())
	}
	require.Empty(t, queue.queued, "a dry run queued for a critical slot")

	// A real createIssue without a key is the anonymous lane's: shed with
	// that lane's challenge (checkout has none), not queued.
	anonCreate := sendAll(t, srv.URL, []gqlPost{{name: "anonymous createIssue",
		query: `mutation { createIssue(repo: "hello-world", title: "Anonymous") { id } }`}})[0]
	require.NoError(t, anonCreate.err)
	require.Equal(t, http.StatusServiceUnavailable, anonCreate.status, "%s", anonCreate.body)
	assert.Equal(t, budget.CodeOverloaded, decodeGraphQL(t, anonCreate.body).code())
	assert.NotEmpty(t, anonCreate.header.Get(challenge.HeaderChallenge), "shed without the anonymous lane's challenge")
	require.Empty(t, queue.queued, "an anonymous createIssue queued for a critical slot")

	// The server's own account: every anonymous request was decided in
	// the anonymous lane, none in checkout.
	metrics := scrapeMetrics(t, h.admin)
	assert.Contains(t, metrics, `costguard_decisions_total{kind="graphql",lane="anonymous",outcome="shed",plan="anon"} `+
		strconv.Itoa(len(anonymousDry)+1)+"\n")
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "costguard_decisions_total{") && strings.Contains(line, `plan="anon"`) {
			assert.NotContains(t, line, `lane="checkout"`, "an anonymous request took the critical lane")
		}
	}

	// The key's real createIssue takes checkout's queue, which the dry
	// runs left empty, and gets the first slot that frees.
	checkout := make(chan gqlAnswer, 1)
	go func() {
		checkout <- gqlPost{name: "checkout", apiKey: demoAPIKey,
			query: `mutation { createIssue(repo: "hello-world", title: "Checkout") { title } }`}.send(t.Context(), srv.URL)
	}()
	select {
	case d := <-queue.queued:
		assert.Equal(t, 2*time.Second, d, "queued for checkout's queue time")
	case a := <-checkout:
		t.Fatalf("the key's createIssue was answered without queueing: %d %s", a.status, a.body)
	case <-time.After(answerGuard):
		t.Fatal("the key's createIssue neither queued nor was answered")
	}
	assert.Zero(t, created.Load(), "an issue was opened before the checkout ran")
	hold.release <- struct{}{} // one held request finishes; its slot goes to the queue
	a := <-checkout
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.JSONEq(t, `{"createIssue":{"title":"Checkout"}}`, string(decodeGraphQL(t, a.body).Data))
	assert.EqualValues(t, 1, created.Load(), "only the real createIssue opened an issue")

	close(hold.release)
	released = true
	for range held {
		a := <-heldAnswers
		require.NoError(t, a.err)
		assert.Equal(t, http.StatusOK, a.status, "%s", a.body)
	}

	// The anonymous client paid nothing: a price-only request, which
	// debits nothing, finds its budget (500 points) whole.
	price := gqlPost{name: "price", costHeader: "validate", query: `{ user(login: "octocat") { login } }`}.send(t.Context(), srv.URL)
	require.NoError(t, price.err)
	require.Equal(t, http.StatusOK, price.status, "%s", price.body)
	cost := decodeGraphQL(t, price.body).Extensions.Cost
	require.NotNil(t, cost, "%s", price.body)
	require.NotNil(t, cost.ThrottleStatus.CurrentlyAvailable)
	assert.EqualValues(t, 500, *cost.ThrottleStatus.CurrentlyAvailable, "the anonymous budget after the dry runs")
}

// scrapeMetrics reads the admin listener's /metrics, in-process.
func scrapeMetrics(t *testing.T, admin http.Handler) string {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	r.Host = "127.0.0.1:9091" // a token-less admin listener answers only loopback names
	admin.ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code)
	return w.Body.String()
}
