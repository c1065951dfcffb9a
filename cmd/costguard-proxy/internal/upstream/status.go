package upstream

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
)

// exchange is what one client request learns from the upstream.
type exchange struct {
	status atomic.Int32 // the upstream's status, when not 200; 0 until known

	mu     sync.Mutex
	header http.Header // the upstream's RelayedHeaders, to answer with
}

// RelayedHeaders are the upstream's response headers the client's answer
// carries: the cookies the upstream sets (Set-Cookie) and the challenge of
// its 401 (WWW-Authenticate). The rest of the upstream's headers are its
// own business: the answer's are the limiter's and gqlgen's.
var RelayedHeaders = []string{"Set-Cookie", "WWW-Authenticate"}

// keepHeaders records the RelayedHeaders of an upstream response for the
// request of ctx.
func keepHeaders(ctx context.Context, h http.Header) {
	x, ok := ctx.Value(exchangeKey{}).(*exchange)
	if !ok {
		return
	}
	for _, name := range RelayedHeaders {
		if v := h.Values(name); len(v) > 0 {
			x.mu.Lock()
			if x.header == nil {
				x.header = make(http.Header, len(RelayedHeaders))
			}
			x.header[name] = append(x.header[name], v...)
			x.mu.Unlock()
		}
	}
}

type exchangeKey struct{}

// Capture lets the response to each request take the upstream's status:
// when an operation of the request was answered with a non-200 status (a
// 401 with a GraphQL body, or the 502 of an unreachable upstream), the 200
// that gqlgen writes becomes that status. Every other status (a limiter's
// 429, gqlgen's 400 or 422) is kept. Install it outside the limiter's
// handler, so the limiter's writer sits inside and its headers stay:
//
//	mux.Handle("/graphql", upstream.Capture(lim.Handler(srv)))
//
// A WebSocket upgrade passes through untouched: a socket has no status
// per operation.
func Capture(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
			next.ServeHTTP(w, r)
			return
		}
		x := &exchange{}
		next.ServeHTTP(&statusWriter{ResponseWriter: w, x: x}, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, x)))
	})
}

// Status returns the HTTP status the upstream answered the request's
// operation with when it was not 200 (502 when the upstream could not be
// reached or did not answer GraphQL), and 0 when it was 200, when no
// operation was forwarded yet, or outside Capture. ctx is the request's or
// an operation's.
func Status(ctx context.Context) int {
	if x, ok := ctx.Value(exchangeKey{}).(*exchange); ok {
		return int(x.status.Load())
	}
	return 0
}

func setStatus(ctx context.Context, status int) {
	if x, ok := ctx.Value(exchangeKey{}).(*exchange); ok {
		x.status.Store(int32(status))
	}
}

// statusWriter turns the first 200 written into the upstream's status.
type statusWriter struct {
	http.ResponseWriter
	x       *exchange
	written bool
}

func (w *statusWriter) WriteHeader(status int) {
	if !w.written && status >= 200 {
		w.written = true
		if upstream := w.x.status.Load(); status == http.StatusOK && upstream != 0 {
			status = int(upstream)
		}
		w.x.mu.Lock()
		for name, v := range w.x.header {
			w.Header()[name] = append(w.Header()[name], v...)
		}
		w.x.mu.Unlock()
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush serves SSE, whose transport needs an http.Flusher.
func (w *statusWriter) Flush() {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
