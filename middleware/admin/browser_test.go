package admin_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/admin"
)

// request is one request to the admin API with its Host, Origin and
// Content-Type as a browser (or anything) may send them; "" leaves a
// header out, and host "" keeps the listener's address.
type request struct {
	method, path, host, origin, contentType, auth, body string
}

// send sends rq to srv and answers its status and the "code" of its JSON
// error ("" when it has none).
func send(t *testing.T, srv *httptest.Server, rq request) (int, string) {
	t.Helper()
	req, err := http.NewRequest(rq.method, srv.URL+rq.path, strings.NewReader(rq.body))
	if err != nil {
		t.Fatal(err)
	}
	if rq.host != "" {
		req.Host = rq.host
	}
	for name, v := range map[string]string{"Origin": rq.origin, "Content-Type": rq.contentType, "Authorization": rq.auth} {
		if v != "" {
			req.Header.Set(name, v)
		}
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(b, &e); err != nil || e.Error == "" {
			t.Errorf("%s %s: %d %q is not a JSON error", rq.method, rq.path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, e.Code
}

// overrideOf is the override the limiter holds for principal ("" for
// none), read without the API.
func overrideOf(t *testing.T, lim *middleware.Limiter, principal, plan string) string {
	t.Helper()
	st, err := lim.Principal(t.Context(), principal, plan)
	if err != nil {
		t.Fatal(err)
	}
	if st.Override == nil {
		return ""
	}
	return st.Override.String()
}

// Without a token, the admin API answers nothing a web page could send it
// from another site: a page that rebinds its own name to 127.0.0.1 (a
// foreign Host, with its own Origin), a page of another origin on this
// machine (a foreign Origin), a form (a body type other than JSON). Each
// is refused with its code and changes nothing; requests for 127.0.0.1,
// [::1] or localhost, with or without a port, are answered.
func TestAdminRefusesBrowsers(t *testing.T) {
	srv, lim := newAPI(t, admin.Config{NoToken: true})
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	const (
		put      = "/admin/principals/ip:127.0.0.1/override"
		billion  = `{"burst":1000000000,"rate":1000000000,"per":"1h"}`
		jsonType = "application/json"
	)
	rebind := "rebind.attacker.example:" + port
	for _, tc := range []struct {
		name   string
		rq     request
		status int
		code   string
	}{
		{"rebound PUT", request{method: "PUT", path: put, host: rebind, origin: "http://" + rebind, contentType: jsonType, body: billion}, 403, admin.CodeForeignHost},
		{"rebound PUT, no Origin", request{method: "PUT", path: put, host: rebind, contentType: jsonType, body: billion}, 403, admin.CodeForeignHost},
		{"rebound GET of a principal", request{method: "GET", path: "/admin/principals/ip:127.0.0.1", host: rebind, origin: "http://" + rebind}, 403, admin.CodeForeignHost},
		{"rebound GET of the dashboard", request{method: "GET", path: "/admin/", host: rebind}, 403, admin.CodeForeignHost},
		{"rebound DELETE", request{method: "DELETE", path: put, host: rebind, contentType: jsonType}, 403, admin.CodeForeignHost},
		{"another page on this machine", request{method: "PUT", path: put, origin: "http://localhost:3000", contentType: jsonType, body: billion}, 403, admin.CodeForeignOrigin},
		{"another port, same host", request{method: "GET", path: "/admin/principals/ip:127.0.0.1", host: "127.0.0.1:" + port, origin: "http://127.0.0.1:1"}, 403, admin.CodeForeignOrigin},
		{"another scheme", request{method: "GET", path: "/admin/principals/ip:127.0.0.1", host: "127.0.0.1:" + port, origin: "https://127.0.0.1:" + port}, 403, admin.CodeForeignOrigin},
		{"localhost is another origin than 127.0.0.1", request{method: "GET", path: "/admin/principals/ip:127.0.0.1", host: "127.0.0.1:" + port, origin: "http://localhost:" + port}, 403, admin.CodeForeignOrigin},
		{"a sandboxed page", request{method: "PUT", path: put, origin: "null", contentType: jsonType, body: billion}, 403, admin.CodeForeignOrigin},
		{"an origin with a path", request{method: "GET", path: "/admin/principals/ip:127.0.0.1", host: "127.0.0.1:" + port, origin: "http://127.0.0.1:" + port + "/x"}, 403, admin.CodeForeignOrigin},
		{"a form", request{method: "PUT", path: put, contentType: "application/x-www-form-urlencoded", body: billion}, 415, admin.CodeNotJSON},
		{"a multipart form", request{method: "PUT", path: put, contentType: "multipart/form-data; boundary=x", body: billion}, 415, admin.CodeNotJSON},
		{"text/plain", request{method: "PUT", path: put, contentType: "text/plain", body: billion}, 415, admin.CodeNotJSON},
		{"no type", request{method: "PUT", path: put, body: billion}, 415, admin.CodeNotJSON},
		{"a type that only contains json", request{method: "PUT", path: put, contentType: "text/plain; x=application/json", body: billion}, 415, admin.CodeNotJSON},
		{"a POST form", request{method: "POST", path: put, contentType: "application/x-www-form-urlencoded", body: billion}, 415, admin.CodeNotJSON},
		{"a DELETE without a type", request{method: "DELETE", path: put}, 415, admin.CodeNotJSON},
	} {
		status, code := send(t, srv, tc.rq)
		if status != tc.status || code != tc.code {
			t.Errorf("%s: %d %q, want %d %q", tc.name, status, code, tc.status, tc.code)
		}
		if o := overrideOf(t, lim, "ip:127.0.0.1", ""); o != "" {
			t.Fatalf("%s: the override %q was set", tc.name, o)
		}
	}

	// What a browser on this machine's own pages, and a script, send is
	// answered.
	for _, host := range []string{
		"127.0.0.1:" + port, "127.0.0.1", "127.9.8.7:" + port, "localhost:" + port, "localhost", "LocalHost:" + port,
		"[::1]:" + port, "[::1]",
	} {
		if status, code := send(t, srv, request{method: "GET", path: "/admin/principals/ip:127.0.0.1", host: host}); status != 200 {
			t.Errorf("Host %s: %d %q, want 200", host, status, code)
		}
	}
	for _, tc := range []struct{ host, origin string }{
		{"127.0.0.1:" + port, "http://127.0.0.1:" + port},
		{"localhost:" + port, "http://localhost:" + port},
		{"[::1]:" + port, "http://[::1]:" + port},
		{"localhost", "http://localhost"},
		{"localhost:80", "http://localhost"},
		{"localhost", "http://localhost:80"},
	} {
		if status, code := send(t, srv, request{method: "GET", path: "/admin/principals/ip:127.0.0.1", host: tc.host, origin: tc.origin}); status != 200 {
			t.Errorf("Host %s, Origin %s: %d %q, want 200", tc.host, tc.origin, status, code)
		}
	}
	own := "http://127.0.0.1:" + port
	if status, code := send(t, srv, request{method: "PUT", path: put, origin: own, contentType: "application/json; charset=utf-8", body: `{"plan":"free"}`}); status != 200 {
		t.Fatalf("PUT from the dashboard's own origin: %d %q", status, code)
	}
	if o := overrideOf(t, lim, "ip:127.0.0.1", ""); o != "plan=free" {
		t.Fatalf("override %q, want plan=free", o)
	}
	// A DELETE that is refused leaves the override; one that is not
	// removes it.
	for _, rq := range []request{
		{method: "DELETE", path: put, host: rebind, contentType: "application/json"},
		{method: "DELETE", path: put, origin: "http://localhost:3000", contentType: "application/json"},
		{method: "DELETE", path: put, contentType: "text/plain"},
	} {
		if status, _ := send(t, srv, rq); status < 400 {
			t.Errorf("DELETE %+v: %d", rq, status)
		}
	}
	if o := overrideOf(t, lim, "ip:127.0.0.1", ""); o != "plan=free" {
		t.Fatalf("after refused DELETEs: override %q, want plan=free", o)
	}
	if status, code := send(t, srv, request{method: "DELETE", path: put, host: "localhost:" + port, contentType: "application/json"}); status != 204 {
		t.Fatalf("DELETE: %d %q", status, code)
	}
}

// Host names that are not exactly a loopback literal or localhost, or
// ports that are not one, are refused.
func TestAdminHostExact(t *testing.T) {
	srv, _ := newAPI(t, admin.Config{NoToken: true})
	for _, host := range []string{
		"localhost.", "localhost.attacker.example", "127.0.0.1.nip.io", "attacker.example",
		"localhost:", "localhost:0", "localhost:65536", "localhost:+80", "localhost:80:80", "localhost:http",
		"127.1", "2130706433", "0x7f000001", "127.0.0.01", "0.0.0.0", "10.0.0.1", "[127.0.0.1]",
		"::1", "[::1", "[::1]80", "[::1]:", "[::ffff:127.0.0.1]", "[::]", "[fe80::1%25lo]",
	} {
		if status, code := send(t, srv, request{method: "GET", path: "/admin/principals/ip:127.0.0.1", host: host}); status != 403 || code != admin.CodeForeignHost {
			t.Errorf("Host %q: %d %q, want 403 %s", host, status, code, admin.CodeForeignHost)
		}
	}
}

// With a token, Host and Origin are not checked (a page cannot send the
// token: a browser never adds a bearer token by itself), so a listener
// reached by any name works; the body type is checked all the same.
func TestAdminWithTokenChecksNoHost(t *testing.T) {
	srv, lim := newAPI(t, admin.Config{TokenSHA256: admin.HashToken(token)})
	const put = "/admin/principals/alice/override"
	bearer := "Bearer " + token
	for _, tc := range []struct {
		name   string
		rq     request
		status int
		code   string
	}{
		{"a rebound page without the token", request{method: "PUT", path: put, host: "rebind.attacker.example", origin: "http://rebind.attacker.example", contentType: "application/json", body: `{"plan":"pro"}`}, 401, ""},
		{"a form with the token", request{method: "PUT", path: put, host: "admin.internal.example", contentType: "application/x-www-form-urlencoded", auth: bearer, body: `{"plan":"pro"}`}, 415, admin.CodeNotJSON},
		{"a script by another name", request{method: "PUT", path: put, host: "admin.internal.example:9091", contentType: "application/json", auth: bearer, body: `{"plan":"pro"}`}, 200, ""},
	} {
		if status, code := send(t, srv, tc.rq); status != tc.status || code != tc.code {
			t.Errorf("%s: %d %q, want %d %q", tc.name, status, code, tc.status, tc.code)
		}
	}
	if o := overrideOf(t, lim, "alice", "free"); o != "plan=pro" {
		t.Errorf("override %q, want plan=pro (set once, by the script)", o)
	}
}

// LocalOnly guards the rest of a token-less admin listener (metrics,
// probes) the same way; what it refuses never reaches the handler.
func TestLocalOnly(t *testing.T) {
	reached := 0
	srv := httptest.NewServer(admin.LocalOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached++
		w.WriteHeader(http.StatusNoContent)
	})))
	t.Cleanup(srv.Close)
	if status, code := send(t, srv, request{method: "GET", path: "/metrics", host: "rebind.attacker.example"}); status != 403 || code != admin.CodeForeignHost {
		t.Errorf("a foreign Host: %d %q", status, code)
	}
	if status, code := send(t, srv, request{method: "GET", path: "/metrics", origin: "http://attacker.example"}); status != 403 || code != admin.CodeForeignOrigin {
		t.Errorf("a foreign Origin: %d %q", status, code)
	}
	if reached != 0 {
		t.Errorf("the handler was reached %d times", reached)
	}
	if status, _ := send(t, srv, request{method: "GET", path: "/metrics", host: "localhost"}); status != 204 || reached != 1 {
		t.Errorf("localhost: %d, reached %d", status, reached)
	}
}
