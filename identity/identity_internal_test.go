package identity

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestClientIP(t *testing.T) {
	trusted := []string{"10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.1"}
	tests := []struct {
		name      string
		forwarded bool // read Forwarded instead of X-Forwarded-For
		peer      string
		header    http.Header
		want      string
	}{
		{name: "no header", peer: "203.0.113.9:5000", want: "203.0.113.9"},
		{name: "spoofed XFF from an untrusted peer is ignored", peer: "203.0.113.9:5000",
			header: http.Header{"X-Forwarded-For": {"1.1.1.1"}}, want: "203.0.113.9"},
		{name: "trusted proxy, one hop", peer: "10.1.2.3:80",
			header: http.Header{"X-Forwarded-For": {"198.51.100.4"}}, want: "198.51.100.4"},
		{name: "client-supplied prefix is skipped", peer: "10.1.2.3:80",
			header: http.Header{"X-Forwarded-For": {"6.6.6.6, 198.51.100.4"}}, want: "198.51.100.4"},
		{name: "trusted hops are skipped right to left", peer: "10.1.2.3:80",
			header: http.Header{"X-Forwarded-For": {"6.6.6.6, 198.51.100.4, 10.9.9.9", "192.0.2.1"}}, want: "198.51.100.4"},
		{name: "all hops trusted: the leftmost", peer: "10.1.2.3:80",
			header: http.Header{"X-Forwarded-For": {"10.3.3.3, 10.2.2.2"}}, want: "10.3.3.3"},
		{name: "garbage ends the walk at the hop that reported it", peer: "10.1.2.3:80",
			header: http.Header{"X-Forwarded-For": {"6.6.6.6, not-an-ip, 10.2.2.2"}}, want: "10.2.2.2"},
		{name: "XFF with ports and brackets", peer: "10.1.2.3:80",
			header: http.Header{"X-Forwarded-For": {"[2001:db8:1:2::7]:443"}}, want: "2001:db8:1:2::/64"},
		{name: "Forwarded is ignored in XFF mode", peer: "10.1.2.3:80",
			header: http.Header{"Forwarded": {"for=6.6.6.6"}, "X-Forwarded-For": {"198.51.100.4"}}, want: "198.51.100.4"},
		{name: "Forwarded mode", forwarded: true, peer: "10.1.2.3:80",
			header: http.Header{"Forwarded": {`for=6.6.6.6, for="[2001:db8:1:2::7]:4711";proto=https, For=10.4.4.4`}}, want: "2001:db8:1:2::/64"},
		{name: "XFF is ignored in Forwarded mode", forwarded: true, peer: "10.1.2.3:80",
			header: http.Header{"X-Forwarded-For": {"6.6.6.6"}}, want: "10.1.2.3"},
		{name: "obfuscated Forwarded node ends the walk", forwarded: true, peer: "10.1.2.3:80",
			header: http.Header{"Forwarded": {"for=6.6.6.6, for=_hidden"}}, want: "10.1.2.3"},
		{name: "IPv6 peers are grouped by /64", peer: "[2001:db8:aa:bb:1:2:3:4]:9", want: "2001:db8:aa:bb::/64"},
		{name: "IPv4-mapped IPv6 is IPv4", peer: "[::ffff:198.51.100.4]:9", want: "198.51.100.4"},
		{name: "trusted IPv6 proxy", peer: "[2001:db8:ffff:1::1]:9",
			header: http.Header{"X-Forwarded-For": {"198.51.100.4"}}, want: "198.51.100.4"},
		{name: "unparseable peer", peer: "@unix", want: "unknown"},
	}
	prefixes, err := parseTrustedProxies(trusted)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.peer
			r.Header = tc.header
			if r.Header == nil {
				r.Header = http.Header{}
			}
			p := &proxyResolver{trusted: prefixes, forwarded: tc.forwarded}
			if got := strings.TrimPrefix(addressKey(p.clientIP(r)), "ip:"); got != tc.want {
				t.Errorf("client %q, want %q", got, tc.want)
			}
		})
	}
}

func TestIdentifyChain(t *testing.T) {
	keys := NewStaticKeys(map[string]APIKey{
		"k-alice": {Principal: "alice", Plan: "free"},
		"k-anon":  {Plan: "free"},
	})
	d := &defaultIdentifier{keys: keys, anonymousPlan: "anon", proxies: &proxyResolver{}}
	tests := []struct {
		name      string
		principal []string // name, plan for WithPrincipal
		header    http.Header
		want      Identity
		wantErr   error
	}{
		{name: "anonymous", want: Identity{Key: "ip:192.0.2.5", Plan: "anon"}},
		{name: "bearer", header: http.Header{"Authorization": {"Bearer k-alice"}}, want: Identity{Key: "user:alice", Plan: "free"}},
		{name: "bearer scheme is case-insensitive", header: http.Header{"Authorization": {"bearer k-alice"}}, want: Identity{Key: "user:alice", Plan: "free"}},
		{name: "X-API-Key", header: http.Header{"X-Api-Key": {"k-alice"}}, want: Identity{Key: "user:alice", Plan: "free"}},
		{name: "key without principal is keyed by its hash", header: http.Header{"X-Api-Key": {"k-anon"}},
			want: Identity{Key: "key:" + HashAPIKey("k-anon"), Plan: "free"}},
		{name: "bearer wins over X-API-Key", header: http.Header{"Authorization": {"Bearer k-alice"}, "X-Api-Key": {"k-anon"}},
			want: Identity{Key: "user:alice", Plan: "free"}},
		{name: "Basic auth is not an API key", header: http.Header{"Authorization": {"Basic YTpi"}}, want: Identity{Key: "ip:192.0.2.5", Plan: "anon"}},
		{name: "unknown key", header: http.Header{"X-Api-Key": {"nope"}}, wantErr: ErrUnknownAPIKey},
		{name: "context principal wins", principal: []string{"carol", "pro"}, header: http.Header{"X-Api-Key": {"nope"}},
			want: Identity{Key: "user:carol", Plan: "pro"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.5:1000"
			for k, v := range tc.header {
				r.Header[k] = v
			}
			if tc.principal != nil {
				r = r.WithContext(WithPrincipal(r.Context(), tc.principal[0], tc.principal[1]))
			}
			got, err := d.Identify(r)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("identity %+v, want %+v", got, tc.want)
			}
			if strings.Contains(got.Key, "k-") {
				t.Errorf("bucket key %q contains the API key", got.Key)
			}
		})
	}
}

type brokenLookup struct{}

func (brokenLookup) LookupAPIKey(context.Context, string) (string, string, error) {
	return "", "", errors.New("database is down")
}

func TestIdentifyLookupFailure(t *testing.T) {
	d := &defaultIdentifier{keys: brokenLookup{}, anonymousPlan: "anon", proxies: &proxyResolver{}}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "whatever")
	_, err := d.Identify(r)
	if err == nil || errors.Is(err, ErrUnknownAPIKey) || !strings.HasPrefix(err.Error(), "identity: ") {
		t.Errorf("err %v: want a prefixed lookup error distinct from ErrUnknownAPIKey", err)
	}
}

func TestStaticKeysHoldNoKey(t *testing.T) {
	s := NewStaticKeys(map[string]APIKey{"plaintext-key": {Principal: "p", Plan: "free"}})
	for h := range s.byHash {
		if strings.Contains(string(h[:]), "plaintext-key") {
			t.Fatal("the key is stored in clear")
		}
	}
	if p, plan, err := s.LookupAPIKey(context.Background(), "plaintext-key"); err != nil || p != "p" || plan != "free" {
		t.Errorf("lookup: %q %q %v", p, plan, err)
	}
}

// parseHostAddrNetip is parseHostAddr without its IPv4 fast path: netip's
// parsers alone.
func parseHostAddrNetip(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap()
	}
	return netip.Addr{}
}

var hostAddrCases = []string{
	"192.0.2.1:1234", "192.0.2.1", "0.0.0.0:0", "255.255.255.255:65535", "255.255.255.255:65536",
	"256.0.0.1:80", "01.2.3.4:80", "1.2.3.04", "1.2.3.4:", "1.2.3.4:0080", "1.2.3.4:000080", "1.2.3.4:8a",
	"1.2.3:80", "1.2.3.4.5", "1.2.3.4:80:90", "[1.2.3.4]:80", "[::1]:80", "::ffff:1.2.3.4", "[::ffff:1.2.3.4]:80",
	"", ":80", "1..2.3", "1.2.3.4 ", " 1.2.3.4", "1.2.3.4:+80", "1.2.3.4:-1", "1234.2.3.4", "1.2.3.4%eth0",
	"2001:db8::1", "[2001:db8::1]", "fe80::1%eth0", "unix", "@",
}

func TestParseHostAddrFastPathAgreesWithNetip(t *testing.T) {
	for _, s := range hostAddrCases {
		if got, want := parseHostAddr(s), parseHostAddrNetip(s); got != want {
			t.Errorf("parseHostAddr(%q) = %v, netip parses %v", s, got, want)
		}
	}
}

func FuzzParseHostAddr(f *testing.F) {
	for _, s := range hostAddrCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := parseHostAddr(s), parseHostAddrNetip(s); got != want {
			t.Errorf("parseHostAddr(%q) = %v, netip parses %v", s, got, want)
		}
	})
}

// HashKey is the first 16 hex digits of the key's SHA-256: the same in
// every process, and never the key.
func TestHashKey(t *testing.T) {
	got := HashKey("user:alice")
	if len(got) != 16 || got != HashAPIKey("user:alice")[:16] || strings.Contains(got, "alice") {
		t.Errorf("HashKey(user:alice) = %q", got)
	}
	if HashKey("user:bob") == got {
		t.Error("two keys share a hash")
	}
}

// PrincipalFrom returns what WithPrincipal stored, and nothing from a
// context without it.
func TestPrincipalFrom(t *testing.T) {
	if _, _, ok := PrincipalFrom(context.Background()); ok {
		t.Error("a principal in an empty context")
	}
	name, plan, ok := PrincipalFrom(WithPrincipal(context.Background(), "alice", "pro"))
	if !ok || name != "alice" || plan != "pro" {
		t.Errorf("PrincipalFrom = %q, %q, %v; want alice, pro, true", name, plan, ok)
	}
}
