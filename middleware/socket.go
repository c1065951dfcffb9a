package middleware

import (
	"cmp"
	"context"
	"errors"
	"net/http"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// A WebSocket connection is one HTTP request (the upgrade) carrying many
// operations, each of which must pay as if it came alone. The wrapper
// identifies the upgrade (an unknown key in its headers is answered 401
// before any upgrade) and leaves a connState in the connection's context;
// the extension then gives each operation a requestState of its own and
// decides it in InterceptOperation, the first hook that sees the
// connection_init payload (gqlgen adds it to the context only after the
// operation is parsed and validated), and the last before any resolver.

// connKey is where the wrapper leaves a WebSocket connection's connState.
type connKey struct{}

// connState is what a WebSocket connection's operations share: the upgrade
// request, whose headers and address identify them unless the init
// payload carries credentials the headers lack.
type connState struct {
	r *http.Request
}

// Close codes of the graphql-transport-ws protocol for a connection
// WebsocketInit refuses: a SocketError's Code.
const (
	// closeForbidden: the connection_init payload names an unknown API key.
	closeForbidden = 4403
	// closeInternalError: the principal could not be identified (the
	// KeyLookup failed).
	closeInternalError = 4500
)

// isSocketUpgrade reports whether r asks for a WebSocket: a GET with an
// Upgrade header, with or without a body (which no transport reads).
// gqlgen's Websocket transport takes every request with an Upgrade header;
// of its other transports, those that take a GET refuse one. A request
// with one that is not a GET goes through the ordinary screening (and
// fails the handshake). A body must not make a difference: an upgrade
// decided as one HTTP request would have its operations share one state.
func isSocketUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet && r.Header.Get("Upgrade") != ""
}

// identifyError is the GraphQL error of an identification that failed.
func (e *costExtension) identifyError(ctx context.Context, err error) *gqlerror.Error {
	if errors.Is(err, identity.ErrUnknownAPIKey) {
		return codedError(CodeUnknownAPIKey, 0, "unknown API key")
	}
	e.l.log.ErrorContext(ctx, "middleware: cannot identify the operation", "err", err)
	ra := e.l.engine.RetryAfter(budget.UnavailableRetryAfter)
	return codedError(budget.CodeRateLimiterUnavailable, ra, "rate limiter unavailable; retry in %s", inSeconds(ra))
}

// withInitCredentials returns the upgrade request r with the credentials
// of a connection_init payload as headers, when r carries none of its own
// (browsers cannot set headers on a WebSocket): "Authorization" (or
// "authorization"), "X-API-Key" or "apiKey". It returns r itself when
// there is nothing to add.
func withInitCredentials(r *http.Request, payload transport.InitPayload) *http.Request {
	if len(payload) == 0 || r.Header.Get("Authorization") != "" || r.Header.Get(identity.HeaderAPIKey) != "" {
		return r
	}
	auth := payload.Authorization()
	key := cmp.Or(payload.GetString(identity.HeaderAPIKey), payload.GetString("apiKey"))
	if auth == "" && key == "" {
		return r
	}
	r2 := r.Clone(r.Context())
	if auth != "" {
		r2.Header.Set("Authorization", auth)
	} else {
		r2.Header.Set(identity.HeaderAPIKey, key)
	}
	return r2
}

// reidentify identifies a WebSocket operation again once the init payload
// is known: its credentials, when the upgrade request had none, choose who
// pays.
func (e *costExtension) reidentify(ctx context.Context, st *requestState) *gqlerror.Error {
	base := st.conn.r.WithContext(ctx)
	r := withInitCredentials(base, transport.GetInitPayload(ctx))
	if r == base {
		return nil
	}
	id, p, err := st.set.identify(r)
	if err != nil {
		return e.identifyError(ctx, err)
	}
	st.mu.Lock()
	st.id, st.plan, st.addr = id, p, st.set.clientAddr(r)
	st.mu.Unlock()
	return nil
}

// decideSocket decides a WebSocket operation, which MutateOperationContext
// left undecided: it identifies it by the init payload, then prices and
// debits it as over HTTP. A refusal is returned as the handler of the
// operation's response: gqlgen's WebSocket transport sends it as the
// operation's error message, and the connection stays open.
func (e *costExtension) decideSocket(ctx context.Context, st *requestState, opCtx *graphql.OperationContext) graphql.ResponseHandler {
	gerr := e.reidentify(ctx, st)
	if gerr == nil {
		gerr = e.decide(ctx, st, opCtx)
	}
	if gerr == nil {
		return nil
	}
	st.end(ctx, e.l)
	if addSocketError(ctx, gerr) {
		return func(context.Context) *graphql.Response { return nil }
	}
	return graphql.OneShot(&graphql.Response{Errors: gqlerror.List{gerr}})
}

// addSocketError queues ge as the error message gqlgen's WebSocket
// transport sends when the operation's responses end. It reports false
// when ctx is not that transport's (a transport of the application's own).
func addSocketError(ctx context.Context, ge *gqlerror.Error) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	transport.AddSubscriptionError(ctx, ge)
	return true
}

// A SocketError is the error WebsocketInit returns for a connection it
// refuses: gqlgen sends Message to the client and closes the connection.
// Code is the graphql-transport-ws close code the refusal deserves (4403:
// an unknown API key; 4500: the key lookup failed). gqlgen closes with it
// from v0.17.92 on, through transport.WithWebsocketCloseCode, which older
// releases lack: the core, which builds with those, leaves the code to the
// separate module github.com/costguard/costguard/middleware/wsclose, and
// without it the connection closes with 1000 (normal closure) after the
// message.
type SocketError struct {
	Code    int
	Message string
}

func (e *SocketError) Error() string { return e.Message }

// CloseCode is the close code the refusal deserves.
func (e *SocketError) CloseCode() int { return e.Code }

// WebsocketInit returns an InitFunc for gqlgen's Websocket transport that
// checks the credentials of a connection_init payload when the connection
// opens: an unknown API key closes the connection before any operation
// with a *SocketError of Code 4403, a lookup that fails with Code 4500;
// wsclose.InitFunc around it closes with that code. next, when not nil,
// runs after the check. Without WebsocketInit the connection opens and
// each of its operations is refused UNKNOWN_API_KEY instead:
//
//	srv.AddTransport(transport.Websocket{InitFunc: lim.WebsocketInit(nil)})
func (l *Limiter) WebsocketInit(next transport.WebsocketInitFunc) transport.WebsocketInitFunc {
	return func(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		if cs, ok := ctx.Value(connKey{}).(*connState); ok {
			base := cs.r.WithContext(ctx)
			if r := withInitCredentials(base, payload); r != base {
				if _, _, err := l.current().identify(r); err != nil {
					if errors.Is(err, identity.ErrUnknownAPIKey) {
						return ctx, nil, &SocketError{Code: closeForbidden, Message: "unknown API key"}
					}
					l.log.ErrorContext(ctx, "middleware: cannot identify a WebSocket connection", "err", err)
					return ctx, nil, &SocketError{Code: closeInternalError, Message: "rate limiter unavailable"}
				}
			}
		}
		if next != nil {
			return next(ctx, payload)
		}
		return ctx, nil, nil
	}
}
