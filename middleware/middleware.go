package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vektah/gqlparser/v2/ast"
	"golang.org/x/sync/semaphore"

	"github.com/costguard/costguard/challenge"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/overload"
)

// FailureMode chooses what happens when the store fails or times out.
type FailureMode string

const (
	// FailOpen admits through a local in-memory bucket per identity (the
	// same limit, kept by this process only), started from the store's last
	// decision this process saw for it, or empty (limiter/lastknown), and
	// logs a warning at most once a minute.
	FailOpen FailureMode = "open"
	// FailClosed answers 503 with Retry-After (GraphQL code
	// RATE_LIMITER_UNAVAILABLE).
	FailClosed FailureMode = "closed"
)

// Mode says whether the Limiter refuses what it would refuse.
type Mode string

const (
	// Enforce refuses what the budget cannot pay or a static cap forbids.
	Enforce Mode = "enforce"
	// Shadow prices and debits everything as Enforce does, but lets what
	// Enforce would refuse for its budget or a static cap run, answering as
	// if admitted; the decision is reported as OutcomeShadowRejected and
	// logged. The document bounds (body size, MaxTokens, MaxSelections,
	// variables) and complexity.AbsoluteMaxDepth, which protect the server
	// before anything is priced, stay on; so do DisableIntrospection and
	// fail-closed 503s.
	Shadow Mode = "shadow"
)

// Plan is a token bucket in points: Burst points at most, Rate points
// restored every Per.
type Plan struct {
	Burst int64
	Rate  int64
	Per   time.Duration
	// FailureMode overrides Config.FailureMode for this plan when set.
	FailureMode FailureMode
	// Mode overrides Config.Mode for this plan when set.
	Mode Mode
	// DisableIntrospection refuses operations of this plan that select
	// __schema or __type (INTROSPECTION_DISABLED).
	DisableIntrospection bool
	// DisableCostReport refuses the per-field breakdown a request asks for
	// with "GraphQL-Cost: report" (400 COST_REPORT_DISABLED): a report prices
	// the operation a second time and tells the client how the schema is
	// priced.
	DisableCostReport bool
	// SplitBudget serves this plan from local leases of each principal's
	// budget (limiter/splitbudget, tuned by Config.SplitBudget): most
	// requests skip the store's round trip, at the price of up to
	// (gateways × lease) points of overshoot within a window. For UX-grade
	// plans; leave it false (the default) for billing-grade plans, which
	// the store then keeps exact. It needs a Config.Store with Refund (a
	// limiter.Store).
	SplitBudget bool
	// MaxConcurrent caps this plan's principals' requests in flight at
	// once, overriding Config.Concurrency.PerPrincipal (0: that; None: no
	// cap).
	MaxConcurrent int
	// Quota, when set, is a second budget the same cost is drawn from, in
	// fixed windows aligned to UTC ("100,000 a day"): see Quota.
	Quota *Quota
	// DisableRefund keeps the whole requested cost of a GraphQL operation
	// even when its response shows it cost less: by default the unused
	// part (requested − actual) is given back before the response is
	// written (docs/middleware.md, "Actual cost and refunds").
	DisableRefund bool
}

// SplitBudgetOptions tune the leases of the plans with Plan.SplitBudget.
// Zero fields take limiter/splitbudget's defaults.
type SplitBudgetOptions struct {
	// LeaseFraction is the share of a plan's burst one lease takes, in
	// (0, 1]. Default splitbudget.DefaultLeaseFraction (5 %).
	LeaseFraction float64
	// SettleInterval is how often unspent leases are given back to the
	// store. Default splitbudget.DefaultSettleInterval (100 ms).
	SettleInterval time.Duration
}

// None, given for a cap of GraphQLOptions, lifts it; given for a cost, makes
// it 0. A zero field always means the default, so None is how to say
// "nothing" (other negative values are refused).
const None = -1

// GraphQLOptions are the static caps and pricing knobs of the Extension.
// Zero means the default; None means no cap, or no cost.
type GraphQLOptions struct {
	// MaxDepth caps the nesting of fields (root fields at 1), introspection
	// included. Default 15: the schema query GraphiQL sends is 13 deep.
	MaxDepth int
	// MaxBreadth caps every slicing argument (first, last, …). Default 100.
	MaxBreadth int
	// MaxNodes caps the objects an operation may return through lists, as
	// GitHub counts them. Default 500,000.
	MaxNodes int64
	// MaxCost caps the cost of one operation. 0 (the default): the
	// principal's plan burst is the only ceiling.
	MaxCost int64
	// DefaultListSize is the size assumed for a list field with neither a
	// slicing argument nor @listSize. Default 10.
	DefaultListSize int
	// MutationCost is the base cost of a mutation. Default 10.
	MutationCost int64
	// MaxAliases caps the aliased fields of an operation (introspection
	// included). Default 100.
	MaxAliases int
	// MaxRootFields caps the root fields of an operation (introspection
	// included). Default 100.
	MaxRootFields int

	// MaxTokens caps the lexical tokens of a document, counted before it
	// is parsed (MAX_TOKENS_EXCEEDED). Default 20,000.
	MaxTokens int
	// MaxSelections caps the fields, fragment spreads and inline
	// fragments written in a document, counted before it is parsed or
	// validated (MAX_SELECTIONS_EXCEEDED): validation is quadratic in
	// them. Default 500.
	MaxSelections int
	// MaxVariableValues caps the JSON values in a request's variables and
	// extensions together, counted before they are decoded
	// (VARIABLES_TOO_LARGE). Default 10,000.
	MaxVariableValues int
	// MaxVariablesDepth caps the nesting of variables and extensions, the
	// object itself at depth 1 (VARIABLES_TOO_LARGE). Default 32.
	MaxVariablesDepth int

	// InvalidCost is what a request refused before it could be priced
	// pays: a body or document over a bound, a document that fails to
	// parse or validate, a static cap. Default 1.
	InvalidCost int64
	// MinCost is the least an operation is charged, so that an operation
	// priced at 0 is not free. Default 1.
	MinCost int64
	// IntrospectionCost is what an operation pays for each __schema or
	// __type selection after its first at the root (each alias counts), on
	// top of its price: a tool's schema fetch (one __schema) pays MinCost,
	// N aliased __schema pay (N − 1) × this. Default 50.
	IntrospectionCost int64
	// UploadCostPerMiB is what each MiB begun of a multipart request (its
	// files) adds to its operation's price. Default 0: uploads cost
	// their operation's price only.
	UploadCostPerMiB int64

	// DisableFirstLastConvention stops treating arguments named first and
	// last as slicing arguments on fields without @listSize.
	DisableFirstLastConvention bool
	// DisableConnectionConvention stops a …Connection type without
	// @listSize from handing its size to its edges and nodes.
	DisableConnectionConvention bool
	// DisableCountArgumentConvention stops treating Int arguments named
	// like a count (limit, maxRepositories, batch_size…) as slicing
	// arguments on fields without @listSize, and a type with one list
	// from taking its parent's size (complexity.WithCountArgumentConvention).
	DisableCountArgumentConvention bool
	// DisableKeyListConvention stops sizing a list field without
	// @listSize by the length of its representations, ids or keys argument
	// (complexity.WithKeyListConvention).
	DisableKeyListConvention bool
	// DisableMutationListConvention stops sizing what a mutation without
	// @listSize returns by the length of its list arguments
	// (complexity.WithMutationListConvention).
	DisableMutationListConvention bool
	// PriceIntrospectionFields prices the fields beneath __schema and
	// __type like any other, against the introspection types, on top of
	// IntrospectionCost (by default they cost nothing).
	PriceIntrospectionFields bool

	// RateLimitField names the root field that reports the budget in the
	// response, GitHub's rateLimit (see RateLimitFrom). When the schema's
	// Query type has a field of this name with a Boolean argument dryRun,
	// an operation selecting it with dryRun: true is priced and answered
	// without running any other root field or debiting anything. Default
	// DefaultRateLimitField ("rateLimit"); a schema without that field
	// simply has no dry runs, while another name the schema lacks is an
	// error when the Extension is added to a server.
	RateLimitField string
}

// MemoryStoreOptions size the in-memory stores the Limiter creates: the
// budgets when Config.Store is nil, and FailOpen's local fallback buckets.
type MemoryStoreOptions struct {
	// MaxKeys bounds the identities held. A full store never resets a
	// budget to make room: it only drops budgets that are whole, and
	// otherwise admits new identities through one overflow bucket per
	// plan (see docs/middleware.md). Default memorystore.DefaultMaxKeys
	// (100,000).
	MaxKeys int
}

// RESTOptions price REST requests.
type RESTOptions struct {
	// DefaultCost is the cost of a request no route matches. Default 1.
	DefaultCost int64
	// Routes maps a net/http ServeMux pattern ("GET /api/search",
	// "/api/users/{login}") to its cost. Matching follows ServeMux rules:
	// the most specific pattern wins. A cost of 0 makes a route free (its
	// responses still carry the headers).
	Routes map[string]int64
}

// Config configures a Limiter. Zero fields take the documented defaults.
type Config struct {
	// Store holds the budgets. Nil: an in-memory store owned by the Limiter
	// (released by Close). Share a redisstore between processes. Quotas
	// and field limits need a store that also decides several budgets at
	// once (limiter.MultiTaker and limiter.MultiRefunder: memorystore,
	// redisstore); New refuses them on another.
	Store limiter.Store
	// Plans maps a plan name to its budget. Required. Names must be
	// printable ASCII; they appear in the RateLimit headers.
	Plans map[string]Plan
	// AnonymousPlan is the plan of requests without a principal or API key,
	// which are keyed by client address. Required.
	AnonymousPlan string
	// APIKeys resolves API keys. Nil: every presented key is unknown (401).
	APIKeys identity.KeyLookup
	// Identifier replaces the default chain (WithPrincipal principal, then
	// API key through APIKeys, then client address on AnonymousPlan).
	Identifier identity.Identifier
	// TrustedProxies lists CIDRs (or single addresses) of reverse proxies
	// whose forwarding header is believed. Empty: the peer address is the
	// client, whatever the headers say.
	TrustedProxies []string
	// ProxyHeader names the forwarding header trusted proxies set:
	// "X-Forwarded-For" (default) or "Forwarded". Only one is read, so a
	// client cannot slip a spoofed value through the header a proxy passes
	// along untouched.
	ProxyHeader string

	GraphQL GraphQLOptions
	REST    RESTOptions
	// FieldLimits attach a rate to schema coordinates ("Mutation.login"),
	// counted per selection, every alias and list item included, and
	// decided with the plan's bucket and quota, all or nothing (429
	// FIELD_RATE_LIMITED). Coordinates the schema lacks are an error when
	// the Extension is added to a server.
	FieldLimits map[string]FieldLimit

	// MaxBodyBytes bounds a request body in the GraphQL and REST wrappers:
	// a larger one, declared or chunked, is answered 413 before anything
	// reads it into memory beyond the limit. Of a GraphQL multipart
	// request it bounds the operations part (MaxUploadBytes the whole).
	// Default 1 MiB.
	MaxBodyBytes int64
	// MaxUploadBytes bounds a GraphQL multipart request (file uploads),
	// which the wrapper streams to gqlgen rather than reading it: a larger
	// one is answered 413, declared or once that much has arrived. Its
	// first part, operations, is bounded by MaxBodyBytes and screened like
	// a JSON body. gqlgen's MultipartForm limits (MaxUploadSize, MaxMemory)
	// apply too. Default 32 MiB (or MaxBodyBytes when larger).
	MaxUploadBytes int64
	// MaxBodyBytesInFlight bounds the GraphQL request bodies larger than
	// 64 KiB that are screened and handed to gqlgen at once, in bytes:
	// gqlgen reads and decodes a body into seven to ten times its size, so
	// this is what bounds the memory of many large requests at once. A
	// body that finds no room waits (until its request's context ends).
	// Default 1 MiB (or MaxBodyBytes when larger); at least MaxBodyBytes.
	MaxBodyBytesInFlight int64
	// MemoryStore sizes the in-memory stores the Limiter creates.
	MemoryStore MemoryStoreOptions

	// Lanes classify requests by priority (first match wins; a request no
	// lane matches goes to the last). None: every request is in no lane.
	Lanes []Lane
	// Overload, when set, sheds requests by their lane's priority once this
	// process has too many in flight, and switches named features off as
	// load rises (package overload). Nil: nothing is shed. Fixed
	// at New: Reload keeps the running shedder.
	Overload *overload.Config
	// Concurrency caps the requests one principal has in flight at once,
	// REST and GraphQL together (per plan: Plan.MaxConcurrent).
	Concurrency ConcurrencyOptions
	// Subscriptions caps the GraphQL subscriptions one principal holds
	// open (default 100 each).
	Subscriptions SubscriptionOptions
	// Challenger issues and checks the challenge of lanes with Challenge
	// "pow" (challenge.NewPoW). Required when a lane asks for
	// one.
	Challenger challenge.Challenger
	// Mode applies to the plans that set none: Enforce (the default) or
	// Shadow, to watch what the Limiter would refuse before it does.
	Mode Mode
	// FailureMode applies when the store fails or times out and the plan
	// sets none. Default FailOpen.
	FailureMode FailureMode
	// StoreTimeout bounds every store call. Default 100ms.
	StoreTimeout time.Duration
	// Breaker stops calling a shared store that keeps failing, for a
	// cool-down: requests are then decided by their failure mode at once
	// instead of each waiting StoreTimeout. Defaults: 5 failures in a
	// row, 1 s (BreakerOptions).
	Breaker BreakerOptions
	// RetryAfterJitter adds up to this fraction of Retry-After, at random,
	// so rejected clients do not return in lockstep. It only ever adds.
	// Between 0 (default) and 1.
	RetryAfterJitter float64
	// Observer receives an Event for every decision (nil: none). Package
	// middleware/prommetrics turns them into Prometheus metrics.
	Observer Observer
	// Logger receives store-failure warnings and identification errors.
	// Default slog.Default().
	Logger *slog.Logger
	// Clock is the time source of the headers and of the in-memory stores
	// the Limiter creates. Default limiter.SystemClock.
	Clock limiter.Clock

	// OverLimitCache remembers rejections locally. Default
	// OverLimitCacheAuto: on for a shared Store, off for the in-memory one.
	OverLimitCache stack.OverLimitCache
	// SplitBudget tunes the leases of plans with Plan.SplitBudget set.
	SplitBudget SplitBudgetOptions
}

// Defaults applied by New to zero Config fields.
const (
	DefaultStoreTimeout = stack.DefaultStoreTimeout
	DefaultMaxDepth     = 15
	DefaultMaxBreadth   = 100
	DefaultMaxNodes     = 500_000
	DefaultRESTCost     = 1

	DefaultMaxAliases           = 100
	DefaultMaxRootFields        = 100
	DefaultMaxTokens            = 20_000
	DefaultMaxSelections        = 500
	DefaultMaxVariableValues    = 10_000
	DefaultMaxVariablesDepth    = 32
	DefaultInvalidCost          = 1
	DefaultMinCost              = 1
	DefaultIntrospectionCost    = 50
	DefaultMaxBodyBytes         = 1 << 20
	DefaultMaxBodyBytesInFlight = 1 << 20
)

// holdBody waits for room for a body of n bytes among the large bodies in
// flight and returns its release; small bodies never wait.
func (l *Limiter) holdBody(ctx context.Context, n int) (release func(), err error) {
	if n <= smallBody {
		return func() {}, nil
	}
	if err := l.bodies.Acquire(ctx, int64(n)); err != nil {
		return nil, err
	}
	return func() { l.bodies.Release(int64(n)) }, nil
}

const (
	// unavailableRetryAfter is the Retry-After of a 503: long enough not to
	// hammer a recovering store, short enough to notice it is back.
	unavailableRetryAfter = time.Second
	storeFailureLogEvery  = time.Minute
	graphQLResponseMIME   = "application/graphql-response+json"
	jsonMIME              = "application/json"
	jsonUTF8              = "application/json; charset=utf-8"
)

// Sentinel errors.
var (
	// ErrInvalidConfig wraps every configuration error New returns.
	ErrInvalidConfig = errors.New("middleware: invalid config")
)

// plan is a validated Plan with everything the hot path needs precomputed.
type plan struct {
	Plan
	name     string
	limit    limiter.Limit
	failOpen bool
	shadow   bool // refusals are reported, not enforced (Mode Shadow)
	// maxConcurrent caps the principal's requests in flight (0: no cap).
	maxConcurrent int64
	quotedName    string
	policyHeader  string
	burstText     string      // Burst in decimal, X-RateLimit-Limit
	quota         *quotaLimit // nil: no quota
	restoreRate   float64     // points per second

	// Warnings logged at most once a minute for each plan: a store failure
	// (under the plan's failure mode), a full memory store, a refusal shadow
	// mode let through, a refund that failed.
	storeWarn, fullWarn, shadowWarn, refundWarn, excessWarn everyMinute
}

// Limiter prices requests and debits them from per-principal budgets. Build
// it with New; it is safe for concurrent use. Close releases the in-memory
// stores it owns.
type Limiter struct {
	// stores decides: the over-limit cache, the guard of store failures
	// (timeout, breaker, fail-open fallback, overflow) and the store.
	stores *stack.Stack
	// settings is what Reload swaps: plans, identification, GraphQL options,
	// REST costs, modes. A request loads it once and keeps it to the end.
	settings atomic.Pointer[settings]
	// splitBudget: the stores were built with split-budget leases, so a
	// plan may ask for them (a Reload cannot add the layer).
	splitBudget bool
	// overflowRoom is how many budgets the overflow store has room for.
	overflowRoom int
	maxBody      int64
	maxUpload    int64 // MaxUploadBytes
	observer     Observer
	shed         *overload.Shedder // nil: nothing is shed
	challenger   challenge.Challenger
	slots        concurrency.Slots // the leases of Concurrency
	subs         subscriptionSlots // the subscriptions open, by principal
	slotTTL      time.Duration
	bodies       *semaphore.Weighted // the large GraphQL bodies in flight, in bytes
	// slotsBehindBreaker: the concurrency slots live in a shared store
	// too, so their calls go through the store's breaker.
	slotsBehindBreaker bool
	jitter             float64
	log                *slog.Logger
	clock              limiter.Clock
	start              time.Time

	// Warnings logged at most once a minute: a wrapper without its
	// extension (the others are per plan).
	notInstalledWarn everyMinute
	// directiveWarn: gqlgen generated runtime hooks for @cost or
	// @listSize (no skip_runtime) and a field failed for it.
	directiveWarn everyMinute
	// installed: an Extension of this Limiter was added to a gqlgen server.
	installed atomic.Bool
	// screened remembers the queries that passed the document bounds.
	screened *screenCache
	// schemas are those the Extensions of this Limiter price, for Reload
	// to check new options and field limits against.
	schemasMu sync.Mutex
	schemas   []*ast.Schema

	// randFloat returns a number in [0, 1) for the jitter; tests pin it.
	randFloat func() float64
}

// New validates cfg and builds a Limiter.
func New(cfg Config) (*Limiter, error) {
	l := &Limiter{
		jitter:    cfg.RetryAfterJitter,
		log:       cfg.Logger,
		clock:     cfg.Clock,
		randFloat: rand.Float64,
		maxBody:   cfg.MaxBodyBytes,
		screened:  newScreenCache(),
	}
	if cfg.StoreTimeout < 0 {
		return nil, fmt.Errorf("%w: StoreTimeout %v is negative", ErrInvalidConfig, cfg.StoreTimeout)
	}
	if math.IsNaN(l.jitter) || l.jitter < 0 || l.jitter > 1 {
		return nil, fmt.Errorf("%w: RetryAfterJitter %v is not between 0 and 1", ErrInvalidConfig, l.jitter)
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.clock == nil {
		l.clock = limiter.SystemClock{}
	}
	l.start = l.clock.Now()

	switch {
	case l.maxBody < 0:
		return nil, fmt.Errorf("%w: MaxBodyBytes %d is negative", ErrInvalidConfig, l.maxBody)
	case l.maxBody == 0:
		l.maxBody = DefaultMaxBodyBytes
	}
	switch l.maxUpload = cfg.MaxUploadBytes; {
	case l.maxUpload < 0:
		return nil, fmt.Errorf("%w: MaxUploadBytes %d is negative", ErrInvalidConfig, l.maxUpload)
	case l.maxUpload == 0:
		l.maxUpload = max(DefaultMaxUploadBytes, l.maxBody)
	}
	inFlight := cfg.MaxBodyBytesInFlight
	if inFlight == 0 {
		inFlight = max(DefaultMaxBodyBytesInFlight, l.maxBody)
	}
	if inFlight < l.maxBody {
		return nil, fmt.Errorf("%w: MaxBodyBytesInFlight %d is less than MaxBodyBytes %d: the largest body would never fit",
			ErrInvalidConfig, inFlight, l.maxBody)
	}
	l.bodies = semaphore.NewWeighted(inFlight)
	if cfg.MemoryStore.MaxKeys < 0 {
		return nil, fmt.Errorf("%w: MemoryStore.MaxKeys %d is negative", ErrInvalidConfig, cfg.MemoryStore.MaxKeys)
	}
	st, err := compileSettings(cfg)
	if err != nil {
		return nil, err
	}
	l.observer, l.challenger = cfg.Observer, cfg.Challenger
	if cfg.Overload != nil {
		oc := *cfg.Overload
		if oc.Clock == nil {
			oc.Clock = l.clock
		}
		if l.shed, err = overload.New(oc); err != nil {
			return nil, fmt.Errorf("%w: Overload: %w", ErrInvalidConfig, err)
		}
	}
	if err := l.checkChallenges(st); err != nil {
		return nil, err
	}
	if err := l.buildSlots(cfg); err != nil {
		return nil, err
	}
	if l.stores, err = l.buildStores(cfg, st); err != nil {
		return nil, err
	}
	_, localSlots := l.slots.(*concurrency.Memory)
	_, hasBreaker := l.stores.BreakerState()
	l.slotsBehindBreaker = hasBreaker && !localSlots
	if err := l.attachStores(st); err != nil {
		l.stores.Close()
		return nil, err
	}
	l.settings.Store(st)
	return l, nil
}

// Close stops the background repayment of what the fail-open fallback
// admitted (a debit in flight ends within StoreTimeout), gives the leases
// of SplitBudget plans back to the store and releases the in-memory
// stores the Limiter created. It does not close Config.Store.
func (l *Limiter) Close() error {
	return l.stores.Close()
}

// buildStores puts the stores together (package limiter/stack): the store
// behind the over-limit cache when that is on, split-budget leases when a
// plan asks for them, the fail-open fallback and the overflow buckets.
func (l *Limiter) buildStores(cfg Config, set *settings) (*stack.Stack, error) {
	split := ""
	for _, p := range set.plans {
		if p.SplitBudget && (split == "" || p.name < split) {
			split = p.name // the first, for messages
		}
	}
	st, err := stack.New(stack.Config{
		Store:          cfg.Store,
		MemoryMaxKeys:  cfg.MemoryStore.MaxKeys,
		OverflowKeys:   overflowKeys(set.overflowBudgets()),
		OverLimitCache: cfg.OverLimitCache,
		SplitBudget:    split != "",
		LeaseFraction:  cfg.SplitBudget.LeaseFraction,
		SettleInterval: cfg.SplitBudget.SettleInterval,
		OnSettleError: func(key string, err error) {
			l.log.Warn("middleware: giving split-budget tokens back failed; they return by refill", "err", err)
		},
		StoreTimeout: cfg.StoreTimeout,
		Breaker:      breaker.Config{Failures: cfg.Breaker.Failures, CoolDown: cfg.Breaker.CoolDown},
		NoBreaker:    cfg.Breaker.Failures == None,
		Logger:       l.log,
		Clock:        l.clock,
	})
	l.splitBudget = split != ""
	l.overflowRoom = overflowKeys(set.overflowBudgets())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return st, nil
}

// verdict is what became of a request's cost.
type verdict uint8

const (
	admitted           verdict = iota
	rateLimited                // not enough tokens now
	overBudget                 // costs more than the plan's burst: never admitted
	unavailable                // store failed and the plan fails closed
	capExceeded                // a static GraphQL cap refused it before pricing; InvalidCost paid
	invalid                    // gqlgen refused it before pricing; InvalidCost paid, gqlgen's status
	shed                       // the process was overloaded for its lane's priority; nothing paid
	concurrencyLimited         // the principal had its plan's requests in flight already; nothing paid
	quotaExceeded              // the plan's quota cannot pay in this window; nothing paid
	fieldLimited               // a field limit cannot pay the selections; nothing paid
)

// answers is the one table from a verdict to what a client is told: the
// GraphQL extensions.code (empty: the refusal carries its own) and HTTP
// status (0: gqlgen's own), and the REST status and error code.
var answers = [...]struct {
	code       string
	status     int
	restStatus int
	restCode   string
}{
	admitted:    {},
	rateLimited: {CodeRateLimited, http.StatusTooManyRequests, http.StatusTooManyRequests, "rate_limited"},
	// A REST cost above the burst is refused at New; a custom store with a
	// smaller capacity still gets a 429, never a 200.
	overBudget:  {complexity.CodeMaxCostExceeded, http.StatusUnprocessableEntity, http.StatusTooManyRequests, "rate_limited"},
	unavailable: {CodeRateLimiterUnavailable, http.StatusServiceUnavailable, http.StatusServiceUnavailable, "rate_limiter_unavailable"},
	capExceeded: {"", http.StatusUnprocessableEntity, 0, ""},
	invalid:     {},
	shed:        {CodeOverloaded, http.StatusServiceUnavailable, http.StatusServiceUnavailable, "overloaded"},

	concurrencyLimited: {CodeConcurrencyLimited, http.StatusTooManyRequests, http.StatusTooManyRequests, "concurrency_limited"},
	quotaExceeded:      {CodeQuotaExceeded, http.StatusTooManyRequests, http.StatusTooManyRequests, "quota_exceeded"},
	fieldLimited:       {CodeFieldRateLimited, http.StatusTooManyRequests, http.StatusTooManyRequests, "field_rate_limited"},
}

// outcome is a budget decision ready to be rendered.
type outcome struct {
	verdict  verdict
	decision limiter.Decision
	// known: decision describes the bucket, so the headers can be sent.
	known bool
	// retryAfter in whole seconds, jitter included (rateLimited, unavailable).
	retryAfter int64
	// shadowed is the refusal shadow mode turned into admitted (0: none).
	shadowed verdict
	// charged is what was debited.
	charged int64
	trace   guard.Trace
	// laneCharged is what was debited from the lane's budget, and
	// laneTrace how (for refunds); byLane names the lane whose budget
	// refused the request.
	laneCharged int64
	laneTrace   guard.Trace
	byLane      *lane
	// limits are the budgets decided with the bucket (the quota, field
	// limits), byLimit the one that refused, never whether it never can
	// (a field selected more often than its limit), and groups what the
	// debit took, store by store (spendAll).
	limits  []limitUse
	byLimit *limitUse
	never   bool
	groups  []takenGroup
}

// addLane folds the trace of a lane budget's call into t, the plan's: its
// time and whether it moved the breaker, but not where to refund (t keeps
// the plan's receipt; the lane's is kept apart).
func addLane(t *guard.Trace, u guard.Trace) {
	t.Took += u.Took
	t.BreakerChanged = t.BreakerChanged || u.BreakerChanged
}

// addTrace folds a later call's trace into t.
func addTrace(t *guard.Trace, u guard.Trace) {
	t.Took += u.Took
	if u.Result != guard.ResultNone {
		t.Result = u.Result
	}
	t.Fallback = t.Fallback || u.Fallback
	t.Gone = t.Gone || u.Gone
	t.BreakerChanged = t.BreakerChanged || u.BreakerChanged
	if u.Receipt.Taken() {
		t.Receipt = u.Receipt
	}
}

// spend debits cost from id's bucket on plan p.
func (l *Limiter) spend(ctx context.Context, id identity.Identity, p *plan, cost int64) outcome {
	if cost > p.Burst {
		return outcome{verdict: overBudget} // never debited; the caller decides what it pays
	}
	var o outcome
	d, err := l.take(ctx, id.Key, p, cost, &o.trace)
	switch {
	case errors.Is(err, limiter.ErrCostExceedsCapacity):
		o.verdict, o.decision, o.known = overBudget, d, true
	case err != nil:
		o.verdict, o.retryAfter = unavailable, l.retryAfter(unavailableRetryAfter)
	case !d.Allowed:
		o.verdict, o.decision, o.known, o.retryAfter = rateLimited, d, true, l.retryAfter(d.RetryAfter)
	default:
		o.verdict, o.decision, o.known, o.charged = admitted, d, true, cost
	}
	return o
}

// spendIn debits cost from id's bucket on plan p and, when lane ln has a
// budget, from id's bucket of that lane too: both or neither. A refusal by
// the lane's budget gives the plan's debit back; the headers then describe
// the plan's bucket, the error and Retry-After the lane's.
func (l *Limiter) spendIn(ctx context.Context, id identity.Identity, p *plan, ln *lane, cost int64) outcome {
	o := l.spend(ctx, id, p, cost)
	if o.verdict != admitted || ln == nil || ln.budget == nil {
		return o
	}
	lo := l.spend(ctx, identity.Identity{Key: ln.key(id)}, ln.budget, cost)
	addLane(&o.trace, lo.trace)
	if lo.verdict == admitted {
		o.laneCharged, o.laneTrace = cost, lo.trace
		return o
	}
	if d, ok := l.refund(ctx, p, o.trace, cost); ok {
		o.decision = d
	}
	o.verdict, o.retryAfter, o.charged, o.byLane = lo.verdict, lo.retryAfter, 0, ln
	if lo.verdict == overBudget {
		o.known = false // the caller charges InvalidCost and reports that decision
	}
	return o
}

// shadow lets a refusal through when p is in shadow mode: a request its
// budget cannot pay (rateLimited) or that costs more than it ever could
// (overBudget, capExceeded) is answered as admitted, with the real
// bucket's headers and no Retry-After. It reports whether it did.
func (l *Limiter) shadow(ctx context.Context, p *plan, o *outcome) bool {
	if !p.shadow {
		return false
	}
	switch o.verdict {
	case rateLimited, overBudget, capExceeded, quotaExceeded, fieldLimited:
	default:
		return false
	}
	if held, due := p.shadowWarn.due(l.clock.Now().Sub(l.start)); due {
		l.log.WarnContext(ctx, "middleware: shadow mode let through a request enforce mode would refuse",
			"plan", p.name, "would_be", string(outcomeOf(o.verdict)), "refusals_since_last_warning", held+1)
	}
	o.shadowed, o.verdict, o.retryAfter = o.verdict, admitted, 0
	return true
}

// chargeInvalid debits InvalidCost for a request refused before it could be
// priced, from the bucket and the quota. The verdict is capExceeded once
// paid, else what refused the payment (rateLimited, quotaExceeded,
// unavailable).
func (l *Limiter) chargeInvalid(ctx context.Context, set *settings, id identity.Identity, p *plan) outcome {
	o := l.spendAll(ctx, set, id, "", p, nil, set.gql.InvalidCost, nil) // the quota pays it too
	if o.verdict == admitted || o.verdict == overBudget {
		o.verdict = capExceeded
	}
	return o
}

// call is how p's budget is decided by the store's guard: its failure
// mode, whether from split-budget leases, and its overflow bucket.
func (p *plan) call() guard.Call {
	return guard.Call{Plan: p.name, FailOpen: p.failOpen, Leased: p.SplitBudget}
}

// take is Store.Take through the store's guard (the timeout, the breaker
// and the plan's failure mode); tr records the call.
func (l *Limiter) take(ctx context.Context, key string, p *plan, cost int64, tr *guard.Trace) (limiter.Decision, error) {
	d, err := l.stores.Take(ctx, p.call(), key, p.limit, cost, tr)
	l.noteCall(p, tr)
	return d, err
}

// noteCall logs what a guarded call met: a store failure its failure mode
// decided for, a full memory store.
func (l *Limiter) noteCall(p *plan, tr *guard.Trace) {
	if tr.Failure != nil {
		l.storeFailed(p, tr.Failure)
		tr.Failure = nil
	}
	if tr.Overflow {
		l.overflowing(p)
		tr.Overflow = false
	}
}

// overflowing logs, at most once a minute per plan, that identities of p
// are decided by its overflow bucket.
func (l *Limiter) overflowing(p *plan) {
	if held, due := p.fullWarn.due(l.clock.Now().Sub(l.start)); due {
		l.log.Warn("middleware: memory store full (MemoryStore.MaxKeys) and no budget in it is whole; new identities share their plan's overflow bucket",
			"plan", p.name, "identities_since_last_warning", held+1)
	}
}

// storeFailed logs a store failure, at most once per storeFailureLogEvery
// for each plan (so each failure mode in use gets its own line); the
// message counts the failures it stood in for.
func (l *Limiter) storeFailed(p *plan, err error) {
	since, due := p.storeWarn.due(l.clock.Now().Sub(l.start))
	if !due {
		return
	}
	mode := FailClosed
	action := "answering 503"
	if p.failOpen {
		mode, action = FailOpen, "admitting through the local fallback bucket"
	}
	l.log.Warn("middleware: rate-limit store failed; "+action,
		"err", err, "plan", p.name, "failure_mode", string(mode),
		"failures_since_last_warning", since)
}

// everyMinute lets one caller a minute through, counting the others.
type everyMinute struct {
	last       atomic.Int64 // nanoseconds since the Limiter started, +1 so 0 means never
	suppressed atomic.Int64
}

// due reports whether the caller at elapsed (since the Limiter started)
// should log, and how many callers were held back since the last one.
func (e *everyMinute) due(elapsed time.Duration) (suppressed int64, ok bool) {
	now := int64(elapsed) + 1
	last := e.last.Load()
	if (last != 0 && now-last < int64(storeFailureLogEvery)) || !e.last.CompareAndSwap(last, now) {
		e.suppressed.Add(1) // not due, or another caller logs it
		return 0, false
	}
	return e.suppressed.Swap(0), true
}

// retryAfter turns a wait into whole seconds, rounded up, never below 1,
// plus the configured jitter (which only adds).
func (l *Limiter) retryAfter(wait time.Duration) int64 {
	s := max(ceilSeconds(wait), 1)
	if l.jitter == 0 {
		return s
	}
	extra := l.randFloat() * l.jitter * float64(s)
	if extra >= float64(math.MaxInt64-s) {
		return math.MaxInt64
	}
	return s + int64(extra)
}
