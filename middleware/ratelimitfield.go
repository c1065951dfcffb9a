package middleware

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
)

// dryRunArgument is the Boolean argument of the rate-limit field that asks
// for a dry run.
const dryRunArgument = "dryRun"

// CodeDryRun (errors[].extensions.code) marks a non-null root field a dry
// run did not execute: its null, which the schema forbids, nulls the
// response's data, and the error says why. The response is still 200 with
// extensions.cost; nullable root fields are null without an error.
const CodeDryRun = "DRY_RUN"

// RateLimitStatus is the budget as an operation left it, for a resolver of
// GitHub's rateLimit field (see RateLimitFrom).
type RateLimitStatus struct {
	// Limit is the plan's burst.
	Limit int64
	// Cost is the operation's price, as debited (at least MinCost); a dry
	// run debits nothing and reports what it would have debited.
	Cost int64
	// Remaining is the whole points left after this operation's debit; for
	// a dry run, the bucket as it stands.
	Remaining int64
	// Used is Limit − Remaining.
	Used int64
	// ResetAt is when the bucket is full again, by the Limiter's clock,
	// rounded up to the second as X-RateLimit-Reset is.
	ResetAt time.Time
	// NodeCount is the operation's node count (complexity.Report.Nodes):
	// the objects it may return through lists.
	NodeCount int64
	// Key is the budget the operation was charged to, identity.Identity's
	// Key ("user:…", "key:" and an API key's SHA-256, or "ip:…"): safe to
	// log or to forward, it never holds a credential.
	Key string
	// Plan is the plan of that budget.
	Plan string
}

// SetInt stores v in *dst, whichever Go integer type gqlgen maps a
// GraphQL Int to (int, or int32 in a project made by gqlgen init today),
// saturating at the type's bounds: a resolver that fills a model from a
// RateLimitStatus builds under either mapping.
func SetInt[T ~int | ~int32 | ~int64](dst *T, v int64) {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if past := int64(math.MaxInt32) + 1; int64(T(past)) != past { // a 32-bit type
		lo, hi = math.MinInt32, math.MaxInt32
	}
	*dst = T(min(max(v, lo), hi))
}

// RateLimitFrom returns the budget of the operation ctx belongs to, as its
// debit (or, for a dry run, its peek) left it. A resolver calls it to serve
// GitHub's rateLimit field; with the field in the schema's Query type and a
// Boolean argument dryRun (GraphQLOptions.RateLimitField), the extension
// also makes rateLimit(dryRun: true) a dry run:
//
//	func (r *queryResolver) RateLimit(ctx context.Context, dryRun *bool) (*model.RateLimit, error) {
//		s, ok := middleware.RateLimitFrom(ctx)
//		if !ok {
//			return nil, errors.New("the rate limit is unavailable")
//		}
//		rl := &model.RateLimit{ResetAt: s.ResetAt.UTC().Format(time.RFC3339)}
//		middleware.SetInt(&rl.Limit, s.Limit) // builds whether gqlgen maps Int to int or int32
//		middleware.SetInt(&rl.Cost, s.Cost)
//		middleware.SetInt(&rl.Remaining, s.Remaining)
//		middleware.SetInt(&rl.Used, s.Used)
//		middleware.SetInt(&rl.NodeCount, s.NodeCount)
//		return rl, nil
//	}
//
// ok is false when no extension of a Limiter priced the operation, or when
// its bucket could not be read (the store failed and the plan fails
// closed, for a dry run).
func RateLimitFrom(ctx context.Context) (RateLimitStatus, bool) {
	st, ok := stateOf(ctx)
	if !ok {
		return RateLimitStatus{}, false
	}
	st.mu.Lock()
	r, known := st.ask.rate, st.ask.rateKnown
	rs := RateLimitStatus{Limit: r.limit, Cost: r.cost, Remaining: r.remaining, Used: r.used, ResetAt: r.resetAt, NodeCount: r.nodes,
		Key: st.id.Key, Plan: st.id.Plan}
	st.mu.Unlock()
	if known {
		rs.ResetAt = time.Unix(unixCeil(rs.ResetAt, 0), 0) // rounded when asked: most operations never ask
	}
	return rs, known
}

// rateStatus is what an operation's state keeps of its RateLimitStatus:
// its numbers, ResetAt not yet rounded up to a second.
type rateStatus struct {
	limit, cost, remaining, used int64
	resetAt                      time.Time
	nodes                        int64
}

// noteRate records what RateLimitFrom returns for outcome o of an
// operation priced by rep at cost.
func (s *requestState) noteRate(rep *complexity.Report, cost int64, o *budget.Outcome, l *Limiter) {
	if !o.Known {
		return
	}
	left := max(o.Decision.Remaining, 0)
	rs := rateStatus{
		limit:     s.plan.Burst,
		cost:      cost,
		remaining: left,
		used:      max(s.plan.Burst-left, 0),
		resetAt:   l.clock.Now().Add(max(o.Decision.ResetAfter, 0)),
		nodes:     rep.Nodes,
	}
	s.mu.Lock()
	s.ask.rate, s.ask.rateKnown = rs, true
	s.mu.Unlock()
}

// rateLimitField is where a schema has the rate-limit field with its
// dryRun argument: on Query (which makes dry runs possible at all) and, if
// there too, on Mutation.
type rateLimitField struct {
	name                string
	onQuery, onMutation bool
}

func findRateLimitField(schema *ast.Schema, name string) *rateLimitField {
	f := &rateLimitField{name: name, onQuery: hasDryRun(schema.Query, name)}
	f.onMutation = f.onQuery && hasDryRun(schema.Mutation, name)
	return f
}

// hasDryRun reports whether def has a field name with a Boolean dryRun
// argument.
func hasDryRun(def *ast.Definition, name string) bool {
	if def == nil {
		return false
	}
	fd := def.Fields.ForName(name)
	if fd == nil {
		return false
	}
	a := fd.Arguments.ForName(dryRunArgument)
	return a != nil && a.Type.Elem == nil && a.Type.NamedType == "Boolean"
}

// checkRateLimitField finds the rate-limit field in schema when the
// extension is added to a server. Only a name other than the default is
// required to be there.
func (e *costExtension) checkRateLimitField(schema *ast.Schema, set *settings) error {
	f, err := set.rateLimitFieldOf(schema)
	if err != nil {
		return err
	}
	e.ask.rateField.Store(f)
	return nil
}

// rateLimitFieldOf finds the rate-limit field of s in schema; only a name
// other than the default is required to be there.
func (s *settings) rateLimitFieldOf(schema *ast.Schema) (*rateLimitField, error) {
	f := findRateLimitField(schema, s.gql.RateLimitField)
	if !f.onQuery && f.name != defaultGraphQLOptions().RateLimitField {
		return nil, fmt.Errorf("middleware: GraphQLOptions.RateLimitField is %q, but the schema's Query type has no such field with a Boolean argument %s",
			f.name, dryRunArgument)
	}
	return f, nil
}

// rateLimitField returns where the schema has the field set names (it
// changes with a Reload).
func (e *costExtension) rateLimitField(set *settings) *rateLimitField {
	if f := e.ask.rateField.Load(); f != nil && f.name == set.gql.RateLimitField {
		return f
	}
	f := findRateLimitField(e.schema, set.gql.RateLimitField)
	e.ask.rateField.Store(f)
	return f
}

// dryRun reports whether op selects the rate-limit field with dryRun true
// (a literal, a variable or the argument's default), as the executor will
// collect it: @skip and @include applied, fragments expanded. One such
// selection makes the whole operation a dry run.
func (e *costExtension) dryRun(set *settings, op *ast.OperationDefinition, vars map[string]any) bool {
	f := e.rateLimitField(set)
	if (op.Operation == ast.Query && f.onQuery) || (op.Operation == ast.Mutation && f.onMutation) {
		var spread map[string]bool
		return selectsDryRun(op.SelectionSet, f.name, vars, &spread)
	}
	return false
}

// selectsDryRun looks for the dry-run selection in a root selection set;
// spread records the fragments already expanded, so each is read once.
func selectsDryRun(ss ast.SelectionSet, name string, vars map[string]any, spread *map[string]bool) bool {
	for _, sel := range ss {
		switch s := sel.(type) {
		case *ast.Field:
			if s.Name == name && included(s.Directives, vars) && dryRunValue(s, vars) {
				return true
			}
		case *ast.InlineFragment:
			if included(s.Directives, vars) && selectsDryRun(s.SelectionSet, name, vars, spread) {
				return true
			}
		case *ast.FragmentSpread:
			if s.Definition == nil || !included(s.Directives, vars) || (*spread)[s.Name] {
				continue
			}
			if *spread == nil {
				*spread = make(map[string]bool)
			}
			(*spread)[s.Name] = true
			if selectsDryRun(s.Definition.SelectionSet, name, vars, spread) {
				return true
			}
		}
	}
	return false
}

// included applies @skip and @include. A condition that is not a Boolean
// counts as absent: the analyzer has already refused such an operation.
func included(dirs ast.DirectiveList, vars map[string]any) bool {
	for _, d := range dirs {
		if d.Name != "skip" && d.Name != "include" {
			continue
		}
		a := d.Arguments.ForName("if")
		if a == nil {
			continue
		}
		v, err := a.Value.Value(vars)
		b, ok := v.(bool)
		if err != nil || !ok {
			continue
		}
		if (d.Name == "skip") == b {
			return false
		}
	}
	return true
}

// dryRunValue is the dryRun argument of f as its resolver will receive it:
// the literal, else the variable when it was given (null is false), else
// the argument's default.
func dryRunValue(f *ast.Field, vars map[string]any) bool {
	if a := f.Arguments.ForName(dryRunArgument); a != nil {
		if a.Value.Kind != ast.Variable {
			v, _ := a.Value.Value(vars)
			b, _ := v.(bool)
			return b
		}
		if v, given := vars[a.Value.Raw]; given {
			b, _ := v.(bool)
			return b
		}
	}
	if f.Definition == nil {
		return false
	}
	if d := f.Definition.Arguments.ForName(dryRunArgument); d != nil && d.DefaultValue != nil {
		v, _ := d.DefaultValue.Value(nil)
		b, _ := v.(bool)
		return b
	}
	return false
}

// InterceptRootField implements graphql.RootFieldInterceptor: in a dry run
// every root field but the rate-limit field resolves to null without its
// resolver running; a non-null one adds a DRY_RUN error saying so.
func (e *costExtension) InterceptRootField(ctx context.Context, next graphql.RootResolver) graphql.Marshaler {
	st, ok := stateOf(ctx)
	if !ok || !st.ask.dryRun {
		return next(ctx)
	}
	rf := graphql.GetRootFieldContext(ctx)
	if rf == nil || rf.Field.Field == nil || rf.Field.Name == st.set.gql.RateLimitField {
		return next(ctx)
	}
	if def := rf.Field.Definition; def != nil && def.Type.NonNull {
		key := cmp.Or(rf.Field.Alias, rf.Field.Name)
		ge := codedError(CodeDryRun, 0, "%s was not executed: the operation is a dry run (%s(%s: true)); nothing was debited",
			key, st.set.gql.RateLimitField, dryRunArgument)
		ge.Path = ast.Path{ast.PathName(key)}
		if pos := rf.Field.Position; pos != nil {
			ge.Locations = []gqlerror.Location{{Line: pos.Line, Column: pos.Column}}
		}
		graphql.AddError(ctx, ge)
	}
	return graphql.Null
}
