package middleware

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/middleware/querycache"
	"github.com/costguard/costguard/middleware/trusteddocs"
)

// GraphQL error codes (errors[].extensions.code) the middleware emits
// besides the static-limit codes of package complexity and the budget's
// (package budget: RATE_LIMITED, QUOTA_EXCEEDED…). Their HTTP statuses are
// pinned by tests: UNKNOWN_API_KEY 401, the static codes (MAX_COST_EXCEEDED
// included) 422, or 400 when the response is
// application/graphql-response+json.
const (
	CodeUnknownAPIKey = "UNKNOWN_API_KEY"
	// CodeIntrospectionDisabled: the operation selects __schema or __type
	// and the principal's plan has DisableIntrospection (422).
	CodeIntrospectionDisabled = "INTROSPECTION_DISABLED"
	// CodeNotInstalled: an operation reached a gqlgen server a Limiter
	// was installed on (Limiter.Handler) without passing the handler
	// Handler returned, so nothing would price it (the server is also
	// served elsewhere): it is refused (422, or 400 when the response is
	// application/graphql-response+json).
	CodeNotInstalled = "COSTGUARD_NOT_INSTALLED"
)

// CostExtensionKey is the key of the cost report in a response's
// extensions.
const CostExtensionKey = "cost"

// Every code is a protocol error, so gqlgen's own status for a refusal is
// 422 (or 400), never 200: the status the wrapper keeps when a decision
// calls for none of its own, and the one an operation that reached the
// server without the wrapper gets (CodeNotInstalled).
func init() {
	for _, code := range []string{
		budget.CodeRateLimited, budget.CodeRateLimiterUnavailable, CodeUnknownAPIKey, CodeIntrospectionDisabled,
		budget.CodeOverloaded, budget.CodeConcurrencyLimited, budget.CodeQuotaExceeded, budget.CodeFieldRateLimited,
		CodeRequestTooLarge, CodeInvalidRequest, CodeVariablesTooLarge, CodeRequestTimeout, CodeSubscriptionsLimited,
		CodeInvalidCostHeader, CodeCostReportDisabled, CodeDocumentNotTrusted, CodeNotInstalled,
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
	// ActualQueryCost is the cost of what the response holds: the same
	// model with each list sized by the items returned (null until the
	// operation has executed).
	ActualQueryCost *int64 `json:"actualQueryCost"`
	// ThrottleStatus is the bucket after this operation's debit (for
	// "GraphQL-Cost: validate" or a dry run, which debit nothing, the
	// bucket as it stands).
	ThrottleStatus ThrottleStatus `json:"throttleStatus"`
	// Fields is the per-field breakdown of RequestedQueryCost, for an
	// admitted operation sent with "GraphQL-Cost: report"; absent
	// otherwise. FieldsTruncated: it stopped at
	// complexity.DefaultBreakdownLimit entries or DefaultBreakdownBytes of
	// paths.
	Fields          []complexity.FieldCost `json:"fields,omitempty"`
	FieldsTruncated bool                   `json:"fieldsTruncated,omitempty"`
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

// costExtension is the gqlgen handler extension Handler adds to a server:
// after validation and before any resolver it prices the operation,
// enforces the static caps and debits the cost; on every response it adds
// extensions.cost. Each server gets its own.
type costExtension struct {
	l      *Limiter
	schema *ast.Schema // set by Validate
	// priced is the analyzer of the settings it was built for; a Reload
	// that changes the GraphQL options makes the next operation build a
	// new one (buildMu keeps that to one at a time).
	priced  atomic.Pointer[boundAnalyzer]
	buildMu sync.Mutex
	ask     extensionAsk // GraphQL-Cost reports and the rate-limit field
}

// boundAnalyzer is an analyzer and the settings whose options it prices
// by, with the compiled plans of the operations it has priced.
type boundAnalyzer struct {
	set   *settings
	a     *complexity.Analyzer
	plans *complexity.PlanCache
	// relaxed prices by the same options with the structural caps lifted,
	// with its own plans, for the requests whose caps are lifted (a plan's
	// RelaxStructuralLimits, a trusted document's): nil when neither a plan
	// nor the trusted documents lift them.
	relaxed      *complexity.Analyzer
	relaxedPlans *complexity.PlanCache
	// uncapped records the lists of what a cap refused and shadow mode
	// let run (recordShadowed); nil unless list sizes are recorded.
	uncapped *complexity.Analyzer
	// trusted are the trusted documents' plans, compiled when it was
	// built (with the structural caps lifted when the settings say so).
	trusted trustedPlans
}

// newBoundAnalyzer binds a to set, with empty plan caches and the plans
// of set's trusted documents on schema.
func newBoundAnalyzer(set *settings, schema *ast.Schema, a *complexity.Analyzer) (*boundAnalyzer, error) {
	relaxed, err := set.relaxedAnalyzer(schema)
	if err != nil {
		return nil, err
	}
	trusted, err := set.trustedPlans(schema, a, relaxed)
	if err != nil {
		return nil, err
	}
	b := &boundAnalyzer{set: set, a: a, plans: a.NewPlanCache(planCacheEntries, planCacheBytes), relaxed: relaxed, trusted: trusted}
	if relaxed != nil {
		b.relaxedPlans = relaxed.NewPlanCache(planCacheEntries, planCacheBytes)
	}
	if set.sizes != nil {
		if b.uncapped, err = complexity.New(schema, set.uncappedOptions()...); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	return b, nil
}

// relaxedAnalyzer is the analyzer of s's options with the structural caps
// lifted, on schema; nil when neither a plan nor the trusted documents
// lift them.
func (s *settings) relaxedAnalyzer(schema *ast.Schema) (*complexity.Analyzer, error) {
	if !s.relaxPlans && (s.trusted == nil || !s.trusted.relax) {
		return nil, nil
	}
	a, err := complexity.New(schema, s.relaxedOptions()...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return a, nil
}

// trustedPlans compiles s's trusted documents on schema, priced by a or,
// when their structural caps are lifted, by relaxed.
func (s *settings) trustedPlans(schema *ast.Schema, a, relaxed *complexity.Analyzer) (trustedPlans, error) {
	if s.trusted == nil {
		return nil, nil
	}
	if s.trusted.relax {
		a = relaxed
	}
	return compileTrustedPlans(schema, a, s.trusted)
}

// analyzerFor is the analyzer of a request whose structural caps are
// lifted (relax) or not.
func (b *boundAnalyzer) analyzerFor(relax bool) *complexity.Analyzer {
	if relax && b.relaxed != nil {
		return b.relaxed
	}
	return b.a
}

// trustedPlan is the compiled plan of operation op of trusted document d,
// nil when d is nil.
func (b *boundAnalyzer) trustedPlan(d *trusteddocs.Document, op *ast.OperationDefinition) *complexity.Plan {
	if d == nil {
		return nil
	}
	return b.trusted[d.Hash][op.Name]
}

// Bounds of the compiled cost plans an extension keeps (one per priced
// operation of a parsed document), as querycache's defaults bound the
// documents: an entry is charged its plan's size and its document's
// estimated size, which it keeps alive.
const (
	planCacheEntries = querycache.DefaultEntries
	planCacheBytes   = querycache.DefaultBytes
)

// price prices op of doc with variables through its compiled plan,
// compiling it on the first request of that parsed document, and returns
// the plan too, to price the response with (settleActual). query is the
// document's text, for the plan cache's charge; relax: the request's
// structural caps are lifted (its plan is compiled by the relaxed
// analyzer, into its own cache).
func (b *boundAnalyzer) price(doc *ast.QueryDocument, op *ast.OperationDefinition, variables map[string]any, query string, relax bool) (*complexity.Report, *complexity.Plan, error) {
	plans := b.plans
	if relax && b.relaxedPlans != nil {
		plans = b.relaxedPlans
	}
	plan, err := plans.GetCharging(doc, op, func() int64 { return querycache.DocumentBytes(query) })
	if err != nil {
		return nil, nil, err
	}
	rep, err := plan.Evaluate(variables)
	return rep, plan, err
}

var (
	_ graphql.HandlerExtension          = (*costExtension)(nil)
	_ graphql.OperationParameterMutator = (*costExtension)(nil)
	_ graphql.OperationContextMutator   = (*costExtension)(nil)
	_ graphql.ResponseInterceptor       = (*costExtension)(nil)
	_ graphql.OperationInterceptor      = (*costExtension)(nil)
	_ graphql.RootFieldInterceptor      = (*costExtension)(nil)
)

// ExtensionName implements graphql.HandlerExtension.
func (e *costExtension) ExtensionName() string { return "CostGuard" }

// Validate implements graphql.HandlerExtension: it prepares the pricing of
// the server's schema.
func (e *costExtension) Validate(schema graphql.ExecutableSchema) error {
	set := e.l.current()
	a, err := complexity.New(schema.Schema(), set.complexityOptions()...)
	if err != nil {
		return fmt.Errorf("middleware: %w", err)
	}
	if err := e.checkRateLimitField(schema.Schema(), set); err != nil {
		return err
	}
	b, err := newBoundAnalyzer(set, schema.Schema(), a)
	if err != nil {
		return fmt.Errorf("middleware: %w", err)
	}
	e.schema = schema.Schema()
	e.priced.Store(b)
	e.l.addSchema(e)
	return nil
}

// CheckSchema reports whether the Limiter's GraphQL options and field
// limits can price schema (a field limit's coordinate the schema lacks is
// an error wrapping ErrInvalidConfig), as adding its extension to a server
// for schema will check, but without gqlgen's panic.
func (l *Limiter) CheckSchema(schema *ast.Schema) error {
	set := l.current()
	if _, err := set.rateLimitFieldOf(schema); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return set.checkSchema(schema)
}

// checkSchema reports whether s's options can price schema.
func (s *settings) checkSchema(schema *ast.Schema) error {
	a, err := complexity.New(schema, s.complexityOptions()...)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	relaxed, err := s.relaxedAnalyzer(schema)
	if err != nil {
		return err
	}
	_, err = s.trustedPlans(schema, a, relaxed) // every trusted document parses, validates and compiles
	return err
}

// addSchema remembers e, an extension of l on a server, so that Reload can
// check new options against its schema and prepare it. Extensions are held
// weakly: a server dropped (a schema reloaded, say) no longer constrains
// what Reload accepts.
func (l *Limiter) addSchema(e *costExtension) {
	l.schemasMu.Lock()
	defer l.schemasMu.Unlock()
	l.exts = slices.DeleteFunc(l.exts, func(p weak.Pointer[costExtension]) bool { return p.Value() == nil })
	l.exts = append(l.exts, weak.Make(e))
}

// extensions are the extensions of l still on a server.
func (l *Limiter) extensions() []*costExtension {
	l.schemasMu.Lock()
	defer l.schemasMu.Unlock()
	exts := make([]*costExtension, 0, len(l.exts))
	for _, p := range l.exts {
		if e := p.Value(); e != nil {
			exts = append(exts, e)
		}
	}
	return exts
}

// prepare builds, for every extension of l still on a server, the
// analyzer of s with its trusted documents' plans, so that the first
// request after a Reload does not compile them. Reload checked s against
// their schemas: it cannot fail.
func (l *Limiter) prepare(s *settings) {
	if s.trusted == nil {
		return // an analyzer alone is cheap to build on first use
	}
	for _, e := range l.extensions() {
		if _, err := e.boundFor(&e.priced, s); err != nil {
			l.log.Error("middleware: cannot compile the trusted documents after a reload", "err", err)
		}
	}
}

// checkSchemas checks s against every schema an extension of l prices.
func (l *Limiter) checkSchemas(s *settings) error {
	var checked []*ast.Schema
	for _, e := range l.extensions() {
		if slices.Contains(checked, e.schema) {
			continue
		}
		checked = append(checked, e.schema)
		if err := s.checkSchema(e.schema); err != nil {
			return err
		}
	}
	return nil
}

// analyzer returns the analyzer pricing st by its settings' GraphQL
// options, with its structural caps lifted when they are (st.relaxed).
func (e *costExtension) analyzer(st *requestState) (*complexity.Analyzer, error) {
	b, err := e.boundFor(&e.priced, st.set)
	if err != nil {
		return nil, err
	}
	return b.analyzerFor(st.plan.RelaxStructuralLimits || st.trustedDoc != nil && st.relaxed()), nil
}

// boundFor returns the analyzer, with its plan cache, that p holds when it
// prices by set's GraphQL options, else builds one and keeps it in p.
func (e *costExtension) boundFor(p *atomic.Pointer[boundAnalyzer], set *settings) (*boundAnalyzer, error) {
	if b := p.Load(); b != nil && (b.set == set || b.set.pricesLike(set)) {
		return b, nil
	}
	e.buildMu.Lock()
	defer e.buildMu.Unlock()
	if b := p.Load(); b != nil && b.set.pricesLike(set) {
		return b, nil
	}
	a, err := complexity.New(e.schema, set.complexityOptions()...)
	if err != nil {
		return nil, err
	}
	b, err := newBoundAnalyzer(set, e.schema, a)
	if err != nil {
		return nil, err
	}
	p.Store(b)
	return b, nil
}

// statsKey is where, without the GraphQL wrapper, an operation's
// requestState lives in its OperationContext (with the wrapper it is in
// the request's context).
const statsKey = "costguard"

// MutateOperationParameters implements graphql.OperationParameterMutator.
// It runs before gqlgen parses the document: it counts the document's
// tokens and selections in one pass of the lexer and refuses it past
// MaxTokens or MaxSelections, so parsing and validation stay bounded.
func (e *costExtension) MutateOperationParameters(ctx context.Context, params *graphql.RawParams) *gqlerror.Error {
	opCtx := graphql.GetOperationContext(ctx)
	opCtx.Headers = params.Headers // what admission reads of an operation on a WebSocket
	st, gerr := e.requestState(ctx, opCtx)
	if gerr != nil || !e.owns(st) {
		return gerr
	}
	if st.documentChecked == params.Query && params.Query != "" {
		return nil // the wrapper counted this very document
	}
	if ref := st.readCostHeader(params.Headers); ref != nil {
		return e.refuseUnpriced(ctx, st, codedError(ref.code, 0, "%s", ref.message), false)
	}
	if st.conn != nil {
		// A WebSocket message: the wrapper never saw it, so its variables
		// and extensions are bounded here, as decoded.
		budget := st.set.newJSONBudget()
		for _, ref := range []*refusal{budget.measureDecoded("variables", params.Variables), budget.measureDecoded("extensions", params.Extensions)} {
			if ref != nil {
				return e.refuseUnpriced(ctx, st, codedError(ref.code, 0, "%s", ref.message), false)
			}
		}
	}
	if t := st.set.trusted; t != nil {
		// A WebSocket operation, a body the wrapper does not read, or a
		// document gqlgen's persisted queries filled in before this hook.
		apq, hasAPQ := persistedHash(params.Extensions)
		tr, ref := t.resolve(params.Query, params.Query != "", "", false, apq, hasAPQ)
		if ref != nil {
			return e.refuseUnpriced(ctx, st, codedError(ref.code, 0, "%s", ref.message), false)
		}
		if tr.inject {
			params.Query = tr.doc.Body
		}
		st.trustedDoc = tr.doc
	}
	if st.trustedDoc != nil && st.documentBoundsLifted() {
		st.documentChecked = params.Query
		return nil
	}
	if gerr := e.checkDocument(ctx, st, params.Query); gerr != nil {
		return gerr
	}
	return nil
}

// checkDocument applies the document bounds to query, refusing it (it
// pays InvalidCost) past them, and marks st checked when it passes.
func (e *costExtension) checkDocument(ctx context.Context, st *requestState, query string) *gqlerror.Error {
	_, err := complexity.CheckDocument(query, st.set.documentLimits())
	if err == nil {
		st.documentChecked = query
		return nil
	}
	var cerr *complexity.Error
	errors.As(err, &cerr)
	return e.refuseUnpriced(ctx, st, cerr.GQLError(), false)
}

// checkParsed applies the trusted documents and the document bounds to an
// operation whose text no earlier hook saw: gqlgen's persisted queries,
// added after the extension, filled it in from their cache. It was bounded
// when it was registered, but perhaps under other bounds.
func (e *costExtension) checkParsed(ctx context.Context, st *requestState, opCtx *graphql.OperationContext) *gqlerror.Error {
	if st.documentChecked == opCtx.RawQuery && opCtx.RawQuery != "" {
		return nil
	}
	t := st.set.trusted
	if t != nil && st.trustedDoc == nil {
		st.trustedDoc = t.lookup(opCtx.RawQuery)
		if st.trustedDoc == nil && t.enforce {
			return e.refuseUnpriced(ctx, st, codedError(CodeDocumentNotTrusted, 0, "the document is not a trusted document of this server"), false)
		}
	}
	if st.trustedDoc != nil && st.documentBoundsLifted() {
		return nil
	}
	return e.checkDocument(ctx, st, opCtx.RawQuery)
}

// refuseUnpriced charges InvalidCost for an operation refused before it was
// priced and returns ge, or the rate-limit error when the budget cannot
// pay even that. When shadowable (a static cap) and the plan is in shadow
// mode, it lets the operation run instead and returns nil.
func (e *costExtension) refuseUnpriced(ctx context.Context, st *requestState, ge *gqlerror.Error, shadowable bool) *gqlerror.Error {
	o := e.l.engine.ChargeInvalid(ctx, st.id.Key, st.plan.Rule, budget.CapExceeded, shadowable)
	st.record(o, 0, codeOf(o, ge))
	if o.Verdict == budget.Admitted {
		return nil // shadow mode let it run
	}
	if o.Verdict != budget.CapExceeded {
		return e.l.verdictError(&o, st.set.gql.InvalidCost, st.plan)
	}
	return ge
}

// codeOf is the code of o's refusal, or of the refusal shadow mode let
// through: the budget's, or ge's (a static cap's).
func codeOf(o budget.Outcome, ge *gqlerror.Error) string {
	v := o.Verdict
	if o.Shadowed != 0 {
		v = o.Shadowed
	}
	if c := v.Answer().Code; c != "" {
		return c
	}
	if v == budget.Admitted || ge == nil {
		return ""
	}
	c, _ := ge.Extensions["code"].(string)
	return c
}

// shadowable reports whether shadow mode may let an operation the
// analyzer refused run: any static cap, but not the absolute nesting
// guard, and not an argument the executor could not coerce.
func shadowable(cerr *complexity.Error) bool {
	switch cerr.Code {
	case complexity.CodeInvalidArgumentValue:
		return false
	case complexity.CodeMaxDepthExceeded:
		return cerr.Limit < complexity.AbsoluteMaxDepth
	}
	return true
}

// owns reports whether e decides the request st belongs to: the first
// extension to ask claims it, so a second one on the same server stands
// aside.
func (e *costExtension) owns(st *requestState) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ext == nil {
		st.ext = e
	}
	return st.ext == e
}

// MutateOperationContext implements graphql.OperationContextMutator. It
// runs once per operation, after validation, before any resolver, and
// decides it (an operation on a WebSocket is decided a step later, in
// InterceptOperation, where its connection's init payload is known).
func (e *costExtension) MutateOperationContext(ctx context.Context, opCtx *graphql.OperationContext) *gqlerror.Error {
	st, gerr := e.requestState(ctx, opCtx)
	if gerr != nil || !e.owns(st) || st.conn != nil {
		return gerr
	}
	return e.decide(ctx, st, opCtx)
}

// decide takes operation opCtx of request st through its phases once it
// is parsed and validated: lane and admission, price (the static caps),
// charge. A non-nil error refuses it.
func (e *costExtension) decide(ctx context.Context, st *requestState, opCtx *graphql.OperationContext) *gqlerror.Error {
	st.mu.Lock()
	st.operation = operationName(opCtx.Operation)
	st.mu.Unlock()
	if gerr := e.checkParsed(ctx, st, opCtx); gerr != nil {
		return gerr
	}
	// A dry run runs no resolver: it never takes a lane above normal.
	if st.ask.mode != modeValidate {
		st.ask.dryRun = e.dryRun(st.set, opCtx.Operation, opCtx.Variables)
	}
	dry := st.ask.mode == modeValidate || st.ask.dryRun
	var ln *lane // no lanes configured: none
	if len(st.set.lanes) > 0 {
		ln = st.set.laneForGraphQL(opCtx.Doc, opCtx.Operation, opCtx.Variables, st.id, dry)
	}
	st.mu.Lock()
	st.lane, st.laned = ln, true
	st.mu.Unlock()
	if gerr := e.admit(ctx, st, ln); gerr != nil {
		return gerr
	}
	if st.get && opCtx.Operation.Operation != ast.Query {
		// gqlgen's GET transport refuses it (406) once this returns:
		// nothing runs, so nothing is charged.
		st.record(budget.Outcome{Verdict: budget.Admitted}, 0, "")
		return nil
	}
	rep, cost, gerr := e.price(ctx, st, opCtx)
	if rep == nil {
		return gerr
	}
	if dry && e.priceOnly(ctx, st, opCtx, rep, cost) {
		st.release() // answered without running, it holds no slot while it is written
		return nil   // GraphQL-Cost: validate, a dry run
	}
	return e.charge(ctx, st, opCtx, ln, rep, cost)
}

// price prices operation opCtx of st by its compiled plan and enforces the
// static caps: the report and the cost to charge (at least MinCost, with
// its uploads), or a nil report and the refusal (which paid InvalidCost),
// nil when shadow mode lets a capped operation run unpriced.
func (e *costExtension) price(ctx context.Context, st *requestState, opCtx *graphql.OperationContext) (*complexity.Report, int64, *gqlerror.Error) {
	bound, err := e.boundFor(&e.priced, st.set)
	var (
		rep      *complexity.Report
		costPlan *complexity.Plan
	)
	if err == nil && st.trustedDoc != nil {
		costPlan = bound.trustedPlan(st.trustedDoc, opCtx.Operation)
	}
	switch {
	case err != nil:
		err = fmt.Errorf("the analyzer for the reloaded GraphQL options: %w", err)
	case costPlan != nil:
		rep, err = costPlan.Evaluate(opCtx.Variables) // compiled with the manifest; priced with this request's variables
	default:
		rep, costPlan, err = bound.price(opCtx.Doc, opCtx.Operation, opCtx.Variables, opCtx.RawQuery, st.plan.RelaxStructuralLimits || st.trustedDoc != nil && st.relaxed())
	}
	var cerr *complexity.Error
	switch {
	case err != nil && !errors.As(err, &cerr):
		// Not a limit: a document validation let through that the
		// analyzer cannot price. Refuse rather than run it unpriced.
		e.l.log.ErrorContext(ctx, "middleware: cannot price the operation", "err", err)
		ge := gqlerror.Errorf("the operation cannot be priced")
		errcode.Set(ge, errcode.ValidationFailed)
		return nil, 0, e.refuseUnpriced(ctx, st, ge, false)
	case err != nil:
		ge := cerr.GQLError()
		if cerr.Totals != nil {
			if cost := cerr.Totals.Cost.Points(); cost > 0 {
				ge.Extensions["cost"] = cost
			}
		}
		return nil, 0, e.refuseUnpriced(ctx, st, ge, shadowable(cerr))
	case rep.Introspection && st.plan.DisableIntrospection:
		return nil, 0, e.refuseUnpriced(ctx, st, codedError(CodeIntrospectionDisabled, 0,
			"introspection is disabled for plan %q", st.plan.Name()), false)
	}
	st.mu.Lock()
	st.costPlan = costPlan
	st.mu.Unlock()
	cost := max(rep.Points, st.set.gql.MinCost)
	if st.upload != nil {
		if up := st.uploadCost(); up > 0 {
			cost = min(cost, 1<<63-1-up) + up
		}
	}
	return rep, cost, nil
}

// charge debits cost for operation opCtx of st in lane ln, records the
// decision and what the operation asked to learn, and holds an admitted
// one for its turn under a shaping limit. A non-nil error refuses it.
func (e *costExtension) charge(ctx context.Context, st *requestState, opCtx *graphql.OperationContext, ln *lane, rep *complexity.Report, cost int64) *gqlerror.Error {
	l := e.l
	if opCtx.Operation.Operation == ast.Subscription {
		if gerr := e.openSubscription(ctx, st); gerr != nil {
			return gerr
		}
	}
	var fields []budget.FieldCount // what the field limits count
	if len(rep.FieldCounts) > 0 {
		fields = fieldCounts(rep.FieldCounts)
	}
	req := st.request(ln, cost, fields)
	req.ChargeInvalidIfNever = true // a price it can never pay is refused as a static cap is
	o := l.engine.Charge(ctx, req)
	st.record(o, cost, codeOf(o, nil))
	st.noteRate(rep, cost, &o, l)
	admitted := o.Verdict == budget.Admitted
	if st.ask.mode == modeReport && admitted {
		e.explain(ctx, st, opCtx) // the breakdown "GraphQL-Cost: report" asks for
	}
	if st.sub != nil {
		st.sub.settle(admitted)
	}
	if gerr := l.verdictError(&o, cost, st.plan); gerr != nil || !admitted {
		return gerr
	}
	turn := o.Delay <= 0 || l.hold(ctx, o.Delay)
	if st.sub != nil {
		// An admitted subscription's subscribe is final here: its price is
		// never refunded, and each event is a decision of its own
		// (chargeEvent). It ends now, whether or not events follow.
		st.end(ctx, l)
	}
	if !turn {
		// Its turn under a leaky_bucket_shaping field limit had not come
		// when the client left; the turn stays taken.
		return gqlerror.Errorf("the request ended while the operation waited its turn")
	}
	return nil
}

// verdictError is the GraphQL error of a budget decision on cost, nil when
// it was admitted or when the refusal carries its own error (a static cap).
func (l *Limiter) verdictError(o *budget.Outcome, cost int64, p *plan) *gqlerror.Error {
	code := o.Verdict.Answer().Code
	switch o.Verdict {
	case budget.OverBudget:
		if o.ByLane != nil {
			return pricedError(code, cost, 0,
				"operation cost %d exceeds the budget of lane %q, %d points", cost, o.ByLane.Lane(), o.ByLane.Burst)
		}
		return pricedError(code, cost, 0,
			"operation cost %d exceeds the plan's capacity of %d points", cost, p.Burst)
	case budget.RateLimited:
		if o.ByLane != nil {
			return pricedError(code, cost, o.RetryAfter,
				"rate limited by the budget of lane %q: the operation costs %d points; retry in %s",
				o.ByLane.Lane(), cost, inSeconds(o.RetryAfter))
		}
		return pricedError(code, cost, o.RetryAfter,
			"rate limited: the operation costs %d points and %d are available; retry in %s",
			cost, o.Decision.Remaining, inSeconds(o.RetryAfter))
	case budget.Unavailable:
		return pricedError(code, cost, o.RetryAfter,
			"rate limiter unavailable; retry in %s", inSeconds(o.RetryAfter))
	case budget.QuotaExceeded:
		return pricedError(code, cost, o.RetryAfter,
			"quota exceeded: plan %q allows %d points per %s and %d are left in this window; the operation costs %d; retry in %s",
			p.Name(), p.Quota.Limit, p.Quota.Per, max(o.ByLimit.Decision.Remaining, 0), cost, inSeconds(o.RetryAfter))
	case budget.FieldLimited:
		u := o.ByLimit
		var ge *gqlerror.Error
		if o.Never {
			ge = pricedError(code, cost, 0,
				"field %s is limited to %s per %s and the operation selects it %s: it can never run",
				u.Field.Coord, plural(u.Field.Max, "selection", "selections"), u.Field.Limit.Period,
				plural(u.Count, "time", "times"))
		} else {
			ge = pricedError(code, cost, o.RetryAfter,
				"field %s is limited to %s per %s; the operation selects it %s and %s; retry in %s",
				u.Field.Coord, plural(u.Field.Max, "selection", "selections"), u.Field.Limit.Period,
				plural(u.Count, "time", "times"), plural(max(u.Decision.Remaining, 0), "is left", "are left"), inSeconds(o.RetryAfter))
		}
		ge.Extensions["field"] = u.Field.Coord
		for _, name := range u.Path {
			ge.Path = append(ge.Path, ast.PathName(name))
		}
		return ge
	}
	return nil
}

// answer writes the rate-limit headers of outcome o into h and returns the
// status it calls for, given the status gqlgen chose.
func (l *Limiter) answer(h http.Header, r *http.Request, set *settings, p *plan, o *budget.Outcome, status int) int {
	if o.Known {
		set.setOutcomeHeaders(h, p, o, l.clock.Now())
	}
	if o.RetryAfter > 0 {
		h.Set(HeaderRetryAfter, strconv.FormatInt(o.RetryAfter, 10))
	}
	a := o.Verdict.Answer()
	switch {
	case a.Status == 0:
		return status // admitted, or refused by gqlgen with its own status
	case a.Status == http.StatusUnprocessableEntity && isGraphQLResponse(h.Get("Content-Type"), r):
		return http.StatusBadRequest // GraphQL-over-HTTP's status for application/graphql-response+json
	}
	return a.Status
}

// InterceptResponse implements graphql.ResponseInterceptor: it adds
// extensions.cost to every response. A request gqlgen refused before the
// extension priced it (a parse or validation error) is charged InvalidCost
// here, before the wrapper writes the status and headers.
func (e *costExtension) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	resp := next(ctx)
	if resp == nil || !graphql.HasOperationContext(ctx) {
		return resp
	}
	if len(resp.Errors) > 0 {
		e.l.checkDirectiveHooks(ctx, resp.Errors)
	}
	opCtx := graphql.GetOperationContext(ctx) // once: each lookup walks gqlgen's context chain
	st, gerr := e.requestState(ctx, opCtx)
	if gerr != nil || !e.owns(st) {
		return resp
	}
	if st.sub != nil && st.sub.admitted.Load() {
		return e.chargeEvent(ctx, st, opCtx, resp) // the subscribe ended when it was admitted
	}
	if _, _, _, decided := st.current(); decided {
		e.settleActual(ctx, st, opCtx, resp)
	}
	o, _, charged := st.settle(ctx, e.l)
	if ge := e.l.verdictError(&o, st.set.gql.InvalidCost, st.plan); charged && ge != nil {
		// Out of budget matters more than what was wrong.
		resp.Errors = append(gqlerror.List{ge}, resp.Errors...)
	}
	if resp.Extensions == nil {
		resp.Extensions = make(map[string]any, 1)
	}
	c := st.costReport()
	if st.ask.mode == modeReport {
		c.Fields, c.FieldsTruncated = st.explained()
	}
	resp.Extensions[CostExtensionKey] = c
	if st.conn != nil {
		st.end(ctx, e.l) // over HTTP the wrapper ends it once the response is written
	}
	return resp
}

// checkDirectiveHooks logs, at most once a minute, a response whose fields
// failed because gqlgen generated runtime hooks for the cost directives,
// which only the analysis reads: the fix is in gqlgen.yml.
func (l *Limiter) checkDirectiveHooks(ctx context.Context, errs gqlerror.List) {
	for _, ge := range errs {
		if ge.Message != "directive cost is not implemented" && ge.Message != "directive listSize is not implemented" {
			continue
		}
		if _, due := l.directiveWarn.Due(l.clock.Now().Sub(l.start)); due {
			l.log.ErrorContext(ctx, "middleware: fields with @cost or @listSize fail because gqlgen generated runtime hooks for them; "+
				"add `directives: {cost: {skip_runtime: true}, listSize: {skip_runtime: true}}` to gqlgen.yml and run gqlgen generate (docs/gqlgen.md)",
				"error", ge.Message)
		}
		return
	}
}

// costReport is extensions.cost: the price, the actual cost once known,
// and the bucket after the debit (and any refund).
func (s *requestState) costReport() Cost {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Cost{
		RequestedQueryCost: s.cost,
		ThrottleStatus: ThrottleStatus{
			MaximumAvailable: s.plan.Burst,
			RestoreRate:      s.plan.restoreRate,
		},
	}
	if s.hasActual || s.outcome.Known {
		vals := new([2]int64) // one allocation for both pointers
		if s.hasActual {
			vals[0] = s.actual
			c.ActualQueryCost = &vals[0]
		}
		if s.outcome.Known {
			vals[1] = max(s.outcome.Decision.Remaining, 0)
			c.ThrottleStatus.CurrentlyAvailable = &vals[1]
		}
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

// requestState is the one owner of a GraphQL operation, from the door to
// its report: who pays and on which plan (set where the request or the
// WebSocket operation begins, newState), then the price and the decision
// (set by the extension's hooks), read by the response interceptor and the
// wrapper's writer. Its decision moves through phases (phase).
type requestState struct {
	// invalidOnce charges InvalidCost to a request gqlgen refused before
	// the extension priced it (settle).
	invalidOnce sync.Once
	set         *settings // the configuration the request started under
	id          identity.Identity
	plan        *plan
	// addr keys the client address, for field limits ByIP.
	addr string
	// documentChecked is the query the wrapper found within the document
	// bounds, so the extension need not count it again.
	documentChecked string
	// trustedDoc is the trusted document the request runs (nil: none, or
	// not known yet).
	trustedDoc *trusteddocs.Document
	// operation is the name of the operation that runs, as the document
	// spells it (cut at kept.MaxOperation bytes), under mu.
	operation string
	// get: the request came by GET, whose transport refuses mutations
	// after the extension has run.
	get bool
	// conn is the WebSocket connection the operation came on (nil over
	// HTTP): it is decided in InterceptOperation (socket.go).
	conn *connState
	// ext is the extension that decides the request: the first whose hook
	// ran, so that a limiter installed twice on one server (two Extensions)
	// prices and debits once.
	ext *costExtension
	// sub is the subscription's slot and events (subscription.go); nil for
	// queries and mutations.
	sub *subscription
	// upload counts the bytes of a multipart request (upload.go).
	upload *countingReader

	mu    sync.Mutex
	phase phase
	// hasActual: actual holds the response's actual cost. laned: lane is
	// the operation's.
	hasActual, laned bool

	cost    int64 // the price debited; 0 when the request was not priced
	code    string
	outcome budget.Outcome
	// actual is the executed operation's actual cost (when hasActual),
	// refunded what was given back of cost, and excess what was debited
	// beyond it (actual − cost, when the response held more than its price).
	actual   int64
	refunded int64
	excess   int64
	// costPlan is the compiled plan the operation was priced through, to
	// price its response with.
	costPlan *complexity.Plan

	ask askState // GraphQL-Cost and the rate-limit field (ask.go)

	// lane is the operation's lane once laned (decided from its root
	// fields when it was parsed).
	lane *lane
	// admission is its slot among the requests in flight (Dependencies.Overload)
	// and slot its lease among its principal's (Policy.Concurrency), given
	// back when the response is written.
	admission admission
	slot      budget.Slot
	// r is the HTTP request, with the wrapper (for the challenge answer),
	// and w the writer it answers through.
	r *http.Request
	w graphQLWriter
}

type stateKey struct{}

// phase is how far a request's decision has gone; it only moves forward.
type phase uint8

const (
	// phaseOpen: identified (and maybe laned and priced), nothing decided.
	phaseOpen phase = iota
	// phaseDecided: a decision is recorded (record), which the answer and
	// the report render.
	phaseDecided
	// phaseReported: final. Its decision went to the observer (report),
	// or it has none to report (a peek: recordPeek).
	phaseReported
)

func (s *requestState) record(o budget.Outcome, cost int64, code string) {
	s.mu.Lock()
	s.outcome, s.cost, s.code = o, cost, code
	s.phase = max(s.phase, phaseDecided)
	s.mu.Unlock()
}

// request is what the engine is asked about st's operation: its price
// cost, in lane ln, selecting fields.
func (s *requestState) request(ln *lane, cost int64, fields []budget.FieldCount) budget.Request {
	req := budget.Request{Key: s.id.Key, Addr: s.addr, Rule: s.plan.Rule, Cost: cost, Fields: fields}
	if ln != nil {
		req.Lane = ln.budget
	}
	return req
}

// fieldCounts is the report's field counts as the engine takes them (nil
// for none).
func fieldCounts(fcs []complexity.FieldCount) []budget.FieldCount {
	if len(fcs) == 0 {
		return nil
	}
	out := make([]budget.FieldCount, len(fcs))
	for i, fc := range fcs {
		out[i] = budget.FieldCount(fc)
	}
	return out
}

// currentLane is the lane decided so far (nil before the operation was
// parsed, or without lanes).
func (s *requestState) currentLane() *lane {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lane
}

// operationName is a copy of op's name, cut to kept.MaxOperation bytes
// (64: the name is the client's to choose; GraphQL names are ASCII); "" for an anonymous operation. The parser's
// name is a substring of the document, so keeping it would keep the whole
// document alive in every table the Event reaches.
func operationName(op *ast.OperationDefinition) string {
	if op == nil || op.Name == "" {
		return ""
	}
	if len(op.Name) <= kept.MaxOperation {
		return strings.Clone(op.Name) // the usual name, whole
	}
	return kept.String(op.Name, kept.MaxOperation)
}

// end is a request's last phase, the one place its decision is reported:
// it gives the request's slots back (Overload, Concurrency) and reports
// its decision, each once, as soon as that decision is final. That is:
//
//   - an admitted subscription: when it is admitted (decide), on every
//     transport, whether or not events follow. Its price is never
//     refunded, and each event is a decision of its own, reported before
//     the event is sent (chargeEvent); its own cap (Subscriptions) bounds
//     it from then on, however long it stays open;
//   - any other request over HTTP: once its response is written (serve,
//     refuseRequest, shedBeforeReading), whether gqlgen dispatched it or
//     answered it itself (a mutation by GET, 406);
//   - each other operation on a WebSocket: when its response leaves the
//     response interceptor (after settleActual), or when decideSocket
//     refuses it.
func (s *requestState) end(ctx context.Context, l *Limiter) {
	s.release()
	s.report(ctx, l)
}

// report sends the request's decision to the Limiter's Observer and debug
// log, once (end calls it). A request nothing was decided for (or that
// touched no budget, a GET mutation) reports nothing.
func (s *requestState) report(ctx context.Context, l *Limiter) {
	if !l.observing(ctx) {
		return
	}
	s.mu.Lock()
	if s.phase != phaseDecided || (!s.outcome.Known && s.outcome.Verdict == budget.Admitted && s.outcome.Trace.Result == guard.ResultNone) {
		s.mu.Unlock()
		return
	}
	s.phase = phaseReported
	ln := s.lane
	if !s.laned && len(s.set.lanes) > 0 {
		ln = s.set.laneForGraphQL(nil, nil, nil, s.id, false) // refused before it was parsed
	}
	e := l.newEvent(KindGraphQL, s.id, s.plan, ln, s.outcome, s.cost, s.code)
	e.ActualCost, e.HasActualCost, e.Refunded, e.Excess = s.actual, s.hasActual, s.refunded, s.excess
	e.Operation = s.operation
	s.mu.Unlock()
	l.report(ctx, &e)
}

// current returns the decision so far, its code and the operation's lane,
// without any I/O; decided is false when nothing was decided (gqlgen
// answered before the extension ran).
func (s *requestState) current() (o budget.Outcome, code string, ln *lane, decided bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outcome, s.code, s.lane, s.phase >= phaseDecided
}

// settle returns the decision and the price. If nothing was decided, gqlgen
// refused the request before the extension priced it (a parse or
// validation error): it pays InvalidCost now, and charged says so.
func (s *requestState) settle(ctx context.Context, l *Limiter) (o budget.Outcome, cost int64, charged bool) {
	s.mu.Lock()
	decided := s.phase >= phaseDecided
	s.mu.Unlock()
	if !decided {
		// gqlgen chose the status, and refuses it all the same. Once, and
		// with no lock held across the store call.
		s.invalidOnce.Do(func() {
			s.mu.Lock()
			decided := s.phase >= phaseDecided
			s.mu.Unlock()
			if decided {
				return
			}
			paid := l.engine.ChargeInvalid(ctx, s.id.Key, s.plan.Rule, budget.Invalid, false)
			s.mu.Lock()
			s.outcome, s.code = paid, paid.Verdict.Answer().Code
			s.phase = phaseDecided
			s.mu.Unlock()
			charged = true
		})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outcome, s.cost, charged
}

// requestState returns the state of the operation opCtx: the one the
// wrapper put in the HTTP request's context, or, for an operation on a
// WebSocket, its own, made by the first hook that sees it and kept in
// opCtx. An operation that came another way (the gqlgen server is also
// served without Handler's wrapper) is refused: nothing would price it.
func (e *costExtension) requestState(ctx context.Context, opCtx *graphql.OperationContext) (*requestState, *gqlerror.Error) {
	if st, ok := opCtx.Stats.GetExtension(statsKey).(*requestState); ok {
		return st, nil
	}
	if st, ok := ctx.Value(stateKey{}).(*requestState); ok {
		opCtx.Stats.SetExtension(statsKey, st)
		return st, nil
	}
	if cs, ok := ctx.Value(connKey{}).(*connState); ok {
		// An operation on a WebSocket, identified by the upgrade request
		// in its context: a principal the application's InitFunc put
		// there (WithPrincipal) is seen as on any request.
		st, err := e.l.current().newState(cs.r.WithContext(ctx))
		if err != nil {
			return nil, e.identifyError(ctx, err)
		}
		st.conn = cs
		opCtx.Stats.SetExtension(statsKey, st)
		return st, nil
	}
	if _, due := e.l.notInstalledWarn.Due(e.l.clock.Now().Sub(e.l.start)); due {
		e.l.log.ErrorContext(ctx, "middleware: a request reached the gqlgen server without passing the handler Limiter.Handler returned (is the server also served elsewhere?); refusing its operations")
	}
	return nil, codedError(CodeNotInstalled, 0, "the rate limiter is not installed on this route")
}

// stateOf returns the requestState of the operation ctx belongs to, kept
// in its OperationContext by the first hook that saw it
// (extension.requestState); unlike requestState it never makes one.
func stateOf(ctx context.Context) (*requestState, bool) {
	if !graphql.HasOperationContext(ctx) {
		return nil, false
	}
	st, ok := graphql.GetOperationContext(ctx).Stats.GetExtension(statsKey).(*requestState)
	return st, ok
}

// newState identifies r under set and starts its requestState: the one
// place a request over HTTP or an operation on a WebSocket begins, before
// the same hooks price it and the same engine decides it.
func (set *settings) newState(r *http.Request) (*requestState, error) {
	id, p, err := set.identify(r)
	if err != nil {
		return nil, err
	}
	st := &requestState{set: set, id: id, plan: p}
	if set.pol.AnyByIP() {
		st.addr = set.addrKey(r) // a field or route limit counts by address
	}
	return st, nil
}

// graphQL wraps h, a gqlgen server carrying l's extension. It identifies
// the caller before gqlgen runs (401 UNKNOWN_API_KEY for an unknown key),
// screens the body, then applies the extension's decision to the
// response: 429 for RATE_LIMITED, 503 for RATE_LIMITER_UNAVAILABLE, 422
// for static-limit codes (400 when the response is
// application/graphql-response+json), the rate-limit headers, and
// Retry-After on 429 and 503.
func (l *Limiter) graphQL(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ctx := r.Context(); ctx.Value(stateKey{}) != nil || ctx.Value(connKey{}) != nil {
			h.ServeHTTP(w, r) // wrapped twice: the outer wrapper limits this request
			return
		}
		set := l.current()
		st, err := set.newState(r)
		if err != nil {
			l.graphQLIdentifyFailed(w, r, err)
			return
		}
		if isSocketUpgrade(r) {
			// Identified (an unknown key answered 401 before any
			// upgrade), then handed on with the connection's state: each
			// operation on it is identified, priced and debited alone.
			r = r.WithContext(context.WithValue(r.Context(), connKey{}, &connState{r: r}))
			if l.shed != nil {
				r = l.withDegradation(r)
			}
			h.ServeHTTP(w, r)
			return
		}
		st.get = r.Method == http.MethodGet
		if l.shed != nil && l.shedAtTheDoor(r, set, st.id) {
			l.shedBeforeReading(w, r, st)
			return
		}
		if ref := st.readCostHeader(r.Header); ref != nil {
			l.refuseRequest(w, r, st, ref)
			return
		}
		boundary, multipart := "", false
		if v := r.Header["Content-Type"]; len(v) == 0 || v[0] != jsonMIME {
			boundary, multipart = isMultipart(r) // a POST of multipart/form-data
		}
		if multipart {
			l.serveMultipart(w, r, h, st, boundary)
			return
		}
		// A large body waits for room before it is read when its length is
		// declared (waiting bodies then hold no memory; the read that
		// follows has a deadline, so a slow sender cannot keep the room),
		// and after it is read when it comes chunked.
		declared := r.ContentLength > smallBody && r.ContentLength <= l.maxBody
		var release func()
		if declared {
			if release, err = l.holdBody(r.Context(), int(r.ContentLength)); err != nil {
				l.busy(w, r)
				return
			}
			defer release()
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(largeBodyReadTimeout)) // network time, not the limiter's clock
		}
		body, ref := readBody(r, l.maxBody)
		if declared {
			_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
		}
		if ref == nil && !declared {
			if len(body) > smallBody {
				if release, err = l.holdBody(r.Context(), len(body)); err != nil {
					l.busy(w, r)
					return
				}
				defer release()
			}
		}
		if ref == nil {
			ref = l.screenGraphQL(r, body, st)
		}
		if ref != nil {
			l.refuseRequest(w, r, st, ref)
			return
		}
		l.serve(w, r, h, st)
	})
}

// serveMultipart serves a multipart request (uploads), which streams to h
// rather than being read whole: its operations part is screened as a JSON
// body, the whole bounded by MaxUploadBytes.
func (l *Limiter) serveMultipart(w http.ResponseWriter, r *http.Request, h http.Handler, st *requestState, boundary string) {
	if o := l.engine.Peek(r.Context(), budget.Request{Key: st.id.Key, Rule: st.plan.Rule}); o.Known && o.Decision.Remaining < st.set.gql.MinCost && !st.plan.Unlimited {
		// An upload its budget cannot pay is refused before up to
		// MaxUploadBytes of it are read (it pays InvalidCost, or gets the
		// 429 when even that is not there).
		l.refuseRequest(w, r, st, refuse(http.StatusTooManyRequests, budget.CodeRateLimited,
			"rate limited: the budget cannot pay for an operation"))
		return
	}
	if ref := l.screenMultipart(w, r, boundary, st); ref != nil {
		l.refuseRequest(w, r, st, ref)
		return
	}
	l.serve(w, r, h, st)
}

// serve hands a screened request to h with its state, and answers with
// what the extension decided.
func (l *Limiter) serve(w http.ResponseWriter, r *http.Request, h http.Handler, st *requestState) {
	st.r = r
	defer st.release() // even if the handler panics: a leaked slot would shed forever
	gw := &st.w
	*gw = graphQLWriter{ResponseWriter: w, l: l, r: r, st: st}
	r = r.WithContext(context.WithValue(r.Context(), stateKey{}, st))
	if l.shed != nil {
		r = l.withDegradation(r)
	}
	h.ServeHTTP(gw, r)
	gw.finish()
	if _, _, _, decided := st.current(); !decided && st.upload != nil {
		// gqlgen's MultipartForm refused the request before its executor
		// ran (a map or a file it could not read, after reading up to
		// MaxUploadBytes): it pays InvalidCost.
		st.settle(context.WithoutCancel(r.Context()), l)
	}
	st.end(r.Context(), l)
}

// largeBodyReadTimeout bounds reading a large declared body while it holds
// room among the bodies in flight.
const largeBodyReadTimeout = 10 * time.Second

// shedBeforeReading answers a request shed at the door, before its body
// is read: 503 OVERLOADED with Retry-After and the lane's challenge, as a
// request shed once parsed, and nothing debited.
func (l *Limiter) shedBeforeReading(w http.ResponseWriter, r *http.Request, st *requestState) {
	ln, _ := st.set.laneWithoutDocument(st.id)
	ra := l.shedRetryAfter()
	st.mu.Lock()
	st.lane, st.laned = ln, true
	st.mu.Unlock()
	st.record(budget.Outcome{Verdict: budget.Shed, RetryAfter: ra}, 0, budget.CodeOverloaded)
	if ln != nil && ln.Challenge != "" {
		l.challenge(r.Context(), w.Header(), st.id, ln)
	}
	writeGraphQLError(w, r, http.StatusServiceUnavailable,
		codedError(budget.CodeOverloaded, ra, "the service is overloaded; retry in %s", inSeconds(ra)), ra)
	st.end(r.Context(), l)
}

// busy answers a request whose client left, or whose server is shutting
// down, while its body waited for room.
func (l *Limiter) busy(w http.ResponseWriter, r *http.Request) {
	ra := l.engine.RetryAfter(budget.UnavailableRetryAfter)
	writeGraphQLError(w, r, http.StatusServiceUnavailable,
		codedError(budget.CodeRateLimiterUnavailable, ra, "the server is busy; retry in %s", inSeconds(ra)), ra)
}

// Handler installs l on a gqlgen server, the one way to: it adds l's
// extension to srv (pricing and debiting each operation after validation,
// before any resolver) and returns srv wrapped by the handler that
// identifies each request, bounds its body and answers with the
// extension's decision (statuses, rate-limit headers, extensions.cost).
// srv's transports, cache and other extensions are the caller's. Served
// only through the returned handler: an operation that reaches srv another
// way is refused CodeNotInstalled. Installed twice (on one server, or one
// wrapped in another), an operation is still priced and charged once.
func (l *Limiter) Handler(srv *handler.Server) http.Handler {
	srv.Use(&costExtension{l: l})
	return l.graphQL(srv)
}

func (l *Limiter) graphQLIdentifyFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, identity.ErrUnknownAPIKey) {
		writeGraphQLError(w, r, http.StatusUnauthorized, codedError(CodeUnknownAPIKey, 0, "unknown API key"), 0)
		return
	}
	l.log.ErrorContext(r.Context(), "middleware: cannot identify the request; answering 503", "err", err)
	ra := l.engine.RetryAfter(budget.UnavailableRetryAfter)
	writeGraphQLError(w, r, http.StatusServiceUnavailable,
		codedError(budget.CodeRateLimiterUnavailable, ra, "rate limiter unavailable; retry in %s", inSeconds(ra)), ra)
}

// refuseRequest answers a request screenGraphQL refused, after charging
// InvalidCost for it: a client whose budget cannot pay gets the 429
// instead.
func (l *Limiter) refuseRequest(w http.ResponseWriter, r *http.Request, st *requestState, ref *refusal) {
	if ref.free {
		writeGraphQLError(w, r, ref.status, ref.gqlErr, 0)
		return
	}
	ctx := r.Context()
	if ref.status == http.StatusRequestTimeout {
		ctx = context.WithoutCancel(ctx) // the connection may be gone; the charge is not
	}
	o := l.engine.ChargeInvalid(ctx, st.id.Key, st.plan.Rule, budget.CapExceeded, false) // refused by the bound
	if o.Verdict == budget.Unavailable && ref.status == http.StatusRequestTimeout {
		o = budget.Outcome{Verdict: budget.CapExceeded, Trace: o.Trace} // the body's fault, not the store's
	}
	code := ref.code
	if ref.gqlErr != nil {
		code, _ = ref.gqlErr.Extensions["code"].(string)
	}
	if c := o.Verdict.Answer().Code; c != "" {
		code = c
	}
	st.record(o, 0, code)
	defer st.end(r.Context(), l)
	if o.Known {
		st.set.setOutcomeHeaders(w.Header(), st.plan, &o, l.clock.Now())
	}
	if ge := l.verdictError(&o, st.set.gql.InvalidCost, st.plan); ge != nil {
		status := http.StatusTooManyRequests
		if o.Verdict == budget.Unavailable {
			status = http.StatusServiceUnavailable
		}
		writeGraphQLError(w, r, status, ge, o.RetryAfter)
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

// graphQLWriter holds gqlgen's status back until the body starts (or the
// handler returns), so that the decision, taken by the extension's hooks by
// then, chooses the status and the headers: no store I/O happens here.
type graphQLWriter struct {
	http.ResponseWriter
	l       *Limiter
	r       *http.Request
	st      *requestState
	status  int // held back; 0 when none was written yet
	written bool
	// replaced: the multipart body failed to arrive (too large, too
	// slow) while gqlgen read it; the wrapper's refusal was sent instead
	// of gqlgen's, whose writes are dropped.
	replaced bool
	// held is the body of a refusal before execution under
	// application/graphql-response+json, kept until finish to drop the
	// "data" member gqlgen writes: GraphQL over HTTP gives a request that
	// never reached execution none.
	held    []byte
	holding bool
}

// WriteHeader holds the status back (informational ones pass through).
func (w *graphQLWriter) WriteHeader(status int) {
	switch {
	case w.written || (status >= 100 && status < 200):
		w.ResponseWriter.WriteHeader(status)
	case w.status == 0:
		w.status = status
	}
}

func (w *graphQLWriter) Write(b []byte) (int, error) {
	w.writeHeader()
	if w.replaced {
		return len(b), nil
	}
	if w.holding {
		if len(w.held)+len(b) > maxHeldRefusal {
			w.holding = false // not a refusal gqlgen wrote: pass it on as it is
			if _, err := w.ResponseWriter.Write(w.held); err != nil {
				return 0, err
			}
			w.held = nil
			return w.ResponseWriter.Write(b)
		}
		w.held = append(w.held, b...)
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// maxHeldRefusal bounds the refusal body the writer holds back.
const maxHeldRefusal = 64 << 10

// Flush supports streaming transports (SSE, multipart).
func (w *graphQLWriter) Flush() {
	w.writeHeader()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController and websocket upgrades reach the
// underlying writer.
func (w *graphQLWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish sends a status the handler wrote without a body, or the refusal
// held back, without its "data" member.
func (w *graphQLWriter) finish() {
	if w.status != 0 {
		w.writeHeader()
	}
	if w.holding {
		w.holding = false
		_, _ = w.ResponseWriter.Write(withoutData(w.held))
	}
}

// withoutData drops the top-level "data" member of a JSON response object
// (when it is null), leaving anything else as it is.
func withoutData(body []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	if d, ok := m["data"]; !ok || string(d) != "null" {
		return body
	}
	delete(m, "data")
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return append(out, '\n')
}

// writeHeader sends the status and headers the decision calls for, once.
func (w *graphQLWriter) writeHeader() {
	if w.written {
		return
	}
	w.written = true
	if up := w.st.upload; up != nil && up.refused != nil {
		w.replaced = true
		writeGraphQLError(w.ResponseWriter, w.r, up.refused.status, codedError(up.refused.code, 0, "%s", up.refused.message), 0)
		return
	}
	status := cmp.Or(w.status, http.StatusOK)
	if o, code, ln, decided := w.st.current(); decided {
		if o.Verdict != budget.Admitted && isGraphQLResponse(w.ResponseWriter.Header().Get("Content-Type"), w.r) {
			w.holding = true
		}
		status = w.l.answer(w.ResponseWriter.Header(), w.r, w.st.set, w.st.plan, &o, status)
		if o.Verdict == budget.CapExceeded {
			if s := statusOfCode(code); s != 0 {
				status = s // a refusal by the trusted documents
			}
		}
		if o.Verdict == budget.Shed || o.Verdict == budget.RateLimited {
			w.l.challenge(w.r.Context(), w.ResponseWriter.Header(), w.st.id, ln)
		}
	}
	w.ResponseWriter.WriteHeader(status)
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
func (s *settings) complexityOptions() []complexity.Option {
	o := s.gql
	opts := []complexity.Option{
		complexity.WithMaxDepth(o.MaxDepth),
		complexity.WithMaxBreadth(o.MaxBreadth),
		complexity.WithMaxNodes(o.MaxNodes),
		complexity.WithMaxCost(float64(o.MaxCost)), // 0: no cap but the plan's burst
		complexity.WithDefaultListSize(o.DefaultListSize),
		complexity.WithMutationBaseCost(float64(o.MutationCost)),
		complexity.WithMaxAliases(o.MaxAliases),
		complexity.WithMaxRootFields(o.MaxRootFields),
		complexity.WithIntrospectionCost(float64(o.IntrospectionCost)),
		complexity.WithFirstLastConvention(!o.DisableFirstLastConvention),
		complexity.WithConnectionConvention(!o.DisableConnectionConvention),
		complexity.WithCountArgumentConvention(!o.DisableCountArgumentConvention),
		complexity.WithKeyListConvention(!o.DisableKeyListConvention),
		complexity.WithMutationListConvention(!o.DisableMutationListConvention),
		complexity.WithFreeIntrospection(!o.PriceIntrospectionFields),
		complexity.WithSubtreeDiscounts(o.SubtreeDiscounts),
		complexity.WithNullArgumentsCharged(o.NullArgumentsCharged),
		// No WithBreakdownLimit: totals only, as every request needs; a
		// report asks for the breakdown with Explain.
	}
	if len(s.pol.FieldCoordinates()) > 0 {
		opts = append(opts, complexity.WithCountedFields(s.pol.FieldCoordinates()...))
	}
	if len(s.listSizes) > 0 {
		opts = append(opts, complexity.WithAssumedSizes(s.listSizes))
	}
	if s.sizes != nil {
		opts = append(opts, complexity.WithListSizeRecorder(s.sizes))
	}
	return opts
}

// pricesLike reports whether an analyzer built for s prices as one built
// for t: the same GraphQL options, counted fields and list sizes.
func (s *settings) pricesLike(t *settings) bool {
	return s == t || s.gql == t.gql && s.trusted == t.trusted && s.relaxPlans == t.relaxPlans && slices.Equal(s.pol.FieldCoordinates(), t.pol.FieldCoordinates()) &&
		maps.Equal(s.listSizes, t.listSizes) && s.sizes == t.sizes
}

func (s *settings) documentLimits() complexity.DocumentLimits {
	return complexity.DocumentLimits{MaxTokens: s.gql.MaxTokens, MaxSelections: s.gql.MaxSelections}
}
