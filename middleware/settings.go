package middleware

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/internal/seconds"
)

// settings is the part of a Limiter's configuration Reload may swap: the
// plans, how requests are identified, the GraphQL options, the REST costs
// and the modes. It is immutable once built; a request loads the current
// one once and keeps it to its end, so a swap never mixes two.
type settings struct {
	// pol is what the budget engine decides by; plans are its plans with
	// their headers.
	pol      *budget.Policy
	plans    map[string]*plan
	ident    identity.Identifier
	gql      GraphQLOptions
	routes   *http.ServeMux
	restCost int64
	lanes    []*lane // in order; empty: no lanes
	// fieldHeaders are the field limits' RateLimit-Policy names and items,
	// by coordinate.
	fieldHeaders map[string]limitHeaders
	// routeHeaders are the route limits', by pattern; routeLimits matches
	// a request to its route limit.
	routeHeaders map[string]limitHeaders
	routeLimits  *http.ServeMux
	// addrKey keys a request by its client address, for limits ByIP.
	addrKey func(*http.Request) string
	// maxSubscriptions caps a principal's open subscriptions (0: no cap).
	maxSubscriptions int
	// leastBurst is the least burst a plan (or an override) must have: the
	// fixed costs (InvalidCost, MinCost, the REST costs) must fit it.
	leastBurst int64
	// anonymousPlan is the plan of requests keyed by client address.
	anonymousPlan string
	// overrides are the per-principal overrides in force (the Limiter's,
	// set after compileSettings).
	overrides *overrides
	// trusted is the trusted documents (nil: none).
	trusted *trustedSet
	// relaxPlans: some plan lifts the structural caps
	// (budget.Plan.RelaxStructuralLimits).
	relaxPlans bool
	// listSizes are Policy.ListSizes; sizes the Limiter's recorder.
	listSizes map[string]int
	sizes     *complexity.ListSizeRecorder
}

// compileSettings validates cfg, a Policy, against the Limiter's
// dependencies: New's check and Reload's are this one.
func (l *Limiter) compileSettings(cfg Policy) (*settings, error) {
	s := &settings{}
	gql, err := normalizeGraphQL(cfg.GraphQL)
	if err != nil {
		return nil, err
	}
	s.gql, s.listSizes, s.sizes = gql, maps.Clone(cfg.ListSizes), l.sizes
	perPrincipal := cfg.Concurrency.PerPrincipal
	switch {
	case perPrincipal == None: // no cap, which is also the default
		perPrincipal = 0
	case perPrincipal < 0:
		return nil, keyed(fmt.Errorf("%w: Concurrency.PerPrincipal %d is negative (None: no cap)", ErrInvalidConfig, perPrincipal), "concurrency", "per_principal")
	}
	var lanes []budget.LaneBudget
	for _, ln := range cfg.Lanes {
		if b := ln.Budget; b != nil && budget.ValidName(ln.Name) {
			lanes = append(lanes, budget.LaneBudget{Name: ln.Name, Burst: b.Burst, Rate: b.Rate, Per: b.Per})
		}
	}
	if s.pol, err = budget.Compile(budget.Config{
		Plans:         cfg.Plans,
		FieldLimits:   cfg.FieldLimits,
		RouteLimits:   cfg.REST.RouteLimits,
		Lanes:         lanes,
		Mode:          cfg.Mode,
		FailureMode:   cfg.FailureMode,
		InvalidCost:   gql.InvalidCost,
		MaxConcurrent: perPrincipal,
	}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, underREST(laneIndexed(err, cfg.Lanes)))
	}
	s.buildPlans()
	s.buildFieldHeaders()
	s.anonymousPlan = cfg.AnonymousPlan
	if _, ok := s.plans[cfg.AnonymousPlan]; !ok {
		return nil, keyed(fmt.Errorf("%w: anonymous plan %q is not among the plans (%s)", ErrInvalidConfig, cfg.AnonymousPlan, s.planList()), "anonymous_plan")
	}
	if err := l.buildIdentity(s, cfg); err != nil {
		return nil, err
	}
	s.leastBurst = max(gql.InvalidCost, gql.MinCost)
	if smallest := s.smallestPlan(); max(gql.InvalidCost, gql.MinCost) > smallest.Burst {
		key := "invalid_cost"
		if gql.MinCost > gql.InvalidCost {
			key = "min_cost"
		}
		return nil, keyed(fmt.Errorf("%w: GraphQL InvalidCost (%d) and MinCost (%d) must not exceed the burst %d of plan %q",
			ErrInvalidConfig, gql.InvalidCost, gql.MinCost, smallest.Burst, smallest.Name()), "graphql", key)
	}
	if err := s.buildRoutes(cfg.REST); err != nil {
		return nil, err
	}
	if err := s.buildLanes(cfg.Lanes); err != nil {
		return nil, err
	}
	if s.maxSubscriptions, err = cfg.Subscriptions.maxSubscriptions(); err != nil {
		return nil, keyed(err, "subscriptions", "max_per_principal")
	}
	if s.trusted, err = compileTrusted(cfg.TrustedDocuments); err != nil {
		return nil, err
	}
	return s, nil
}

// keysThen resolves an API key from the table keys, then, for a key it
// does not list, through lookup (nil: none). Nil when there is neither.
func keysThen(keys map[string]identity.APIKey, lookup identity.KeyLookup) identity.KeyLookup {
	if len(keys) == 0 {
		return lookup
	}
	table := identity.NewStaticKeys(keys)
	if lookup == nil {
		return table
	}
	return tableThenLookup{table, lookup}
}

// tableThenLookup is keysThen of a table and a lookup: a key in both
// grants what the table says.
type tableThenLookup struct {
	table  *identity.StaticKeys
	lookup identity.KeyLookup
}

func (k tableThenLookup) LookupAPIKey(ctx context.Context, apiKey string) (string, string, error) {
	principal, plan, err := k.table.LookupAPIKey(ctx, apiKey)
	if errors.Is(err, identity.ErrUnknownAPIKey) {
		return k.lookup.LookupAPIKey(ctx, apiKey)
	}
	return principal, plan, err
}

// buildIdentity sets who pays under s: the API keys' plans checked, the
// identifier (New's, or the default chain of keys and addresses) and the
// client address key.
func (l *Limiter) buildIdentity(s *settings, cfg Policy) (err error) {
	for _, key := range slices.Sorted(maps.Keys(cfg.APIKeys)) {
		if name := cfg.APIKeys[key].Plan; s.plans[name] == nil {
			return keyed(fmt.Errorf("%w: an API key grants plan %q, which is not among the plans (%s)", ErrInvalidConfig, name, s.planList()), "api_keys")
		}
	}
	s.ident = l.ident
	if s.ident == nil {
		s.ident, err = identity.NewChain(identity.ChainConfig{
			Keys:           keysThen(cfg.APIKeys, l.keys),
			AnonymousPlan:  cfg.AnonymousPlan,
			TrustedProxies: cfg.TrustedProxies,
			ProxyHeader:    cfg.ProxyHeader,
		})
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, keyed(err, "trusted_proxies"))
		}
	}
	if s.addrKey, err = identity.NewAddressKey(identity.ChainConfig{TrustedProxies: cfg.TrustedProxies, ProxyHeader: cfg.ProxyHeader}); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// laneIndexed puts the index of the lane in place of its name in the path
// of a budget.ConfigError about a lane's budget, which budget.Compile
// names by the lane's name.
func laneIndexed(err error, lanes []Lane) error {
	var ce *budget.ConfigError
	if !errors.As(err, &ce) || len(ce.Path) < 2 || ce.Path[0] != "lanes" {
		return err
	}
	for i, l := range lanes {
		if l.Name == ce.Path[1] {
			ce.Path[1] = strconv.Itoa(i)
			break
		}
	}
	return err
}

// underREST puts the route limits' configuration errors under "rest",
// where a configuration file has them (budget.Compile names them from
// "route_limits").
func underREST(err error) error {
	var ce *budget.ConfigError
	if errors.As(err, &ce) && len(ce.Path) > 0 && ce.Path[0] == "route_limits" {
		ce.Path = append([]string{"rest"}, ce.Path...)
	}
	return err
}

// overflowKeys is the room for overflow buckets: one per plan, with spare
// room for the plans a Reload adds.
func overflowKeys(plans int) int { return max(2*plans, 64) }

// current returns the settings in force.
func (l *Limiter) current() *settings { return l.settings.Load() }

// buildPlans puts the rate-limit headers of each plan of the policy
// beside it.
func (s *settings) buildPlans() {
	s.plans = make(map[string]*plan, len(s.pol.PlanNames()))
	for _, name := range s.pol.PlanNames() {
		r, _ := s.pol.Plan(name)
		s.plans[name] = newPlan(r)
		s.relaxPlans = s.relaxPlans || r.RelaxStructuralLimits
	}
}

// newPlan puts the rate-limit headers of r beside it: a plan's rule, or an
// override's.
func newPlan(r *budget.Rule) *plan {
	q := sfString(r.Name())
	p := &plan{
		Rule:         r,
		quotedName:   q,
		burstText:    strconv.FormatInt(r.Burst, 10),
		policyHeader: fmt.Sprintf("%s;q=%d;w=%d", q, r.Burst, fillSeconds(r.Burst, r.Rate, r.Per)),
		restoreRate:  float64(r.Rate) / r.Per.Seconds(),
	}
	if qr := r.QuotaRule(); qr != nil {
		p.quotaQuoted = sfString(qr.Name)
		p.quotaPolicy = p.quotaQuoted + ";q=" + strconv.FormatInt(qr.Limit.Rate, 10) + ";w=" + strconv.FormatInt(seconds.Ceil(qr.Limit.Period), 10)
		p.bothPolicies = p.policyHeader + ", " + p.quotaPolicy
	}
	return p
}

// planList names the plans, sorted, for error messages.
func (s *settings) planList() string {
	names := make([]string, 0, len(s.plans))
	for _, n := range s.pol.PlanNames() {
		names = append(names, fmt.Sprintf("%q", n))
	}
	return strings.Join(names, ", ")
}

// smallestPlan returns the plan with the smallest burst (ties by name), the
// one a fixed cost is checked against.
func (s *settings) smallestPlan() *plan {
	var min *plan
	for _, name := range s.pol.PlanNames() { // sorted: ties go to the first name
		if p := s.plans[name]; min == nil || p.Burst < min.Burst {
			min = p
		}
	}
	return min
}

// orDefault resolves one option: 0 takes its default, None becomes 0 (no
// cap, or no cost), any other negative value is an error.
func orDefault[T int | int64](name string, v *T, def T) error {
	switch {
	case *v == 0:
		*v = def
	case *v == None:
		*v = 0
	case *v < 0:
		return fmt.Errorf("%w: GraphQL option %s is %d; it must be positive, 0 for the default or None", ErrInvalidConfig, name, *v)
	}
	return nil
}

// defaultGraphQLOptions returns the value each zero field of
// GraphQLOptions takes (0 for MaxCost and UploadCostPerMiB: no cap, no
// cost), Defaults' Policy.GraphQL. Each default is written here once.
func defaultGraphQLOptions() GraphQLOptions {
	return GraphQLOptions{
		MaxDepth:          15, // GraphiQL's schema query is 13 deep
		MaxBreadth:        100,
		MaxNodes:          500_000,
		DefaultListSize:   complexity.DefaultListSize,
		MutationCost:      complexity.DefaultMutationBaseCost,
		MaxAliases:        100,
		MaxRootFields:     100,
		MaxTokens:         20_000,
		MaxSelections:     500,
		MaxVariableValues: 10_000,
		MaxVariablesDepth: 32,
		InvalidCost:       1,
		MinCost:           1,
		IntrospectionCost: 50,
		RateLimitField:    "rateLimit", // GitHub's name
	}
}

// normalizeGraphQL resolves the options to their effective values, where 0
// means no cap (or no cost) for every field but DefaultListSize.
func normalizeGraphQL(o GraphQLOptions) (GraphQLOptions, error) {
	def := defaultGraphQLOptions()
	if o.RateLimitField == "" {
		o.RateLimitField = def.RateLimitField
	}
	if o.DefaultListSize == None {
		return o, fmt.Errorf("%w: GraphQL option complexity.DefaultListSize cannot be None: a list needs a size", ErrInvalidConfig)
	}
	for _, err := range []error{
		orDefault("MaxDepth", &o.MaxDepth, def.MaxDepth),
		orDefault("MaxBreadth", &o.MaxBreadth, def.MaxBreadth),
		orDefault("MaxNodes", &o.MaxNodes, def.MaxNodes),
		orDefault("MaxCost", &o.MaxCost, def.MaxCost), // by default the plan's burst is the only ceiling
		orDefault("DefaultListSize", &o.DefaultListSize, def.DefaultListSize),
		orDefault("MutationCost", &o.MutationCost, def.MutationCost),
		orDefault("MaxAliases", &o.MaxAliases, def.MaxAliases),
		orDefault("MaxRootFields", &o.MaxRootFields, def.MaxRootFields),
		orDefault("MaxTokens", &o.MaxTokens, def.MaxTokens),
		orDefault("MaxSelections", &o.MaxSelections, def.MaxSelections),
		orDefault("MaxVariableValues", &o.MaxVariableValues, def.MaxVariableValues),
		orDefault("MaxVariablesDepth", &o.MaxVariablesDepth, def.MaxVariablesDepth),
		orDefault("InvalidCost", &o.InvalidCost, def.InvalidCost),
		orDefault("MinCost", &o.MinCost, def.MinCost),
		orDefault("IntrospectionCost", &o.IntrospectionCost, def.IntrospectionCost),
		orDefault("UploadCostPerMiB", &o.UploadCostPerMiB, def.UploadCostPerMiB),
	} {
		if err != nil {
			return o, err
		}
	}
	return o, nil
}

// identify resolves who pays for r and on which plan.
func (s *settings) identify(r *http.Request) (identity.Identity, *plan, error) {
	id, err := s.ident.Identify(r)
	if err != nil {
		return id, nil, err
	}
	// An Identifier may name a principal by anything a client sent: past
	// kept.MaxKey bytes the key becomes its prefix and its hash, still
	// its alone, so that no table holds more of it.
	if len(id.Key) > kept.MaxKey {
		id.Key = kept.Bound(id.Key, kept.MaxKey)
	}
	p, ok := s.plans[id.Plan]
	if !ok {
		return id, nil, fmt.Errorf("middleware: identity %s has plan %q, which is not among the plans (%s)", id.Key, id.Plan, s.planList())
	}
	return id, s.overrides.apply(s, id.Key, p), nil
}
