package middleware

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/costguard/costguard/complexity"
)

// GraphQL error codes (errors[].extensions.code) the middleware emits
// besides the static-limit codes of package complexity. Their HTTP statuses
// are pinned by tests: RATE_LIMITED 429, RATE_LIMITER_UNAVAILABLE 503,
// UNKNOWN_API_KEY 401, the static codes (MAX_COST_EXCEEDED included) 422, or
// 400 when the response is application/graphql-response+json.
const (
	CodeRateLimited            = "RATE_LIMITED"
	CodeRateLimiterUnavailable = "RATE_LIMITER_UNAVAILABLE"
	CodeUnknownAPIKey          = "UNKNOWN_API_KEY"
)

// CostExtensionKey is the key of the cost report in a response's
// extensions.
const CostExtensionKey = "cost"

// Every code is a protocol error: should the GraphQL wrapper be missing,
// gqlgen still answers 422 (or 400), never 200.
func init() {
	for _, code := range []string{
		CodeRateLimited, CodeRateLimiterUnavailable, CodeUnknownAPIKey,
		complexity.CodeMaxDepthExceeded, complexity.CodeMaxBreadthExceeded, complexity.CodeMaxNodesExceeded,
		complexity.CodeMaxCostExceeded, complexity.CodeSlicingArgumentRequired,
		complexity.CodeMaxAliasesExceeded, complexity.CodeMaxRootFieldsExceeded, complexity.CodeInvalidArgumentValue,
	} {
		errcode.RegisterErrorType(code, errcode.KindProtocol)
	}
}

// Cost is extensions.cost, in Shopify's shape.
type Cost struct {
	// RequestedQueryCost is the static price of the operation (0 when the
	// document could not be priced: it failed to parse or validate).
	RequestedQueryCost int64 `json:"requestedQueryCost"`
	// ActualQueryCost stays null until actual-cost accounting exists.
	ActualQueryCost *int64 `json:"actualQueryCost"`
	// ThrottleStatus is the bucket after this operation's debit.
	ThrottleStatus ThrottleStatus `json:"throttleStatus"`
}

// ThrottleStatus describes the principal's bucket.
type ThrottleStatus struct {
	// MaximumAvailable is the plan's burst.
	MaximumAvailable int64 `json:"maximumAvailable"`
	// CurrentlyAvailable is the whole points left; null when the store
	// could not be read.
	CurrentlyAvailable *int64 `json:"currentlyAvailable"`
	// RestoreRate is in points per second.
	RestoreRate float64 `json:"restoreRate"`
}

// Extension is the gqlgen handler extension: after validation and before
// any resolver it prices the operation, enforces the static caps and debits
// the cost; on every response it adds extensions.cost. Get one from
// Limiter.Extension and pair it with Limiter.GraphQL.
type Extension struct {
	l        *Limiter
	analyzer *complexity.Analyzer // set by Validate
}

var (
	_ graphql.HandlerExtension        = (*Extension)(nil)
	_ graphql.OperationContextMutator = (*Extension)(nil)
	_ graphql.ResponseInterceptor     = (*Extension)(nil)
)

// Extension returns a new gqlgen extension drawing on l's budgets. Add it
// with (*handler.Server).Use; each server needs its own.
func (l *Limiter) Extension() *Extension { return &Extension{l: l} }

// ExtensionName implements graphql.HandlerExtension.
func (e *Extension) ExtensionName() string { return "CostGuard" }

// Validate implements graphql.HandlerExtension: it prepares the pricing of
// the server's schema.
func (e *Extension) Validate(schema graphql.ExecutableSchema) error {
	a, err := complexity.New(schema.Schema(), e.l.complexityOptions()...)
	if err != nil {
		return fmt.Errorf("middleware: %w", err)
	}
	e.analyzer = a
	return nil
}

// Where an operation's result, and without the wrapper its requestState,
// live in its OperationContext.
const (
	statsKey      = "costguard"
	stateStatsKey = "costguard.request"
)

// opResult is what became of one operation.
type opResult struct {
	plan    *plan
	cost    int64
	outcome outcome
}

// MutateOperationContext implements graphql.OperationContextMutator. It
// runs once per operation, after validation, before any resolver.
func (e *Extension) MutateOperationContext(ctx context.Context, opCtx *graphql.OperationContext) *gqlerror.Error {
	st, gerr := e.requestState(ctx, opCtx)
	if gerr != nil {
		return gerr
	}
	l := e.l
	res := &opResult{plan: st.plan}
	opCtx.Stats.SetExtension(statsKey, res)

	rep, err := e.analyzer.AnalyzeOperation(opCtx.Doc, opCtx.Operation, opCtx.Variables)
	if err != nil {
		// A static cap: refused before any debit; the bucket is only read
		// for the headers.
		res.outcome = l.peek(ctx, st.id, st.plan, capExceeded)
		st.record(res.outcome)
		var cerr *complexity.Error
		if !errors.As(err, &cerr) {
			// Not a limit: a document validation let through that the
			// analyzer cannot price. Refuse rather than run it unpriced.
			l.log.ErrorContext(ctx, "middleware: cannot price the operation", "err", err)
			ge := gqlerror.Errorf("the operation cannot be priced")
			errcode.Set(ge, errcode.ValidationFailed)
			return ge
		}
		if cerr.Totals != nil {
			res.cost = cerr.Totals.Cost.Points()
		}
		ge := cerr.GQLError()
		if res.cost > 0 {
			ge.Extensions["cost"] = res.cost
		}
		return ge
	}
	res.cost = rep.Points
	res.outcome = l.spend(ctx, st.id, st.plan, res.cost)
	st.record(res.outcome)

	switch res.outcome.verdict {
	case overBudget:
		return pricedError(complexity.CodeMaxCostExceeded, res.cost, 0,
			"operation cost %d exceeds the plan's capacity of %d points", res.cost, st.plan.Burst)
	case rateLimited:
		return pricedError(CodeRateLimited, res.cost, res.outcome.retryAfter,
			"rate limited: the operation costs %d points and %d are available; retry in %d seconds",
			res.cost, res.outcome.decision.Remaining, res.outcome.retryAfter)
	case unavailable:
		return pricedError(CodeRateLimiterUnavailable, res.cost, res.outcome.retryAfter,
			"rate limiter unavailable; retry in %d seconds", res.outcome.retryAfter)
	}
	return nil
}

// InterceptResponse implements graphql.ResponseInterceptor: it adds
// extensions.cost to every response.
func (e *Extension) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	resp := next(ctx)
	if resp == nil {
		return nil
	}
	var res *opResult
	if graphql.HasOperationContext(ctx) {
		opCtx := graphql.GetOperationContext(ctx)
		res, _ = opCtx.Stats.GetExtension(statsKey).(*opResult)
		if res == nil {
			// Parsing or validation failed: nothing was priced or spent,
			// but the client still learns where its budget stands.
			if st, gerr := e.requestState(ctx, opCtx); gerr == nil {
				res = &opResult{plan: st.plan, outcome: st.peekOnce(ctx, e.l)}
			}
		}
	}
	if res == nil {
		return resp
	}
	if resp.Extensions == nil {
		resp.Extensions = make(map[string]any, 1)
	}
	resp.Extensions[CostExtensionKey] = res.costReport()
	return resp
}

func (r *opResult) costReport() Cost {
	c := Cost{
		RequestedQueryCost: r.cost,
		ThrottleStatus: ThrottleStatus{
			MaximumAvailable: r.plan.Burst,
			RestoreRate:      r.plan.restoreRate,
		},
	}
	if r.outcome.known {
		left := max(r.outcome.decision.Remaining, 0)
		c.ThrottleStatus.CurrentlyAvailable = &left
	}
	return c
}

// codedError builds a GraphQL error with extensions code and, when
// positive, retryAfterSeconds.
func codedError(code string, retryAfter int64, format string, args ...any) *gqlerror.Error {
	ge := gqlerror.Errorf(format, args...)
	ge.Extensions = map[string]any{"code": code}
	if retryAfter > 0 {
		ge.Extensions["retryAfterSeconds"] = retryAfter
	}
	return ge
}

// pricedError is codedError for an operation whose cost is known.
func pricedError(code string, cost, retryAfter int64, format string, args ...any) *gqlerror.Error {
	ge := codedError(code, retryAfter, format, args...)
	ge.Extensions["cost"] = cost
	return ge
}

// requestState is the identity and decision of one HTTP request, shared by
// the GraphQL wrapper (which creates it) and the Extension (which fills it).
type requestState struct {
	id   Identity
	plan *plan

	mu      sync.Mutex
	decided bool
	outcome outcome
}

type stateKey struct{}

func (s *requestState) record(o outcome) {
	s.mu.Lock()
	s.outcome, s.decided = o, true
	s.mu.Unlock()
}

// peekOnce returns the recorded outcome, reading the bucket (without
// spending) if nothing was decided: a request gqlgen refused before pricing
// still gets the headers.
func (s *requestState) peekOnce(ctx context.Context, l *Limiter) outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.decided {
		s.outcome, s.decided = l.peek(ctx, s.id, s.plan, admitted), true
	}
	return s.outcome
}

// requestState returns the state the GraphQL wrapper put in ctx. Without
// the wrapper, it identifies the operation from what gqlgen kept of the
// request (the Identifier sees a synthetic request carrying only the
// headers and the context): a WithPrincipal principal or an API key still
// work; the client address is unknown, so anonymous operations share one
// "ip:unknown" bucket.
func (e *Extension) requestState(ctx context.Context, opCtx *graphql.OperationContext) (*requestState, *gqlerror.Error) {
	if st, ok := ctx.Value(stateKey{}).(*requestState); ok {
		return st, nil
	}
	if st, ok := opCtx.Stats.GetExtension(stateStatsKey).(*requestState); ok {
		return st, nil
	}
	r := (&http.Request{Method: http.MethodPost, URL: &url.URL{}, Header: opCtx.Headers}).WithContext(ctx)
	if r.Header == nil {
		r.Header = http.Header{}
	}
	id, p, err := e.l.identify(r)
	if err != nil {
		if errors.Is(err, ErrUnknownAPIKey) {
			return nil, codedError(CodeUnknownAPIKey, 0, "unknown API key")
		}
		e.l.log.ErrorContext(ctx, "middleware: cannot identify the operation", "err", err)
		ra := e.l.retryAfter(unavailableRetryAfter)
		return nil, codedError(CodeRateLimiterUnavailable, ra, "rate limiter unavailable; retry in %d seconds", ra)
	}
	st := &requestState{id: id, plan: p}
	opCtx.Stats.SetExtension(stateStatsKey, st)
	return st, nil
}

// GraphQL wraps a gqlgen handler (whose server uses this Limiter's
// Extension). It identifies the caller before gqlgen runs (401
// UNKNOWN_API_KEY for an unknown key), then applies the Extension's
// decision to the response: 429 for RATE_LIMITED, 503 for
// RATE_LIMITER_UNAVAILABLE, 422 for static-limit codes (400 when the
// response is application/graphql-response+json), the rate-limit headers,
// and Retry-After on 429 and 503.
func (l *Limiter) GraphQL(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, p, err := l.identify(r)
		if err != nil {
			l.graphQLIdentifyFailed(w, r, err)
			return
		}
		st := &requestState{id: id, plan: p}
		gw := &graphQLWriter{ResponseWriter: w, l: l, r: r, st: st}
		h.ServeHTTP(gw, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
	})
}

func (l *Limiter) graphQLIdentifyFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ErrUnknownAPIKey) {
		writeGraphQLError(w, r, http.StatusUnauthorized, codedError(CodeUnknownAPIKey, 0, "unknown API key"), 0)
		return
	}
	l.log.ErrorContext(r.Context(), "middleware: cannot identify the request; answering 503", "err", err)
	ra := l.retryAfter(unavailableRetryAfter)
	writeGraphQLError(w, r, http.StatusServiceUnavailable,
		codedError(CodeRateLimiterUnavailable, ra, "rate limiter unavailable; retry in %d seconds", ra), ra)
}

// writeGraphQLError answers with a GraphQL response holding one error.
func writeGraphQLError(w http.ResponseWriter, r *http.Request, status int, ge *gqlerror.Error, retryAfter int64) {
	// No "data" member: the request never reached execution.
	body, _ := json.Marshal(struct {
		Errors gqlerror.List `json:"errors"`
	}{gqlerror.List{ge}})
	h := w.Header()
	ct := jsonMIME
	if acceptsGraphQLResponse(r) {
		ct = graphQLResponseMIME
	}
	h.Set("Content-Type", ct)
	if retryAfter > 0 {
		h.Set(HeaderRetryAfter, strconv.FormatInt(retryAfter, 10))
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// acceptsGraphQLResponse reports whether the client lists
// application/graphql-response+json in Accept.
func acceptsGraphQLResponse(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == graphQLResponseMIME {
				return true
			}
		}
	}
	return false
}

// graphQLWriter applies the Extension's decision when gqlgen first writes.
type graphQLWriter struct {
	http.ResponseWriter
	l       *Limiter
	r       *http.Request
	st      *requestState
	written bool
}

// WriteHeader sets the status and headers the decision calls for.
func (w *graphQLWriter) WriteHeader(status int) {
	if w.written || (status >= 100 && status < 200) {
		w.ResponseWriter.WriteHeader(status)
		return
	}
	w.written = true
	w.ResponseWriter.WriteHeader(w.apply(status))
}

func (w *graphQLWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush supports streaming transports (SSE, multipart).
func (w *graphQLWriter) Flush() {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController and websocket upgrades reach the
// underlying writer.
func (w *graphQLWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// apply writes the rate-limit headers and returns the status to send.
func (w *graphQLWriter) apply(status int) int {
	o := w.st.peekOnce(w.r.Context(), w.l)
	h := w.Header()
	if o.known {
		setBudgetHeaders(h, w.st.plan, o.decision, w.l.clock.Now())
	}
	switch o.verdict {
	case rateLimited:
		h.Set(HeaderRetryAfter, strconv.FormatInt(o.retryAfter, 10))
		return http.StatusTooManyRequests
	case unavailable:
		h.Set(HeaderRetryAfter, strconv.FormatInt(o.retryAfter, 10))
		return http.StatusServiceUnavailable
	case overBudget, capExceeded:
		if isGraphQLResponse(h.Get("Content-Type"), w.r) {
			return http.StatusBadRequest
		}
		return http.StatusUnprocessableEntity
	}
	return status
}

// isGraphQLResponse reports whether the response is (or, before gqlgen set
// a Content-Type, will be) application/graphql-response+json, which the
// GraphQL-over-HTTP spec answers with 400 rather than 422.
func isGraphQLResponse(contentType string, r *http.Request) bool {
	if contentType != "" {
		mt, _, err := mime.ParseMediaType(contentType)
		return err == nil && mt == graphQLResponseMIME
	}
	return acceptsGraphQLResponse(r)
}

// complexityOptions maps the GraphQL options onto the analyzer's.
func (l *Limiter) complexityOptions() []complexity.Option {
	o := l.gql
	return []complexity.Option{
		complexity.WithMaxDepth(o.MaxDepth),
		complexity.WithMaxBreadth(o.MaxBreadth),
		complexity.WithMaxNodes(o.MaxNodes),
		complexity.WithMaxCost(float64(o.MaxCost)), // 0: no cap but the plan's burst
		complexity.WithDefaultListSize(o.DefaultListSize),
		complexity.WithMutationBaseCost(float64(o.MutationCost)),
		complexity.WithBreakdownLimit(0), // totals only: the explain view is not served
	}
}
