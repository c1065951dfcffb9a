// The project's own test, which adoption_test.go copies into a project made
// by gqlgen init: the limiter installed as docs/gqlgen.md's "Install" shows,
// with every transport gqlgen ships. It only reports; adoption_test.go
// checks.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"

	"example.com/todo/graph"
)

const query = "{ todos { text } }"

// TestCostguard prints what the server answered: one request through
// gqlgen's client, then the priced query over every transport, all in the
// line it prints (RESULT, JSON) for adoption_test.go to check.
func TestCostguard(t *testing.T) {
	var logs bytes.Buffer
	lim, err := middleware.New(middleware.Dependencies{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}, middleware.Policy{
		Plans:         map[string]budget.Plan{"anon": {Burst: 500, Rate: 500, Per: time.Hour}},
		AnonymousPlan: "anon",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	srv := handler.New(graph.NewExecutableSchema(graph.Config{Resolvers: &graph.Resolver{}}))
	srv.AddTransport(transport.Websocket{InitFunc: lim.WebsocketInit(nil)}) // graphql-transport-ws and graphql-ws
	srv.AddTransport(transport.SSE{})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.MultipartMixed{}) // before POST, which would take its requests
	srv.AddTransport(transport.POST{})
	srv.AddTransport(transport.MultipartForm{})
	srv.AddTransport(transport.UrlEncodedForm{})
	srv.AddTransport(transport.GRAPHQL{})
	h := lim.Handler(srv)

	// gqlgen's client: its requests come from 192.0.2.1, a budget apart
	// from the real server's clients at 127.0.0.1.
	resp, err := client.New(h).RawPost("{ todos { text } rateLimit { cost remaining } }")
	if err != nil {
		t.Fatal(err)
	}

	// The query over every transport of a real server, the bucket read
	// with GraphQL-Cost: validate (which debits nothing) around each.
	ts := httptest.NewServer(h)
	defer ts.Close()
	var sent []exchange
	for _, tr := range transports(ts.URL) {
		x := exchange{Transport: tr.name}
		before, price, err := available(ts.URL)
		if err == nil {
			x.Header, x.Response, err = tr.send()
		}
		if x.Response != nil && !json.Valid(x.Response) { // kept out of the RESULT line, which must parse
			err, x.Response = fmt.Errorf("not a JSON response (%v): %q", err, x.Response), nil
		}
		after, _, err2 := available(ts.URL)
		if err == nil {
			err = err2
		}
		if err != nil {
			x.Err = err.Error()
		}
		x.Price, x.Before, x.After = price, before, after
		sent = append(sent, x)
	}
	out, err := json.Marshal(map[string]any{"data": resp.Data, "errors": resp.Errors, "extensions": resp.Extensions, "log": logs.String(), "transports": sent})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("RESULT %s\n", out)
}

// exchange is the query sent over one transport, as adoption_test.go
// decodes it.
type exchange struct {
	Transport, Err string
	Response       json.RawMessage // the operation's response: data, errors, extensions
	Header         string          // X-RateLimit-Remaining, if the transport wrote it
	Price          int64           // requestedQueryCost, by GraphQL-Cost: validate
	Before, After  int64           // the bucket before and after, the same way
}

// A way sends the query and returns X-RateLimit-Remaining ("" when there
// is none) and the operation's response.
type way struct {
	name string
	send func() (remaining string, response []byte, err error)
}

// transports are the ways gqlgen's transports take the query.
func transports(base string) []way {
	jsonBody, _ := json.Marshal(map[string]string{"query": query})
	return []way{
		{"POST", func() (string, []byte, error) { return post(base, "application/json", "", string(jsonBody)) }},
		{"GET", func() (string, []byte, error) {
			return do(http.NewRequest("GET", base+"?query="+url.QueryEscape(query), nil))
		}},
		{"multipart form", func() (string, []byte, error) {
			var b bytes.Buffer
			mw := multipart.NewWriter(&b)
			_ = mw.WriteField("operations", string(jsonBody))
			_ = mw.WriteField("map", "{}") // no files: the init schema has no Upload
			_ = mw.Close()
			return post(base, mw.FormDataContentType(), "", b.String())
		}},
		{"form-encoded", func() (string, []byte, error) {
			return post(base, "application/x-www-form-urlencoded", "", "query="+url.QueryEscape(query))
		}},
		{"application/graphql", func() (string, []byte, error) { return post(base, "application/graphql", "", query) }},
		{"multipart/mixed", func() (string, []byte, error) {
			return post(base, "application/json", "multipart/mixed", string(jsonBody))
		}},
		{"SSE", func() (string, []byte, error) {
			return post(base, "application/json", "text/event-stream", string(jsonBody))
		}},
		{"graphql-transport-ws", func() (string, []byte, error) { return ws(base, "graphql-transport-ws") }},
		{"graphql-ws", func() (string, []byte, error) { return ws(base, "graphql-ws") }},
	}
}

func post(base, contentType, accept, body string) (string, []byte, error) {
	req, err := http.NewRequest("POST", base, strings.NewReader(body))
	if err == nil {
		req.Header.Set("Content-Type", contentType)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
	}
	return do(req, err)
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// do sends req and returns the operation's response, out of an SSE stream
// or a multipart/mixed body when it came as one.
func do(req *http.Request, err error) (string, []byte, error) {
	if err != nil {
		return "", nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", nil, err
	}
	remaining := resp.Header.Get("X-RateLimit-Remaining")
	if resp.StatusCode != http.StatusOK {
		return remaining, body, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	mediaType, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mediaType {
	case "text/event-stream": // event: next, data: the response; then event: complete
		for _, event := range strings.Split(string(body), "\n\n") {
			if data, ok := strings.CutPrefix(event, "event: next\ndata: "); ok {
				return remaining, []byte(data), nil
			}
		}
		return remaining, body, fmt.Errorf("no next event in %q", body)
	case "multipart/mixed": // one part, the whole response
		part, err := multipart.NewReader(bytes.NewReader(body), params["boundary"]).NextPart()
		if err != nil {
			return remaining, body, fmt.Errorf("%v in %q", err, body)
		}
		b, err := io.ReadAll(part)
		return remaining, b, err
	}
	return remaining, body, nil
}

// available reads the anonymous bucket and the query's price without
// spending anything.
func available(base string) (left, price int64, err error) {
	body, _ := json.Marshal(map[string]string{"query": query})
	req, err := http.NewRequest("POST", base, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(middleware.HeaderGraphQLCost, "validate")
	_, b, err := do(req, nil)
	if err != nil {
		return 0, 0, err
	}
	var r struct {
		Extensions struct{ Cost middleware.Cost }
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, 0, fmt.Errorf("%v: %s", err, b)
	}
	if r.Extensions.Cost.ThrottleStatus.CurrentlyAvailable == nil {
		return 0, 0, fmt.Errorf("validate: no currentlyAvailable in %s", b)
	}
	return *r.Extensions.Cost.ThrottleStatus.CurrentlyAvailable, r.Extensions.Cost.RequestedQueryCost, nil
}

// wsMessage is a message of either subprotocol.
type wsMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// ws sends the query on a new connection of the subprotocol and returns
// its payload once the operation completes.
func ws(base, subprotocol string) (_ string, payload []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http"), &websocket.DialOptions{Subprotocols: []string{subprotocol}})
	if err != nil {
		return "", nil, err
	}
	defer c.CloseNow()
	if c.Subprotocol() != subprotocol {
		return "", nil, fmt.Errorf("subprotocol %q", c.Subprotocol())
	}
	start := "subscribe"
	if subprotocol == "graphql-ws" {
		start = "start"
	}
	if err := wsjson.Write(ctx, c, wsMessage{Type: "connection_init"}); err != nil {
		return "", nil, err
	}
	for {
		var m wsMessage
		if err := wsjson.Read(ctx, c, &m); err != nil {
			return "", payload, err
		}
		switch m.Type {
		case "connection_ack":
			op, _ := json.Marshal(map[string]string{"query": query})
			if err := wsjson.Write(ctx, c, wsMessage{ID: "1", Type: start, Payload: op}); err != nil {
				return "", nil, err
			}
		case "next", "data": // data: graphql-ws's name for it
			payload = m.Payload
		case "complete":
			return "", payload, nil
		case "error", "connection_error":
			return "", nil, fmt.Errorf("%s %s", m.Type, m.Payload)
		}
	}
}
