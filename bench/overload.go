package main

// The overload scenario (-only overload, issue 12 item 8): one server with
// a small capacity, offered overloadFactor times that capacity by a fixed
// mix of clients, then an outage and the retry wave that follows it, run
// twice: with the lanes of docs/middleware.md and without any.
//
// The server under test is built in this process from the pieces the
// example server is made of (middleware.Limiter in front of gqlgen over
// graph.Resolver, served by net/http on a loopback port): it was written
// before the example server had its overload and demo_latency keys, and
// does not yet start that server as a subprocess. Its resolvers take spec.latency; an outage switch in front of the
// limiter answers 503 with a Retry-After pointing at the outage's end.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/overload"
)

// overloadFactor is the offered load, as a multiple of capacity.
const overloadFactor = 4

// The scenario's fixed parameters.
const (
	// window is the bucket of the recovery figures.
	window = 100 * time.Millisecond
	// maxAttempts bounds the tries of one client request: the first and
	// up to three retries, each after the Retry-After it was given.
	maxAttempts = 4
	// anonymousAddrs is how many client addresses the anonymous clients
	// come from (X-Forwarded-For, believed from the loopback proxy).
	anonymousAddrs = 1000
	// apiKeys is how many API keys (principals) the authenticated and
	// checkout clients share.
	apiKeys = 4
	// unloadedProbes is how many requests, one at a time, measure the
	// unloaded latency.
	unloadedProbes = 30
	// recoveredShare: a lane has recovered once its successes in a window
	// reach this share of its mean per window in the loaded phase.
	recoveredShare = 0.9
)

// overloadSpec is the scenario's shape, from the flags.
type overloadSpec struct {
	capacity int           // the server's MaxInFlight
	latency  time.Duration // what every resolver takes
	load     time.Duration // the loaded phase
	outage   time.Duration // the backend fails
	recovery time.Duration // observed after the outage, at the same offered load
	queue    time.Duration // how long a checkout request waits for a slot (Lane.Queue)
}

// capacityRate is the requests per second the server can complete:
// capacity ÷ latency.
func (s overloadSpec) capacityRate() float64 {
	return float64(s.capacity) / s.latency.Seconds()
}

// interval is the time between two arrivals at overloadFactor × capacity.
func (s overloadSpec) interval() time.Duration {
	return time.Duration(float64(time.Second) / (overloadFactor * s.capacityRate()))
}

// client classes, each matched by one lane when lanes are on.
type class int

const (
	checkout class = iota
	authenticated
	anonymous
	numClasses
)

var classNames = [numClasses]string{"checkout", "authenticated", "anonymous"}

// classOf is the class of the n-th arrival: of every 10, one checkout
// (n%10 == 0), four authenticated (the other even ones) and five anonymous
// (the odd ones), interleaved.
func classOf(n int) class {
	switch {
	case n%10 == 0:
		return checkout
	case n%2 == 0:
		return authenticated
	}
	return anonymous
}

// The operations each class sends: opening an issue stands for checkout,
// as in the example server's default lanes. The issues go to the seeded
// repositories in turn, each of which takes graph.MaxIssuesPerRepository.
const readQuery = `{"query":"{ user(login: \"octocat\") { login } }"}`

var checkoutRepos = []string{"hello-world", "spoon-knife", "linguist", "octocat.github.io"}

func checkoutQuery(n int) string {
	return `{"query":"mutation { createIssue(repo: \"` + checkoutRepos[(n/10)%len(checkoutRepos)] + `\", title: \"bench\") { id } }"}`
}

// benchLanes are the example server's default lanes (docs/middleware.md,
// "Lanes"), the checkout lane queueing for up to queue.
func benchLanes(queue time.Duration) []middleware.Lane {
	return []middleware.Lane{
		{Name: "checkout", Priority: middleware.PriorityCritical, Queue: queue,
			Match: middleware.LaneMatch{GraphQL: []string{"Mutation.createIssue"}, REST: []string{"POST /api/orders"}}},
		{Name: "authenticated", Priority: middleware.PriorityNormal, Match: middleware.LaneMatch{Authenticated: true}},
		{Name: "anonymous", Priority: middleware.PrioritySheddable, Match: middleware.LaneMatch{Anonymous: true}},
	}
}

// sut is the server under test.
type sut struct {
	url  string
	http *httptest.Server
	lim  *middleware.Limiter
	// downUntil is when the outage ends, in Unix nanoseconds; 0: up.
	downUntil atomic.Int64
	// running counts the operations inside their resolvers; peak is its
	// highest value.
	running, peak atomic.Int64
	// from and finished count the operations that left their resolvers,
	// per window since from (Unix nanoseconds; 0: not counting yet): the
	// admitted rate, as the server saw it.
	from     atomic.Int64
	finished []atomic.Int64
}

// startInProcess builds the server: generous budgets (the scenario is
// about capacity, not budgets), the overload shedder at spec.capacity, the
// lanes when lanes is set, and resolvers that take spec.latency.
func startInProcess(spec overloadSpec, lanes bool) (*sut, error) {
	total := spec.load + spec.outage + spec.recovery
	keys := make(map[string]middleware.APIKey, apiKeys)
	for i := range apiKeys {
		keys[apiKey(i)] = middleware.APIKey{Principal: "member-" + strconv.Itoa(i), Plan: "member"}
	}
	generous := middleware.Plan{Burst: 1_000_000_000, Rate: 1_000_000_000, Per: time.Second}
	cfg := middleware.Config{
		Plans:          map[string]middleware.Plan{"member": generous, "anon": generous},
		AnonymousPlan:  "anon",
		APIKeys:        middleware.NewStaticKeys(keys),
		TrustedProxies: []string{"127.0.0.1/32", "::1/128"},
		Overload:       &overload.Config{MaxInFlight: spec.capacity},
		Logger:         slog.New(slog.DiscardHandler),
	}
	if lanes {
		cfg.Lanes = benchLanes(spec.queue)
	}
	lim, err := middleware.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: overload server: %w", err)
	}
	s := &sut{lim: lim, finished: make([]atomic.Int64, int(total/window)+1)}
	gql := handler.New(graph.NewResolver().Schema())
	gql.AddTransport(transport.POST{})
	gql.AroundRootFields(func(ctx context.Context, next graphql.RootResolver) graphql.Marshaler {
		n := s.running.Add(1)
		defer s.running.Add(-1)
		for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
		}
		t := time.NewTimer(spec.latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		m := next(ctx)
		if from := s.from.Load(); from != 0 {
			s.finished[min(int(time.Since(time.Unix(0, from))/window), len(s.finished)-1)].Add(1)
		}
		return m
	})
	limited := lim.Handler(gql)
	s.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if until := s.downUntil.Load(); until != 0 {
			if left := time.Until(time.Unix(0, until)); left > 0 {
				w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(left.Seconds())), 10))
				writeJSONStatus(w, http.StatusServiceUnavailable, `{"error":"backend_unavailable"}`)
				return
			}
		}
		limited.ServeHTTP(w, r)
	}))
	s.url = s.http.URL + "/graphql"
	return s, nil
}

func writeJSONStatus(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func (s *sut) fail(until time.Time) { s.downUntil.Store(until.UnixNano()) }

func (s *sut) Close() error {
	s.http.Close()
	return s.lim.Close()
}

func apiKey(i int) string { return "bench-key-" + strconv.Itoa(i) }

// outcome is what became of one attempt.
type outcome int

const (
	succeeded  outcome = iota // 200 without errors
	shedOut                   // 503 OVERLOADED
	limitedOut                // 429
	outageOut                 // the outage's 503
	failedOut                 // anything else, transport errors included
	numOutcomes
)

// phase of the scenario an attempt was sent in.
type phase int

const (
	loaded phase = iota
	outage
	recovering
	numPhases
)

var phaseNames = [numPhases]string{"loaded", "outage", "recovery"}

// overloadRun is one run's raw measurements. Every field is guarded by mu.
type overloadRun struct {
	mu sync.Mutex
	// counts[phase][class][outcome] counts attempts by when they were sent.
	counts [numPhases][numClasses][numOutcomes]int64
	// retries counts attempts after the first, by phase sent.
	retries [numPhases]int64
	// gaveUp counts requests refused on their last allowed attempt, or
	// whose retry fell after the end of the run.
	gaveUp int64
	// lat holds the latency of the successful attempts sent in the loaded
	// phase, by class, and all together.
	lat    [numClasses]histogram
	latAll histogram
	// ok[class][w] counts successes by the window they completed in,
	// from the start of the loaded phase.
	ok [numClasses][]int64
	// admitted counts the operations that finished their resolvers, per
	// window, as the server counted them.
	admitted []int64
	firstErr error
	unloaded histogram
	peak     int64
}

// overloadClient sends the scenario's requests.
type overloadClient struct {
	hc  *http.Client
	url string
}

func newOverloadClient(url string, conns int) *overloadClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = conns, conns
	return &overloadClient{hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}, url: url}
}

// attempt is what one try came back with.
type attempt struct {
	outcome    outcome
	retryAfter time.Duration // from the Retry-After header; 0: none
	err        error         // for failedOut
}

// send makes one attempt of a request of class c; n numbers the arrival
// (it picks the API key or the client address).
func (oc *overloadClient) send(ctx context.Context, c class, n int) attempt {
	body := readQuery
	if c == checkout {
		body = checkoutQuery(n)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, oc.url, bytes.NewReader([]byte(body)))
	if err != nil {
		return attempt{outcome: failedOut, err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if c == anonymous {
		a := n % anonymousAddrs
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.0.%d.%d", a/250, 1+a%250))
	} else {
		req.Header.Set(middleware.HeaderAPIKey, apiKey(n%apiKeys))
	}
	resp, err := oc.hc.Do(req)
	if err != nil {
		return attempt{outcome: failedOut, err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return attempt{outcome: failedOut, err: err}
	}
	return classify(resp.StatusCode, resp.Header.Get("Retry-After"), raw)
}

// classify reads a response: its status, its Retry-After, and for a 503
// whether the limiter shed it (GraphQL code OVERLOADED) or the outage
// refused it.
func classify(status int, retryAfter string, body []byte) attempt {
	var a attempt
	if s, err := strconv.Atoi(retryAfter); err == nil && s >= 0 {
		a.retryAfter = time.Duration(s) * time.Second
	}
	var parsed struct {
		Error  string `json:"error"`
		Errors []struct {
			Message    string `json:"message"`
			Extensions struct {
				Code string `json:"code"`
			} `json:"extensions"`
		} `json:"errors"`
	}
	_ = json.Unmarshal(body, &parsed) // an unreadable body stays failedOut below
	switch {
	case status == http.StatusOK && len(parsed.Errors) == 0:
		a.outcome = succeeded
	case status == http.StatusServiceUnavailable && parsed.Error == "backend_unavailable":
		a.outcome = outageOut
	case status == http.StatusServiceUnavailable && len(parsed.Errors) > 0 && parsed.Errors[0].Extensions.Code == middleware.CodeOverloaded:
		a.outcome = shedOut
	case status == http.StatusTooManyRequests:
		a.outcome = limitedOut
	default:
		msg := ""
		if len(parsed.Errors) > 0 {
			msg = ": " + parsed.Errors[0].Message
		}
		a.outcome, a.err = failedOut, fmt.Errorf("status %d%s", status, msg)
	}
	return a
}

// runOverloadOnce runs the scenario against a fresh server: the unloaded
// probes, then the loaded phase, the outage and the recovery, with arrivals
// at overloadFactor × capacity throughout.
func runOverloadOnce(ctx context.Context, spec overloadSpec, lanes bool) (*overloadRun, error) {
	srv, err := startInProcess(spec, lanes)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	oc := newOverloadClient(srv.url, 4*overloadFactor*spec.capacity)
	defer oc.hc.CloseIdleConnections()
	r := &overloadRun{}

	// Unloaded: one request at a time, the three classes in turn.
	for n := range unloadedProbes {
		t0 := time.Now()
		a := oc.send(ctx, classOf(n), n)
		if a.outcome != succeeded {
			return nil, fmt.Errorf("bench: overload: unloaded probe %d (%s) failed: %v %v", n, classNames[classOf(n)], a.outcome, a.err)
		}
		r.unloaded.record(time.Since(t0))
	}
	srv.peak.Store(0)

	start := time.Now()
	srv.from.Store(start.UnixNano())
	outageAt := start.Add(spec.load)
	outageEnd := outageAt.Add(spec.outage)
	end := outageEnd.Add(spec.recovery)
	phaseOf := func(t time.Time) phase {
		switch {
		case t.Before(outageAt):
			return loaded
		case t.Before(outageEnd):
			return outage
		}
		return recovering
	}
	nWindows := int(end.Sub(start)/window) + 1
	for c := range r.ok {
		r.ok[c] = make([]int64, nWindows)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	// try sends attempt k (1-based) of arrival n and schedules the next
	// after a refusal, honouring Retry-After.
	var try func(c class, n, k int)
	try = func(c class, n, k int) {
		sent := time.Now()
		p := phaseOf(sent)
		a := oc.send(runCtx, c, n)
		done := time.Now()
		r.mu.Lock()
		r.counts[p][c][a.outcome]++
		if k > 1 {
			r.retries[p]++
		}
		if a.outcome == succeeded {
			if p == loaded {
				r.lat[c].record(done.Sub(sent))
				r.latAll.record(done.Sub(sent))
			}
			r.ok[c][min(int(done.Sub(start)/window), nWindows-1)]++
		}
		if a.outcome == failedOut && r.firstErr == nil && runCtx.Err() == nil {
			r.firstErr = a.err
		}
		retry := a.outcome == shedOut || a.outcome == limitedOut || a.outcome == outageOut
		wait := a.retryAfter
		if wait <= 0 {
			wait = time.Second
		}
		if retry && (k == maxAttempts || done.Add(wait).After(end)) {
			r.gaveUp++
			retry = false
		}
		r.mu.Unlock()
		if retry {
			wg.Add(1)
			time.AfterFunc(wait, func() {
				defer wg.Done()
				if runCtx.Err() == nil {
					try(c, n, k+1)
				}
			})
		}
	}

	srvFailed := false
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	interval := spec.interval()
	for n := 0; ; {
		now := time.Now()
		if !now.Before(end) || ctx.Err() != nil {
			break
		}
		if !srvFailed && !now.Before(outageAt) {
			srv.fail(outageEnd)
			srvFailed = true
		}
		for due := int(now.Sub(start) / interval); n <= due; n++ {
			c, i := classOf(n), n
			wg.Go(func() { try(c, i, 1) })
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench: interrupted: %w", err)
	}
	r.peak = srv.peak.Load()
	r.admitted = make([]int64, len(srv.finished))
	for i := range srv.finished {
		r.admitted[i] = srv.finished[i].Load()
	}
	return r, nil
}

// errNoOverload: a run measured nothing (a too short -duration).
var errNoOverload = errors.New("bench: overload: no request succeeded in the loaded phase")

// validate checks the flags of the scenario: every phase at least one
// window long, the capacity one at which every priority has a slot.
func (s overloadSpec) validate() error {
	switch {
	case s.capacity < 2 || s.capacity > 4096:
		return fmt.Errorf("bench: -capacity must be between 2 and 4096 (got %d)", s.capacity)
	case s.latency < time.Millisecond || s.latency > time.Second:
		return fmt.Errorf("bench: -latency must be between 1ms and 1s (got %v)", s.latency)
	case s.load < 2*window:
		return fmt.Errorf("bench: overload: -duration must be at least %v (got %v)", 2*window, s.load)
	case s.outage < window:
		return fmt.Errorf("bench: -outage must be at least %v (got %v)", window, s.outage)
	case s.queue < 0:
		return fmt.Errorf("bench: -queue must not be negative (got %v)", s.queue)
	case s.recovery < window:
		return fmt.Errorf("bench: -recovery must be at least %v (got %v)", window, s.recovery)
	}
	total := s.load + s.outage + s.recovery
	if checkouts := 0.1 * overloadFactor * s.capacityRate() * total.Seconds(); checkouts > float64(len(checkoutRepos)*graph.MaxIssuesPerRepository) {
		return fmt.Errorf("bench: overload: %.0f checkouts in %v would overflow the %d seeded repositories' %d issues each; shorten the run or lower -capacity",
			checkouts, total, len(checkoutRepos), graph.MaxIssuesPerRepository)
	}
	return nil
}
