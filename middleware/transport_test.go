package middleware_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/internal/wstest"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/middleware"
)

// An adopter's gqlgen server: every transport gqlgen ships, the limiter
// installed the README's way (lim.Handler), served on a real listener.
type adopter struct {
	t     *testing.T
	lim   *middleware.Limiter
	res   *graph.Resolver
	clock *fakeClock
	srv   *httptest.Server
	h     http.Handler
	cfg   config // as New got it
}

const (
	adopterKey     = "k-pro"
	adopterBurst   = 500
	mutationDoc    = `mutation { createIssue(repo: "hello-world", title: "t") { id title } }`
	subscribeDoc   = `subscription { issueCreated(repo: "hello-world") { id title } }`
	cheapQueryDoc  = `{ user(login: "octocat") { login } }`
	rateLimitQuery = `{ rateLimit { remaining } }`
)

// newAdopter builds the server; cfg's zero fields get a 500-point
// anonymous plan and a "pro" plan for adopterKey.
func newAdopter(t *testing.T, cfg config, install func(lim *middleware.Limiter, srv *handler.Server) http.Handler) *adopter {
	t.Helper()
	a := &adopter{t: t, clock: newClock(), res: graph.NewResolver()}
	if cfg.Plans == nil {
		cfg.Plans = map[string]budget.Plan{
			"anon": {Burst: adopterBurst, Rate: adopterBurst, Per: time.Hour},
			"pro":  {Burst: adopterBurst, Rate: adopterBurst, Per: time.Hour},
		}
		cfg.AnonymousPlan = "anon"
	}
	if cfg.APIKeys == nil {
		cfg.APIKeys = map[string]identity.APIKey{adopterKey: {Principal: "pro-user", Plan: "pro"}}
	}
	cfg.Clock = a.clock
	if cfg.Store == nil {
		store, err := memorystore.New(memorystore.Config{Clock: a.clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		cfg.Store = store
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	a.cfg = cfg
	a.lim = newLimiter(t, cfg)
	srv := handler.New(a.res.Schema())
	srv.AddTransport(transport.Websocket{InitFunc: a.lim.WebsocketInit(nil), KeepAlivePingInterval: time.Hour})
	srv.AddTransport(transport.SSE{})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.MultipartMixed{}) // before POST, which takes every JSON body it is asked first
	srv.AddTransport(transport.POST{})
	srv.AddTransport(transport.MultipartForm{})
	srv.AddTransport(transport.UrlEncodedForm{})
	srv.AddTransport(transport.GRAPHQL{})
	if install == nil {
		install = func(lim *middleware.Limiter, srv *handler.Server) http.Handler { return lim.Handler(srv) }
	}
	a.h = install(a.lim, srv)
	a.srv = httptest.NewServer(a.h)
	t.Cleanup(a.srv.Close)
	return a
}

// validate prices doc through "GraphQL-Cost: validate", which runs and
// debits nothing, as the principal of key (the anonymous address when "").
func (a *adopter) validate(doc, key string) middleware.Cost {
	a.t.Helper()
	body, _ := json.Marshal(map[string]string{"query": doc})
	req, _ := http.NewRequest(http.MethodPost, a.srv.URL, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(middleware.HeaderGraphQLCost, "validate")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out gqlResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Extensions.Cost == nil {
		a.t.Fatalf("validate %q: %v", doc, err)
	}
	return *out.Extensions.Cost
}

// remaining reads a budget without spending from it.
func (a *adopter) remaining(key string) int64 {
	a.t.Helper()
	c := a.validate("{ __typename }", key)
	if c.ThrottleStatus.CurrentlyAvailable == nil {
		a.t.Fatal("the price-only request read no budget")
	}
	return *c.ThrottleStatus.CurrentlyAvailable
}

// price is what a document costs over HTTP POST.
func (a *adopter) price(doc string) int64 { return a.validate(doc, "").RequestedQueryCost }

// postBody sends body with contentType (and accept, when not "") as the
// anonymous client, and returns the status, the response and whether a
// resolver ran.
func (a *adopter) postBody(contentType, accept, body string) (int, string, bool) {
	a.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, a.srv.URL, strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	calls := a.res.Calls()
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return resp.StatusCode, string(out), a.res.Calls() != calls
}

// Every transport gqlgen ships that takes a document in a POST body
// debits what a JSON POST does (its price, less the refund of what the
// response did not hold): form-encoded bodies in each of the
// three forms transport.UrlEncodedForm reads, application/graphql plain and
// URL-encoded, and multipart/mixed, @defer included. A form body that UrlEncodedForm decodes
// as JSON is screened as a JSON body is, before gqlgen decodes it: with
// 480,000 values in its variables it is refused as over the values limit,
// no resolver run; unscreened, gqlgen would allocate 59 MB to decode it and
// it would pass for 1 point.
func TestEveryBodyTransportPays(t *testing.T) {
	a := newAdopter(t, config{}, nil)
	const doc = `{ user(login: "octocat") { repos(first: 5) { name } } }`
	if price := a.price(doc); price <= 1 {
		t.Fatalf("price %d: pick a document that costs more than the minimum", price)
	}
	jsonBody, _ := json.Marshal(map[string]string{"query": doc})
	const form, gql = "application/x-www-form-urlencoded", "application/graphql"
	var jsonPaid int64
	for _, tc := range []struct{ name, contentType, accept, body string }{
		{"JSON", "application/json", "", string(jsonBody)},
		{"form, JSON body", form, "", string(jsonBody)},
		{"form, query=%7B…", form, "", "query=" + url.QueryEscape(doc)},
		{"form, plain text", form, "", "query=" + doc},
		{"application/graphql", gql, "", doc},
		{"application/graphql, %7B…", gql, "", url.QueryEscape(doc)},
		{"multipart/mixed", "application/json", "multipart/mixed", string(jsonBody)},
	} {
		if a.remaining("") < adopterBurst/2 {
			a.clock.Advance(time.Hour) // whole again
		}
		before := a.remaining("")
		status, body, ran := a.postBody(tc.contentType, tc.accept, tc.body)
		if status != http.StatusOK || !ran || !strings.Contains(body, `"repos"`) {
			t.Errorf("%s: %d, resolvers ran: %v\n%.300s", tc.name, status, ran, body)
		}
		paid := before - a.remaining("")
		if jsonPaid == 0 {
			jsonPaid = paid
		}
		if paid != jsonPaid || paid < 2 {
			t.Errorf("%s: paid %d, want %d as a JSON POST", tc.name, paid, jsonPaid)
		}
	}

	// Over multipart/mixed, a @defer operation's deferred part arrives; an
	// incremental response gets no refund, so it pays its whole price.
	const deferred = `{ user(login: "octocat") { login ... @defer { repos(first: 5) { name } } } }`
	deferBody, _ := json.Marshal(map[string]string{"query": deferred})
	price, before := a.price(deferred), a.remaining("")
	status, body, _ := a.postBody("application/json", "multipart/mixed", string(deferBody))
	if status != http.StatusOK || !strings.Contains(body, `"incremental"`) || !strings.Contains(body, `"hello-world"`) {
		t.Errorf("@defer over multipart/mixed: %d\n%.600s", status, body)
	}
	if paid := before - a.remaining(""); paid != price {
		t.Errorf("@defer over multipart/mixed paid %d, want its price %d", paid, price)
	}

	// Undeclared and oversized variables in a form body decoded as JSON.
	huge := `{"query":"{ __typename }","variables":{"x":[` + strings.Repeat("1,", 480_000) + `1]}}`
	before = a.remaining("")
	status, body, ran := a.postBody(form, "", huge)
	if status != http.StatusBadRequest || ran || !strings.Contains(body, middleware.CodeVariablesTooLarge) {
		t.Errorf("form body of 480,000 variable values: %d, resolvers ran: %v\n%.300s", status, ran, body)
	}
	if paid := before - a.remaining(""); paid < 1 {
		t.Errorf("the refused form body paid %d, want its invalid cost", paid)
	}
	// A document over the selection bound, in the bodies the wrapper does
	// not decode: refused by the extension before gqlgen parses it.
	big := strings.Repeat("{ __typename ", 600) + strings.Repeat("}", 600)
	for _, tc := range []struct{ contentType, body string }{{gql, big}, {form, "query=" + big}} {
		status, body, ran := a.postBody(tc.contentType, "", tc.body)
		if status != http.StatusUnprocessableEntity || ran || !strings.Contains(body, "MAX_") {
			t.Errorf("%s, 600 nested selections: %d, resolvers ran: %v\n%.300s", tc.contentType, status, ran, body)
		}
	}
}

// gqlgen's NewDefaultServer (deprecated, still common) wrapped by
// lim.Handler: its own persisted-query extension runs before the limiter's
// and its WebSocket transport has no InitFunc, yet a query, an APQ
// registration, a hash-only request and a WebSocket operation each pay the
// same.
func TestNewDefaultServerPays(t *testing.T) {
	res := graph.NewResolver()
	a := newAdopter(t, config{}, func(lim *middleware.Limiter, _ *handler.Server) http.Handler {
		return lim.Handler(handler.NewDefaultServer(res.Schema()))
	})
	const doc = `{ user(login: "octocat") { repos(first: 5) { name } } }`
	sum := sha256.Sum256([]byte(doc))
	apq := map[string]any{"persistedQuery": map[string]any{"version": 1, "sha256Hash": hex.EncodeToString(sum[:])}}
	plain, _ := json.Marshal(map[string]any{"query": doc})
	register, _ := json.Marshal(map[string]any{"query": doc, "extensions": apq})
	hashOnly, _ := json.Marshal(map[string]any{"extensions": apq})
	var want int64
	for _, tc := range []struct{ name, body string }{{"query", string(plain)}, {"APQ registration", string(register)}, {"APQ hash only", string(hashOnly)}} {
		before, calls := a.remaining(""), res.Calls()
		status, body, _ := a.postBody("application/json", "", tc.body)
		paid := before - a.remaining("")
		if want == 0 {
			want = paid
		}
		if status != http.StatusOK || res.Calls() == calls || paid != want || paid < 2 {
			t.Errorf("%s: %d, paid %d (want %d), resolvers ran: %v\n%.300s", tc.name, status, paid, want, res.Calls() != calls, body)
		}
	}
	s := a.dial(protoTransportWS, nil, nil)
	before := a.remaining("")
	s.start("1", doc)
	if m := s.next(); m.Type != "next" || before-a.remaining("") != want {
		t.Errorf("over WebSocket: %s %s, paid %d, want %d", m.Type, m.Payload, before-a.remaining(""), want)
	}
}

// wsMessage is a message of either WebSocket subprotocol.
type wsMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// socket is a real WebSocket client of one subprotocol.
type socket struct {
	t      *testing.T
	c      *wstest.Conn
	legacy bool // graphql-ws (subscriptions-transport-ws), else graphql-transport-ws
}

const (
	protoTransportWS = "graphql-transport-ws"
	protoLegacyWS    = "graphql-ws"
)

// dial opens a socket and sends connection_init with payload, waiting for
// the ack.
func (a *adopter) dial(proto string, header http.Header, payload map[string]any) *socket {
	a.t.Helper()
	s, err := a.tryDial(proto, header, payload)
	if err != nil {
		a.t.Fatal(err)
	}
	return s
}

func (a *adopter) tryDial(proto string, header http.Header, payload map[string]any) (*socket, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := wstest.Dial(ctx, a.srv.URL, wstest.DialOptions{
		Subprotocols: []string{proto}, Header: header,
	})
	if err != nil {
		return nil, err
	}
	s := &socket{t: a.t, c: c, legacy: proto == protoLegacyWS}
	a.t.Cleanup(func() { _ = c.CloseNow() })
	init := wsMessage{Type: "connection_init"}
	if payload != nil {
		init.Payload, _ = json.Marshal(payload)
	}
	if err := c.WriteJSON(ctx, init); err != nil {
		return nil, err
	}
	for {
		var m wsMessage
		if err := c.ReadJSON(ctx, &m); err != nil {
			return nil, err
		}
		switch m.Type {
		case "connection_ack":
			return s, nil
		case "connection_error":
			return nil, fmt.Errorf("connection_error %s", m.Payload)
		}
	}
}

// start sends an operation.
func (s *socket) start(id, doc string) {
	s.t.Helper()
	typ := "subscribe"
	if s.legacy {
		typ = "start"
	}
	payload, _ := json.Marshal(map[string]string{"query": doc})
	if err := s.c.WriteJSON(context.Background(), wsMessage{ID: id, Type: typ, Payload: payload}); err != nil {
		s.t.Fatal(err)
	}
}

// stop ends an operation from the client's side.
func (s *socket) stop(id string) {
	s.t.Helper()
	typ := "complete"
	if s.legacy {
		typ = "stop"
	}
	if err := s.c.WriteJSON(context.Background(), wsMessage{ID: id, Type: typ}); err != nil {
		s.t.Fatal(err)
	}
}

// next reads the next message about an operation, skipping keep-alives.
// Its type is normalized: "next" (legacy "data"), "error", "complete".
func (s *socket) next() wsMessage {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var m wsMessage
		if err := s.c.ReadJSON(ctx, &m); err != nil {
			s.t.Fatalf("reading the socket: %v", err)
		}
		switch m.Type {
		case "ka", "ping", "pong":
			continue
		case "data":
			m.Type = "next"
		}
		return m
	}
}

func decode(t *testing.T, raw []byte) gqlResponse {
	t.Helper()
	var r gqlResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
	return r
}

// errorCodes reads the codes of an error message's payload (a list of
// errors) or of a response's errors.
func errorCodes(t *testing.T, m wsMessage) []string {
	t.Helper()
	var errs []struct {
		Extensions map[string]any `json:"extensions"`
	}
	if m.Type == "error" {
		if err := json.Unmarshal(m.Payload, &errs); err != nil {
			// graphql-ws (legacy) sends an object when there is one error
			var one struct {
				Extensions map[string]any `json:"extensions"`
			}
			if json.Unmarshal(m.Payload, &one) != nil {
				t.Fatalf("error payload %s", m.Payload)
			}
			errs = append(errs, one)
		}
	} else {
		r := decode(t, m.Payload)
		for _, e := range r.Errors {
			errs = append(errs, struct {
				Extensions map[string]any `json:"extensions"`
			}{e.Extensions})
		}
	}
	var codes []string
	for _, e := range errs {
		c, _ := e.Extensions["code"].(string)
		codes = append(codes, c)
	}
	return codes
}

// Every operation on a WebSocket is priced and debited as over HTTP, on
// both subprotocols; a refusal is the operation's error message and the
// connection stays usable.
func TestWebSocketOperationsArePriced(t *testing.T) {
	for _, proto := range []string{protoTransportWS, protoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			a := newAdopter(t, config{}, nil)
			price := a.price(mutationDoc)
			if price <= 1 {
				t.Fatalf("the mutation prices at %d", price)
			}
			before := a.remaining("")
			s := a.dial(proto, nil, nil)
			calls := a.res.Calls()
			s.start("1", mutationDoc)
			m := s.next()
			if m.Type != "next" {
				t.Fatalf("first message %s %s, want next", m.Type, m.Payload)
			}
			r := decode(t, m.Payload)
			if r.Extensions.Cost == nil || r.Extensions.Cost.RequestedQueryCost != price {
				t.Errorf("extensions.cost %+v, want requestedQueryCost %d", r.Extensions.Cost, price)
			}
			if m := s.next(); m.Type != "complete" {
				t.Errorf("then %s, want complete", m.Type)
			}
			if got := a.remaining(""); got != before-price {
				t.Errorf("budget %d after the mutation, want %d - %d", got, before, price)
			}
			if a.res.Calls() == calls {
				t.Error("the mutation did not run")
			}

			// Spend the rest over the socket: each mutation pays; the one
			// the budget cannot pay is refused and runs nothing.
			n := (before - price) / price
			for i := range n {
				s.start(fmt.Sprint("m", i), mutationDoc)
				if m := s.next(); m.Type != "next" {
					t.Fatalf("mutation %d: %s %s", i, m.Type, m.Payload)
				}
				if m := s.next(); m.Type != "complete" {
					t.Fatalf("mutation %d: then %s", i, m.Type)
				}
			}
			left := a.remaining("")
			if left >= price {
				t.Fatalf("%d points left, want fewer than %d", left, price)
			}
			calls = a.res.Calls()
			s.start("refused", mutationDoc)
			m = s.next()
			if m.Type != "error" || m.ID != "refused" {
				t.Fatalf("refused mutation: %s %s %s, want its error message", m.ID, m.Type, m.Payload)
			}
			if codes := errorCodes(t, m); len(codes) != 1 || codes[0] != budget.CodeRateLimited {
				t.Errorf("codes %v, want [RATE_LIMITED]", codes)
			}
			if !strings.Contains(string(m.Payload), `"retryAfterSeconds"`) || !strings.Contains(string(m.Payload), `"cost"`) {
				t.Errorf("the refusal lacks cost or retryAfterSeconds: %s", m.Payload)
			}
			if a.res.Calls() != calls {
				t.Error("a refused mutation ran a resolver")
			}
			// The connection is still usable: an hour later the budget is
			// back and the next operation runs.
			a.clock.Advance(time.Hour)
			s.start("after", cheapQueryDoc)
			if m := s.next(); m.Type != "next" || m.ID != "after" {
				t.Fatalf("after the refusal: %s %s", m.Type, m.Payload)
			}
		})
	}
}

// A WebSocket handshake carrying a chunked body, which no transport reads,
// must not turn the connection into one HTTP request whose operations
// share a state. gqlgen's WebSocket transport up to v0.17.91 refuses such a
// handshake (its WebSocket package sees data before the handshake is
// complete), which leaves nothing to share; later releases accept it, and
// then each operation pays.
func TestWebSocketUpgradeWithABody(t *testing.T) {
	a := newAdopter(t, config{}, nil)
	price := a.price(mutationDoc)
	before := a.remaining("")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := wstest.Dial(ctx, a.srv.URL, wstest.DialOptions{Subprotocols: []string{protoTransportWS}, Body: []byte("x")})
	if err == nil {
		err = c.WriteJSON(ctx, wsMessage{Type: "connection_init"})
	}
	var ack wsMessage
	if err == nil {
		err = c.ReadJSON(ctx, &ack)
	}
	if err != nil {
		if got := a.remaining(""); got != before {
			t.Errorf("a refused handshake with a body cost %d", before-got)
		}
		t.Logf("this gqlgen refuses a handshake with a body: %v", err)
		return
	}
	defer c.CloseNow()
	s := &socket{t: t, c: c}
	if ack.Type != "connection_ack" {
		t.Fatalf("%s %s", ack.Type, ack.Payload)
	}
	for i := range 3 {
		s.start(fmt.Sprint(i), mutationDoc)
		if m := s.next(); m.Type != "next" {
			t.Fatalf("%s %s", m.Type, m.Payload)
		}
		s.next() // complete
	}
	if got := a.remaining(""); got != before-3*price {
		t.Errorf("budget %d after three mutations, want %d", got, before-3*price)
	}
}

// A browser cannot set headers on a WebSocket: the key in the
// connection_init payload chooses who pays; an unknown one closes the
// connection (WebsocketInit) before any operation.
func TestWebSocketInitPayloadIdentifies(t *testing.T) {
	for _, payload := range []map[string]any{
		{"Authorization": "Bearer " + adopterKey},
		{"authorization": "Bearer " + adopterKey},
		{"X-API-Key": adopterKey},
		{"apiKey": adopterKey},
	} {
		a := newAdopter(t, config{}, nil)
		anon, pro := a.remaining(""), a.remaining(adopterKey)
		s := a.dial(protoTransportWS, nil, payload)
		s.start("1", mutationDoc)
		if m := s.next(); m.Type != "next" {
			t.Fatalf("%v: %s %s", payload, m.Type, m.Payload)
		}
		price := a.price(mutationDoc)
		if got := a.remaining(adopterKey); got != pro-price {
			t.Errorf("%v: key's budget %d, want %d", payload, got, pro-price)
		}
		if got := a.remaining(""); got != anon {
			t.Errorf("%v: the address paid: %d, want %d", payload, got, anon)
		}
	}

	// An unknown key in the payload: the connection closes before any
	// operation, with the refusal's message (the close code is
	// wsclose.InitFunc's, a module of its own).
	a := newAdopter(t, config{}, nil)
	anon := a.remaining("")
	_, err := a.tryDial(protoTransportWS, nil, map[string]any{"Authorization": "Bearer nope"})
	if err == nil || !strings.Contains(err.Error(), "unknown API key") && wstest.CloseStatus(err) < 0 {
		t.Errorf("unknown key in the payload: %v, want the connection refused", err)
	}
	if got := a.remaining(""); got != anon {
		t.Errorf("a refused connection cost the address %d", anon-got)
	}
	// An unknown key in the upgrade's headers is refused before the upgrade.
	_, err = a.tryDial(protoTransportWS, http.Header{"X-Api-Key": {"nope"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("unknown key in the headers: %v, want 401", err)
	}
}

// Without WebsocketInit the connection opens, and each operation of an
// unknown payload key is refused UNKNOWN_API_KEY, running nothing.
func TestWebSocketUnknownPayloadKeyWithoutInitFunc(t *testing.T) {
	a := newAdopter(t, config{}, func(lim *middleware.Limiter, _ *handler.Server) http.Handler {
		srv := handler.New(graph.NewResolver().Schema())
		srv.AddTransport(transport.Websocket{})
		return lim.Handler(srv)
	})
	s := a.dial(protoTransportWS, nil, map[string]any{"Authorization": "Bearer nope"})
	s.start("1", mutationDoc)
	m := s.next()
	if codes := errorCodes(t, m); m.Type != "error" || len(codes) != 1 || codes[0] != middleware.CodeUnknownAPIKey {
		t.Errorf("%s %s, want an error message UNKNOWN_API_KEY", m.Type, m.Payload)
	}
}

// A subscription pays its price, then each event pays its actual cost
// before it is sent and reports the budget after its own debit; the event
// the budget cannot pay ends the subscription with RATE_LIMITED.
func TestSubscriptionEventsPay(t *testing.T) {
	for _, proto := range []string{protoTransportWS, protoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			rec := &recorder{}
			a := newAdopter(t, config{Dependencies: middleware.Dependencies{Observer: rec}}, nil)
			price := a.price(subscribeDoc)
			before := a.remaining("")
			s := a.dial(proto, nil, nil)
			s.start("sub", subscribeDoc)
			waitFor(t, func() bool { return a.res.Subscribers() == 1 })
			if n := a.lim.OpenSubscriptions(); n != 1 {
				t.Fatalf("%d subscriptions open, want 1", n)
			}
			if got := a.remaining(""); got != before-price {
				t.Fatalf("after subscribing %d, want %d", got, before-price)
			}
			// The key's budget pays the mutations, so the subscriber's
			// budget moves by its events alone.
			mutate := func() {
				t.Helper()
				var resp map[string]any
				c := client.New(a.h)
				if err := c.Post(mutationDoc, &resp, client.AddHeader("Authorization", "Bearer "+adopterKey)); err != nil {
					t.Fatal(err)
				}
			}
			left := before - price
			for i := range 3 {
				mutate()
				m := s.next()
				if m.Type != "next" {
					t.Fatalf("event %d: %s %s", i, m.Type, m.Payload)
				}
				r := decode(t, m.Payload)
				c := r.Extensions.Cost
				if c == nil || c.ActualQueryCost == nil || c.ThrottleStatus.CurrentlyAvailable == nil {
					t.Fatalf("event %d: extensions.cost %s", i, m.Payload)
				}
				left -= *c.ActualQueryCost
				if *c.ActualQueryCost < 1 || *c.ThrottleStatus.CurrentlyAvailable != left {
					t.Errorf("event %d: cost %d, remaining %d, want remaining %d", i, *c.ActualQueryCost, *c.ThrottleStatus.CurrentlyAvailable, left)
				}
			}
			if got := a.remaining(""); got != left {
				t.Errorf("budget %d after three events, want %d", got, left)
			}
			// The subscribe is a graphql decision, each event one of its own.
			var subscribes, events int
			for _, e := range rec.take() {
				switch {
				case e.Kind == middleware.KindSubscriptionEvent && e.Outcome == budget.ClassAdmitted && e.Charged >= 1:
					events++
				case e.Kind == middleware.KindGraphQL && e.RequestedCost == price && e.Key != "user:pro-user":
					subscribes++
				}
			}
			if subscribes != 1 || events != 3 {
				t.Errorf("%d subscribe and %d event decisions, want 1 and 3", subscribes, events)
			}
			// Spend the subscriber's budget over HTTP; the next event
			// cannot be paid.
			for a.remaining("") > 0 {
				w := do(t, a.h, request{path: "/", body: `{"query":"` + strings.ReplaceAll(cheapQueryDoc, `"`, `\"`) + `"}`, remoteAddr: "127.0.0.1:1"})
				if w.Code != http.StatusOK {
					break
				}
			}
			mutate()
			m := s.next()
			if m.Type != "next" {
				t.Fatalf("unpaid event: %s %s, want next with the refusal", m.Type, m.Payload)
			}
			r := decode(t, m.Payload)
			if (len(r.Data) != 0 && string(r.Data) != "null") || len(r.Errors) != 1 || r.Errors[0].Extensions["code"] != budget.CodeRateLimited ||
				r.Errors[0].Extensions["retryAfterSeconds"] == nil {
				t.Errorf("unpaid event: %s", m.Payload)
			}
			if m := s.next(); m.Type != "complete" {
				t.Errorf("then %s %s, want complete", m.Type, m.Payload)
			}
			waitFor(t, func() bool { return a.lim.OpenSubscriptions() == 0 })
		})
	}
}

// waitFor polls cond until it holds, for what happens on the server's
// goroutines after a message was read (a slot given back).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// One principal holds at most MaxPerPrincipal subscriptions, across its
// connections and transports; a slot is given back when the subscription
// is stopped, or its connection vanishes without a close.
func TestSubscriptionCap(t *testing.T) {
	a := newAdopter(t, config{Policy: middleware.Policy{Subscriptions: middleware.SubscriptionOptions{MaxPerPrincipal: 3}}}, nil)
	s1 := a.dial(protoTransportWS, nil, nil)
	s2 := a.dial(protoLegacyWS, nil, nil)
	s1.start("a", subscribeDoc)
	s1.start("b", subscribeDoc)
	s2.start("c", subscribeDoc)
	waitFor(t, func() bool { return a.lim.OpenSubscriptions() == 3 })
	s2.start("d", subscribeDoc)
	m := s2.next()
	if codes := errorCodes(t, m); m.Type != "error" || len(codes) != 1 || codes[0] != middleware.CodeSubscriptionsLimited {
		t.Fatalf("fourth subscription: %s %s, want SUBSCRIPTIONS_LIMITED", m.Type, m.Payload)
	}
	// Another principal has slots of its own.
	other := a.dial(protoTransportWS, nil, map[string]any{"apiKey": adopterKey})
	other.start("x", subscribeDoc)
	waitFor(t, func() bool { return a.lim.OpenSubscriptions() == 4 })

	s1.stop("a")
	waitFor(t, func() bool { return a.lim.OpenSubscriptions() == 3 })
	// The legacy client vanishes: its TCP connection is dropped, no close
	// frame, no stop.
	_ = s2.c.CloseNow()
	waitFor(t, func() bool { return a.lim.OpenSubscriptions() == 2 })
	s3 := a.dial(protoTransportWS, nil, nil)
	s3.start("e", subscribeDoc)
	s3.start("f", subscribeDoc)
	waitFor(t, func() bool { return a.lim.OpenSubscriptions() == 4 })
	s3.start("g", subscribeDoc)
	if m := s3.next(); m.Type != "error" {
		t.Fatalf("over the cap again: %s %s", m.Type, m.Payload)
	}
}

// Over SSE a subscription pays at subscribe, then per event, as on a
// WebSocket.
func TestSSESubscriptionEventsPay(t *testing.T) {
	a := newAdopter(t, config{}, nil)
	price := a.price(subscribeDoc)
	before := a.remaining("")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := a.subscribeRequest(ctx, "text/event-stream")
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	waitFor(t, func() bool { return a.res.Subscribers() == 1 })
	if n := a.lim.OpenSubscriptions(); n != 1 {
		t.Fatalf("%d subscriptions open, want 1", n)
	}
	if got := a.remaining(""); got != before-price {
		t.Fatalf("after subscribing %d, want %d", got, before-price)
	}
	var out map[string]any
	if err := client.New(a.h).Post(mutationDoc, &out, client.AddHeader("Authorization", "Bearer "+adopterKey)); err != nil {
		t.Fatal(err)
	}
	data := readSSEEvent(t, bufio.NewReader(resp.Body))
	r := decode(t, data)
	if r.Extensions.Cost == nil || r.Extensions.Cost.ActualQueryCost == nil {
		t.Fatalf("event without its cost: %s", data)
	}
	if got, want := a.remaining(""), before-price-*r.Extensions.Cost.ActualQueryCost; got != want {
		t.Errorf("after one event %d, want %d", got, want)
	}
	cancel()
	waitFor(t, func() bool { return a.lim.OpenSubscriptions() == 0 })
}

// subscribeRequest is a POST of subscribeDoc asking for the response type
// accept (an HTTP transport that streams a subscription's events).
func (a *adopter) subscribeRequest(ctx context.Context, accept string) *http.Request {
	a.t.Helper()
	body, _ := json.Marshal(map[string]string{"query": subscribeDoc})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.srv.URL, strings.NewReader(string(body)))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	return req
}

// readSSEEvent returns the data of the next "next" event.
func readSSEEvent(t *testing.T, r *bufio.Reader) []byte {
	t.Helper()
	event := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "next":
			return []byte(strings.TrimPrefix(line, "data: "))
		}
	}
}

// gqlgen's own test client builds requests with a body and ContentLength
// 0; the wrapper reads them to EOF, as gqlgen does.
func TestGqlgenClient(t *testing.T) {
	a := newAdopter(t, config{}, nil)
	c := client.New(a.h, client.AddHeader("Authorization", "Bearer "+adopterKey))
	var resp struct {
		User struct{ Login string }
	}
	c.MustPost(cheapQueryDoc, &resp)
	if resp.User.Login != "octocat" {
		t.Errorf("login %q", resp.User.Login)
	}
	var created struct {
		CreateIssue struct{ Title string }
	}
	before := a.remaining(adopterKey)
	c.MustPost(`mutation($t: String!) { createIssue(repo: "hello-world", title: $t) { title } }`, &created, client.Var("t", "from the client"))
	if created.CreateIssue.Title != "from the client" {
		t.Errorf("created %+v", created)
	}
	if got, want := a.remaining(adopterKey), before-a.price(mutationDoc); got != want {
		t.Errorf("after the mutation %d, want %d", got, want)
	}
	// Its WebSocket helper (the legacy subprotocol) too.
	var once struct {
		User struct{ Login string }
	}
	if err := c.WebsocketOnce(cheapQueryDoc, &once); err != nil || once.User.Login != "octocat" {
		t.Errorf("WebsocketOnce: %v %+v", err, once)
	}
	// A subscription through its Websocket helper, as gqlgen's chat
	// example's tests do: the event arrives, paid for.
	sub := c.Websocket(subscribeDoc)
	defer sub.Close()
	waitFor(t, func() bool { return a.res.Subscribers() == 1 })
	beforeEvent := a.remaining(adopterKey)
	c.MustPost(`mutation { createIssue(repo: "hello-world", title: "for the client") { title } }`, &created)
	var event struct {
		IssueCreated struct{ ID, Title string }
	}
	if err := sub.Next(&event); err != nil || event.IssueCreated.Title != "for the client" {
		t.Fatalf("the subscription's event: %v %+v", err, event)
	}
	if got, want := a.remaining(adopterKey), beforeEvent-a.price(mutationDoc)-1; got != want {
		t.Errorf("after the mutation and its event %d, want %d", got, want)
	}
}

// However often the limiter is installed on one server, each request is
// priced and debited once.
func TestInstalledTwiceChargesOnce(t *testing.T) {
	for name, install := range map[string]func(*middleware.Limiter, *handler.Server) http.Handler{
		"Handler twice": func(lim *middleware.Limiter, srv *handler.Server) http.Handler {
			return lim.Handler(srv) // and once more below
		},
		"Handler's handler wrapped again": func(lim *middleware.Limiter, srv *handler.Server) http.Handler {
			return middleware.Wrap(lim, lim.Handler(srv))
		},
	} {
		t.Run(name, func(t *testing.T) {
			var inner http.Handler
			a := newAdopter(t, config{}, func(lim *middleware.Limiter, srv *handler.Server) http.Handler {
				inner = install(lim, srv)
				if name == "Handler twice" {
					mux := http.NewServeMux()
					mux.Handle("/a", inner)
					mux.Handle("/", lim.Handler(srv))
					return mux
				}
				return inner
			})
			price := a.price(mutationDoc)
			before := a.remaining(adopterKey)
			var out map[string]any
			if err := client.New(a.h).Post(mutationDoc, &out, client.AddHeader("Authorization", "Bearer "+adopterKey)); err != nil {
				t.Fatal(err)
			}
			if got := a.remaining(adopterKey); got != before-price {
				t.Errorf("over HTTP: %d left, want %d - %d", got, before, price)
			}
			s := a.dial(protoTransportWS, nil, map[string]any{"apiKey": adopterKey})
			s.start("1", mutationDoc)
			if m := s.next(); m.Type != "next" {
				t.Fatalf("%s %s", m.Type, m.Payload)
			}
			if got := a.remaining(adopterKey); got != before-2*price {
				t.Errorf("over a WebSocket: %d left, want %d", got, before-2*price)
			}
		})
	}
}

// A gqlgen server the limiter is installed on, served also without the
// handler Handler returned, runs nothing that way: every operation is
// refused COSTGUARD_NOT_INSTALLED before any resolver, and the mistake is
// logged once a minute, not per request.
func TestServedWithoutHandlerRefuses(t *testing.T) {
	logs := &countingHandler{}
	var direct http.Handler
	a := newAdopter(t, config{Dependencies: middleware.Dependencies{Logger: slog.New(logs)}}, func(lim *middleware.Limiter, srv *handler.Server) http.Handler {
		h := lim.Handler(srv)
		direct = srv
		return h
	})
	calls := a.res.Calls()
	for range 3 {
		w := do(t, direct, request{path: "/graphql", body: `{"query":"{ user(login: \"octocat\") { login } }"}`, header: bearer(adopterKey)})
		var resp gqlResponse
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != http.StatusUnprocessableEntity || resp.code() != middleware.CodeNotInstalled {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	if n := a.res.Calls() - calls; n != 0 {
		t.Errorf("%d resolvers ran", n)
	}
	if n := logs.count(slog.LevelError); n != 1 {
		t.Errorf("%d errors logged for 3 refusals within a minute, want 1", n)
	}
	if x := a.post(map[string]any{"query": cheapQueryDoc}); x.status != http.StatusOK || len(x.resp.Errors) != 0 {
		t.Errorf("through Handler: %d %+v", x.status, x.resp.Errors)
	}
}

// postAccept POSTs a JSON body asking for the response type accept
// ("text/event-stream": SSE), and returns the status and the whole body.
func (a *adopter) postAccept(body, accept string) (int, []byte) {
	a.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, a.srv.URL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// A refusal before execution under application/graphql-response+json has
// no data entry (GraphQL over HTTP: the request never reached execution).
func TestRefusalBeforeExecutionHasNoData(t *testing.T) {
	a := newAdopter(t, config{}, nil)
	status, body := a.postAccept(`{"query":"{ user(login: \"octocat\") { repos(first: 100) { issues(first: 100) { title } } } }"}`, "application/graphql-response+json")
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if status < 400 {
		t.Fatalf("status %d: %s", status, body)
	}
	if _, ok := m["data"]; ok {
		t.Errorf("a refusal before execution carries data: %s", body)
	}
}

// By default a principal holds at most 100 subscriptions open.
func TestSubscriptionCapDefault(t *testing.T) {
	deps, policy := middleware.Defaults()
	if policy.Subscriptions.MaxPerPrincipal != 100 || deps.MaxUploadBytes != 32<<20 {
		t.Error("the documented defaults changed")
	}
	a := newAdopter(t, config{}, nil)
	s := a.dial(protoTransportWS, nil, nil)
	for i := range 100 {
		s.start(fmt.Sprint(i), subscribeDoc)
	}
	waitFor(t, func() bool { return a.lim.OpenSubscriptions() == 100 })
	s.start("one more", subscribeDoc)
	m := s.next()
	if codes := errorCodes(t, m); m.ID != "one more" || len(codes) != 1 || codes[0] != middleware.CodeSubscriptionsLimited {
		t.Errorf("the 101st: %s %s %s", m.ID, m.Type, m.Payload)
	}
}

// An open subscription holds no slot among its principal's requests in
// flight (Policy.Concurrency): its own cap bounds it, and a principal with
// subscriptions open can still send requests.
func TestSubscriptionsHoldNoConcurrencySlot(t *testing.T) {
	a := newAdopter(t, config{Policy: middleware.Policy{Concurrency: middleware.ConcurrencyOptions{PerPrincipal: 2}}}, nil)
	s := a.dial(protoTransportWS, nil, nil)
	for i := range 3 {
		s.start(fmt.Sprint(i), subscribeDoc)
	}
	waitFor(t, func() bool { return a.res.Subscribers() == 3 })
	s.start("q", cheapQueryDoc)
	if m := s.next(); m.Type != "next" || m.ID != "q" {
		t.Errorf("a query beside three subscriptions: %s %s %s", m.ID, m.Type, m.Payload)
	}
}

// The attacks of the trial, replayed at their sizes on one connection:
// 100 mutations of two createIssue each, then 600 subscriptions. Every
// one that ran was paid; the rest ran nothing.
func TestWebSocketFloodsPay(t *testing.T) {
	a := newAdopter(t, config{}, nil)
	const twoPosts = `mutation { a: createIssue(repo: "hello-world", title: "a") { id } b: createIssue(repo: "hello-world", title: "b") { id } }`
	price := a.price(twoPosts)
	s := a.dial(protoTransportWS, nil, nil)
	calls := a.res.Calls()
	admitted, refused := 0, 0
	for i := range 100 {
		s.start(fmt.Sprint("m", i), twoPosts)
		switch m := s.next(); m.Type {
		case "next":
			admitted++
			s.next() // complete
		case "error":
			refused++
		default:
			t.Fatalf("mutation %d: %s %s", i, m.Type, m.Payload)
		}
	}
	t.Logf("100 mutations of two posts at %d points: %d ran, %d refused; %d points left", price, admitted, refused, a.remaining(""))
	if admitted != int(adopterBurst/price) || refused != 100-admitted {
		t.Errorf("%d ran, %d refused; a budget of %d pays for %d", admitted, refused, adopterBurst, adopterBurst/price)
	}
	if ran := a.res.Calls() - calls; ran != int64(2*admitted) {
		t.Errorf("%d resolver calls for %d admitted mutations", ran, admitted)
	}

	a.clock.Advance(time.Hour) // the budget is whole again
	for i := range 600 {
		s.start(fmt.Sprint("s", i), subscribeDoc)
	}
	codes := map[string]int{}
	_, def := middleware.Defaults()
	for range 600 - def.Subscriptions.MaxPerPrincipal {
		m := s.next()
		for _, c := range errorCodes(t, m) {
			codes[c]++
		}
	}
	t.Logf("600 subscriptions: %d open, refused %v; %d points left", a.lim.OpenSubscriptions(), codes, a.remaining(""))
	if n := a.lim.OpenSubscriptions(); n != def.Subscriptions.MaxPerPrincipal {
		t.Errorf("%d subscriptions open, want %d", n, def.Subscriptions.MaxPerPrincipal)
	}
	if codes[middleware.CodeSubscriptionsLimited]+codes[budget.CodeRateLimited] != 500 {
		t.Errorf("refusals %v, want 500", codes)
	}
}

// A WebSocket message's variables are bounded as a POST body's are, once
// gqlgen has decoded them: too many values, or too deep, is refused
// VARIABLES_TOO_LARGE and pays InvalidCost.
func TestWebSocketVariablesBounded(t *testing.T) {
	a := newAdopter(t, config{Policy: middleware.Policy{GraphQL: middleware.GraphQLOptions{MaxVariableValues: 100, MaxVariablesDepth: 4}}}, nil)
	s := a.dial(protoTransportWS, nil, nil)
	many := make([]any, 200)
	for i := range many {
		many[i] = i
	}
	deep := any("leaf")
	for range 6 {
		deep = map[string]any{"x": deep}
	}
	for name, vars := range map[string]map[string]any{"200 values": {"l": many}, "6 deep": {"d": deep}} {
		before := a.remaining("")
		payload, _ := json.Marshal(map[string]any{"query": `query($l: [Int], $d: String) { __typename }`, "variables": vars})
		if err := s.c.WriteJSON(context.Background(), wsMessage{ID: name, Type: "subscribe", Payload: payload}); err != nil {
			t.Fatal(err)
		}
		m := s.next()
		if m.Type != "error" {
			t.Fatalf("%s: %s %s, want its error message", name, m.Type, m.Payload)
		}
		if codes := errorCodes(t, m); len(codes) != 1 || codes[0] != middleware.CodeVariablesTooLarge {
			t.Errorf("%s: %s %s", name, m.Type, m.Payload)
		}
		if m := s.next(); m.Type != "complete" { // gqlgen completes what it refused before execution
			t.Errorf("%s: then %s", name, m.Type)
		}
		if got := a.remaining(""); got != before-1 {
			t.Errorf("%s: budget %d, want %d", name, got, before-1)
		}
	}
	s.start("fine", cheapQueryDoc)
	if m := s.next(); m.Type != "next" {
		t.Errorf("then a plain query: %s %s", m.Type, m.Payload)
	}
}

// An application's own InitFunc may authenticate the connection and put
// its principal in the context (WithPrincipal): the connection's
// operations are that principal's.
func TestWebSocketInitFuncPrincipal(t *testing.T) {
	a := newAdopter(t, config{}, func(lim *middleware.Limiter, _ *handler.Server) http.Handler {
		srv := handler.New(graph.NewResolver().Schema())
		srv.AddTransport(transport.Websocket{InitFunc: lim.WebsocketInit(func(ctx context.Context, p transport.InitPayload) (context.Context, *transport.InitPayload, error) {
			if p.GetString("token") != "let-bob-in" {
				return ctx, nil, errors.New("who are you")
			}
			return identity.WithPrincipal(ctx, "bob", "pro"), nil, nil
		})})
		srv.AddTransport(transport.POST{})
		return lim.Handler(srv)
	})
	anon := a.remaining("")
	s := a.dial(protoTransportWS, nil, map[string]any{"token": "let-bob-in"})
	s.start("1", mutationDoc)
	m := s.next()
	if m.Type != "next" {
		t.Fatalf("%s %s", m.Type, m.Payload)
	}
	r := decode(t, m.Payload)
	if c := r.Extensions.Cost; c == nil || c.ThrottleStatus.CurrentlyAvailable == nil || *c.ThrottleStatus.CurrentlyAvailable != adopterBurst-a.price(mutationDoc) {
		t.Errorf("bob's budget after the mutation: %+v", c)
	}
	if got := a.remaining(""); got != anon {
		t.Errorf("the address paid for bob: %d, want %d", got, anon)
	}
}

// An introspection request the server refuses (gqlgen without its
// Introspection extension, as here) runs nothing: it pays InvalidCost, not
// the introspection cost of each aliased __schema after the first. Whether
// introspection is off is read once every extension has run, so one added
// after the limiter still counts.
func TestRefusedIntrospectionPaysInvalidCost(t *testing.T) {
	var b strings.Builder
	b.WriteString("{ __typename")
	for i := range 5 {
		fmt.Fprintf(&b, " s%d: __schema { queryType { name } }", i)
	}
	b.WriteString(" }")
	doc := b.String() // 4 × 50 past the first __schema

	post := func(a *adopter) (int, gqlResponse) {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"query": doc})
		req, _ := http.NewRequest(http.MethodPost, a.srv.URL, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+adopterKey)
		resp, err := a.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out gqlResponse
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Extensions.Cost == nil {
			t.Fatalf("decode: %v", err)
		}
		return resp.StatusCode, out
	}

	// Off: refused by gqlgen, 1 point.
	off := newAdopter(t, config{}, nil)
	status, resp := post(off)
	if len(resp.Errors) == 0 || resp.Extensions.Cost.RequestedQueryCost != 200 {
		t.Fatalf("off: status %d, errors %v, requested %d; want an error and 200 requested", status, resp.Errors, resp.Extensions.Cost.RequestedQueryCost)
	}
	_, def := middleware.Defaults()
	if a := resp.Extensions.Cost.ActualQueryCost; a == nil || *a != def.GraphQL.InvalidCost {
		t.Errorf("off: actualQueryCost %v, want %d", a, def.GraphQL.InvalidCost)
	}
	if got := off.remaining(adopterKey); got != adopterBurst-def.GraphQL.InvalidCost {
		t.Errorf("off: remaining %d, want %d", got, adopterBurst-def.GraphQL.InvalidCost)
	}
	// On, through an Introspection extension added after the limiter: it
	// runs, and pays its price.
	on := newAdopter(t, config{}, func(lim *middleware.Limiter, srv *handler.Server) http.Handler {
		h := lim.Handler(srv)
		srv.Use(extension.Introspection{})
		return h
	})
	if status, resp := post(on); len(resp.Errors) != 0 || status != http.StatusOK {
		t.Fatalf("on: status %d, errors %v", status, resp.Errors)
	}
	if got := on.remaining(adopterKey); got != adopterBurst-200 {
		t.Errorf("on: remaining %d, want %d", got, adopterBurst-200)
	}
}
