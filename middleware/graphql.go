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
	"github.com/vektah/gqlparser/v2/ast"
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
	// CodeIntrospectionDisabled: the operation selects __schema or __type
	// and the principal's plan has DisableIntrospection (422).
	CodeIntrospectionDisabled = "INTROSPECTION_DISABLED"
)

// CostExtensionKey is the key of the cost report in a response's
// extensions.
const CostExtensionKey = "cost"

// Every code is a protocol error: should the GraphQL wrapper be missing,
// gqlgen still answers 422 (or 400), never 200.
func init() {
	for _, code := range []string{
		CodeRateLimited, CodeRateLimiterUnavailable, CodeUnknownAPIKey, CodeIntrospectionDisabled,
		CodeRequestTooLarge, CodeInvalidRequest, CodeVariablesTooLarge,
		complexity.CodeMaxTokensExceeded, complexity.CodeMaxSelectionsExceeded,
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
	_ graphql.HandlerExtension          = (*Extension)(nil)
	_ graphql.OperationParameterMutator = (*Extension)(nil)
	_ graphql.OperationContextMutator   = (*Extension)(nil)
	_ graphql.ResponseInterceptor       = (*Extension)(nil)
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

// MutateOperationParameters implements graphql.OperationParameterMutator.
// It runs before gqlgen parses the document: it counts the document's
// tokens and selections in one pass of the lexer and refuses it past
// MaxTokens or MaxSelections, so parsing and validation stay bounded.
func (e *Extension) MutateOperationParameters(ctx context.Context, params *graphql.RawParams) *gqlerror.Error {
	if st, ok := ctx.Value(stateKey{}).(*requestState); ok && st.documentChecked == params.Query && params.Query != "" {
		return nil // the GraphQL wrapper counted this very document
	}
	_, err := complexity.CheckDocument(params.Query, e.l.documentLimits())
	if err == nil {
		return nil
	}
	opCtx := graphql.GetOperationContext(ctx)
	opCtx.Headers = params.Headers // for requestState without the wrapper
	st, gerr := e.requestState(ctx, opCtx)
	if gerr != nil {
		return gerr
	}
	var cerr *complexity.Error
	errors.As(err, &cerr)
	return e.refuseUnpriced(ctx, st, opCtx, cerr.GQLError())
}

// refuseUnpriced charges InvalidCost for an operation refused before it was
// priced and returns ge, or the rate-limit error when the budget cannot
// pay even that.
func (e *Extension) refuseUnpriced(ctx context.Context, st *requestState, opCtx *graphql.OperationContext, ge *gqlerror.Error) *gqlerror.Error {
	res := &opResult{plan: st.plan}
	opCtx.Stats.SetExtension(statsKey, res)
	res.outcome = e.l.chargeInvalid(ctx, st.id, st.plan)
	st.record(res.outcome)
	if res.outcome.verdict != capExceeded {
		return e.l.verdictError(res.outcome, e.l.gql.InvalidCost, st.plan)
	}
	return ge
}

// MutateOperationContext implements graphql.OperationContextMutator. It
// runs once per operation, after validation, before any resolver.
func (e *Extension) MutateOperationContext(ctx context.Context, opCtx *graphql.OperationContext) *gqlerror.Error {
	st, gerr := e.requestState(ctx, opCtx)
	if gerr != nil {
		return gerr
	}
	l := e.l
	if st.get && opCtx.Operation.Operation != ast.Query {
		// gqlgen's GET transport refuses it (406) once this returns:
		// nothing runs, so nothing is charged.
		st.record(outcome{verdict: admitted})
		return nil
	}

	rep, err := e.analyzer.AnalyzeOperation(opCtx.Doc, opCtx.Operation, opCtx.Variables)
	if err != nil {
		var cerr *complexity.Error
		if !errors.As(err, &cerr) {
			// Not a limit: a document validation let through that the
			// analyzer cannot price. Refuse rather than run it unpriced.
			l.log.ErrorContext(ctx, "middleware: cannot price the operation", "err", err)
			ge := gqlerror.Errorf("the operation cannot be priced")
			errcode.Set(ge, errcode.ValidationFailed)
			return e.refuseUnpriced(ctx, st, opCtx, ge)
		}
		ge := cerr.GQLError()
		if cerr.Totals != nil {
			if cost := cerr.Totals.Cost.Points(); cost > 0 {
				ge.Extensions["cost"] = cost
			}
		}
		return e.refuseUnpriced(ctx, st, opCtx, ge)
	}
	if rep.Introspection && st.plan.DisableIntrospection {
		return e.refuseUnpriced(ctx, st, opCtx, codedError(CodeIntrospectionDisabled, 0,
			"introspection is disabled for plan %q", st.plan.name))
	}
	res := &opResult{plan: st.plan, cost: max(rep.Points, l.gql.MinCost)}
	opCtx.Stats.SetExtension(statsKey, res)
	res.outcome = l.spend(ctx, st.id, st.plan, res.cost)
	if res.outcome.verdict == overBudget {
		// It can never run: it pays InvalidCost, as a static cap would.
		if o := l.chargeInvalid(ctx, st.id, st.plan); o.verdict == capExceeded {
			res.outcome = outcome{verdict: overBudget, decision: o.decision, known: o.known}
		} else {
			res.outcome = o
		}
	}
	st.record(res.outcome)

	return l.verdictError(res.outcome, res.cost, st.plan)
}

// verdictError is the GraphQL error of a budget decision on cost, nil when
// it was admitted.
func (l *Limiter) verdictError(o outcome, cost int64, p *plan) *gqlerror.Error {
	switch o.verdict {
	case overBudget:
		return pricedError(complexity.CodeMaxCostExceeded, cost, 0,
			"operation cost %d exceeds the plan's capacity of %d points", cost, p.Burst)
	case rateLimited:
		return pricedError(CodeRateLimited, cost, o.retryAfter,
			"rate limited: the operation costs %d points and %d are available; retry in %s",
			cost, o.decision.Remaining, seconds(o.retryAfter))
	case unavailable:
		return pricedError(CodeRateLimiterUnavailable, cost, o.retryAfter,
			"rate limiter unavailable; retry in %s", seconds(o.retryAfter))
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
			// Parsing or validation failed: nothing was priced, so the
			// request pays InvalidCost (once, whoever settles first).
			if st, gerr := e.requestState(ctx, opCtx); gerr == nil {
				res = &opResult{plan: st.plan, outcome: st.settle(ctx, e.l)}
				if ge := e.l.verdictError(res.outcome, e.l.gql.InvalidCost, st.plan); ge != nil {
					// Out of budget matters more than what was wrong.
					resp.Errors = append(gqlerror.List{ge}, resp.Errors...)
				}
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
	// get: the request came by GET, whose transport refuses mutations
	// after the Extension has run.
	get bool
	// documentChecked is the query the wrapper found within the document
	// bounds, so the Extension need not count it again.
	documentChecked string

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

// settle returns the recorded outcome. If nothing was decided, gqlgen
// refused the request before the Extension priced it (a parse or
// validation error, a malformed request): it pays InvalidCost, and the
// client learns where its budget stands.
func (s *requestState) settle(ctx context.Context, l *Limiter) outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.decided {
		s.outcome, s.decided = l.chargeInvalid(ctx, s.id, s.plan), true
		if s.outcome.verdict == capExceeded {
			s.outcome.verdict = invalid // gqlgen chose the status
		}
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
		return nil, codedError(CodeRateLimiterUnavailable, ra, "rate limiter unavailable; retry in %s", seconds(ra))
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
		st := &requestState{id: id, plan: p, get: r.Method == http.MethodGet}
		body, ref := readBody(r, l.maxBody)
		if ref == nil {
			release, err := l.holdBody(r.Context(), len(body))
			if err != nil {
				// The client left (or the server is shutting down) while the
				// body waited for room.
				ra := l.retryAfter(unavailableRetryAfter)
				writeGraphQLError(w, r, http.StatusServiceUnavailable,
					codedError(CodeRateLimiterUnavailable, ra, "the server is busy; retry in %s", seconds(ra)), ra)
				return
			}
			defer release()
			ref = l.screenGraphQL(r, body, st)
		}
		if ref != nil {
			l.refuseRequest(w, r, st, ref)
			return
		}
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
		codedError(CodeRateLimiterUnavailable, ra, "rate limiter unavailable; retry in %s", seconds(ra)), ra)
}

// refuseRequest answers a request screenGraphQL refused, after charging
// InvalidCost for it: a client whose budget cannot pay gets the 429
// instead.
func (l *Limiter) refuseRequest(w http.ResponseWriter, r *http.Request, st *requestState, ref *refusal) {
	if ref.free {
		writeGraphQLError(w, r, ref.status, ref.gqlErr, 0)
		return
	}
	o := l.chargeInvalid(r.Context(), st.id, st.plan)
	if o.known {
		setBudgetHeaders(w.Header(), st.plan, o.decision, l.clock.Now())
	}
	if ge := l.verdictError(o, l.gql.InvalidCost, st.plan); ge != nil {
		status := http.StatusTooManyRequests
		if o.verdict == unavailable {
			status = http.StatusServiceUnavailable
		}
		writeGraphQLError(w, r, status, ge, o.retryAfter)
		return
	}
	ge := ref.gqlErr
	if ge == nil {
		ge = codedError(ref.code, 0, "%s", ref.message)
	}
	writeGraphQLError(w, r, ref.status, ge, 0)
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
	o := w.st.settle(w.r.Context(), w.l)
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
		complexity.WithMaxAliases(o.MaxAliases),
		complexity.WithMaxRootFields(o.MaxRootFields),
		complexity.WithIntrospectionCost(float64(o.IntrospectionCost)),
		complexity.WithBreakdownLimit(0), // totals only: the explain view is not served
	}
}

func (l *Limiter) documentLimits() complexity.DocumentLimits {
	return complexity.DocumentLimits{MaxTokens: l.gql.MaxTokens, MaxSelections: l.gql.MaxSelections}
}
