package main

// The clients scenario (-only clients): many clients of one API key
// against a budget that refills fast, demanding clientsDemand times what
// it refills, run twice in one process with the same load:
//
//   - naive: each client's http.Client has a plain http.Transport, and the
//     application resends a refused operation at once, query or mutation,
//     until it is served or the run ends;
//   - paced: each client's http.Client has the pacing transport of
//     package client over its own plain http.Transport, and the
//     application leaves retries to it: a refusal it hands back is given
//     up, and the client goes on to its next operation.
//
// The server is the example schema (package graph) behind the limiter,
// in this process, on a loopback port (httptest.NewServer): a fresh
// Limiter and a fresh data set per run, the in-memory store, one plan of
// clientsBurst points refilling clientsRate points a second, one API key
// granting it. A handler outside the limiter (clientsRecorder) sees every
// request: which client sent it (the X-Bench-Client header), the
// operation's id (the variable $rid: the same for every send of one
// operation, so a retry shows as a second send of the id), and the
// answer's status and Retry-After. The points served are the limiter's
// own account, from its Observer: what the admitted operations were
// debited once their actual cost was known.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
)

// The scenario's fixed parameters.
const (
	// clientsBurst and clientsRate are the shared plan: a bucket of 600
	// points refilling 300 a second (RateLimit-Policy q=600;w=2), so a
	// minute holds 30 refills of the whole bucket.
	clientsBurst = 600
	clientsRate  = 300
	// clientsDemand is the load the clients offer together, as a multiple
	// of clientsRate, in points.
	clientsDemand = 3
	// clientsKey is the API key every client presents.
	clientsKey = "bench-shared-key"
	// headerBenchClient names the client that sent a request.
	headerBenchClient = "X-Bench-Client"
	// earlyTolerance is how much before the end of its last Retry-After a
	// client's request may arrive and still not count as early. The end
	// is taken when the refusal left the handler, before the client could
	// have read it, so a client that waits Retry-After from when it read
	// the refusal arrives after it; the tolerance covers only the clock's
	// granularity.
	earlyTolerance = time.Millisecond
	// clientsMaxDuration bounds -duration: the served mutations open
	// issues in four repositories, each of which holds
	// graph.MaxIssuesPerRepository.
	clientsMaxDuration = 10 * time.Minute
	// clientsDefaultDuration is -duration when not given.
	clientsDefaultDuration = time.Minute
)

// clientOp is one operation of the mix. Its price is both its requested
// and its actual cost on the example schema's seeded data (the lists it
// selects are always full), so no refund blurs the account; a test pins
// it. Every document uses $rid (a no-op search of no items), the
// operation's id.
type clientOp struct {
	name     string
	price    int64
	mutation bool
	weight   int // out of the sum of the weights
	doc      string
}

var clientOps = []clientOp{
	{"Search", 20, false, 35, `query Search($rid: String!) { search(query: "", first: 20) { __typename } probe: search(query: $rid, first: 0) { __typename } }`},
	{"Issues", 13, false, 25, `query Issues($rid: String!) { user(login: "octocat") { repos(first: 4) { issues(first: 2) { title } } } probe: search(query: $rid, first: 0) { __typename } }`},
	{"Bodies", 53, false, 20, `query Bodies($rid: String!) { user(login: "octocat") { repos(first: 4) { issues(first: 2) { bodyHTML } } } probe: search(query: $rid, first: 0) { __typename } }`},
	// The issue goes to one of octocat's four repositories in turn; its
	// title is the id.
	{"CreateIssue", 11, true, 20, `mutation CreateIssue($repo: String!, $rid: String!) { createIssue(repo: $repo, title: $rid) { id title } }`},
}

var clientRepos = []string{"hello-world", "spoon-knife", "linguist", "octocat.github.io"}

// pickOp draws an operation of the mix by its weight.
func pickOp(rng *rand.Rand) clientOp {
	total := 0
	for _, op := range clientOps {
		total += op.weight
	}
	n := rng.IntN(total)
	for _, op := range clientOps {
		if n < op.weight {
			return op
		}
		n -= op.weight
	}
	return clientOps[len(clientOps)-1]
}

// body is the request body of the operation with the id rid; n picks a
// mutation's repository.
func (op clientOp) body(rid string, n int) []byte {
	vars := map[string]string{"rid": rid}
	if op.mutation {
		vars["repo"] = clientRepos[n%len(clientRepos)]
	}
	b, err := json.Marshal(struct {
		Query         string            `json:"query"`
		OperationName string            `json:"operationName"`
		Variables     map[string]string `json:"variables"`
	}{op.doc, op.name, vars})
	if err != nil {
		panic(err) // strings only
	}
	return b
}

// opID is the id of client c's n-th operation: "m" for a mutation, "q"
// for a query, then c and n.
func opID(op clientOp, c, n int) string {
	kind := "q"
	if op.mutation {
		kind = "m"
	}
	return kind + strconv.Itoa(c) + "-" + strconv.Itoa(n)
}

// clientsPolicy is the limiter of one run: the shared plan, granted by
// clientsKey, and a small anonymous plan no client uses.
func clientsPolicy() middleware.Policy {
	return middleware.Policy{
		Plans: map[string]budget.Plan{
			"team": {Burst: clientsBurst, Rate: clientsRate, Per: time.Second},
			"anon": {Burst: 100, Rate: 10, Per: time.Second},
		},
		AnonymousPlan: "anon",
		APIKeys:       map[string]identity.APIKey{clientsKey: {Principal: "team", Plan: "team"}},
	}
}

// clientsSpec is the scenario's shape, from the flags.
type clientsSpec struct {
	clients  int
	duration time.Duration
}

func (s clientsSpec) validate() error {
	switch {
	case s.clients < 1:
		return fmt.Errorf("bench: -clients must be at least 1 (got %d)", s.clients)
	case s.duration <= 0:
		return fmt.Errorf("bench: -duration must be positive (got %v)", s.duration)
	case s.duration > clientsMaxDuration:
		return fmt.Errorf("bench: clients: -duration %v is above %v (the served mutations would fill the seeded repositories)", s.duration, clientsMaxDuration)
	}
	return nil
}

// pointsPerSecond is what one client demands: its share of clientsDemand
// × clientsRate.
func (s clientsSpec) pointsPerSecond() float64 {
	return float64(clientsDemand*clientsRate) / float64(s.clients)
}

// clientKind is a client under test.
type clientKind struct {
	name string
	// transport wraps each client's own plain http.Transport: the
	// http.Client's Transport is transport(base).
	transport func(base http.RoundTripper) http.RoundTripper
	// resend: the application resends a refused operation at once, until
	// it is served or the run ends. Otherwise a refusal the transport
	// hands back is given up.
	resend bool
	// prepare, when set, tells the transport about an operation (its
	// price) on its request.
	prepare func(*http.Request, clientOp) *http.Request
}

// naiveClient is a plain http.Transport and an application that resends
// every refusal at once.
var naiveClient = clientKind{
	name:      "naive",
	transport: func(base http.RoundTripper) http.RoundTripper { return base },
	resend:    true,
}

// clientsRun is what one run measured.
type clientsRun struct {
	kind    string
	clients int
	elapsed time.Duration // from the first client's start to the server's close
	// At the server (clientsRecorder): every request that reached it,
	// those served (a 200 that is not a refusal), refused (429 or
	// RATE_LIMITED), abandoned (neither, its client gone: the end of the
	// run) and other; sends that arrived before the end of the
	// last Retry-After their client was given (early), and the resends of
	// an operation before the end of the Retry-After it was last given
	// (earlyRetries, a part of early); the sends of a mutation's id, and
	// of a query's, beyond its first.
	sent, served, refused, abandoned, other int64
	early, earlyRetries                     int64
	mutationRetries                         int64
	queryRetries                            int64
	// From the limiter's Observer: the points the admitted operations
	// were debited (after refunds), and how many they were.
	points   int64
	admitted int64
	// At the clients: operations started, served, given up on a refusal,
	// failed (an error or another status), resent by the application, and
	// the first failure.
	issued, done, gaveUp, failed, resent int64
	firstErr                             error
}

// allowed is what the budget allowed over the run: the burst and the
// refill over its length.
func (r *clientsRun) allowed() float64 {
	return clientsBurst + clientsRate*r.elapsed.Seconds()
}

// runClientsOnce runs one kind of client against a fresh server for d.
func runClientsOnce(ctx context.Context, spec clientsSpec, k clientKind) (*clientsRun, error) {
	obs := &pointsObserver{}
	lim, err := middleware.New(middleware.Dependencies{Logger: slog.New(slog.DiscardHandler), Observer: obs}, clientsPolicy())
	if err != nil {
		return nil, fmt.Errorf("bench: clients: %w", err)
	}
	defer lim.Close()
	rec := newClientsRecorder(lim.Handler(newGraphQLServer()))
	srv := httptest.NewServer(rec)
	url := srv.URL + "/graphql"

	r := &clientsRun{kind: k.name, clients: spec.clients}
	var cs clientStats
	runCtx, cancel := context.WithTimeout(ctx, spec.duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range spec.clients {
		wg.Go(func() { runClient(runCtx, c, k, url, spec, start, &cs) })
	}
	wg.Wait()
	srv.Close() // waits for the requests still at the server
	r.elapsed = time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench: interrupted: %w", err)
	}

	rec.mu.Lock()
	r.sent, r.served, r.refused, r.abandoned, r.other = rec.sent, rec.served, rec.refused, rec.abandoned, rec.other
	r.early, r.earlyRetries, r.mutationRetries, r.queryRetries = rec.early, rec.earlyRetries, rec.mutationRetries, rec.queryRetries
	rec.mu.Unlock()
	r.points, r.admitted = obs.points.Load(), obs.admitted.Load()
	r.issued, r.done, r.gaveUp, r.failed, r.resent = cs.issued.Load(), cs.done.Load(), cs.gaveUp.Load(), cs.failed.Load(), cs.resent.Load()
	r.firstErr = cs.firstErr()
	return r, nil
}

// clientStats are the clients' counts, shared by every client of a run.
type clientStats struct {
	issued, done, gaveUp, failed, resent atomic.Int64
	mu                                   sync.Mutex
	first                                error
}

func (s *clientStats) fail(err error) {
	s.failed.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == nil {
		s.first = err
	}
}

func (s *clientStats) firstErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

// runClient is client c until ctx ends: its operations drawn from the mix
// with a generator of its own, each due when the previous one's price has
// been demanded at the client's share of the load (from a random offset
// within one operation), sent as soon as it is due; a client behind its
// schedule sends its next operation at once.
func runClient(ctx context.Context, c int, k clientKind, url string, spec clientsSpec, start time.Time, st *clientStats) {
	base := http.DefaultTransport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	hc := &http.Client{Transport: k.transport(base)}
	rng := rand.New(rand.NewPCG(uint64(c), 0x636c69656e7473))
	perSecond := spec.pointsPerSecond()
	after := func(points int64) time.Duration {
		return time.Duration(float64(points) / perSecond * float64(time.Second))
	}
	due := start.Add(time.Duration(rng.Float64() * float64(after(clientOps[0].price))))
	timer := time.NewTimer(0)
	defer timer.Stop()
	for n := 0; ; n++ {
		op := pickOp(rng)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		due = due.Add(after(op.price))
		body := op.body(opID(op, c, n), n)
		st.issued.Add(1)
		for {
			refused, err := sendOp(ctx, hc, url, c, body, op, k.prepare)
			if ctx.Err() != nil {
				return
			}
			switch {
			case err != nil:
				st.fail(err)
			case !refused:
				st.done.Add(1)
			case k.resend:
				st.resent.Add(1)
				continue
			default:
				st.gaveUp.Add(1)
			}
			break
		}
	}
}

// sendOp sends one operation and reads its answer: refused, or an error
// for a failure (a transport error, a status other than 200 and 429).
func sendOp(ctx context.Context, hc *http.Client, url string, c int, body []byte, op clientOp, prepare func(*http.Request, clientOp) *http.Request) (refused bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/graphql-response+json, application/json;q=0.9")
	req.Header.Set("Authorization", "Bearer "+clientsKey)
	req.Header.Set(headerBenchClient, strconv.Itoa(c))
	if prepare != nil {
		req = prepare(req, op)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return false, err
	}
	if isRefusal(resp.StatusCode, b) {
		return true, nil
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: status %d: %.200s", op.name, resp.StatusCode, b)
	}
	return false, nil
}

// isRefusal: a 429, or a body carrying the code RATE_LIMITED.
func isRefusal(status int, body []byte) bool {
	return status == http.StatusTooManyRequests || bytes.Contains(body, []byte(`"`+budget.CodeRateLimited+`"`))
}

// pointsObserver sums what the admitted GraphQL operations were debited
// once their actual cost was known.
type pointsObserver struct {
	points, admitted atomic.Int64
}

var _ middleware.Observer = (*pointsObserver)(nil)

func (o *pointsObserver) ObserveDecision(e *middleware.Event) {
	if e.Kind != middleware.KindGraphQL || e.Outcome != budget.ClassAdmitted {
		return
	}
	o.points.Add(e.Charged - e.Refunded + e.Excess)
	o.admitted.Add(1)
}

// clientsRecorder is the handler in front of the limiter that counts what
// reaches the server.
type clientsRecorder struct {
	next http.Handler

	mu sync.Mutex
	// notBefore is, by client, when the last Retry-After it was given
	// runs out: when its refusal left this handler, plus Retry-After.
	notBefore map[string]time.Time
	// opNotBefore is the same by operation id: when the Retry-After of
	// the operation's last refusal runs out.
	opNotBefore map[string]time.Time
	// seen counts the sends of each operation id.
	seen                                    map[string]int
	sent, served, refused, abandoned, other int64
	early, earlyRetries                     int64
	mutationRetries                         int64
	queryRetries                            int64
}

func newClientsRecorder(next http.Handler) *clientsRecorder {
	return &clientsRecorder{next: next, notBefore: map[string]time.Time{}, opNotBefore: map[string]time.Time{}, seen: map[string]int{}}
}

func (rec *clientsRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, "bench: reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Variables struct {
			Rid string `json:"rid"`
		} `json:"variables"`
	}
	_ = json.Unmarshal(body, &req) // a body without an id counts as sent, under no id
	id, client := req.Variables.Rid, r.Header.Get(headerBenchClient)

	rec.mu.Lock()
	rec.sent++
	if nb, ok := rec.notBefore[client]; ok && arrived.Before(nb.Add(-earlyTolerance)) {
		rec.early++
	}
	if nb, ok := rec.opNotBefore[id]; ok && id != "" && arrived.Before(nb.Add(-earlyTolerance)) {
		rec.earlyRetries++
	}
	if id != "" {
		rec.seen[id]++
		if rec.seen[id] > 1 {
			if id[0] == 'm' {
				rec.mutationRetries++
			} else {
				rec.queryRetries++
			}
		}
	}
	rec.mu.Unlock()

	cw := &capturingWriter{ResponseWriter: w}
	rec.next.ServeHTTP(cw, r)
	left := time.Now()
	if cw.status == 0 {
		cw.status = http.StatusOK
	}
	refused := isRefusal(cw.status, cw.head)
	var retryAfter time.Duration
	if refused {
		if s, err := strconv.Atoi(cw.Header().Get(middleware.HeaderRetryAfter)); err == nil && s >= 0 {
			retryAfter = time.Duration(s) * time.Second
		}
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	switch {
	case refused:
		rec.refused++
		rec.notBefore[client] = left.Add(retryAfter)
		if id != "" {
			rec.opNotBefore[id] = left.Add(retryAfter)
		}
	case cw.status == http.StatusOK:
		rec.served++
	case r.Context().Err() != nil:
		rec.abandoned++
	default:
		rec.other++
	}
}

// capturingWriter keeps a response's status and the first bytes of its
// body.
type capturingWriter struct {
	http.ResponseWriter
	status int
	head   []byte
}

const capturedBytes = 4 << 10

func (c *capturingWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *capturingWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if room := capturedBytes - len(c.head); room > 0 {
		c.head = append(c.head, b[:min(room, len(b))]...)
	}
	return c.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (c *capturingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// errNoClientKinds: no client kind to run.
var errNoClientKinds = errors.New("bench: clients: no client to run")
