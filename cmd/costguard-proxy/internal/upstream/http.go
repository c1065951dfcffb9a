package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// request is the body of a GraphQL over HTTP POST. The variables are
// those gqlgen coerced, the values the limiter priced.
type request struct {
	Query         string         `json:"query"`
	OperationName string         `json:"operationName,omitempty"`
	Variables     map[string]any `json:"variables,omitempty"`
}

// acceptGraphQL asks for the GraphQL over HTTP media type, whose non-2xx
// statuses still carry a GraphQL response, and takes plain JSON from older
// servers.
const acceptGraphQL = "application/graphql-response+json, application/json;q=0.9"

// execute runs a query or mutation on the upstream and returns its
// response; every failure is a response too (unavailable).
func (f *Forwarder) execute(ctx context.Context, opCtx *graphql.OperationContext) *graphql.Response {
	if withheld(ctx, opCtx) {
		return &graphql.Response{Data: json.RawMessage("null")}
	}
	body, err := json.Marshal(request{Query: opCtx.RawQuery, OperationName: opCtx.OperationName, Variables: opCtx.Variables})
	if err != nil {
		return f.unavailable(ctx, "the operation's variables cannot be encoded", fmt.Errorf("%w: %w", ErrNotExecuted, err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(body))
	if err != nil {
		return f.unavailable(ctx, "the request cannot be built", fmt.Errorf("%w: %w", ErrNotExecuted, err))
	}
	req.Header = f.requestHeaders(ctx, opCtx)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", acceptGraphQL)
	// Whether the upstream received the whole request: until it has, it
	// cannot have run the operation.
	var sent atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) { sent.Store(info.Err == nil) },
	}))
	resp, err := f.client.Do(req)
	if err != nil {
		if !sent.Load() {
			err = fmt.Errorf("%w: %w", ErrNotExecuted, err)
		}
		return f.unavailable(ctx, failure(err), err)
	}
	defer resp.Body.Close()
	keepHeaders(ctx, resp.Header)
	raw, err := readBounded(resp.Body, f.maxBytes)
	if err != nil {
		return f.unavailable(ctx, failure(err), err)
	}
	out, err := decodeResponse(raw)
	if err != nil {
		return f.unavailable(ctx, fmt.Sprintf("status %d without a GraphQL response", resp.StatusCode),
			fmt.Errorf("upstream: status %d: %w", resp.StatusCode, err))
	}
	if resp.StatusCode != http.StatusOK {
		setStatus(ctx, resp.StatusCode)
	}
	noteChecked(ctx, out.Data)
	return deliver(ctx, out)
}

// withheld reports whether the operation must not be forwarded because
// the server would not run all its root fields: an extension kept one from
// running (a costguard dry run answers null for every root field but its
// rate-limit field, and charges nothing), or the operation selects
// introspection the server disabled. Forwarding would run on the upstream
// what the limiter did not charge for. Errors the extensions add are in
// the response.
func withheld(ctx context.Context, opCtx *graphql.OperationContext) bool {
	root := opCtx.Operation.Operation
	name := "Query"
	switch root {
	case ast.Mutation:
		name = "Mutation"
	case ast.Subscription:
		name = "Subscription"
	}
	for _, f := range graphql.CollectFields(opCtx, opCtx.Operation.SelectionSet, []string{name}) {
		if opCtx.DisableIntrospection && (f.Name == "__schema" || f.Name == "__type") {
			graphql.AddError(ctx, &gqlerror.Error{Message: "introspection disabled", Path: ast.Path{ast.PathName(f.Alias)}})
			return true
		}
		if opCtx.RootResolverMiddleware == nil {
			continue
		}
		ran := false
		fctx := graphql.WithRootFieldContext(ctx, &graphql.RootFieldContext{Object: name, Field: f})
		opCtx.RootResolverMiddleware(fctx, func(context.Context) graphql.Marshaler {
			ran = true
			return graphql.Null
		})
		if !ran {
			return true
		}
	}
	return false
}

// errTooLarge is a response over Config.MaxResponseBytes.
var errTooLarge = errors.New("upstream: response too large")

// readBounded reads r to its end, or fails with errTooLarge past limit
// bytes, without holding more than limit+1 of them.
func readBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("upstream: reading the response: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: over %d bytes", errTooLarge, limit)
	}
	return b, nil
}

// decodeResponse reads a GraphQL response: a JSON object with data,
// errors or both. data is kept as the upstream wrote it; numbers in errors
// and extensions keep their digits (json.Number).
func decodeResponse(raw []byte) (*graphql.Response, error) {
	data, errs, ext, err := responseMembers(raw)
	if err != nil {
		return nil, err
	}
	if data == nil && errs == nil {
		return nil, errors.New("neither data nor errors")
	}
	resp := &graphql.Response{Data: data}
	if errs != nil && !isNull(errs) {
		if err := decodeNumbers(errs, &resp.Errors); err != nil {
			return nil, fmt.Errorf("errors: %w", err)
		}
	}
	if ext != nil && !isNull(ext) {
		if err := decodeNumbers(ext, &resp.Extensions); err != nil {
			return nil, fmt.Errorf("extensions: %w", err)
		}
	}
	return resp, nil
}

func isNull(b json.RawMessage) bool { return string(b) == "null" }

func decodeNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// deliver hands resp to gqlgen. gqlgen replaces a response's extensions
// with those registered on its context, so the upstream's are registered
// there; the limiter's extensions.cost then replaces an upstream "cost".
func deliver(ctx context.Context, resp *graphql.Response) *graphql.Response {
	for key, value := range resp.Extensions {
		graphql.RegisterExtension(ctx, key, value)
	}
	resp.Extensions = nil
	return resp
}

// unavailable is the response of an operation the upstream did not
// answer: one CodeUnavailable error whose Err is cause (ErrNotExecuted when
// the operation never reached the upstream), and no data, which the client
// reads as data null; the request's status becomes 502. Data is left nil,
// not "null": the limiter prices the data of a response to refund what it
// did not return, and the upstream may have run the whole operation
// (after a timeout, say). reason is for the client: it names no address.
func (f *Forwarder) unavailable(ctx context.Context, reason string, cause error) *graphql.Response {
	setStatus(ctx, http.StatusBadGateway)
	return &graphql.Response{Errors: gqlerror.List{unavailableError(reason, cause)}}
}

func unavailableError(reason string, cause error) *gqlerror.Error {
	return &gqlerror.Error{
		Err:        cause,
		Message:    "upstream unavailable: " + reason,
		Extensions: map[string]any{"code": CodeUnavailable},
	}
}

// failure says in a few words what went wrong with the exchange, without
// the addresses Go's errors carry.
func failure(err error) string {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var netErr net.Error
	switch {
	case errors.Is(err, errTooLarge):
		return "the response is too large"
	case errors.Is(err, errHandshake):
		return "the WebSocket handshake failed"
	case errors.Is(err, context.Canceled):
		return "the request was cancelled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	case errors.As(err, &dnsErr):
		return "the upstream's host name does not resolve"
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return "cannot connect"
	}
	return "the connection failed"
}
