package middleware

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter"
)

// settings is the part of a Limiter's configuration Reload may swap: the
// plans, how requests are identified, the GraphQL options, the REST costs
// and the modes. It is immutable once built; a request loads the current
// one once and keeps it to its end, so a swap never mixes two.
type settings struct {
	plans    map[string]*plan
	ident    identity.Identifier
	gql      GraphQLOptions
	routes   *http.ServeMux
	restCost int64
	lanes    []*lane // in order; empty: no lanes
	failOpen bool    // the global failure mode, for lane budgets
	// fieldLimits by coordinate (nil: none); fieldCoords are their
	// coordinates, sorted, as the analyzer counts them.
	fieldLimits map[string]*fieldLimit
	fieldCoords []string
	// addrKey keys a request by its client address, for limits ByIP;
	// anyByIP says whether a field limit needs it.
	addrKey func(*http.Request) string
	anyByIP bool
	// maxSubscriptions caps a principal's open subscriptions (0: no cap).
	maxSubscriptions int
}

// compileSettings validates the reloadable part of cfg.
func compileSettings(cfg Config) (*settings, error) {
	s := &settings{}
	failure := cfg.FailureMode
	if failure == "" {
		failure = FailOpen
	}
	if failure != FailOpen && failure != FailClosed {
		return nil, fmt.Errorf("%w: failure mode %q is neither %q nor %q", ErrInvalidConfig, failure, FailOpen, FailClosed)
	}
	mode := cfg.Mode
	if mode == "" {
		mode = Enforce
	}
	if mode != Enforce && mode != Shadow {
		return nil, fmt.Errorf("%w: mode %q is neither %q nor %q", ErrInvalidConfig, mode, Enforce, Shadow)
	}
	s.failOpen = failure == FailOpen
	if err := s.buildPlans(cfg.Plans, failure, mode); err != nil {
		return nil, err
	}
	if _, ok := s.plans[cfg.AnonymousPlan]; !ok {
		return nil, fmt.Errorf("%w: anonymous plan %q is not among the plans (%s)", ErrInvalidConfig, cfg.AnonymousPlan, s.planList())
	}
	if sk, ok := cfg.APIKeys.(*identity.StaticKeys); ok && sk != nil {
		for _, name := range sk.Plans() {
			if _, ok := s.plans[name]; !ok {
				return nil, fmt.Errorf("%w: an API key grants plan %q, which is not among the plans (%s)", ErrInvalidConfig, name, s.planList())
			}
		}
	}
	s.ident = cfg.Identifier
	if s.ident == nil {
		var err error
		s.ident, err = identity.NewChain(identity.ChainConfig{
			Keys:           cfg.APIKeys,
			AnonymousPlan:  cfg.AnonymousPlan,
			TrustedProxies: cfg.TrustedProxies,
			ProxyHeader:    cfg.ProxyHeader,
		})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	gql, err := normalizeGraphQL(cfg.GraphQL)
	if err != nil {
		return nil, err
	}
	s.gql = gql
	if smallest := s.smallestPlan(); max(gql.InvalidCost, gql.MinCost) > smallest.Burst {
		return nil, fmt.Errorf("%w: GraphQL InvalidCost (%d) and MinCost (%d) must not exceed the burst %d of plan %q",
			ErrInvalidConfig, gql.InvalidCost, gql.MinCost, smallest.Burst, smallest.name)
	}
	if err := s.buildFieldLimits(cfg.FieldLimits); err != nil {
		return nil, err
	}
	if s.addrKey, err = identity.NewAddressKey(identity.ChainConfig{TrustedProxies: cfg.TrustedProxies, ProxyHeader: cfg.ProxyHeader}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := s.buildRoutes(cfg.REST); err != nil {
		return nil, err
	}
	if err := s.buildLanes(cfg.Lanes); err != nil {
		return nil, err
	}
	if err := s.buildConcurrency(cfg); err != nil {
		return nil, err
	}
	if s.maxSubscriptions, err = cfg.Subscriptions.maxSubscriptions(); err != nil {
		return nil, err
	}
	return s, nil
}

// overflowKeys is the room for overflow buckets: one per plan, with spare
// room for the plans a Reload adds.
func overflowKeys(plans int) int { return max(2*plans, 64) }

// overflowBudgets is how many overflow budgets s may need: per plan a
// bucket, a quota and the field limits, and a bucket per lane budget.
func (s *settings) overflowBudgets() int {
	n := len(s.plans) * (2 + len(s.fieldLimits))
	for _, ln := range s.lanes {
		if ln.budget != nil {
			n++
		}
	}
	return n
}

// attachStores checks that the stores can decide each plan of s: from
// split-budget leases when it asks for them, several budgets at once when
// it has a quota or field limits, and an overflow bucket for each budget.
func (l *Limiter) attachStores(s *settings) error {
	buckets := s.overflowBudgets()
	if buckets > l.overflowRoom {
		return fmt.Errorf("%w: %d overflow budgets (plans × (bucket, quota, field limits) and lane budgets): the Limiter has room for %d without a restart", ErrInvalidConfig, buckets, l.overflowRoom)
	}
	for _, p := range s.plans {
		if p.SplitBudget && !l.splitBudget {
			return fmt.Errorf("%w: plan %q: SplitBudget needs split-budget leases, which the Limiter was built without (no plan had SplitBudget); restart to add them", ErrInvalidConfig, p.name)
		}
		if s.multiLimited(p) {
			if err := l.stores.CanTakeAll(p.SplitBudget); err != nil {
				return fmt.Errorf("%w: plan %q: quotas and field limits need a store that decides several budgets at once (limiter.MultiTaker and limiter.MultiRefunder: memorystore, redisstore): %w", ErrInvalidConfig, p.name, err)
			}
		}
	}
	return nil
}

// Reload validates cfg and swaps in its plans, anonymous plan, API keys and
// identification (APIKeys, Identifier, TrustedProxies, ProxyHeader),
// GraphQL options, REST costs, failure mode and modes, atomically: a
// request in flight finishes under the configuration it started with, the
// next one sees the new one, and none is dropped. Budgets are kept: a
// principal's bucket is the same key under its plan's new limit. On error
// the running configuration stays.
//
// The fields that shape the stores and the body bounds are fixed when New
// runs and Reload ignores them: Store, MemoryStore, OverLimitCache,
// SplitBudget, StoreTimeout, MaxBodyBytes, MaxBodyBytesInFlight,
// RetryAfterJitter, Observer, Overload, Challenger, Logger and Clock. A plan may turn
// SplitBudget on only if some plan had it at New.
func (l *Limiter) Reload(cfg Config) error {
	s, err := compileSettings(cfg)
	if err != nil {
		return err
	}
	if err := l.attachStores(s); err != nil {
		return err
	}
	if err := l.checkChallenges(s); err != nil {
		return err
	}
	if err := l.checkSchemas(s); err != nil {
		return err
	}
	l.settings.Store(s)
	return nil
}

// current returns the settings in force.
func (l *Limiter) current() *settings { return l.settings.Load() }

func (s *settings) buildPlans(plans map[string]Plan, mode FailureMode, global Mode) error {
	if len(plans) == 0 {
		return fmt.Errorf("%w: no plans", ErrInvalidConfig)
	}
	s.plans = make(map[string]*plan, len(plans))
	for name, p := range plans {
		if !validPlanName(name) {
			return fmt.Errorf("%w: plan name %q must be non-empty printable ASCII", ErrInvalidConfig, name)
		}
		if p.Burst <= 0 || p.Rate <= 0 || p.Per <= 0 {
			return fmt.Errorf("%w: plan %q: burst (%d), rate (%d) and per (%v) must be positive", ErrInvalidConfig, name, p.Burst, p.Rate, p.Per)
		}
		limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: p.Burst, Rate: p.Rate, Period: p.Per}
		if err := limit.Validate(); err != nil {
			return fmt.Errorf("%w: plan %q: %w", ErrInvalidConfig, name, err)
		}
		pm := p.FailureMode
		if pm == "" {
			pm = mode
		}
		shadow := p.Mode
		if shadow == "" {
			shadow = global
		}
		if shadow != Enforce && shadow != Shadow {
			return fmt.Errorf("%w: plan %q: mode %q is neither %q nor %q", ErrInvalidConfig, name, shadow, Enforce, Shadow)
		}
		if pm != FailOpen && pm != FailClosed {
			return fmt.Errorf("%w: plan %q: failure mode %q is neither %q nor %q", ErrInvalidConfig, name, pm, FailOpen, FailClosed)
		}
		q := sfString(name)
		policy := fmt.Sprintf("%s;q=%d;w=%d", q, p.Burst, fillSeconds(p.Burst, p.Rate, p.Per))
		quota, err := buildQuota(name, p, policy)
		if err != nil {
			return err
		}
		s.plans[name] = &plan{
			quota:        quota,
			Plan:         p,
			name:         name,
			limit:        limit,
			failOpen:     pm == FailOpen,
			shadow:       shadow == Shadow,
			quotedName:   q,
			burstText:    strconv.FormatInt(p.Burst, 10),
			policyHeader: policy,
			restoreRate:  float64(p.Rate) / p.Per.Seconds(),
		}
	}
	return nil
}

// planList names the plans, sorted, for error messages.
func (s *settings) planList() string {
	names := make([]string, 0, len(s.plans))
	for n := range s.plans {
		names = append(names, fmt.Sprintf("%q", n))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// smallestPlan returns the plan with the smallest burst (ties by name), the
// one a fixed cost is checked against.
func (s *settings) smallestPlan() *plan {
	var min *plan
	for _, p := range s.plans {
		if min == nil || p.Burst < min.Burst || (p.Burst == min.Burst && p.name < min.name) {
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

// normalizeGraphQL resolves the options to their effective values, where 0
// means no cap (or no cost) for every field but DefaultListSize.
func normalizeGraphQL(o GraphQLOptions) (GraphQLOptions, error) {
	if o.RateLimitField == "" {
		o.RateLimitField = DefaultRateLimitField
	}
	if o.DefaultListSize == None {
		return o, fmt.Errorf("%w: GraphQL option complexity.DefaultListSize cannot be None: a list needs a size", ErrInvalidConfig)
	}
	for _, err := range []error{
		orDefault("MaxDepth", &o.MaxDepth, DefaultMaxDepth),
		orDefault("MaxBreadth", &o.MaxBreadth, DefaultMaxBreadth),
		orDefault("MaxNodes", &o.MaxNodes, DefaultMaxNodes),
		orDefault("MaxCost", &o.MaxCost, 0), // by default the plan's burst is the only ceiling
		orDefault("DefaultListSize", &o.DefaultListSize, complexity.DefaultListSize),
		orDefault("MutationCost", &o.MutationCost, complexity.DefaultMutationBaseCost),
		orDefault("MaxAliases", &o.MaxAliases, DefaultMaxAliases),
		orDefault("MaxRootFields", &o.MaxRootFields, DefaultMaxRootFields),
		orDefault("MaxTokens", &o.MaxTokens, DefaultMaxTokens),
		orDefault("MaxSelections", &o.MaxSelections, DefaultMaxSelections),
		orDefault("MaxVariableValues", &o.MaxVariableValues, DefaultMaxVariableValues),
		orDefault("MaxVariablesDepth", &o.MaxVariablesDepth, DefaultMaxVariablesDepth),
		orDefault("InvalidCost", &o.InvalidCost, DefaultInvalidCost),
		orDefault("MinCost", &o.MinCost, DefaultMinCost),
		orDefault("IntrospectionCost", &o.IntrospectionCost, DefaultIntrospectionCost),
		orDefault("UploadCostPerMiB", &o.UploadCostPerMiB, 0),
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
	p, ok := s.plans[id.Plan]
	if !ok {
		return id, nil, fmt.Errorf("middleware: identity %s has plan %q, which is not among the plans (%s)", id.Key, id.Plan, s.planList())
	}
	return id, p, nil
}
