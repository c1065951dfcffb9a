package budget

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/internal/logevery"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/concurrency"
)

// FailureMode chooses what happens when the store fails or times out.
type FailureMode string

const (
	// FailOpen admits through a local in-memory bucket per identity (the
	// same limit, kept by this process only), started from the store's last
	// decision this process saw for it, or empty (limiter/lastknown), and
	// logs a warning at most once a minute.
	FailOpen FailureMode = "open"
	// FailClosed refuses (Unavailable: 503 with Retry-After, GraphQL code
	// RATE_LIMITER_UNAVAILABLE).
	FailClosed FailureMode = "closed"
)

// Mode says whether the engine refuses what it would refuse.
type Mode string

const (
	// Enforce refuses what the budget cannot pay or a static cap forbids.
	Enforce Mode = "enforce"
	// Shadow prices and debits everything as Enforce does, but lets what
	// Enforce would refuse for its budget or a static cap run, answering as
	// if admitted; the decision is reported as ClassShadowRejected and
	// logged. The document bounds (body size, MaxTokens, MaxSelections,
	// variables) and complexity.AbsoluteMaxDepth, which protect the server
	// before anything is priced, stay on; so do DisableIntrospection and
	// fail-closed 503s.
	Shadow Mode = "shadow"
)

// None, given for a count, lifts its cap (Plan.MaxConcurrent). A zero
// field always means the default, so None is how to say "nothing".
const None = -1

// Plan is a token bucket in points: Burst points at most, Rate points
// restored every Per.
type Plan struct {
	Burst int64         `yaml:"burst"`
	Rate  int64         `yaml:"rate"`
	Per   time.Duration `yaml:"per"`
	// FailureMode overrides Config.FailureMode for this plan when set.
	FailureMode FailureMode `yaml:"failure_mode"`
	// Mode overrides Config.Mode for this plan when set.
	Mode Mode `yaml:"mode"`
	// DisableIntrospection refuses operations of this plan that select
	// __schema or __type (INTROSPECTION_DISABLED).
	DisableIntrospection bool `yaml:"-"`
	// DisableCostReport refuses the per-field breakdown a request asks for
	// with "GraphQL-Cost: report" (400 COST_REPORT_DISABLED): a report prices
	// the operation a second time and tells the client how the schema is
	// priced.
	DisableCostReport bool `yaml:"-"`
	// SplitBudget serves this plan from local leases of each principal's
	// budget (limiter/splitbudget): most requests skip the store's round
	// trip, at the price of up to (gateways × lease) points of overshoot
	// within a window. For UX-grade plans; leave it false (the default)
	// for billing-grade plans, which the store then keeps exact.
	SplitBudget bool `yaml:"split_budget"`
	// MaxConcurrent caps this plan's principals' requests in flight at
	// once, overriding Config.MaxConcurrent (0: that; None: no cap).
	MaxConcurrent int `yaml:"-"`
	// Quota, when set, is a second budget the same cost is drawn from, in
	// fixed windows aligned to UTC ("100,000 a day"): see Quota.
	Quota *Quota `yaml:"quota"`
	// DisableRefund keeps the whole requested cost of a GraphQL operation
	// even when its response shows it cost less: by default the unused
	// part (requested − actual) is given back before the response is
	// written (docs/middleware.md, "Actual cost and refunds").
	DisableRefund bool `yaml:"-"`
	// Unlimited never refuses this plan's requests for budget: trusted
	// internal callers. They are priced, debited and reported as on any
	// plan (headers, extensions.cost, events), and a request its budgets
	// cannot pay (the bucket, the quota, a field limit or a lane budget is
	// short, or the cost is above the burst) runs anyway, unpaid: nothing is
	// debited for it and the headers show the budgets as they are. Static
	// caps (depth, breadth, MaxCost, …) still refuse, and pay InvalidCost.
	Unlimited bool `yaml:"unlimited"`
	// RelaxStructuralLimits lifts, for this plan's requests, the caps on an
	// operation's shape: the middleware's MaxDepth, MaxAliases,
	// MaxRootFields and MaxNodes. The price, the budget, MaxCost,
	// MaxBreadth, the bounds on variables, complexity.AbsoluteMaxDepth and
	// the document bounds (MaxTokens, MaxSelections), which guard the
	// parser before anything is priced, still apply: a plan's documents may
	// be any text (a trusted document's RelaxStructuralLimits lifts the
	// document bounds too, its text being known at start).
	RelaxStructuralLimits bool `yaml:"relax_structural_limits"`
}

// Quota is a plan's second budget: Limit points per fixed window of Per,
// drawn by the same cost as the plan's bucket ("5,000 an hour, 100,000 a
// day"). Windows are aligned on multiples of Per since the Unix epoch, so a
// 24h quota renews at midnight UTC and a 1h quota on the hour. A request is
// admitted only if the bucket and the quota (and the field limits it
// selects) can all pay; otherwise none of them is debited.
type Quota struct {
	// Limit is the points one window admits. It must be at least the
	// plan's Burst: a smaller quota would make the burst unreachable.
	Limit int64 `yaml:"limit"`
	// Per is the window.
	Per time.Duration `yaml:"per"`
	// Name is the quota's policy name in RateLimit-Policy. Default: the
	// plan's name and "-daily" (Per 24h), "-hourly" (1h), "-weekly" (168h)
	// or "-quota".
	Name string `yaml:"name"`
}

// FieldLimitBy says whose selections of a field a FieldLimit counts.
type FieldLimitBy string

const (
	// ByPrincipal counts per principal (the identity that pays: user, API
	// key, or client address for anonymous requests). The default.
	ByPrincipal FieldLimitBy = "principal"
	// ByIP counts per client address (IPv6 by /64), whoever the principal
	// is (Request.Addr).
	ByIP FieldLimitBy = "ip"
	// ByBoth counts twice, once for the principal and once for the client
	// address, and each count must admit; when the principal is keyed by
	// the address (an anonymous request), once.
	ByBoth FieldLimitBy = "both"
)

// LimitAlgorithm names how a FieldLimit (or a route limit) counts, by the
// names of limiter.Algorithm.
type LimitAlgorithm string

// The algorithms of a FieldLimit.
const (
	// TokenBucket (the default): Limit at once, refilled at Limit per Per.
	TokenBucket LimitAlgorithm = "token_bucket"
	// LeakyBucketPolicing admits exactly what TokenBucket admits, seen as
	// a bucket of Limit draining at Limit per Per.
	LeakyBucketPolicing LimitAlgorithm = "leaky_bucket_policing"
	// LeakyBucketShaping lets Limit per Per depart, evenly spaced: an
	// admitted request is told to wait its turn (Outcome.Delay), at most
	// MaxDelay, and one that would wait longer is refused. A turn taken
	// is never given back, not even when the client leaves while it waits.
	LeakyBucketShaping LimitAlgorithm = "leaky_bucket_shaping"
	// FixedWindow admits Limit per window of Per aligned on multiples of
	// Per since the Unix epoch (a calendar quota: up to twice Limit across
	// a window's end).
	FixedWindow LimitAlgorithm = "fixed_window"
	// SlidingLog admits Limit in any trailing Per, exactly, keeping one
	// timestamp per admitted count (Limit at most limiter.MaxLogRate).
	SlidingLog LimitAlgorithm = "sliding_log"
	// SlidingCounter approximates a trailing Per with two fixed windows,
	// weighting the previous one by how much of it still trails: constant
	// memory, for high volumes.
	SlidingCounter LimitAlgorithm = "sliding_counter"
)

// Shaping delays of LeakyBucketShaping limits.
const (
	// DefaultMaxDelay is a shaping limit's MaxDelay when it sets none.
	DefaultMaxDelay = time.Second
	// MaxMaxDelay is the longest MaxDelay: a request is not held longer.
	MaxMaxDelay = time.Minute
)

// FieldLimit is a rate on one schema field ("Mutation.login": 5 a minute),
// counted per selection: each alias, each occurrence through fragments,
// and each item of an enclosing list by its priced size. By default it is
// a token bucket: Limit selections at once, refilled at Limit per Per.
//
// The same type limits a REST route (Config.RouteLimits), counting 1 per
// request.
type FieldLimit struct {
	Limit int64         `yaml:"limit"`
	Per   time.Duration `yaml:"per"`
	// By is ByPrincipal (the default), ByIP or ByBoth.
	By FieldLimitBy `yaml:"by"`
	// Algorithm is how Limit per Per is counted (default TokenBucket).
	// For the window algorithms Limit is admitted per window of Per; for
	// the buckets, Limit at once, restored at Limit per Per.
	Algorithm LimitAlgorithm `yaml:"algorithm"`
	// MaxDelay, for LeakyBucketShaping only, is the longest an admitted
	// request is told to wait (default DefaultMaxDelay, at most
	// MaxMaxDelay): the queue ahead of it holds at most MaxDelay × Limit /
	// Per counts. LeakyBucketShaping limits must all count by the same key
	// (all ByPrincipal or all ByIP, never ByBoth): the budgets of two keys
	// are decided apart, and a turn taken cannot be given back if the
	// other refuses.
	MaxDelay time.Duration `yaml:"max_delay"`
}

// compileLimit turns a field or route limit into its limiter.Limit; what
// names the limit in errors, path its key.
func compileLimit(fl FieldLimit, what string, path ...string) (limiter.Limit, error) {
	if fl.Limit <= 0 || fl.Per <= 0 {
		return limiter.Limit{}, keyed(fmt.Errorf("%w: %s: limit (%d) and per (%v) must be positive", ErrInvalidConfig, what, fl.Limit, fl.Per),
			append(path, firstNotPositive("limit", fl.Limit, 1, fl.Per))...)
	}
	switch fl.By {
	case "", ByPrincipal, ByIP, ByBoth:
	default:
		return limiter.Limit{}, keyed(fmt.Errorf("%w: %s: by %q is none of %q, %q and %q", ErrInvalidConfig, what, fl.By, ByPrincipal, ByIP, ByBoth), append(path, "by")...)
	}
	limit := limiter.Limit{Burst: fl.Limit, Rate: fl.Limit, Period: fl.Per}
	switch fl.Algorithm {
	case "", TokenBucket:
		limit.Algorithm = limiter.TokenBucket
	case LeakyBucketPolicing:
		limit.Algorithm = limiter.LeakyBucketPolicing
	case FixedWindow:
		limit.Algorithm = limiter.FixedWindow
	case SlidingLog:
		limit.Algorithm = limiter.SlidingLog
	case SlidingCounter:
		limit.Algorithm = limiter.SlidingCounter
	case LeakyBucketShaping:
		limit.Algorithm = limiter.LeakyBucketShaping
		if fl.By == ByBoth {
			return limiter.Limit{}, keyed(fmt.Errorf("%w: %s: %s cannot count by %q (the address's count and the principal's are decided apart, and a turn taken cannot be given back)",
				ErrInvalidConfig, what, LeakyBucketShaping, ByBoth), append(path, "by")...)
		}
		burst, err := shapingBurst(fl)
		if err != nil {
			return limiter.Limit{}, keyed(fmt.Errorf("%w: %s: %w", ErrInvalidConfig, what, err), append(path, "max_delay")...)
		}
		limit.Burst = burst
	default:
		return limiter.Limit{}, keyed(fmt.Errorf("%w: %s: algorithm %q is none of %s", ErrInvalidConfig, what, fl.Algorithm, algorithmNames), append(path, "algorithm")...)
	}
	if fl.MaxDelay != 0 && limit.Algorithm != limiter.LeakyBucketShaping {
		return limiter.Limit{}, keyed(fmt.Errorf("%w: %s: max_delay applies to %s only", ErrInvalidConfig, what, LeakyBucketShaping), append(path, "max_delay")...)
	}
	if err := limit.Validate(); err != nil {
		return limiter.Limit{}, keyed(fmt.Errorf("%w: %s: %w", ErrInvalidConfig, what, err), path...)
	}
	return limit, nil
}

// algorithmNames lists the algorithms for an error.
const algorithmNames = `"token_bucket", "leaky_bucket_policing", "leaky_bucket_shaping", "fixed_window", "sliding_log" and "sliding_counter"`

// maxDelay is the longest a LeakyBucketShaping limit tells a request to
// wait: fl.MaxDelay, or DefaultMaxDelay.
func (fl FieldLimit) maxDelay() time.Duration { return cmpOr(fl.MaxDelay, DefaultMaxDelay) }

// shapingBurst is the burst of a shaping limit: the request itself and
// the queue ahead that drains within MaxDelay, ⌊MaxDelay × Limit / Per⌋.
// A request then waits at most (Burst − count) × Per / Limit ≤ MaxDelay.
func shapingBurst(fl FieldLimit) (int64, error) {
	d := fl.maxDelay()
	if d < 0 || d > MaxMaxDelay || d%time.Microsecond != 0 {
		return 0, fmt.Errorf("max_delay %v must be positive whole microseconds, at most %v", fl.MaxDelay, MaxMaxDelay)
	}
	us, per := int64(d/time.Microsecond), int64(fl.Per/time.Microsecond)
	if per <= 0 {
		return 0, fmt.Errorf("per %v is below a microsecond", fl.Per)
	}
	hi, lo := bits.Mul64(uint64(us), uint64(fl.Limit))
	if hi >= uint64(per) {
		return 0, fmt.Errorf("max_delay %v holds too many counts at %d per %v", d, fl.Limit, fl.Per)
	}
	q, _ := bits.Div64(hi, lo, uint64(per))
	if q >= limiter.MaxSafeInteger {
		return 0, fmt.Errorf("max_delay %v holds too many counts at %d per %v", d, fl.Limit, fl.Per)
	}
	return int64(q) + 1, nil
}

// LaneBudget is the bucket of a lane (a class of requests by priority),
// drawn with the plan's by every request in the lane, per principal.
type LaneBudget struct {
	// Name is the lane's.
	Name  string
	Burst int64
	Rate  int64
	Per   time.Duration
}

// ErrInvalidConfig wraps every error Compile returns.
var ErrInvalidConfig = errors.New("budget: invalid config")

// ConfigError is a configuration error about one key. Path names the key
// as a configuration file spells it, by the yaml tags of the config types
// ({"plans", "free", "burst"}; a list index in decimal), so that a caller
// that read the configuration from a file can point at the line; Err is
// the error, wrapping ErrInvalidConfig (or the package's own). Compile and
// middleware.New return one, wrapped, where the key is known. (Compile
// names a lane budget's lane by its name, {"lanes", name, "budget"}: it
// does not see the list; middleware.New puts the lane's index there.)
type ConfigError struct {
	Path []string
	Err  error
}

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// keyed is err about the key at path.
func keyed(err error, path ...string) error { return &ConfigError{Path: path, Err: err} }

// Config is what a Policy is compiled from.
type Config struct {
	// Plans maps a plan name (printable ASCII) to its budget. Required.
	Plans map[string]Plan
	// FieldLimits attach a rate to schema coordinates ("Mutation.login"),
	// decided with the plan's bucket and quota, all or nothing.
	FieldLimits map[string]FieldLimit
	// RouteLimits attach a limit of its own to a route, keyed by the
	// route's name (printable ASCII; the REST middleware uses its ServeMux
	// pattern, "POST /api/login"), counted 1 per request
	// (Request.Route) and decided with the plan's bucket and quota, all
	// or nothing.
	RouteLimits map[string]FieldLimit
	// Lanes are the lane budgets.
	Lanes []LaneBudget
	// Mode applies to the plans that set none. Default Enforce.
	Mode Mode
	// FailureMode applies to the plans that set none, and to the lane
	// budgets. Default FailOpen.
	FailureMode FailureMode
	// InvalidCost is what a request refused before it could be priced
	// pays (ChargeInvalid); 0 makes it free. It must not be negative.
	InvalidCost int64
	// MaxConcurrent caps the requests in flight of a principal on a plan
	// that sets no MaxConcurrent. 0: no cap.
	MaxConcurrent int
}

// Policy is a compiled, validated Config: what an Engine decides by. It
// is immutable; a reload compiles a new one and swaps it in (Engine.Swap),
// and a request keeps the Policy it started under to its end.
type Policy struct {
	plans    map[string]*Rule
	names    []string // the plans' names, sorted
	lanes    map[string]*Rule
	fields   map[string]*FieldRule
	coords   []string // the field limits' coordinates, sorted
	routes   map[string]*RouteRule
	anyByIP  bool
	invalid  int64
	failOpen bool
}

// Rule is a compiled plan, or a lane's budget, with what a decision needs
// precomputed.
type Rule struct {
	// Plan is the plan as configured (a lane budget's Burst, Rate, Per).
	Plan
	name          string
	lane          string // the lane's name, for a lane budget
	limit         limiter.Limit
	failOpen      bool
	shadow        bool
	maxConcurrent int64
	quota         *QuotaRule
	policy        *Policy
	// keyPrefix starts the keys of the rule's budgets: "lane:<name>:" for
	// a lane budget, "override:<id>:" for an override's rule, "" for a plan.
	keyPrefix string
	// overflow names the rule's overflow bucket when it is not name's (an
	// override of limits).
	overflow string
	// override is the override the rule was compiled from ("" for a plan
	// or a lane budget): its canonical form.
	override string

	// Warnings logged at most once a minute for each rule: a store failure
	// (under its failure mode), a full memory store, a refusal shadow mode
	// let through, a refund that failed, a response beyond its price.
	storeWarn, fullWarn, shadowWarn, refundWarn, excessWarn logevery.Gate
}

// Name is the plan's name ("lane:" and the lane's name for a lane budget).
func (r *Rule) Name() string { return r.name }

// Lane is the lane's name of a lane budget, "" for a plan.
func (r *Rule) Lane() string { return r.lane }

// Limit is the bucket's limit.
func (r *Rule) Limit() limiter.Limit { return r.limit }

// FailOpen reports whether the rule fails open when the store fails.
func (r *Rule) FailOpen() bool { return r.failOpen }

// Shadowed reports whether the rule's refusals are reported, not enforced.
func (r *Rule) Shadowed() bool { return r.shadow }

// MaxConcurrent caps a principal's requests in flight (0: no cap).
func (r *Rule) MaxConcurrent() int64 { return r.maxConcurrent }

// QuotaRule is the plan's compiled quota, nil without one.
func (r *Rule) QuotaRule() *QuotaRule { return r.quota }

// Policy is the Policy the rule belongs to.
func (r *Rule) Policy() *Policy { return r.policy }

// key is the bucket key of the rule for the principal key k.
func (r *Rule) key(k string) string {
	if r.keyPrefix != "" {
		return r.keyPrefix + k
	}
	return k
}

// QuotaRule is a compiled Quota.
type QuotaRule struct {
	// Name is its policy name (Quota.Name or its default).
	Name  string
	Limit limiter.Limit
}

// FieldRule is a compiled FieldLimit.
type FieldRule struct {
	Coord string
	Limit limiter.Limit
	// ByIP: it counts by client address only (By is ByIP).
	ByIP bool
	// By is how it counts (ByPrincipal, ByIP or ByBoth); Max is the
	// configured limit, counts per Limit.Period.
	By     FieldLimitBy
	Max    int64
	budget string // fieldBudgetPrefix + Coord
}

// RouteRule is a compiled route limit (Config.RouteLimits).
type RouteRule struct {
	// Route is the route's name, as Config.RouteLimits keys it (a REST
	// pattern, "POST /api/login").
	Route string
	Limit limiter.Limit
	// By is how it counts (ByPrincipal, ByIP or ByBoth); Max is the
	// configured limit, requests per Limit.Period.
	By     FieldLimitBy
	Max    int64
	budget string // routeBudgetPrefix + Route
}

// Budget names beside a principal's bucket (limiter.Request.Name): the
// plan's quota, one per limited field and one per limited route.
const (
	quotaBudget       = "quota"
	fieldBudgetPrefix = "field:"
	routeBudgetPrefix = "route:"
)

// Compile validates cfg and compiles it.
func Compile(cfg Config) (*Policy, error) {
	failure := cfg.FailureMode
	if failure == "" {
		failure = FailOpen
	}
	if failure != FailOpen && failure != FailClosed {
		return nil, keyed(fmt.Errorf("%w: failure mode %q is neither %q nor %q", ErrInvalidConfig, failure, FailOpen, FailClosed), "failure_mode")
	}
	mode := cfg.Mode
	if mode == "" {
		mode = Enforce
	}
	if mode != Enforce && mode != Shadow {
		return nil, keyed(fmt.Errorf("%w: mode %q is neither %q nor %q", ErrInvalidConfig, mode, Enforce, Shadow), "mode")
	}
	if cfg.InvalidCost < 0 {
		return nil, fmt.Errorf("%w: InvalidCost %d is negative", ErrInvalidConfig, cfg.InvalidCost)
	}
	if cfg.MaxConcurrent < 0 {
		return nil, fmt.Errorf("%w: MaxConcurrent %d is negative", ErrInvalidConfig, cfg.MaxConcurrent)
	}
	p := &Policy{failOpen: failure == FailOpen, invalid: cfg.InvalidCost}
	if err := p.buildPlans(cfg.Plans, failure, mode, cfg.MaxConcurrent); err != nil {
		return nil, err
	}
	if err := p.buildFieldLimits(cfg.FieldLimits); err != nil {
		return nil, err
	}
	if err := p.buildRouteLimits(cfg.RouteLimits); err != nil {
		return nil, err
	}
	if err := checkShaping(cfg.FieldLimits, cfg.RouteLimits); err != nil {
		return nil, err
	}
	if err := p.buildLanes(cfg.Lanes); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Policy) buildPlans(plans map[string]Plan, failure FailureMode, global Mode, maxConcurrent int) error {
	if len(plans) == 0 {
		return keyed(fmt.Errorf("%w: no plans", ErrInvalidConfig), "plans")
	}
	p.plans = make(map[string]*Rule, len(plans))
	for name, pl := range plans {
		if !ValidName(name) {
			return keyed(fmt.Errorf("%w: plan name %q must be 1 to %d bytes of printable ASCII", ErrInvalidConfig, name, MaxNameBytes), "plans", name)
		}
		if pl.Burst <= 0 || pl.Rate <= 0 || pl.Per <= 0 {
			return keyed(fmt.Errorf("%w: plan %q: burst (%d), rate (%d) and per (%v) must be positive", ErrInvalidConfig, name, pl.Burst, pl.Rate, pl.Per),
				"plans", name, firstNotPositive("burst", pl.Burst, pl.Rate, pl.Per))
		}
		limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: pl.Burst, Rate: pl.Rate, Period: pl.Per}
		if err := limit.Validate(); err != nil {
			return keyed(fmt.Errorf("%w: plan %q: %w", ErrInvalidConfig, name, err), "plans", name)
		}
		fm := cmpOr(pl.FailureMode, failure)
		mode := cmpOr(pl.Mode, global)
		if mode != Enforce && mode != Shadow {
			return keyed(fmt.Errorf("%w: plan %q: mode %q is neither %q nor %q", ErrInvalidConfig, name, mode, Enforce, Shadow), "plans", name, "mode")
		}
		if fm != FailOpen && fm != FailClosed {
			return keyed(fmt.Errorf("%w: plan %q: failure mode %q is neither %q nor %q", ErrInvalidConfig, name, fm, FailOpen, FailClosed), "plans", name, "failure_mode")
		}
		quota, err := buildQuota(name, pl)
		if err != nil {
			return err
		}
		r := &Rule{Plan: pl, name: name, limit: limit, failOpen: fm == FailOpen, shadow: mode == Shadow, quota: quota, policy: p}
		switch n := pl.MaxConcurrent; {
		case n == 0:
			r.maxConcurrent = int64(maxConcurrent)
		case n == None:
			r.maxConcurrent = 0
		case n < 0:
			return keyed(fmt.Errorf("%w: plan %q: MaxConcurrent %d; it must be positive, 0 for Config.MaxConcurrent or None", ErrInvalidConfig, name, n), "plans", name, "concurrency")
		default:
			r.maxConcurrent = int64(n)
		}
		if r.maxConcurrent > concurrency.MaxLimit {
			return keyed(fmt.Errorf("%w: plan %q: at most %d requests in flight can be capped", ErrInvalidConfig, name, concurrency.MaxLimit), "plans", name, "concurrency")
		}
		p.plans[name] = r
	}
	p.names = slices.Sorted(maps.Keys(p.plans))
	return nil
}

// firstNotPositive names the first of count (a plan's burst, a quota's or
// field limit's limit), rate and per that is not positive: the key a
// ConfigError points at.
func firstNotPositive(countKey string, count, rate int64, per time.Duration) string {
	switch {
	case count <= 0:
		return countKey
	case rate <= 0:
		return "rate"
	}
	return "per"
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// quotaName is a quota's default policy name.
func quotaName(plan string, per time.Duration) string {
	switch per {
	case 24 * time.Hour:
		return plan + "-daily"
	case time.Hour:
		return plan + "-hourly"
	case 7 * 24 * time.Hour:
		return plan + "-weekly"
	}
	return plan + "-quota"
}

// buildQuota validates plan name's quota.
func buildQuota(name string, p Plan) (*QuotaRule, error) {
	q := p.Quota
	if q == nil {
		return nil, nil
	}
	if q.Limit <= 0 || q.Per <= 0 {
		return nil, keyed(fmt.Errorf("%w: plan %q: quota limit (%d) and per (%v) must be positive", ErrInvalidConfig, name, q.Limit, q.Per),
			"plans", name, "quota", firstNotPositive("limit", q.Limit, 1, q.Per))
	}
	if q.Limit < p.Burst {
		return nil, keyed(fmt.Errorf("%w: plan %q: quota limit %d is below the burst %d, which could then never be spent", ErrInvalidConfig, name, q.Limit, p.Burst),
			"plans", name, "quota", "limit")
	}
	if p.SplitBudget {
		return nil, keyed(fmt.Errorf("%w: plan %q: a quota cannot be combined with SplitBudget (leases are spent locally, the quota in one atomic step with the bucket)", ErrInvalidConfig, name),
			"plans", name, "quota")
	}
	qn := q.Name
	if qn == "" {
		qn = quotaName(name, q.Per)
	}
	if !ValidName(qn) {
		return nil, keyed(fmt.Errorf("%w: plan %q: quota name %q must be 1 to %d bytes of printable ASCII", ErrInvalidConfig, name, qn, MaxNameBytes), "plans", name, "quota", "name")
	}
	limit := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: q.Limit, Period: q.Per}
	if err := limit.Validate(); err != nil {
		return nil, keyed(fmt.Errorf("%w: plan %q: quota: %w", ErrInvalidConfig, name, err), "plans", name, "quota")
	}
	return &QuotaRule{Name: qn, Limit: limit}, nil
}

// buildFieldLimits validates the field limits. Coordinates are checked
// against the schema by the adapter that knows it.
func (p *Policy) buildFieldLimits(fls map[string]FieldLimit) error {
	if len(fls) == 0 {
		return nil
	}
	// One decision takes the bucket, the quota and every limited field an
	// operation selects in one TakeAll, which refuses more than
	// limiter.MaxTakeAll budgets: past that, an operation selecting them
	// all would fail like a broken store (and count towards the breaker).
	if most := limiter.MaxTakeAll - 2; len(fls) > most {
		return keyed(fmt.Errorf("%w: %d field limits; at most %d fit one decision with the bucket and the quota", ErrInvalidConfig, len(fls), most), "field_limits")
	}
	p.fields = make(map[string]*FieldRule, len(fls))
	for _, coord := range slices.Sorted(maps.Keys(fls)) {
		fl := fls[coord]
		typ, field, ok := strings.Cut(coord, ".")
		if !ok || typ == "" || field == "" || strings.Contains(field, ".") || !ValidName(coord) {
			return keyed(fmt.Errorf("%w: field limit %q: want a schema coordinate Type.field", ErrInvalidConfig, coord), "field_limits", coord)
		}
		limit, err := compileLimit(fl, fmt.Sprintf("field limit %q", coord), "field_limits", coord)
		if err != nil {
			return err
		}
		by := cmpOr(fl.By, ByPrincipal)
		p.fields[coord] = &FieldRule{Coord: coord, Limit: limit, ByIP: by == ByIP, By: by, Max: fl.Limit, budget: fieldBudgetPrefix + coord}
		p.coords = append(p.coords, coord)
		p.anyByIP = p.anyByIP || by != ByPrincipal
	}
	return p.noSplitBudget("field limits")
}

// noSplitBudget refuses a plan with SplitBudget beside what (field
// limits), which are decided with the bucket in one atomic step.
func (p *Policy) noSplitBudget(what string) error {
	for _, name := range p.names {
		if p.plans[name].SplitBudget {
			return keyed(fmt.Errorf("%w: plan %q: %s cannot be combined with SplitBudget (leases are spent locally, %s in one atomic step with the bucket)", ErrInvalidConfig, name, what, what),
				"plans", name, "split_budget")
		}
	}
	return nil
}

// buildRouteLimits validates the route limits. Route names are checked
// by the adapter that matches them (the REST middleware: ServeMux
// patterns).
func (p *Policy) buildRouteLimits(rls map[string]FieldLimit) error {
	if len(rls) == 0 {
		return nil
	}
	p.routes = make(map[string]*RouteRule, len(rls))
	for _, route := range slices.Sorted(maps.Keys(rls)) {
		rl := rls[route]
		if !ValidName(route) {
			return keyed(fmt.Errorf("%w: route limit %q: the route must be 1 to %d bytes of printable ASCII", ErrInvalidConfig, route, MaxNameBytes), "route_limits", route)
		}
		limit, err := compileLimit(rl, fmt.Sprintf("route limit %q", route), "route_limits", route)
		if err != nil {
			return err
		}
		by := cmpOr(rl.By, ByPrincipal)
		p.routes[route] = &RouteRule{Route: route, Limit: limit, By: by, Max: rl.Limit, budget: routeBudgetPrefix + route}
		p.anyByIP = p.anyByIP || by != ByPrincipal
	}
	return nil
}

// checkShaping refuses LeakyBucketShaping limits that count by different
// keys: one request's budgets of the principal and of the address are
// decided apart, the shaping ones last, and the others are given back
// when a shaping one refuses; a shaping turn, once taken, cannot be.
func checkShaping(fls, rls map[string]FieldLimit) error {
	var first FieldLimitBy
	var firstPath []string
	for _, set := range []struct {
		key    string
		limits map[string]FieldLimit
	}{{"field_limits", fls}, {"route_limits", rls}} {
		for _, name := range slices.Sorted(maps.Keys(set.limits)) {
			fl := set.limits[name]
			if fl.Algorithm != LeakyBucketShaping {
				continue
			}
			by := cmpOr(fl.By, ByPrincipal)
			if first == "" {
				first, firstPath = by, []string{set.key, name}
				continue
			}
			if by != first {
				return keyed(fmt.Errorf("%w: %s %q counts by %q and %s %q by %q: %s limits must all count by the same key (a turn taken cannot be given back when the other key's budgets refuse)",
					ErrInvalidConfig, firstPath[0], firstPath[1], first, set.key, name, by, LeakyBucketShaping), set.key, name, "by")
			}
		}
	}
	return nil
}

// buildLanes validates the lane budgets.
func (p *Policy) buildLanes(lanes []LaneBudget) error {
	for _, b := range lanes {
		where := fmt.Sprintf("lane %q", b.Name)
		if !ValidName(b.Name) {
			return keyed(fmt.Errorf("%w: %s: name must be 1 to %d bytes of printable ASCII", ErrInvalidConfig, where, MaxNameBytes), "lanes", b.Name, "name")
		}
		if b.Burst <= 0 || b.Rate <= 0 || b.Per <= 0 {
			return keyed(fmt.Errorf("%w: %s: budget burst (%d), rate (%d) and per (%v) must be positive", ErrInvalidConfig, where, b.Burst, b.Rate, b.Per),
				"lanes", b.Name, "budget", firstNotPositive("burst", b.Burst, b.Rate, b.Per))
		}
		limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: b.Burst, Rate: b.Rate, Period: b.Per}
		if err := limit.Validate(); err != nil {
			return keyed(fmt.Errorf("%w: %s: budget: %w", ErrInvalidConfig, where, err), "lanes", b.Name, "budget")
		}
		if p.lanes == nil {
			p.lanes = make(map[string]*Rule, len(lanes))
		}
		p.lanes[b.Name] = &Rule{
			Plan: Plan{Burst: b.Burst, Rate: b.Rate, Per: b.Per},
			name: "lane:" + b.Name, lane: b.Name, limit: limit, failOpen: p.failOpen, policy: p,
			keyPrefix: "lane:" + b.Name + ":",
		}
	}
	return nil
}

// Plan returns the rule of the plan named name.
func (p *Policy) Plan(name string) (*Rule, bool) {
	r, ok := p.plans[name]
	return r, ok
}

// PlanNames returns the plans' names, sorted.
func (p *Policy) PlanNames() []string { return p.names }

// Lane returns the budget of the lane named name, nil when it has none.
func (p *Policy) Lane(name string) *Rule { return p.lanes[name] }

// Field returns the limit of the field at coord, nil when it has none.
func (p *Policy) Field(coord string) *FieldRule { return p.fields[coord] }

// Route returns the limit of the route named route, nil when it has none.
func (p *Policy) Route(route string) *RouteRule { return p.routes[route] }

// RouteNames returns the names of the limited routes, sorted.
func (p *Policy) RouteNames() []string { return slices.Sorted(maps.Keys(p.routes)) }

// FieldCoordinates returns the coordinates of the field limits, sorted.
func (p *Policy) FieldCoordinates() []string { return p.coords }

// AnyByIP reports whether a field or route limit counts by client address
// (ByIP or ByBoth).
func (p *Policy) AnyByIP() bool { return p.anyByIP }

// InvalidCost is what a request refused before it could be priced pays.
func (p *Policy) InvalidCost() int64 { return p.invalid }

// MultiLimited reports whether requests on r may be decided by more than
// its bucket (a quota, field limits): they need a store that decides
// several budgets at once.
func (p *Policy) MultiLimited(r *Rule) bool {
	return r.quota != nil || len(p.fields) > 0 || len(p.routes) > 0
}

// OverflowBudgets is how many overflow budgets p may need: per plan a
// bucket, a quota, the field limits and the route limits, and a bucket
// per lane budget.
func (p *Policy) OverflowBudgets() int {
	return len(p.plans)*(2+len(p.fields)+len(p.routes)) + len(p.lanes)
}

// SplitBudget is the first plan, by name, that asks for split-budget
// leases, "" when none does.
func (p *Policy) SplitBudget() string {
	for _, n := range p.names {
		if p.plans[n].SplitBudget {
			return n
		}
	}
	return ""
}

// MaxNameBytes is the longest name a plan, a quota, a lane or a limited
// route may have: every table that reports decisions keeps names of at
// most this many bytes, and a store key holds a lane's name.
const MaxNameBytes = kept.MaxName

// ValidName reports whether name can be a plan's, a quota's or a lane's:
// 1 to MaxNameBytes bytes of printable ASCII, so that it is a
// structured-field string, a readable log field and kept whole wherever
// decisions are reported.
func ValidName(name string) bool {
	if name == "" || len(name) > MaxNameBytes {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return false
		}
	}
	return true
}
