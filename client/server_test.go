package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
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

// watch is a Base transport that checks that no request is sent again
// before the Retry-After of its refusal ran out: a retry shares its
// first send's context.
type watch struct {
	base     http.RoundTripper
	mu       sync.Mutex
	notUntil map[context.Context]time.Time
	early    atomic.Int64
	retries  atomic.Int64
}

func (w *watch) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	w.mu.Lock()
	if until, ok := w.notUntil[ctx]; ok {
		w.retries.Add(1)
		if time.Now().Before(until) {
			w.early.Add(1)
		}
	}
	w.mu.Unlock()
	resp, err := w.base.RoundTrip(req)
	if os.Getenv("CLIENT_TRACE") != "" && err == nil {
		fmt.Printf("%s %d %s\n", time.Now().Format("05.000"), resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		var ra int
		fmt.Sscan(resp.Header.Get("Retry-After"), &ra)
		w.mu.Lock()
		w.notUntil[ctx] = time.Now().Add(time.Duration(ra) * time.Second)
		w.mu.Unlock()
	}
	return resp, err
}

// query prices 11 (a user, ten repositories) and costs less once run.
const query = `{"query":"query Repos { user(login: \"alice\") { repos(first: 10) { name } } }","operationName":"Repos"}`

// run drives n clients, each with its own Transport, for d, sending
// together demand times what plan refills, and returns the requests they
// completed with 200.
func run(t *testing.T, url string, plan budget.Plan, n int, demand float64, d time.Duration, w *watch) (int64, int64) {
	t.Helper()
	// Each request debits about 2 points once refunded (a user and one
	// repository of alice's two... the price of what it returns).
	perSecond := demand * float64(plan.Rate) / plan.Per.Seconds() / 2 / float64(n)
	interval := time.Duration(float64(time.Second) / perSecond)
	var ok atomic.Int64
	var wg sync.WaitGroup
	var last *client.Transport
	stop := time.Now().Add(d)
	for i := range n {
		last = &client.Transport{Base: w, MaxWait: 5 * time.Second}
		c := &http.Client{Transport: last}
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := time.Now().Add(time.Duration(i) * interval / time.Duration(n))
			for {
				if now := time.Now(); now.Before(next) {
					time.Sleep(next.Sub(now))
				}
				if time.Now().After(stop) {
					return
				}
				next = next.Add(interval)
				ctx := context.WithValue(context.Background(), new(int), 0) // one per request, for watch
				req, _ := http.NewRequestWithContext(ctx, "POST", url+"/graphql", strings.NewReader(query))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+apiKey)
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load(), last.View().Policies[0].Remaining
}

func TestSharedKeyAgainstServer(t *testing.T) {
	d := 3 * time.Second
	if s := os.Getenv("CLIENT_RUN"); s != "" {
		d, _ = time.ParseDuration(s)
	}
	plan := budget.Plan{Burst: 400, Rate: 400, Per: time.Second}
	if s := os.Getenv("CLIENT_PLAN"); s != "" {
		fmt.Sscanf(s, "%d/%d", &plan.Burst, &plan.Rate)
	}
	ts, n := newServer(t, plan)
	w := &watch{base: http.DefaultTransport, notUntil: map[context.Context]time.Time{}}
	start := time.Now()
	ok, left := run(t, ts.URL, plan, 20, 3, d, w)
	allowed := -float64(left) + float64(plan.Burst) + float64(plan.Rate)*time.Since(start).Seconds()/plan.Per.Seconds()
	sent, refused := n.sent.Load(), n.refused.Load()
	t.Logf("sent %d, refused %d (%.2f%%), ok %d (%.1f%% of the budget), retries %d, early %d", sent, refused, 100*float64(refused)/float64(max(sent, 1)),
		ok, 100*float64(ok)*3/allowed, w.retries.Load(), w.early.Load())
	if w.early.Load() > 0 {
		t.Errorf("%d requests sent again before their Retry-After ran out", w.early.Load())
	}
	if refused*100 > sent*1 {
		t.Errorf("%d of %d requests refused, more than 1%%", refused, sent)
	}
}
