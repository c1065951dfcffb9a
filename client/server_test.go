package client_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/client"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
)

// apiKey is the key every client of the test server shares.
const apiKey = "shared-key"

// tally counts what a server answered, by status.
type tally struct {
	sent, refused atomic.Int64
}

// newServer starts the example schema behind the limiter, as the example
// server builds it, on plan: one principal reached by apiKey.
func newServer(t *testing.T, plan budget.Plan) (*httptest.Server, *tally) {
	t.Helper()
	lim, err := middleware.New(middleware.Dependencies{}, middleware.Policy{
		Plans:         map[string]budget.Plan{"team": plan, "anon": {Burst: 10, Rate: 10, Per: time.Hour}},
		AnonymousPlan: "anon",
		APIKeys:       map[string]identity.APIKey{apiKey: {Principal: "team", Plan: "team"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	srv := handler.New(graph.NewResolver().Schema())
	srv.AddTransport(transport.POST{})
	mux := http.NewServeMux()
	mux.Handle("/graphql", lim.Handler(srv))
	mux.Handle("/api/", lim.REST(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) })))
	n := new(tally)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		mux.ServeHTTP(rec, r)
		n.sent.Add(1)
		if rec.status == http.StatusTooManyRequests {
			n.refused.Add(1)
		}
	}))
	t.Cleanup(ts.Close)
	return ts, n
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// watch is the Base of every Transport of a test: it checks that no
// request is sent again before the Retry-After of its refusal ran out,
// and that no mutation is sent twice. A retry shares its first send's
// context, which run makes unique per request.
type watch struct {
	base     http.RoundTripper
	mu       sync.Mutex
	notUntil map[context.Context]time.Time
	early    atomic.Int64
	retries  atomic.Int64
	twice    atomic.Int64 // mutations sent more than once
}

func newWatch() *watch {
	return &watch{base: http.DefaultTransport, notUntil: map[context.Context]time.Time{}}
}

func (w *watch) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	w.mu.Lock()
	if until, ok := w.notUntil[ctx]; ok {
		w.retries.Add(1)
		if time.Now().Before(until) {
			w.early.Add(1)
		}
		if ctx.Value(mutationKey{}) != nil {
			w.twice.Add(1)
		}
	}
	w.mu.Unlock()
	resp, err := w.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		var ra int
		fmt.Sscan(resp.Header.Get("Retry-After"), &ra)
		w.mu.Lock()
		w.notUntil[ctx] = time.Now().Add(time.Duration(ra) * time.Second)
		w.mu.Unlock()
	}
	return resp, err
}

// mutationKey marks the context of a mutation.
type mutationKey struct{}

// The operations the clients send: the query prices 11 (a user, ten
// repositories) and costs 3 once run (alice has two); the mutation is a
// dry run, priced and never run.
const (
	query    = `{"query":"query Repos { user(login: \"alice\") { repos(first: 10) { name } } }","operationName":"Repos"}`
	mutation = `{"query":"mutation Open { rateLimit(dryRun: true) { cost } }","operationName":"Open"}`
	// queryCost is what the query costs.
	queryCost = 3
)

// outcome is what a run's clients got.
type outcome struct {
	ok   int64 // queries answered 200
	left int64 // the points left at the end, as the last answer said
}

// run drives n clients, each with its own Transport, for d, asking
// together demand times what plan refills; the first of several sends
// mutations.
func run(t *testing.T, url string, plan budget.Plan, n int, demand float64, d time.Duration, w *watch) outcome {
	t.Helper()
	perSecond := demand * float64(plan.Rate) / plan.Per.Seconds() / queryCost / float64(n)
	interval := time.Duration(float64(time.Second) / perSecond)
	var ok atomic.Int64
	var wg sync.WaitGroup
	var last *client.Transport
	stop := time.Now().Add(d)
	for i := range n {
		last = &client.Transport{Base: w, MaxWait: 5 * time.Second}
		c := &http.Client{Transport: last}
		body := query
		if i == 0 && n > 1 {
			body = mutation
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := time.Now().Add(time.Duration(i) * interval / time.Duration(n))
			for {
				if now := time.Now(); now.Before(next) {
					time.Sleep(next.Sub(now)) // the clients' demand, not synchronization
				}
				if time.Now().After(stop) {
					return
				}
				next = next.Add(interval)
				ctx := context.WithValue(context.Background(), new(int), 0) // one per request, for watch
				if body == mutation {
					ctx = context.WithValue(ctx, mutationKey{}, true)
				}
				status, err := send(ctx, c, url, body)
				if err != nil {
					t.Error(err)
					return
				}
				if status == http.StatusOK && body == query {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return outcome{ok: ok.Load(), left: last.View().Policies[0].Remaining}
}

// send posts a GraphQL request body to the test server's /graphql with
// the shared key, reads the answer whole and returns its status.
func send(ctx context.Context, c *http.Client, url, body string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/graphql", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

var (
	sharedFor     = flag.Duration("shared.for", 2*time.Second, "how long TestSharedKey runs its clients")
	sharedPlan    = flag.String("shared.plan", "400/400", "TestSharedKey's plan: burst/rate per second")
	sharedClients = flag.Int("shared.clients", 20, "how many clients TestSharedKey runs")
)

// Twenty clients sharing one key, each with its own Transport, asking
// three times what the plan refills: at most 1% of what they send is
// refused, no request is sent again before its Retry-After ran out, and
// no mutation twice. The share of the budget they spend is logged (go
// test -run SharedKey -v -args -shared.for 60s).
func TestSharedKey(t *testing.T) {
	var plan budget.Plan
	if _, err := fmt.Sscanf(*sharedPlan, "%d/%d", &plan.Burst, &plan.Rate); err != nil {
		t.Fatalf("-shared.plan %q: %v", *sharedPlan, err)
	}
	plan.Per = time.Second
	ts, n := newServer(t, plan)
	w := newWatch()
	start := time.Now()
	out := run(t, ts.URL, plan, *sharedClients, 3, *sharedFor, w)
	allowed := float64(plan.Burst) + float64(plan.Rate)*time.Since(start).Seconds()/plan.Per.Seconds() - float64(out.left)
	sent, refused := n.sent.Load(), n.refused.Load()
	t.Logf("sent %d, refused %d (%.2f%%), queries answered %d (%.1f%% of the budget spent), retries %d",
		sent, refused, 100*float64(refused)/float64(max(sent, 1)), out.ok, 100*float64(out.ok*queryCost)/allowed, w.retries.Load())
	if early := w.early.Load(); early > 0 {
		t.Errorf("%d requests sent again before their Retry-After ran out", early)
	}
	if twice := w.twice.Load(); twice > 0 {
		t.Errorf("%d mutations sent again", twice)
	}
	if refused*100 > sent {
		t.Errorf("%d of %d requests refused, more than 1%%", refused, sent)
	}
}

// One Transport used by many goroutines at once keeps one consistent view.
func TestConcurrentUse(t *testing.T) {
	plan := budget.Plan{Burst: 200, Rate: 200, Per: time.Second}
	ts, n := newServer(t, plan)
	tr := &client.Transport{MaxWait: 5 * time.Second}
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 12 {
				if _, err := send(context.Background(), c, ts.URL, query); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	v := tr.View()
	if len(v.Policies) != 1 || v.Policies[0].Limit != 200 || v.Prices["Repos"] != 11 {
		t.Errorf("View() = %+v, want the plan's bucket of 200 and Repos at 11", v)
	}
	if refused := n.refused.Load(); refused*100 > n.sent.Load() {
		t.Errorf("%d of %d refused", refused, n.sent.Load())
	}
}
