package upstream

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// wsClient is a client of the proxy's WebSocket transport, in either
// subprotocol.
type wsClient struct {
	t     *testing.T
	conn  *websocket.Conn
	proto string
}

// The message types of the two subprotocols, by what they do.
var wsTypes = map[string]map[string]string{
	"graphql-transport-ws": {"subscribe": "subscribe", "next": "next", "unsubscribe": "complete"},
	"graphql-ws":           {"subscribe": "start", "next": "data", "unsubscribe": "stop"},
}

func dialProxy(t *testing.T, proxyURL, proto string, header http.Header, payload map[string]any) *wsClient {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: 10 * time.Second}
	conn, _, err := d.Dial("ws"+strings.TrimPrefix(proxyURL, "http"), header)
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	c := &wsClient{t: t, conn: conn, proto: proto}
	c.send(map[string]any{"type": "connection_init", "payload": payload})
	if typ, p := c.read(); typ != "connection_ack" {
		t.Fatalf("%s before connection_ack: %s", typ, p)
	}
	return c
}

func (c *wsClient) send(m map[string]any) {
	c.t.Helper()
	must(c.t, c.conn.WriteJSON(m))
}

func (c *wsClient) subscribe(query string) {
	c.t.Helper()
	c.send(map[string]any{"id": "s1", "type": wsTypes[c.proto]["subscribe"], "payload": map[string]any{"query": query}})
}

func (c *wsClient) unsubscribe() {
	c.t.Helper()
	c.send(map[string]any{"id": "s1", "type": wsTypes[c.proto]["unsubscribe"]})
}

// read returns the next message but keep-alives and pings (answered).
func (c *wsClient) read() (string, json.RawMessage) {
	c.t.Helper()
	for {
		must(c.t, c.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		var m struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		must(c.t, c.conn.ReadJSON(&m))
		switch m.Type {
		case "ka", "pong":
		case "ping":
			c.send(map[string]any{"type": "pong"})
		default:
			return m.Type, m.Payload
		}
	}
}

// next reads an event, failing on anything else.
func (c *wsClient) next() answer {
	c.t.Helper()
	typ, p := c.read()
	if typ != wsTypes[c.proto]["next"] {
		c.t.Fatalf("%s %s, want an event", typ, p)
	}
	var a answer
	must(c.t, json.Unmarshal(p, &a))
	a.body = p
	return a
}

func (c *wsClient) complete() {
	c.t.Helper()
	if typ, p := c.read(); typ != "complete" {
		c.t.Fatalf("%s %s, want complete", typ, p)
	}
}

const subscription = `subscription { issueCreated(repo: "r") { id title } }`

var events = []string{
	`{"data":{"issueCreated":{"id":"I1","title":"first"}}}`,
	`{"data":{"issueCreated":{"id":"I2","title":"second"}},"extensions":{"seq":2}}`,
}

func TestSubscriptionForwarded(t *testing.T) {
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		t.Run(proto, func(t *testing.T) {
			up := newFakeUpstream(t)
			up.events = events
			proxy := newProxy(t, up.URL, proxyOptions{})
			c := dialProxy(t, proxy.URL, proto,
				http.Header{"Cookie": {"s=1"}, "X-Forwarded-For": {"203.0.113.9"}},
				map[string]any{"Authorization": "Bearer " + aliceKey, "apiKey": aliceKey, "note": "x"})
			c.subscribe(subscription)
			for i, want := range []string{`{"issueCreated":{"id":"I1","title":"first"}}`, `{"issueCreated":{"id":"I2","title":"second"}}`} {
				a := c.next()
				if string(a.Data) != want || len(a.Errors) != 0 {
					t.Errorf("event %d: %s, want data %s", i, a.body, want)
				}
				if a.Extensions["cost"] == nil {
					t.Errorf("event %d has no extensions.cost: %s", i, a.body)
				}
				if i == 1 && string(a.Extensions["seq"]) != "2" {
					t.Errorf("event %d lost the upstream's extensions: %s", i, a.body)
				}
			}
			c.complete()

			up.mu.Lock()
			defer up.mu.Unlock()
			if up.subscribe.Query != subscription {
				t.Errorf("upstream subscribed to %q", up.subscribe.Query)
			}
			if len(up.initPayload) != 1 || up.initPayload["Authorization"] != "Bearer "+aliceKey {
				t.Errorf("upstream's connection_init payload %v, want Authorization alone", up.initPayload)
			}
			h := up.requests[len(up.requests)-1].Header
			if h.Get("Cookie") != "s=1" || h.Get("X-Forwarded-For") != "" {
				t.Errorf("upstream handshake headers %v", h)
			}
		})
	}
}

func TestSubscriptionUnsubscribeClosesUpstream(t *testing.T) {
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		t.Run(proto, func(t *testing.T) {
			up := newFakeUpstream(t)
			up.events = events[:1]
			up.end = "" // the stream goes on until the client leaves
			proxy := newProxy(t, up.URL, proxyOptions{})
			c := dialProxy(t, proxy.URL, proto, http.Header{"Authorization": {"Bearer " + aliceKey}}, nil)
			c.subscribe(subscription)
			c.next()
			c.unsubscribe()
			select {
			case <-up.gotComplete:
			case <-time.After(10 * time.Second):
				t.Fatal("the upstream was not told the client unsubscribed")
			}
		})
	}
}

func TestSubscriptionUpstreamError(t *testing.T) {
	up := newFakeUpstream(t)
	up.events = events[:1]
	up.end = `{"id":"1","type":"error","payload":[{"message":"boom","path":["issueCreated"],"extensions":{"code":"BOOM"}}]}`
	proxy := newProxy(t, up.URL, proxyOptions{})
	c := dialProxy(t, proxy.URL, "graphql-transport-ws", http.Header{"Authorization": {"Bearer " + aliceKey}}, nil)
	c.subscribe(subscription)
	c.next()
	if a := c.next(); len(a.Errors) != 1 || a.Errors[0].Message != "boom" || a.code() != "BOOM" {
		t.Errorf("last event %s, want the upstream's error", a.body)
	}
	c.complete()
}

func TestSubscriptionUpstreamUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	url := "http://" + l.Addr().String()
	must(t, l.Close())
	var seen notExecuted
	proxy := newProxy(t, url, proxyOptions{observe: seen.observe})
	c := dialProxy(t, proxy.URL, "graphql-transport-ws", nil, nil)
	c.subscribe(subscription)
	if a := c.next(); a.code() != CodeUnavailable || a.Errors[0].Message != "upstream unavailable: cannot connect" {
		t.Errorf("%s, want %s", a.body, CodeUnavailable)
	}
	c.complete()
	if !seen.seen.Load() {
		t.Error("a subscription that never reached the upstream does not wrap ErrNotExecuted")
	}
}

// The upstream closing its socket mid-stream ends the subscription with
// an error; the upstream may have run it, so no ErrNotExecuted.
func TestSubscriptionUpstreamLost(t *testing.T) {
	up := newFakeUpstream(t)
	up.events = events[:1]
	up.end = `{"type":"bogus"}` // ignored; the handler returns and closes the socket
	var seen notExecuted
	proxy := newProxy(t, up.URL, proxyOptions{observe: seen.observe})
	c := dialProxy(t, proxy.URL, "graphql-transport-ws", nil, nil)
	c.subscribe(subscription)
	c.next()
	if a := c.next(); a.code() != CodeUnavailable {
		t.Errorf("%s, want %s", a.body, CodeUnavailable)
	}
	c.complete()
	if seen.seen.Load() {
		t.Error("a subscription lost after it started wraps ErrNotExecuted")
	}
}

func TestSubscriptionOverSSE(t *testing.T) {
	up := newFakeUpstream(t)
	up.events = events
	proxy := newProxy(t, up.URL, proxyOptions{})
	req, err := http.NewRequest(http.MethodPost, proxy.URL, strings.NewReader(`{"query":`+quote(subscription)+`}`))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	var data []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var a answer
			must(t, json.Unmarshal([]byte(line), &a))
			data = append(data, string(a.Data))
		}
	}
	want := []string{`{"issueCreated":{"id":"I1","title":"first"}}`, `{"issueCreated":{"id":"I2","title":"second"}}`}
	if strings.Join(data, "\n") != strings.Join(want, "\n") {
		t.Errorf("SSE events %q, want %q", data, want)
	}
}

// An upstream that accepts the socket but never acknowledges it fails the
// subscription within the handshake timeout; it never subscribed, so the
// error wraps ErrNotExecuted.
func TestSubscriptionHandshakeTimeout(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := upstreamUpgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return // the proxy gave up
			}
		}
	}))
	t.Cleanup(up.Close)
	var seen notExecuted
	proxy := newProxy(t, up.URL, proxyOptions{observe: seen.observe, config: func(c *Config) {
		c.HandshakeTimeout = 100 * time.Millisecond
	}})
	c := dialProxy(t, proxy.URL, "graphql-transport-ws", nil, nil)
	c.subscribe(subscription)
	if a := c.next(); a.code() != CodeUnavailable || a.Errors[0].Message != "upstream unavailable: timed out" {
		t.Errorf("%s, want a timeout", a.body)
	}
	c.complete()
	if !seen.seen.Load() {
		t.Error("a subscription never acknowledged does not wrap ErrNotExecuted")
	}
}

func TestSubscriptionEventTooLarge(t *testing.T) {
	up := newFakeUpstream(t)
	up.events = []string{events[0], `{"data":{"issueCreated":{"id":"I2","title":"` + strings.Repeat("x", 300) + `"}}}`}
	up.end = "" // held open: the proxy closes it
	proxy := newProxy(t, up.URL, proxyOptions{config: func(c *Config) { c.MaxResponseBytes = 200 }})
	c := dialProxy(t, proxy.URL, "graphql-transport-ws", nil, nil)
	c.subscribe(subscription)
	c.next()
	if a := c.next(); a.code() != CodeUnavailable || a.Errors[0].Message != "upstream unavailable: the event is too large" {
		t.Errorf("%s, want the event refused", a.body)
	}
	c.complete()
}
