package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The headers the upstream sees, lower-cased as /hits reports them.
const (
	upPrincipal = "x-costguard-principal"
	upPlan      = "x-costguard-plan"
	upSignature = "x-costguard-signature"
)

// spoofedHeaders are what a client may send to pass for another principal
// or address; none of them may reach the upstream as sent.
var spoofedHeaders = []string{
	HeaderPrincipal, "user:mallory",
	HeaderPlan, "enterprise",
	HeaderSignature, "t=1,v1=00",
	"X-Forwarded-For", "203.0.113.7",
}

// The upstream learns from the proxy whose budget paid for each operation,
// and from the proxy alone: a client's own X-Costguard-*, X-API-Key and
// X-Forwarded-For headers never reach it.
func TestPrincipalHeadersNameTheBudget(t *testing.T) {
	up := startUpstream(t, "yoga.js")
	p := startProxyInFront(t, up, testConfig)
	behindProxy := startProxyInFront(t, up, testConfig+"trusted_proxies: [127.0.0.1/32]\n")
	q := query(`{ user(login: "alice") { login } }`, nil)
	for _, tc := range []struct {
		name            string
		proxy           *proxy
		header          []string
		principal, plan string
		authorization   string // as the upstream gets it
	}{
		{"anonymous", p, nil, "ip:127.0.0.1", "anon", ""},
		{"a bearer key", p, []string{"Authorization", "Bearer alice-key"}, "user:alice", "free", "Bearer alice-key"},
		{"an X-API-Key", p, []string{"X-API-Key", "alice-key"}, "user:alice", "free", ""},
		{"anonymous behind a trusted proxy", behindProxy, nil, "ip:203.0.113.7", "anon", ""},
	} {
		a := postGraphQL(t, tc.proxy.URL+"/graphql", q, append(append([]string(nil), spoofedHeaders...), tc.header...)...)
		if a.status != http.StatusOK || len(a.Errors) != 0 {
			t.Errorf("%s: %d %s", tc.name, a.status, a.body)
			continue
		}
		got := up.lastHeaders(t)
		if got[upPrincipal] != tc.principal || got[upPlan] != tc.plan {
			t.Errorf("%s: the upstream got %s %q and %s %q, want %q and %q",
				tc.name, HeaderPrincipal, got[upPrincipal], HeaderPlan, got[upPlan], tc.principal, tc.plan)
		}
		if got["authorization"] != tc.authorization {
			t.Errorf("%s: the upstream got Authorization %q, want %q", tc.name, got["authorization"], tc.authorization)
		}
		for _, name := range []string{upSignature, "x-api-key", "x-forwarded-for"} {
			if v, ok := got[name]; ok {
				t.Errorf("%s: the upstream got %s: %q", tc.name, name, v)
			}
		}
	}
}

// With -principal-secret-file the upstream can check the two headers:
// X-Costguard-Signature is "t=UNIX,v1=HEX", HEX the HMAC-SHA256 of
// "UNIX.PRINCIPAL.PLAN" under the file's secret (its trailing newline
// not part of it), UNIX the time it was signed.
func TestPrincipalSignatureVerifies(t *testing.T) {
	const secret = "a secret of more than 16 bytes"
	up := startUpstream(t, "yoga.js")
	p := startProxyInFront(t, up, testConfig, "-principal-secret-file", writeFile(t, "secret", secret+"\n"))
	q := query(`{ user(login: "alice") { login } }`, nil)
	for _, header := range [][]string{nil, {"Authorization", "Bearer alice-key"}} {
		before := time.Now().Unix()
		a := postGraphQL(t, p.URL+"/graphql", q, append(append([]string(nil), spoofedHeaders...), header...)...)
		after := time.Now().Unix()
		if a.status != http.StatusOK {
			t.Fatalf("%d %s", a.status, a.body)
		}
		got := up.lastHeaders(t)
		checkSignature(t, []byte(secret), got, before, after)
	}
}

// checkSignature fails t unless headers carry a signature of their
// principal and plan under secret, made between before and after (Unix
// seconds).
func checkSignature(t *testing.T, secret []byte, headers map[string]string, before, after int64) {
	t.Helper()
	sig := headers[upSignature]
	ts, mac, ok := strings.Cut(sig, ",")
	unix, err := strconv.ParseInt(strings.TrimPrefix(ts, "t="), 10, 64)
	if !ok || !strings.HasPrefix(ts, "t=") || !strings.HasPrefix(mac, "v1=") || err != nil {
		t.Errorf("%s %q, want t=UNIX,v1=HEX", HeaderSignature, sig)
		return
	}
	if unix < before || unix > after {
		t.Errorf("%s signed at %d, not between %d and %d", HeaderSignature, unix, before, after)
	}
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(strconv.FormatInt(unix, 10) + "\n" + headers[upPrincipal] + "\n" + headers[upPlan]))
	if want := hex.EncodeToString(h.Sum(nil)); strings.TrimPrefix(mac, "v1=") != want {
		t.Errorf("%s %q does not verify for %q and %q: want v1=%s", HeaderSignature, sig, headers[upPrincipal], headers[upPlan], want)
	}
}

// The proxy refuses to start when its flags would let a client's header
// pass for its own, or sign with a secret too short to be one.
func TestPrincipalFlagsRefusedAtStart(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-forward-headers", "X-Costguard-Principal"}, "-forward-headers names X-Costguard-Principal"},
		{[]string{"-forward-headers", "Authorization, x-costguard-plan"}, "-forward-headers names x-costguard-plan"},
		{[]string{"-forward-headers", " X-COSTGUARD-SIGNATURE "}, "-forward-headers names X-COSTGUARD-SIGNATURE"},
		{[]string{"-principal-secret-file", writeFile(t, "short", "fifteen bytes!!\n")}, "the secret must be at least 16 bytes"},
		{[]string{"-principal-secret-file", writeFile(t, "spaces", strings.Repeat(" ", 20))}, "the secret must be at least 16 bytes"},
	} {
		args := append([]string{"-upstream", "http://127.0.0.1:1/graphql", "-schema", upstreamSchema}, tc.args...)
		p, err := runProxy(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("costguard-proxy %s: %v (%s), want an error saying %q", strings.Join(tc.args, " "), err, p.stderr.String(), tc.want)
		}
	}
}

// -forward-headers chooses which of the client's headers the upstream
// gets; "" forwards none, the credentials included, while the principal
// is still named.
func TestPrincipalForwardHeaders(t *testing.T) {
	up := startUpstream(t, "yoga.js")
	q := query(`{ user(login: "alice") { login } }`, nil)
	header := []string{"Authorization", "Bearer alice-key", "Cookie", "session=1", "X-Tenant", "acme"}
	for _, tc := range []struct {
		flag string
		want map[string]string // the client's headers the upstream gets; the others it must not
	}{
		{"", map[string]string{}},
		{"X-Tenant", map[string]string{"x-tenant": "acme"}},
		{"Authorization,Cookie", map[string]string{"authorization": "Bearer alice-key", "cookie": "session=1"}},
	} {
		p := startProxyInFront(t, up, testConfig, "-forward-headers", tc.flag)
		if a := postGraphQL(t, p.URL+"/graphql", q, header...); a.status != http.StatusOK {
			t.Fatalf("-forward-headers %q: %d %s", tc.flag, a.status, a.body)
		}
		got := up.lastHeaders(t)
		for _, name := range []string{"authorization", "cookie", "x-tenant"} {
			if got[name] != tc.want[name] {
				t.Errorf("-forward-headers %q: the upstream got %s %q, want %q", tc.flag, name, got[name], tc.want[name])
			}
		}
		if got[upPrincipal] != "user:alice" {
			t.Errorf("-forward-headers %q: the upstream got %s %q, want user:alice", tc.flag, HeaderPrincipal, got[upPrincipal])
		}
	}
}

// A subscription's upstream socket is opened with the same headers as an
// HTTP operation: the principal that paid, identified by the client's
// upgrade or by its connection_init payload, signed.
func TestPrincipalOnWebSocketUpgrade(t *testing.T) {
	const secret = "a secret of more than 16 bytes"
	up := startUpstream(t, "yoga.js")
	p := startProxyInFront(t, up, testConfig, "-principal-secret-file", writeFile(t, "secret", secret))
	sub := `subscription { issueAdded(repo: "Repo:alpha", count: 2, intervalMs: 0) { title } }`
	for _, tc := range []struct {
		name            string
		header          []string
		initPayload     map[string]any
		principal, plan string
	}{
		{"anonymous", nil, nil, "ip:127.0.0.1", "anon"},
		{"a bearer key on the upgrade", []string{"Authorization", "Bearer alice-key"}, nil, "user:alice", "free"},
		{"a key in connection_init", nil, map[string]any{"apiKey": "alice-key"}, "user:alice", "free"},
	} {
		header := http.Header{}
		for i := 0; i+1 < len(spoofedHeaders); i += 2 {
			header.Set(spoofedHeaders[i], spoofedHeaders[i+1])
		}
		for i := 0; i+1 < len(tc.header); i += 2 {
			header.Set(tc.header[i], tc.header[i+1])
		}
		before := time.Now().Unix()
		events := subscribeOverWebSocket(t, p.URL, header, tc.initPayload, sub)
		after := time.Now().Unix()
		if len(events) != 2 {
			t.Errorf("%s: %d events, want 2: %s", tc.name, len(events), events)
		}
		got := up.report(t).LastUpgradeHeaders
		if got[upPrincipal] != tc.principal || got[upPlan] != tc.plan {
			t.Errorf("%s: the upstream's upgrade had %s %q and %s %q, want %q and %q",
				tc.name, HeaderPrincipal, got[upPrincipal], HeaderPlan, got[upPlan], tc.principal, tc.plan)
		}
		checkSignature(t, []byte(secret), got, before, after)
		for _, name := range []string{"x-forwarded-for", "x-api-key"} {
			if v, ok := got[name]; ok {
				t.Errorf("%s: the upstream's upgrade had %s: %q", tc.name, name, v)
			}
		}
	}
}

// subscribeOverWebSocket runs the subscription q on a graphql-transport-ws
// socket to the proxy at base, opened with header and initPayload, and
// returns the events it sent before completing.
func subscribeOverWebSocket(t *testing.T, base string, header http.Header, initPayload map[string]any, q string) []json.RawMessage {
	t.Helper()
	dialer := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 10 * time.Second}
	conn, resp, err := dialer.Dial("ws"+strings.TrimPrefix(base, "http")+"/graphql", header)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dialing the proxy: %v (status %d)", err, status)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // a bound, not a wait
	send := func(m map[string]any) {
		t.Helper()
		if err := conn.WriteJSON(m); err != nil {
			t.Fatal(err)
		}
	}
	init := map[string]any{"type": "connection_init"}
	if initPayload != nil {
		init["payload"] = initPayload
	}
	send(init)
	var events []json.RawMessage
	for {
		var m struct {
			ID      string          `json:"id"`
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := conn.ReadJSON(&m); err != nil {
			t.Fatalf("reading the proxy's socket after %d events: %v", len(events), err)
		}
		switch m.Type {
		case "connection_ack":
			send(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{"query": q}})
		case "ping":
			send(map[string]any{"type": "pong"})
		case "next":
			events = append(events, m.Payload)
		case "complete":
			return events
		default:
			t.Fatalf("the proxy's socket sent %s %s", m.Type, m.Payload)
		}
	}
}
