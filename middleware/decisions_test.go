package middleware_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
	"github.com/99designs/gqlgen/graphql/handler"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/overload"
)

// decisionTransport is one of gqlgen's transports, as the anonymous
// client uses it.
type decisionTransport struct {
	name string
	// http is the request carrying doc; nil for a WebSocket.
	http func(t *testing.T, doc string) request
	// ws is the WebSocket subprotocol.
	ws string
	// once: the transport answers with one response, so a subscription
	// carries at most its first event.
	once bool
	// get: a subscription is answered 406 before anything is decided.
	get bool
}

// jsonRequest is a POST of doc as a JSON body, asking for accept ("":
// JSON).
func jsonRequest(doc, accept string) request {
	body, _ := json.Marshal(map[string]string{"query": doc})
	h := http.Header{"Content-Type": {"application/json"}}
	if accept != "" {
		h.Set("Accept", accept)
	}
	return request{path: "/", body: string(body), header: h}
}

// multipartMixed and the other transports of the adopter's server.
var (
	multipartMixed = decisionTransport{name: "multipart/mixed", http: func(_ *testing.T, doc string) request {
		return jsonRequest(doc, "multipart/mixed")
	}}
	decisionTransports = []decisionTransport{
		{name: "POST", once: true, http: func(_ *testing.T, doc string) request { return jsonRequest(doc, "") }},
		{name: "GET", once: true, get: true, http: func(_ *testing.T, doc string) request {
			return request{method: http.MethodGet, path: "/?query=" + url.QueryEscape(doc)}
		}},
		{name: "multipart form", once: true, http: func(t *testing.T, doc string) request {
			body, _, ct := multipartBody(t, uploadOps(doc), 0)
			b, err := io.ReadAll(body)
			if err != nil {
				t.Fatal(err)
			}
			return request{path: "/", body: string(b), header: http.Header{"Content-Type": {ct}}}
		}},
		// transport.UrlEncodedForm decodes a body only when it starts
		// "query=%7B": the plain form takes every document.
		{name: "form-encoded", once: true, http: func(_ *testing.T, doc string) request {
			return request{path: "/", body: "query=" + doc,
				header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}}
		}},
		{name: "application/graphql", once: true, http: func(_ *testing.T, doc string) request {
			return request{path: "/", body: doc, header: http.Header{"Content-Type": {"application/graphql"}}}
		}},
		multipartMixed,
		{name: "SSE", http: func(_ *testing.T, doc string) request { return jsonRequest(doc, "text/event-stream") }},
		{name: "WebSocket " + protoTransportWS, ws: protoTransportWS},
		{name: "WebSocket " + protoLegacyWS, ws: protoLegacyWS},
	}
)

// Documents of the cases: an operation priced between half the budget and
// all of it (admitted once, refused 429 the second time while refunds are
// off), one gqlgen refuses as invalid, and one above the plan's burst.
const (
	halfBudgetDoc = `{ user(login: "octocat") { repos(first: 50) { issues(first: 5) { title } } } }`
	invalidDoc    = `{ nope }`
	overBurstDoc  = `{ user(login: "octocat") { repos(first: 100) { issues(first: 100) { title } } } }`
	// subscriptionEvents is how many events a subscription gets on a
	// transport that streams them.
	subscriptionEvents = 3
)

// decisionCase is one operation and the decisions it must report: each
// "kind outcome", sorted.
type decisionCase struct {
	name         string
	subscription bool
	run          func(c *decisionClient)
	want         []string
}

func decisions(kind middleware.Kind, outcome budget.Class, n int) []string {
	return slices.Repeat([]string{string(kind) + " " + string(outcome)}, n)
}

// decisionCases are what TestOneDecisionPerOperation sends over tr.
func decisionCases(tr decisionTransport) []decisionCase {
	admitted := decisions(middleware.KindGraphQL, budget.ClassAdmitted, 1)
	cases := []decisionCase{
		{name: "admitted query", want: admitted, run: func(c *decisionClient) {
			c.send(cheapQueryDoc, `"octocat"`)
		}},
		{name: "query refused 429", want: decisions(middleware.KindGraphQL, budget.ClassRateLimited, 1), run: func(c *decisionClient) {
			c.send(halfBudgetDoc, `"issues"`)
			c.forget() // the decision that spent the budget
			c.send(halfBudgetDoc, budget.CodeRateLimited)
		}},
		// gqlgen refuses it; it pays InvalidCost, reported as admitted
		// (docs/middleware.md, Decision events).
		{name: "invalid operation", want: admitted, run: func(c *decisionClient) {
			c.send(invalidDoc, "GRAPHQL_VALIDATION_FAILED")
		}},
		{name: "operation over the burst", want: decisions(middleware.KindGraphQL, budget.ClassCostExceeded, 1), run: func(c *decisionClient) {
			c.send(overBurstDoc, "MAX_COST_EXCEEDED")
		}},
	}
	if tr.get {
		// GraphQL over GET carries queries only: the wrapper refuses a
		// subscription free, nothing decided, nothing reported.
		return append(cases, decisionCase{name: "subscription refused 406", subscription: true, want: nil, run: func(c *decisionClient) {
			c.send(subscribeDoc, "GET requests only allow query operations")
		}})
	}
	events := subscriptionEvents
	if tr.once {
		events = 1
	}
	return append(cases,
		decisionCase{name: "subscription without events", subscription: true, want: admitted, run: func(c *decisionClient) {
			c.subscribe(0)
		}},
		decisionCase{name: "subscription with events", subscription: true,
			want: append(admitted, decisions(middleware.KindSubscriptionEvent, budget.ClassAdmitted, events)...),
			run:  func(c *decisionClient) { c.subscribe(events) }},
	)
}

// Every operation on every transport is one decision, reported once: an
// admitted query, one refused 429, one gqlgen refuses as invalid, one over
// the burst. A subscription is its subscribe's decision, reported when it
// is admitted, whether or not events follow (the client stops it before
// any here), then one decision per event, reported before the event is
// sent. A subscription by GET is answered 406 and decides nothing. The
// subscriptions over multipart/mixed are counted
// by TestMultipartMixedSubscriptionDecisions, built without -race.
func TestOneDecisionPerOperation(t *testing.T) {
	for _, tr := range decisionTransports {
		t.Run(tr.name, func(t *testing.T) {
			checkDecisions(t, tr, nil, func(dc decisionCase) bool { return !dc.subscription || tr.name != multipartMixed.name })
		})
	}
}

// checkDecisions runs the cases of tr that pick selects against a server
// of its own, installed by install (nil: lim.Handler), and counts what its
// Observer receives.
func checkDecisions(t *testing.T, tr decisionTransport, install func(*middleware.Limiter, *handler.Server) http.Handler, pick func(decisionCase) bool) {
	rec := &recorder{}
	plan := budget.Plan{Burst: adopterBurst, Rate: adopterBurst, Per: time.Hour, DisableRefund: true}
	a := newAdopter(t, config{Dependencies: middleware.Dependencies{
		Observer: rec,
	}, Policy: middleware.Policy{
		Plans:         map[string]budget.Plan{"anon": plan, "pro": plan},
		AnonymousPlan: "anon",
	}}, install)
	if p := a.price(halfBudgetDoc); p <= adopterBurst/2 || p > adopterBurst {
		t.Fatalf("%s costs %d: it must cost more than half the budget of %d and at most all of it", halfBudgetDoc, p, adopterBurst)
	}
	for _, dc := range decisionCases(tr) {
		if !pick(dc) {
			continue
		}
		t.Run(dc.name, func(t *testing.T) {
			a.clock.Advance(time.Hour) // the budget is whole again
			c := &decisionClient{t: t, a: a, rec: rec, tr: tr}
			c.forget()
			dc.run(c)
			got := c.decisions()
			slices.Sort(got)
			want := slices.Clone(dc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("decisions reported %q, want %q", got, want)
			}
			var charged int64
			for _, e := range c.seen {
				charged += e.Charged
			}
			t.Logf("%d decisions reported %q, %d points charged", len(got), got, charged)
		})
	}
}

// decisionClient sends a case's operations and keeps the decisions of its
// principal (not the mutations that make a subscription's events).
type decisionClient struct {
	t    *testing.T
	a    *adopter
	rec  *recorder
	tr   decisionTransport
	seen []middleware.Event
}

// mutatorKey is the bucket key of adopterKey's principal, whose mutations
// make the events.
const mutatorKey = "user:pro-user"

// decisions are the decisions reported so far, as "kind outcome".
func (c *decisionClient) decisions() []string {
	c.collect()
	var out []string
	for _, e := range c.seen {
		out = append(out, string(e.Kind)+" "+string(e.Outcome))
	}
	return out
}

func (c *decisionClient) collect() {
	for _, e := range c.rec.take() {
		if e.Key != mutatorKey {
			c.seen = append(c.seen, e)
		}
	}
}

// forget drops what was reported so far.
func (c *decisionClient) forget() {
	c.rec.take()
	c.seen = nil
}

// send sends doc and returns once the server has answered it whole: over
// HTTP, in process; over a WebSocket, on a connection of its own, once its
// first message arrived (sent after its decision was reported). The
// answer must hold the text answer.
func (c *decisionClient) send(doc, answer string) {
	c.t.Helper()
	if c.tr.ws != "" {
		s := c.a.dial(c.tr.ws, nil, nil)
		s.start("op", doc)
		if m := s.next(); !strings.Contains(string(m.Payload), answer) {
			c.t.Fatalf("%s %s, want %s", m.Type, m.Payload, answer)
		}
		return
	}
	if w := do(c.t, c.a.h, c.tr.http(c.t, doc)); !strings.Contains(w.Body.String(), answer) {
		c.t.Fatalf("%d %.300s, want %s", w.Code, w.Body.String(), answer)
	}
}

// subscribe subscribes to subscribeDoc, checks that its decision was
// reported by the time its resolver runs, makes events events and waits
// until they are sent (over HTTP, until they were decided), then leaves
// and waits until the subscription is closed.
func (c *decisionClient) subscribe(events int) {
	c.t.Helper()
	subscribed := func() {
		c.t.Helper()
		waitFor(c.t, func() bool { return c.a.res.Subscribers() == 1 })
		if got := c.decisions(); !slices.Equal(got, decisions(middleware.KindGraphQL, budget.ClassAdmitted, 1)) {
			c.t.Errorf("subscribed: decisions reported %q, want the subscribe's", got)
		} else if price := c.a.price(subscribeDoc); c.seen[0].Charged != price || c.seen[0].RequestedCost != price {
			c.t.Errorf("the subscribe's decision charged %d of %d, want its price %d", c.seen[0].Charged, c.seen[0].RequestedCost, price)
		}
	}
	mutate := func() {
		c.t.Helper()
		var out map[string]any
		if err := client.New(c.a.h).Post(mutationDoc, &out, client.AddHeader("Authorization", "Bearer "+adopterKey)); err != nil {
			c.t.Fatal(err)
		}
	}
	closed := func() bool { return c.a.lim.OpenSubscriptions() == 0 && c.a.res.Subscribers() == 0 }
	if c.tr.ws != "" {
		s := c.a.dial(c.tr.ws, nil, nil)
		s.start("sub", subscribeDoc)
		subscribed()
		for i := range events {
			mutate()
			if m := s.next(); m.Type != "next" || !strings.Contains(string(m.Payload), `"issueCreated"`) {
				c.t.Fatalf("event %d: %s %s", i, m.Type, m.Payload)
			}
		}
		s.stop("sub")
		waitFor(c.t, closed)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := c.tr.http(c.t, subscribeDoc)
	req.ctx = ctx
	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() { answered <- do(c.t, c.a.h, req) }()
	subscribed()
	for range events {
		mutate()
	}
	waitFor(c.t, func() bool {
		c.collect()
		n := 0
		for _, e := range c.seen {
			if e.Kind == middleware.KindSubscriptionEvent {
				n++
			}
		}
		return n >= events
	})
	cancel()
	w := <-answered // the handler has returned: everything it reports is in
	if got := strings.Count(w.Body.String(), `"issueCreated"`); got != events {
		c.t.Errorf("%d events sent, want %d:\n%.600s", got, events, w.Body.String())
	}
	waitFor(c.t, closed)
}

// A mutation sent by GET is refused 406 by gqlgen's GET transport after
// the extension has seen it, and gqlgen then calls no hook that follows:
// the request still ends with its response, its slot in flight given back
// and nothing decided, so GET mutations cannot hold the process's
// capacity and shed every other request.
func TestGETMutationEnds(t *testing.T) {
	const capacity = 4
	rec := &recorder{}
	a := newAdopter(t, config{Dependencies: middleware.Dependencies{
		Observer: rec,
		Overload: &overload.Config{MaxInFlight: capacity, ShedAt: map[overload.Priority]float64{overload.Sheddable: 1, overload.Normal: 1, overload.High: 1}},
	}}, nil)
	const mutations = 3 * capacity
	for i := range mutations {
		x := a.get(url.Values{"query": {mutationDoc}})
		if x.status != http.StatusNotAcceptable {
			t.Fatalf("GET mutation %d: %d, want 406", i, x.status)
		}
	}
	x := a.post(map[string]any{"query": cheapQueryDoc})
	if x.status != http.StatusOK || len(x.resp.Errors) != 0 {
		t.Fatalf("a query after %d GET mutations: %d %v, want it served", mutations, x.status, x.resp.Errors)
	}
	if got := rec.take(); len(got) != 1 || got[0].RequestedCost != a.price(cheapQueryDoc) {
		t.Fatalf("decisions %+v, want the query's alone: a GET mutation is refused for free", got)
	}
}
