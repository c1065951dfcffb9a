// Package upstream runs GraphQL operations on another server: its
// ExecutableSchema forwards each operation gqlgen validated to the upstream,
// so a costguard limiter in front of gqlgen prices, charges and settles
// operations that some other GraphQL server executes.
//
// Queries and mutations go to the upstream as GraphQL over HTTP POST;
// subscriptions open one graphql-transport-ws WebSocket each. The
// upstream's data is kept byte for byte (the limiter reads the actual cost
// from it), its errors and extensions pass through, and Capture makes the
// client's response carry the upstream's HTTP status.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/middleware"
)

// Defaults of Config.
const (
	// DefaultMaxResponseBytes bounds an upstream response body and each
	// message on a subscription's socket.
	DefaultMaxResponseBytes = 16 << 20
	// DefaultTimeout bounds a whole query or mutation, the response body
	// included, when Config.Client is nil.
	DefaultTimeout = 30 * time.Second
	// DefaultHandshakeTimeout bounds a subscription's WebSocket handshake
	// and the wait for the upstream's connection_ack.
	DefaultHandshakeTimeout = 10 * time.Second
)

// DefaultForwardHeaders are the client request headers sent on to the
// upstream when Config.ForwardHeaders is nil: the credentials the upstream
// authenticates its users by. Identity headers the proxy reads itself
// (X-API-Key, X-Forwarded-For, Forwarded) are not among them.
func DefaultForwardHeaders() []string { return []string{"Authorization", "Cookie"} }

// CodeUnavailable is the extensions.code of the error answered when the
// upstream cannot be reached or answers something that is not a GraphQL
// response.
const CodeUnavailable = "UPSTREAM_UNAVAILABLE"

// ErrNotExecuted is wrapped by the Err of a CodeUnavailable error when the
// operation never reached the upstream whole (the connection failed before
// the request was written), so the upstream cannot have run it: it is the
// limiter's middleware.ErrNotExecuted, and the operation's price goes back
// but InvalidCost. A timeout or a bad answer does not wrap it: the
// upstream may have run the operation, whose price stands.
var ErrNotExecuted = middleware.ErrNotExecuted

// ErrInvalidConfig is wrapped by the errors of New.
var ErrInvalidConfig = errors.New("upstream: invalid config")

// Config is what New needs. Zero values take the documented defaults.
type Config struct {
	// Schema is the upstream's schema (LoadSDL). Required. Operations are
	// validated and priced against it before they are forwarded.
	Schema *ast.Schema
	// URL is the upstream's GraphQL endpoint, http or https. Required.
	URL string
	// WebSocketURL is where subscriptions go, ws or wss; default: URL with
	// the scheme ws (for http) or wss (for https).
	WebSocketURL string
	// Client sends queries and mutations. Default: DefaultTimeout for the
	// whole exchange and redirects not followed (a redirect is not a
	// GraphQL response).
	Client *http.Client
	// MaxResponseBytes bounds an upstream response body and each socket
	// message; default DefaultMaxResponseBytes. A larger answer is a
	// CodeUnavailable error.
	MaxResponseBytes int64
	// HandshakeTimeout bounds a subscription's dial, WebSocket handshake
	// and connection_ack; default DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// ForwardHeaders names the client request headers sent on to the
	// upstream (over HTTP, and on a subscription's handshake). nil:
	// DefaultForwardHeaders; an empty, non-nil list forwards none. Names
	// the forwarder sets itself or that belong to one connection
	// (Content-Type, Accept, Host, Connection, Upgrade, …) are refused.
	// The entries of a WebSocket client's connection_init payload whose
	// keys are listed here (case-insensitively) go into the upstream
	// socket's connection_init payload.
	ForwardHeaders []string
	// Headers, when set, gives headers added to each operation's upstream
	// request, after the forwarded ones (it replaces a forwarded header of
	// the same name): the principal the proxy identified, say. ctx is the
	// operation's. Reserved names (see ForwardHeaders) are not sent.
	Headers func(ctx context.Context) http.Header
}

// Forwarder sends operations to one upstream. It is safe for concurrent
// use and owns no goroutine between operations.
type Forwarder struct {
	schema     *ast.Schema
	url        string
	wsURL      string
	client     *http.Client
	maxBytes   int64
	handshake  time.Duration
	forward    []string        // canonical header names
	forwardKey map[string]bool // the lower-case names, for init payloads
	headers    func(context.Context) http.Header
}

// New validates cfg and returns its Forwarder.
func New(cfg Config) (*Forwarder, error) {
	if cfg.Schema == nil {
		return nil, fmt.Errorf("%w: Schema is required", ErrInvalidConfig)
	}
	if cfg.Schema.Query == nil {
		return nil, fmt.Errorf("%w: the schema has no query type", ErrInvalidConfig)
	}
	u, err := parseURL(cfg.URL, "http", "https")
	if err != nil {
		return nil, fmt.Errorf("%w: URL: %w", ErrInvalidConfig, err)
	}
	wsURL := cfg.WebSocketURL
	if wsURL == "" {
		ws := *u
		ws.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
		wsURL = ws.String()
	} else if _, err := parseURL(wsURL, "ws", "wss"); err != nil {
		return nil, fmt.Errorf("%w: WebSocketURL: %w", ErrInvalidConfig, err)
	}
	if cfg.MaxResponseBytes < 0 || cfg.HandshakeTimeout < 0 {
		return nil, fmt.Errorf("%w: MaxResponseBytes and HandshakeTimeout must not be negative", ErrInvalidConfig)
	}
	f := &Forwarder{
		schema:     cfg.Schema,
		url:        u.String(),
		wsURL:      wsURL,
		client:     cfg.Client,
		maxBytes:   cfg.MaxResponseBytes,
		handshake:  cfg.HandshakeTimeout,
		forwardKey: map[string]bool{},
		headers:    cfg.Headers,
	}
	if f.client == nil {
		f.client = defaultClient()
	}
	if f.maxBytes == 0 {
		f.maxBytes = DefaultMaxResponseBytes
	}
	if f.handshake == 0 {
		f.handshake = DefaultHandshakeTimeout
	}
	names := cfg.ForwardHeaders
	if names == nil {
		names = DefaultForwardHeaders()
	}
	for _, name := range names {
		canonical := textproto.CanonicalMIMEHeaderKey(name)
		if name == "" || reserved(canonical) {
			return nil, fmt.Errorf("%w: ForwardHeaders: %q cannot be forwarded", ErrInvalidConfig, name)
		}
		f.forward = append(f.forward, canonical)
		f.forwardKey[strings.ToLower(canonical)] = true
	}
	return f, nil
}

func parseURL(raw string, schemes ...string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Host == "" || (u.Scheme != schemes[0] && u.Scheme != schemes[1]) {
		return nil, fmt.Errorf("%q is not an absolute %s or %s URL", raw, schemes[0], schemes[1])
	}
	return u, nil
}

// defaultClient is Config.Client's default: NewClient(DefaultTimeout).
func defaultClient() *http.Client { return NewClient(DefaultTimeout) }

// NewClient is a client for the upstream that bounds every phase, so that
// a dead upstream fails an operation within timeout rather than holding
// the client's request, keeps connections to it open for the requests in
// flight at once, and follows no redirect.
func NewClient(timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.ResponseHeaderTimeout = timeout
	t.MaxIdleConnsPerHost = 64 // every request goes to one host: Go's 2 would dial anew under load
	return &http.Client{
		Transport: t,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// reservedHeaders are set by the forwarder or the HTTP client, or belong
// to one connection: never copied from a client or Config.Headers.
var reservedHeaders = map[string]bool{
	"Accept": true, "Accept-Encoding": true, "Connection": true, "Content-Length": true,
	"Content-Type": true, "Host": true, "Keep-Alive": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

func reserved(canonical string) bool {
	return reservedHeaders[canonical] || strings.HasPrefix(canonical, "Sec-")
}

// ExecutableSchema returns the schema gqlgen serves: Schema is the
// upstream's, Complexity leaves pricing to the limiter, and Exec forwards.
func (f *Forwarder) ExecutableSchema() graphql.ExecutableSchema { return executable{f} }

type executable struct{ f *Forwarder }

var _ graphql.ExecutableSchema = executable{}

func (e executable) Schema() *ast.Schema { return e.f.schema }

func (executable) Complexity(context.Context, string, string, int, map[string]any) (int, bool) {
	return 0, false
}

// Exec returns the operation's responses. Nothing is sent before the
// first call of the handler, which runs inside gqlgen's response
// interceptors as generated resolvers do.
func (e executable) Exec(ctx context.Context) graphql.ResponseHandler {
	opCtx := graphql.GetOperationContext(ctx)
	if opCtx.Operation != nil && opCtx.Operation.Operation == ast.Subscription {
		return e.f.subscribe(opCtx)
	}
	done := false
	return func(ctx context.Context) *graphql.Response {
		if done {
			return nil
		}
		done = true
		return e.f.execute(ctx, opCtx)
	}
}

// requestHeaders are the headers of the operation's upstream request: the
// allowlisted client headers, then Config.Headers.
func (f *Forwarder) requestHeaders(ctx context.Context, opCtx *graphql.OperationContext) http.Header {
	h := make(http.Header, len(f.forward)+2)
	for _, name := range f.forward {
		if vs := opCtx.Headers.Values(name); len(vs) > 0 {
			h[name] = append([]string(nil), vs...)
		}
	}
	if f.headers != nil {
		for name, vs := range f.headers(ctx) {
			canonical := textproto.CanonicalMIMEHeaderKey(name)
			if !reserved(canonical) {
				h[canonical] = append([]string(nil), vs...)
			}
		}
	}
	return h
}
