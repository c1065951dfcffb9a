package admin

import (
	"mime"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// The codes of the refusals that keep a browser from being turned against
// the admin listener: the "code" member of their JSON error, beside
// "error".
const (
	// CodeForeignHost: a handler without a token was asked under a Host
	// that is not a loopback literal or localhost (403), as a page that
	// rebinds its own name to 127.0.0.1 asks.
	CodeForeignHost = "foreign_host"
	// CodeForeignOrigin: a handler without a token was sent an Origin
	// other than its own (403): a page of another site, or of another
	// port or scheme of this machine.
	CodeForeignOrigin = "foreign_origin"
	// CodeNotJSON: a request other than GET or HEAD without
	// "Content-Type: application/json" (415), with a token or not: a form
	// or a simple cross-origin request cannot send that type without a
	// CORS preflight, which the handler never grants.
	CodeNotJSON = "content_type_not_json"
)

// LocalOnly wraps h so that it answers only requests a browser cannot be
// made to send from another site's page: their Host is a loopback literal
// (127.0.0.0/8, [::1]) or localhost, optionally with a port, and their
// Origin, when they carry one, is their own (the same scheme, host and
// port as the Host they were sent to). Anything else is refused 403 with
// CodeForeignHost or CodeForeignOrigin, before h sees it.
//
// A handler built with NoToken applies it to every route; wrap with it the
// rest of a token-less admin listener (metrics, probes) too. The port of
// the Host is not compared with the listener's (port forwarding and
// containers change it): a page can put only its own name in Host,
// whatever port it asks for, and a page on another port of this machine
// is refused by its Origin. The Host names a client may use are then
// 127.0.0.1, [::1] or localhost: not the machine's name, nor 127.1.
func LocalOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if localRequest(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}

// localRequest reports whether r may be answered by a handler without a
// token, answering the refusal when it may not.
func localRequest(w http.ResponseWriter, r *http.Request) bool {
	host, port, ok := splitHost(r.Host)
	if !ok || !loopbackHost(host) {
		writeRefusal(w, http.StatusForbidden, CodeForeignHost,
			"this admin listener answers only requests for 127.0.0.1, [::1] or localhost (it has no token, so a web page must not reach it under another name)")
		return false
	}
	origins := r.Header.Values("Origin")
	if len(origins) == 0 {
		return true
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if len(origins) > 1 || !sameOrigin(origins[0], scheme, host, port) {
		writeRefusal(w, http.StatusForbidden, CodeForeignOrigin,
			"this admin listener answers only pages of its own origin (it has no token, so another site's page must not reach it)")
		return false
	}
	return true
}

// splitHost splits a Host (or an origin's host and port) into its host,
// lower-cased, and its port: "" when it has none, else a number from 1 to
// 65535. An IPv6 literal is in brackets, which are dropped.
func splitHost(hostport string) (host, port string, ok bool) {
	host = hostport
	if strings.HasPrefix(hostport, "[") {
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return "", "", false
		}
		host, port = hostport[1:end], hostport[end+1:]
		if port != "" {
			if port[0] != ':' {
				return "", "", false
			}
			port = port[1:]
			if port == "" {
				return "", "", false
			}
		}
		if !strings.Contains(host, ":") { // only IPv6 goes in brackets
			return "", "", false
		}
	} else if i := strings.IndexByte(hostport, ':'); i >= 0 {
		host, port = hostport[:i], hostport[i+1:]
		if port == "" || strings.Contains(port, ":") { // "localhost:", an IPv6 literal without brackets
			return "", "", false
		}
	}
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return "", "", false
		}
		port = strconv.FormatUint(n, 10)
	}
	return strings.ToLower(host), port, host != ""
}

// loopbackHost reports whether host (as splitHost returns it) is
// localhost, an IPv4 address in 127.0.0.0/8 in dotted-quad form, or the
// IPv6 loopback ::1 without a zone.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	if err != nil || a.Zone() != "" {
		return false
	}
	return (a.Is4() && a.IsLoopback()) || a == netip.IPv6Loopback()
}

// sameOrigin reports whether origin (an Origin header: a scheme, "://",
// a host and maybe a port, nothing else) is scheme://host with port, a
// port the scheme implies being the same as none.
func sameOrigin(origin, scheme, host, port string) bool {
	prefix := scheme + "://"
	if len(origin) <= len(prefix) || !strings.EqualFold(origin[:len(prefix)], prefix) {
		return false
	}
	rest := origin[len(prefix):]
	if strings.ContainsAny(rest, "/?#@%\\") {
		return false
	}
	oh, op, ok := splitHost(rest)
	return ok && oh == host && defaultPort(scheme, op) == defaultPort(scheme, port)
}

// defaultPort is port, or the scheme's when it is "".
func defaultPort(scheme, port string) string {
	switch {
	case port != "":
		return port
	case scheme == "https":
		return "443"
	default:
		return "80"
	}
}

// jsonBody reports whether r is a GET or HEAD, or carries
// "Content-Type: application/json" (parameters such as charset allowed),
// answering the refusal when it does not.
func jsonBody(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	if types := r.Header.Values("Content-Type"); len(types) == 1 {
		if mt, _, err := mime.ParseMediaType(types[0]); err == nil && mt == "application/json" {
			return true
		}
	}
	writeRefusal(w, http.StatusUnsupportedMediaType, CodeNotJSON,
		"a request other than GET or HEAD needs \"Content-Type: application/json\" (a web form cannot send it)")
	return false
}
