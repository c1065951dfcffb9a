package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
)

// aliases is a query of n times the example schema's user field: n points,
// its actual cost as well.
func aliases(name string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "query %s {", name)
	for i := range n {
		fmt.Fprintf(&b, ` u%d: user(login: "octocat") { login }`, i)
	}
	return b.String() + " }"
}

// sendLog is a Base over http.DefaultTransport that records when each
// request was sent, on clk, and the status and Retry-After it got.
type sendLog struct {
	clk         *fakeClock
	mu          sync.Mutex
	at          []time.Time
	statuses    []int
	retryAfters []time.Duration
}

func (l *sendLog) RoundTrip(req *http.Request) (*http.Response, error) {
	at := l.clk.Now()
	resp, err := http.DefaultTransport.RoundTrip(req)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at = append(l.at, at)
	if err == nil {
		l.statuses = append(l.statuses, resp.StatusCode)
		seconds, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		l.retryAfters = append(l.retryAfters, time.Duration(seconds)*time.Second)
	}
	return resp, err
}

func (l *sendLog) log() ([]time.Time, []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at...), append([]int(nil), l.statuses...)
}

// clockedServer starts the example schema behind the limiter, with its
// clock on clk, so that its bucket refills only as a test advances clk: a
// plan of 20 points refilling one a second, granted by the key "k".
func clockedServer(t *testing.T, clk *fakeClock) string {
	t.Helper()
	lim, err := middleware.New(middleware.Dependencies{Clock: clk}, middleware.Policy{
		Plans:         map[string]budget.Plan{"team": {Burst: 20, Rate: 1, Per: time.Second}, "anon": {Burst: 10, Rate: 10, Per: time.Hour}},
		AnonymousPlan: "anon",
		APIKeys:       map[string]identity.APIKey{"k": {Principal: "team", Plan: "team"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	srv := handler.New(graph.NewResolver().Schema())
	srv.AddTransport(transport.POST{})
	ts := httptest.NewServer(lim.Handler(srv))
	t.Cleanup(ts.Close)
	return ts.URL
}

// newClocked returns a Transport on clk, without jitter, whose sends log
// records, and an http.Client using it.
func newClocked(clk *fakeClock) (*Transport, *sendLog, *http.Client) {
	log := &sendLog{clk: clk}
	tr := &Transport{Base: log, clock: clk, rand: func() float64 { return 0 }}
	return tr, log, &http.Client{Transport: tr}
}

// The Transport against a real server whose clock is the Transport's fake
// one, for either media type a client asks for: MAX_COST_EXCEEDED (400 or
// 422) is not retried; a known price waits until the bucket holds it,
// unrefused, and such a wait ends with its context; a refused query is sent
// again once its Retry-After has run out, and a refused mutation is not.
func TestRealServerOnFakeClock(t *testing.T) {
	for accept, neverStatus := range map[string]int{"application/json": 422, "application/graphql-response+json": 400} {
		t.Run(accept, func(t *testing.T) {
			clk := newFakeClock()
			url := clockedServer(t, clk)
			request := func(ctx context.Context, doc string) *http.Request {
				body := fmt.Sprintf(`{"query":%q}`, doc)
				req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", accept)
				req.Header.Set("Authorization", "Bearer k")
				return req
			}
			bg := context.Background()

			a, aLog, ac := newClocked(clk)
			r, waits := drive(t, clk, do(ac, request(bg, aliases("TooDear", 21))), 0)
			if _, statuses := aLog.log(); r.err != nil || !strings.Contains(r.body, "MAX_COST_EXCEEDED") || len(waits) > 0 || len(statuses) != 1 || statuses[0] != neverStatus {
				t.Fatalf("a price above the plan: got %q, %v, sends %v, waits %v; want one %d MAX_COST_EXCEEDED", r.body, r.err, statuses, waits, neverStatus)
			}
			drive(t, clk, do(ac, request(bg, aliases("Big", 19))), 0)
			if v := a.View(); v.Prices["Big"] != 19 || len(v.Policies) == 0 || v.Policies[0].Remaining != 0 || v.Policies[0].Limit != 20 {
				t.Fatalf("View() = %+v, want Big at 19 and 0 of 20 left", v)
			}
			// Big again: held until the bucket holds 19, then admitted.
			drive(t, clk, do(ac, request(bg, aliases("Big", 19))), 10)
			at, statuses := aLog.log()
			if gap := at[2].Sub(at[1]); statuses[2] != 200 || gap < 19*time.Second || gap > 20*time.Second {
				t.Errorf("the known price was sent %s after the bucket was emptied, answered %d; want 19s to 20s (full), 200", gap, statuses[2])
			}

			// A held request ends with its context, unsent.
			ctx, cancel := context.WithCancel(bg)
			done := do(ac, request(ctx, aliases("Big", 19)))
			<-clk.sleeping
			cancel()
			if r := <-done; !errors.Is(r.err, context.Canceled) {
				t.Errorf("cancelled while held: %v, want context.Canceled", r.err)
			}
			if at, _ := aLog.log(); len(at) != 3 {
				t.Errorf("%d sends, want 3: the cancelled request was sent", len(at))
			}

			// Another client of the key, which knows nothing yet: refused,
			// then sent again after exactly Retry-After (no jitter here).
			_, bLog, bc := newClocked(clk)
			r, _ = drive(t, clk, do(bc, request(bg, aliases("Big", 19))), 10)
			at, statuses = bLog.log()
			if r.err != nil || len(statuses) < 2 || statuses[0] != 429 || statuses[len(statuses)-1] != 200 {
				t.Fatalf("another client's Big: sends %v, %v; want a 429, then 200", statuses, r.err)
			}
			if wait := bLog.retryAfters[0]; at[1].Sub(at[0]) < wait || wait < time.Second {
				t.Errorf("sent again %s after a Retry-After of %s", at[1].Sub(at[0]), wait)
			}

			// A mutation refused is handed back, sent once.
			_, mLog, mc := newClocked(clk)
			r, _ = drive(t, clk, do(mc, request(bg, `mutation M { createIssue(repo: "hello-world", title: "t") { id } }`)), 10)
			if _, statuses := mLog.log(); r.err != nil || len(statuses) != 1 || statuses[0] != 429 || !strings.Contains(r.body, "RATE_LIMITED") {
				t.Errorf("a refused mutation: sends %v, body %q, %v; want one 429 RATE_LIMITED", statuses, r.body, r.err)
			}
		})
	}
}
