package main

// The overload scenario (-only overload): one example
// server process with a small capacity, offered overloadFactor times that
// capacity by a fixed mix of clients, then an outage and the retry wave
// that follows it, run twice: with the example server's lanes and without
// any (`lanes: []`).
//
// The server under test is examples/server, built once and started once
// per run (exampleserver.go) with a configuration written by overloadYAML:
// overload.max_in_flight is the capacity, demo_latency what every root
// field takes, plans too large to refuse anything, so only shedding
// matters.
//
// The example server has no switch that fails its backend, so the outage
// is emulated by the clients: no attempt is sent while it lasts. Each
// attempt that falls in it (a new arrival or a retry that comes due) is
// counted as refused by the outage and held until the outage ends, when
// all of them are sent at once: a synchronized retry wave, as if every
// client had been answered 503 with a Retry-After pointing at the end.
// Requests already at the server when the outage starts finish normally.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/identity"
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
	// recoveredShare: a lane has recovered once the share of its answered
	// attempts that succeed in a window
	// reach this share of its mean per window in the loaded phase.
	recoveredShare = 0.9
)

// overloadSpec is the scenario's shape, from the flags.
type overloadSpec struct {
	capacity int           // the server's overload.max_in_flight
	maxQueue int           // the server's overload.max_queue (0: capacity)
	latency  time.Duration // the server's demo_latency: what every root field takes
	load     time.Duration // the loaded phase
	outage   time.Duration // the outage, emulated at the clients
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

// overloadYAML is the example server's configuration for one run. Plans
// so large that no budget ever refuses; the API keys of the checkout and
// authenticated clients; the loopback proxy trusted, so the anonymous
// clients' X-Forwarded-For is their address; no per-principal cap and no
// degradation, so only the shedder refuses; with lanes, the server's
// default lanes with the checkout queue of spec.queue; without, none.
func overloadYAML(spec overloadSpec, lanes bool, secret string) string {
	var b strings.Builder
	b.WriteString("plans:\n")
	b.WriteString("  member: {burst: 1000000000, rate: 1000000000, per: 1s}\n")
	b.WriteString("  anon: {burst: 1000000000, rate: 1000000000, per: 1s}\n")
	b.WriteString("anonymous_plan: anon\napi_keys:\n")
	for i := range apiKeys {
		fmt.Fprintf(&b, "  %s: {principal: member-%d, plan: member}\n", apiKey(i), i)
	}
	b.WriteString(`trusted_proxies: ["127.0.0.1/32", "::1/128"]` + "\n")
	if lanes {
		b.WriteString("lanes:\n")
		fmt.Fprintf(&b, "  - {name: checkout, priority: critical, match: {graphql: [\"Mutation.createIssue\"], rest: [\"POST /api/orders\"]}, queue: %s}\n", spec.queue)
		b.WriteString("  - {name: authenticated, priority: normal, match: {authenticated: true}}\n")
		b.WriteString("  - {name: anonymous, priority: sheddable, match: {anonymous: true}, challenge: pow}\n")
	} else {
		b.WriteString("lanes: []\n")
	}
	fmt.Fprintf(&b, "overload: {max_in_flight: %d, max_queue: %d}\n", spec.capacity, spec.maxQueue)
	b.WriteString("concurrency: {per_principal: 0}\n")
	b.WriteString("degradation: []\n")
	fmt.Fprintf(&b, "challenge: {secret: %q, bits: 16}\n", secret)
	fmt.Fprintf(&b, "demo_latency: %s\n", spec.latency)
	return b.String()
}

// randomSecret is a challenge.secret for one run: 32 random bytes in hex.
func randomSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("bench: overload: challenge secret: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func apiKey(i int) string { return "bench-key-" + strconv.Itoa(i) }

// outcome is what became of one attempt.
type outcome int

const (
	succeeded  outcome = iota // 200 without errors
	shedOut                   // 503 OVERLOADED
	limitedOut                // 429
	outageOut                 // held by the outage, never sent
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
	// answered[class][w] counts the attempts sent in window w that reached
	// the server (any outcome but the outage's), and sentOK those of them
	// that succeeded: by the window a client asked in, not the one it was
	// answered in, so that a queued request counts when it was sent.
	answered [numClasses][]int64
	sentOK   [numClasses][]int64
	// spans are the [sent, done] intervals of the successful attempts,
	// over the whole run: their most at once is an upper bound of the
	// server's requests in flight.
	spans []span
	// start is when the loaded phase began; admitted the server's count
	// of admitted requests, read from its /metrics every window from
	// then on, and scrapeErr the first scrape that failed.
	start     time.Time
	admitted  []admittedSample
	scrapeErr error
	// serverPeak is the server's own high-water mark of requests in
	// flight (costguard_requests_in_flight_peak), read once the run ends;
	// -1 when it could not be read.
	serverPeak int64
	firstErr   error
	unloaded   histogram
}

// span is one successful attempt, from sent to answered, at the client.
type span struct{ from, to time.Time }

// lastOf is the last d of each span, or all of it when shorter.
func lastOf(spans []span, d time.Duration) []span {
	out := make([]span, len(spans))
	for i, s := range spans {
		out[i] = span{from: s.from, to: s.to}
		if from := s.to.Add(-d); from.After(s.from) {
			out[i].from = from
		}
	}
	return out
}

// maxOverlap is the most spans open at one instant; a span that ends when
// another starts does not overlap it.
func maxOverlap(spans []span) int64 {
	type edge struct {
		at    time.Time
		delta int64
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		edges = append(edges, edge{s.from, 1}, edge{s.to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return int(a.delta - b.delta) // ends first
	})
	var open, most int64
	for _, e := range edges {
		open += e.delta
		most = max(most, open)
	}
	return most
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
		req.Header.Set(identity.HeaderAPIKey, apiKey(n%apiKeys))
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
// whether the limiter shed it (GraphQL code OVERLOADED).
func classify(status int, retryAfter string, body []byte) attempt {
	var a attempt
	if s, err := strconv.Atoi(retryAfter); err == nil && s >= 0 {
		a.retryAfter = time.Duration(s) * time.Second
	}
	var parsed struct {
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
	case status == http.StatusServiceUnavailable && len(parsed.Errors) > 0 && parsed.Errors[0].Extensions.Code == budget.CodeOverloaded:
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

// runOverloadOnce runs the scenario against a fresh example server
// started from bin, its configuration written into dir: the unloaded
// probes, then the loaded phase, the outage and the recovery, with
// arrivals at overloadFactor × capacity throughout.
func runOverloadOnce(ctx context.Context, spec overloadSpec, lanes bool, bin, dir string) (_ *overloadRun, err error) {
	secret, err := randomSecret()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "overload-lanes-"+onOff(lanes)+".yaml")
	if err := os.WriteFile(cfg, []byte(overloadYAML(spec, lanes, secret)), 0o600); err != nil {
		return nil, fmt.Errorf("bench: overload: %w", err)
	}
	srv, err := startExampleServer(ctx, bin, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, srv.Close()) }()
	oc := newOverloadClient(srv.url+"/graphql", 4*overloadFactor*spec.capacity)
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

	start := time.Now()
	r.start = start
	scrapeCtx, stopScraping := context.WithCancel(ctx)
	defer stopScraping()
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		r.admitted, r.scrapeErr = scrapeAdmitted(scrapeCtx, srv.admin, window)
	}()
	defer func() {
		stopScraping()
		<-scraped
	}()
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
		r.answered[c] = make([]int64, nWindows)
		r.sentOK[c] = make([]int64, nWindows)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	// try makes attempt k (1-based) of arrival n: during the outage it is
	// held until the outage's end, otherwise sent; a refusal schedules
	// the next attempt after its Retry-After.
	var try func(c class, n, k int)
	try = func(c class, n, k int) {
		sent := time.Now()
		p := phaseOf(sent)
		var a attempt
		done := sent
		if p == outage {
			a = attempt{outcome: outageOut, retryAfter: outageEnd.Sub(sent)}
		} else {
			a = oc.send(runCtx, c, n)
			done = time.Now()
		}
		r.mu.Lock()
		r.counts[p][c][a.outcome]++
		if k > 1 {
			r.retries[p]++
		}
		if a.outcome != outageOut {
			w := min(int(sent.Sub(start)/window), nWindows-1)
			r.answered[c][w]++
			if a.outcome == succeeded {
				r.sentOK[c][w]++
			}
		}
		if a.outcome == succeeded {
			if p == loaded {
				r.lat[c].record(done.Sub(sent))
				r.latAll.record(done.Sub(sent))
			}
			r.ok[c][min(int(done.Sub(start)/window), nWindows-1)]++
			r.spans = append(r.spans, span{sent, done})
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

	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	interval := spec.interval()
	for n := 0; ; {
		now := time.Now()
		if !now.Before(end) || ctx.Err() != nil {
			break
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
	stopScraping()
	<-scraped
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench: interrupted: %w", err)
	}
	r.serverPeak = -1
	if peak, err := scrapeGauge(ctx, srv.admin, peakMetric); err == nil {
		r.serverPeak = int64(peak)
	} else if r.scrapeErr == nil {
		r.scrapeErr = err
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
