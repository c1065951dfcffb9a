// Package identity decides who pays for a request: the principal an
// application names in the request's context, the principal an API key
// grants, or the client's address behind trusted proxies. Each answer is an
// Identity, a bucket key and a plan. API keys are never kept or logged: only
// their SHA-256 appears in bucket keys. Package middleware uses the default
// chain (NewChain) unless given an Identifier of its own.
package identity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Header names the chain reads.
const (
	// HeaderAPIKey is the alternative to "Authorization: Bearer <key>".
	HeaderAPIKey = "X-API-Key"
	// DefaultProxyHeader is the forwarding header read by default.
	DefaultProxyHeader = "X-Forwarded-For"
	forwardedHeader    = "Forwarded"
)

// Sentinel errors.
var (
	// ErrUnknownAPIKey: the request presented an API key nobody issued.
	ErrUnknownAPIKey = errors.New("identity: unknown API key")
	// ErrInvalidConfig wraps every configuration error NewChain returns.
	ErrInvalidConfig = errors.New("identity: invalid config")
)

// Identity names whose budget a request spends.
type Identity struct {
	// Key identifies the bucket: "user:<principal>", "key:<sha256 hex of the
	// API key>" or "ip:<address>". The store adds its own prefix. Keys are
	// safe to log: they never contain an API key.
	Key string
	// Plan names one of the limiter's plans.
	Plan string
}

// Anonymous reports whether id is a client known only by its address (a
// key of the form "ip:…"), not a principal or an API key.
func (id Identity) Anonymous() bool { return strings.HasPrefix(id.Key, "ip:") }

// Identifier decides who pays for a request. Identify returns
// ErrUnknownAPIKey for a credential it does not recognise (answered 401); any
// other error is answered 503 (the limiter cannot decide) and logged.
type Identifier interface {
	Identify(r *http.Request) (Identity, error)
}

// IdentifierFunc adapts a function to Identifier.
type IdentifierFunc func(r *http.Request) (Identity, error)

// Identify calls f(r).
func (f IdentifierFunc) Identify(r *http.Request) (Identity, error) { return f(r) }

// KeyLookup resolves an API key to its principal and plan. It returns
// ErrUnknownAPIKey when the key is not known. An empty principal is allowed:
// the budget is then keyed by the key's SHA-256.
type KeyLookup interface {
	LookupAPIKey(ctx context.Context, apiKey string) (principal, plan string, err error)
}

// APIKey is what a static API key grants.
type APIKey struct {
	Principal string `yaml:"principal"`
	Plan      string `yaml:"plan"`
}

// StaticKeys is a fixed KeyLookup, for demos and small deployments. It keeps
// only the SHA-256 of each key, never the key itself.
type StaticKeys struct {
	byHash map[[sha256.Size]byte]APIKey
}

var _ KeyLookup = (*StaticKeys)(nil)

// NewStaticKeys returns a lookup for the given keys (API key → grant).
func NewStaticKeys(keys map[string]APIKey) *StaticKeys {
	s := &StaticKeys{byHash: make(map[[sha256.Size]byte]APIKey, len(keys))}
	for k, v := range keys {
		s.byHash[sha256.Sum256([]byte(k))] = v
	}
	return s
}

// LookupAPIKey implements KeyLookup.
func (s *StaticKeys) LookupAPIKey(_ context.Context, apiKey string) (string, string, error) {
	g, ok := s.byHash[sha256.Sum256([]byte(apiKey))]
	if !ok {
		return "", "", ErrUnknownAPIKey
	}
	return g.Principal, g.Plan, nil
}

// Plans lists the plans the keys grant, so a limiter can refuse at start a
// key whose plan does not exist.
func (s *StaticKeys) Plans() []string {
	out := make([]string, 0, len(s.byHash))
	for _, g := range s.byHash {
		out = append(out, g.Plan)
	}
	return out
}

type principalKey struct{}

type principal struct{ name, plan string }

// WithPrincipal returns a context that tells the default Identifier the
// request is made by an authenticated principal on the named plan, which
// must be one of the limiter's plans (otherwise the request is logged and
// answered 503). It takes precedence over API keys and the client address. Call it in
// the application's authentication middleware, before the Limiter's
// handlers.
func WithPrincipal(ctx context.Context, name, plan string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal{name: name, plan: plan})
}

// PrincipalFrom returns what WithPrincipal stored in ctx.
func PrincipalFrom(ctx context.Context) (name, plan string, ok bool) {
	p, ok := ctx.Value(principalKey{}).(principal)
	return p.name, p.plan, ok
}

// HashAPIKey returns the lowercase hex SHA-256 of an API key: the only form
// of a key that appears in bucket keys and logs.
func HashAPIKey(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:])
}

// HashKey names a bucket key (Identity.Key) in logs without revealing it:
// the first 16 hex digits of its SHA-256, stable across processes so one
// principal's lines can be followed.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// APIKeyFrom extracts the API key a request presents: the token of an
// "Authorization: Bearer" header, else the X-API-Key header. Other
// Authorization schemes are not API keys and are ignored.
func APIKeyFrom(r *http.Request) (string, bool) {
	// The header map is read with the canonical names directly: Get
	// would canonicalize them again on every request.
	if v := r.Header["Authorization"]; len(v) > 0 && v[0] != "" {
		auth := v[0]
		scheme, token, ok := strings.Cut(auth, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			if token = strings.TrimSpace(token); token != "" {
				return token, true
			}
		}
	}
	if v := r.Header[canonicalAPIKey]; len(v) > 0 {
		if k := strings.TrimSpace(v[0]); k != "" {
			return k, true
		}
	}
	return "", false
}

var canonicalAPIKey = http.CanonicalHeaderKey(HeaderAPIKey)

// ChainConfig configures the default chain NewChain builds.
type ChainConfig struct {
	// Keys resolves API keys. Nil: every presented key is unknown.
	Keys KeyLookup
	// AnonymousPlan is the plan of requests without a principal or an API
	// key, which are keyed by client address.
	AnonymousPlan string
	// TrustedProxies lists CIDRs (or single addresses) of reverse proxies
	// whose forwarding header is believed. Empty: the peer address is the
	// client, whatever the headers say.
	TrustedProxies []string
	// ProxyHeader names the forwarding header trusted proxies set:
	// "X-Forwarded-For" (default) or "Forwarded". Only one is read.
	ProxyHeader string
}

// NewChain returns the default Identifier: a principal the application put
// in the request's context (WithPrincipal), else an API key (Authorization:
// Bearer, else X-API-Key) resolved through cfg.Keys, else the client
// address on cfg.AnonymousPlan, believing forwarding headers only from
// cfg.TrustedProxies.
func NewChain(cfg ChainConfig) (Identifier, error) {
	trusted, err := parseTrustedProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	ph := cfg.ProxyHeader
	if ph == "" {
		ph = DefaultProxyHeader
	}
	if !strings.EqualFold(ph, DefaultProxyHeader) && !strings.EqualFold(ph, forwardedHeader) {
		return nil, fmt.Errorf("%w: proxy header %q is neither %q nor %q", ErrInvalidConfig, ph, DefaultProxyHeader, forwardedHeader)
	}
	return &defaultIdentifier{
		keys:          cfg.Keys,
		anonymousPlan: cfg.AnonymousPlan,
		proxies:       &proxyResolver{trusted: trusted, forwarded: strings.EqualFold(ph, forwardedHeader)},
	}, nil
}

// NewAddressKey returns the function that keys a request by its client
// address exactly as the default chain keys anonymous clients ("ip:<addr>",
// IPv6 grouped by /64), believing forwarding headers only from cfg's
// TrustedProxies and ProxyHeader (the other fields are ignored). Limits kept
// per client address whoever the principal is (a per-field limit "by: ip")
// use it.
func NewAddressKey(cfg ChainConfig) (func(*http.Request) string, error) {
	id, err := NewChain(ChainConfig{TrustedProxies: cfg.TrustedProxies, ProxyHeader: cfg.ProxyHeader})
	if err != nil {
		return nil, err
	}
	proxies := id.(*defaultIdentifier).proxies
	return func(r *http.Request) string { return addressKey(proxies.clientIP(r)) }, nil
}

// defaultIdentifier is the chain NewChain describes.
type defaultIdentifier struct {
	keys          KeyLookup
	anonymousPlan string
	proxies       *proxyResolver
}

func (d *defaultIdentifier) Identify(r *http.Request) (Identity, error) {
	if name, plan, ok := PrincipalFrom(r.Context()); ok {
		if name == "" {
			return Identity{}, errors.New("identity: WithPrincipal with an empty principal")
		}
		return Identity{Key: "user:" + name, Plan: plan}, nil
	}
	if apiKey, ok := APIKeyFrom(r); ok {
		if d.keys == nil {
			return Identity{}, ErrUnknownAPIKey
		}
		name, plan, err := d.keys.LookupAPIKey(r.Context(), apiKey)
		if err != nil {
			if errors.Is(err, ErrUnknownAPIKey) {
				return Identity{}, ErrUnknownAPIKey
			}
			return Identity{}, fmt.Errorf("identity: API key lookup: %w", err)
		}
		if name == "" {
			return Identity{Key: "key:" + HashAPIKey(apiKey), Plan: plan}, nil
		}
		return Identity{Key: "user:" + name, Plan: plan}, nil
	}
	return Identity{Key: addressKey(d.proxies.clientIP(r)), Plan: d.anonymousPlan}, nil
}

// addressKey is the bucket identity of an anonymous client: "ip:" and its
// address, built in one allocation (it is on every anonymous request).
// IPv6 clients are grouped by /64: a single subscriber usually holds a
// whole /64 and could otherwise mint a fresh budget per address.
func addressKey(a netip.Addr) string {
	var buf [64]byte // "ip:" and the longest /64 prefix fit
	b := append(buf[:0], "ip:"...)
	switch {
	case !a.IsValid():
		b = append(b, "unknown"...)
	case a.Is6():
		p, _ := a.Prefix(64)
		b = p.AppendTo(b)
	default:
		b = a.AppendTo(b)
	}
	return string(b)
}

// proxyResolver finds the client address behind trusted reverse proxies.
type proxyResolver struct {
	trusted   []netip.Prefix
	forwarded bool // read Forwarded (RFC 7239) instead of X-Forwarded-For
}

func parseTrustedProxies(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		c = strings.TrimSpace(c)
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(c)
		if err != nil {
			return nil, fmt.Errorf("%w: trusted proxy %q is neither a CIDR nor an IP address", ErrInvalidConfig, c)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func (p *proxyResolver) isTrusted(a netip.Addr) bool {
	for _, pre := range p.trusted {
		if pre.Contains(a) {
			return true
		}
	}
	return false
}

// clientIP returns the peer address, or, when the peer is a trusted proxy,
// the nearest untrusted address of the forwarding chain, walked right to
// left (each proxy appends the address it received the request from, so
// only entries right of the last trusted hop were written by someone we
// trust). An unparseable entry ends the walk at the hop that reported it.
func (p *proxyResolver) clientIP(r *http.Request) netip.Addr {
	peer, ok := parseIPv4Port(r.RemoteAddr) // the common case, without netip's general parser
	if !ok {
		peer = parseHostAddr(r.RemoteAddr)
	}
	if !peer.IsValid() || len(p.trusted) == 0 || !p.isTrusted(peer) {
		return peer
	}
	var hops []string
	if p.forwarded {
		hops = forwardedFor(r.Header.Values("Forwarded"))
	} else {
		for _, v := range r.Header.Values("X-Forwarded-For") {
			hops = append(hops, strings.Split(v, ",")...)
		}
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a := parseHostAddr(strings.TrimSpace(hops[i]))
		if !a.IsValid() {
			break
		}
		client = a
		if !p.isTrusted(a) {
			break
		}
	}
	return client
}

// forwardedFor extracts the for= parameters of Forwarded header values, in
// order. Obfuscated identifiers ("_hidden", "unknown") come back as-is and
// fail to parse, which ends the walk.
func forwardedFor(values []string) []string {
	var out []string
	for _, v := range values {
		for elem := range strings.SplitSeq(v, ",") {
			for pair := range strings.SplitSeq(elem, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(k, "for") {
					out = append(out, strings.Trim(val, `"`))
				}
			}
		}
	}
	return out
}

// parseHostAddr parses "ip", "ip:port", "[ipv6]" or "[ipv6]:port".
func parseHostAddr(s string) netip.Addr {
	if a, ok := parseIPv4Port(s); ok {
		return a // the common case, a request's RemoteAddr, without netip's general parser
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap()
	}
	return netip.Addr{}
}

// parseIPv4Port parses "a.b.c.d" or "a.b.c.d:port" in the form netip
// accepts (four decimal fields of at most 255 without leading zeros, a
// port of decimal digits up to 65535). It reports false for anything else,
// valid or not, which parseHostAddr then parses in full.
func parseIPv4Port(s string) (netip.Addr, bool) {
	var ip [4]byte
	i := 0
	for f := range 4 {
		if f > 0 {
			if i >= len(s) || s[i] != '.' {
				return netip.Addr{}, false
			}
			i++
		}
		start, v := i, 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < 3 {
			v = v*10 + int(s[i]-'0')
			i++
		}
		if n := i - start; n == 0 || v > 255 || (n > 1 && s[start] == '0') {
			return netip.Addr{}, false
		}
		ip[f] = byte(v)
	}
	if i < len(s) {
		if s[i] != ':' {
			return netip.Addr{}, false
		}
		i++
		port := s[i:]
		if len(port) == 0 || len(port) > 5 {
			return netip.Addr{}, false
		}
		v := 0
		for j := 0; j < len(port); j++ {
			if port[j] < '0' || port[j] > '9' {
				return netip.Addr{}, false
			}
			v = v*10 + int(port[j]-'0')
		}
		if v > 65535 {
			return netip.Addr{}, false
		}
	}
	return netip.AddrFrom4(ip), true
}
