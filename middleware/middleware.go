package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"golang.org/x/sync/semaphore"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/challenge"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/internal/logevery"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/splitbudget"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/overload"
	"github.com/costguard/costguard/override"
)

// SplitBudgetOptions tune the leases of the plans with Plan.SplitBudget.
// Zero fields take limiter/splitbudget's defaults.
type SplitBudgetOptions struct {
	// LeaseFraction is the share of a plan's burst one lease takes, in
	// (0, 1]. Default splitbudget.DefaultLeaseFraction (5 %).
	LeaseFraction float64 `yaml:"lease_fraction"`
	// SettleInterval is how often unspent leases are given back to the
	// store. Default splitbudget.DefaultSettleInterval (100 ms).
	SettleInterval time.Duration `yaml:"settle_interval"`
}

// None says "nothing" where zero cannot: given for a cap of GraphQLOptions,
// it lifts it; for a cost, makes it 0; for Plan.MaxConcurrent or
// Concurrency.PerPrincipal, lifts the cap; for Breaker.Failures, removes
// the breaker. Other negative values are refused.
const None = budget.None

// GraphQLOptions are the static caps and pricing knobs of the extension.
// Zero means the default; None means no cap, or no cost.
type GraphQLOptions struct {
	// MaxDepth caps the nesting of fields (root fields at 1), introspection
	// included. Default 15: the schema query GraphiQL sends is 13 deep.
	MaxDepth int `yaml:"max_depth"`
	// MaxBreadth caps every slicing argument (first, last, …). Default 100.
	MaxBreadth int `yaml:"max_breadth"`
	// MaxNodes caps the objects an operation may return through lists, as
	// GitHub counts them. Default 500,000.
	MaxNodes int64 `yaml:"max_nodes"`
	// MaxCost caps the cost of one operation. 0 (the default): the
	// principal's plan burst is the only ceiling.
	MaxCost int64 `yaml:"max_cost"`
	// DefaultListSize is the size assumed for a list field with neither a
	// slicing argument nor @listSize. Default 10.
	DefaultListSize int `yaml:"default_list_size"`
	// MutationCost is the base cost of a mutation. Default 10.
	MutationCost int64 `yaml:"mutation_cost"`
	// MaxAliases caps the aliased fields of an operation (introspection
	// included). Default 100.
	MaxAliases int `yaml:"max_aliases"`
	// MaxRootFields caps the root fields of an operation (introspection
	// included). Default 100.
	MaxRootFields int `yaml:"max_root_fields"`

	// MaxTokens caps the lexical tokens of a document, counted before it
	// is parsed (MAX_TOKENS_EXCEEDED). Default 20,000.
	MaxTokens int `yaml:"max_tokens"`
	// MaxSelections caps the fields, fragment spreads and inline
	// fragments written in a document, counted before it is parsed or
	// validated (MAX_SELECTIONS_EXCEEDED): validation is quadratic in
	// them. Default 500.
	MaxSelections int `yaml:"max_selections"`
	// MaxVariableValues caps the JSON values in a request's variables and
	// extensions together, counted before they are decoded
	// (VARIABLES_TOO_LARGE). Default 10,000.
	MaxVariableValues int `yaml:"max_variable_values"`
	// MaxVariablesDepth caps the nesting of variables and extensions, the
	// object itself at depth 1 (VARIABLES_TOO_LARGE). Default 32.
	MaxVariablesDepth int `yaml:"max_variables_depth"`

	// InvalidCost is what a request refused before it could be priced
	// pays: a body or document over a bound, a document that fails to
	// parse or validate, a static cap. Default 1.
	InvalidCost int64 `yaml:"invalid_cost"`
	// MinCost is the least an operation is charged, so that an operation
	// priced at 0 is not free. Default 1.
	MinCost int64 `yaml:"min_cost"`
	// IntrospectionCost is what an operation pays for each __schema or
	// __type selection after its first at the root (each alias counts), on
	// top of its price: a tool's schema fetch (one __schema) pays MinCost,
	// N aliased __schema pay (N − 1) × this. Default 50.
	IntrospectionCost int64 `yaml:"introspection_cost"`
	// UploadCostPerMiB is what each MiB begun of a multipart request (its
	// files) adds to its operation's price. Default 0: uploads cost
	// their operation's price only.
	UploadCostPerMiB int64 `yaml:"-"`

	// DisableFirstLastConvention stops treating arguments named first and
	// last as slicing arguments on fields without @listSize.
	DisableFirstLastConvention bool `yaml:"disable_first_last_convention"`
	// DisableConnectionConvention stops a …Connection type without
	// @listSize from handing its size to its edges and nodes.
	DisableConnectionConvention bool `yaml:"disable_connection_convention"`
	// DisableCountArgumentConvention stops treating Int arguments named
	// like a count (limit, maxRepositories, batch_size…) as slicing
	// arguments on fields without @listSize, and a type with one list
	// from taking its parent's size (complexity.WithCountArgumentConvention).
	DisableCountArgumentConvention bool `yaml:"disable_count_argument_convention"`
	// DisableKeyListConvention stops sizing a list field without
	// @listSize by the length of its representations, ids or keys argument
	// (complexity.WithKeyListConvention).
	DisableKeyListConvention bool `yaml:"disable_key_list_convention"`
	// DisableMutationListConvention stops sizing what a mutation without
	// @listSize returns by the length of its list arguments
	// (complexity.WithMutationListConvention).
	DisableMutationListConvention bool `yaml:"disable_mutation_list_convention"`
	// PriceIntrospectionFields prices the fields beneath __schema and
	// __type like any other, against the introspection types, on top of
	// IntrospectionCost (by default they cost nothing).
	PriceIntrospectionFields bool `yaml:"price_introspection_fields"`
	// SubtreeDiscounts lets a field's negative own cost (a negative
	// argument or field weight) discount what the field returns, where by
	// default only the field itself is discounted, down to 0
	// (complexity.WithSubtreeDiscounts).
	SubtreeDiscounts bool `yaml:"subtree_discounts"`
	// NullArgumentsCharged charges an explicit null the weight of its
	// argument or input field, where by default it costs nothing
	// (complexity.WithNullArgumentsCharged).
	NullArgumentsCharged bool `yaml:"null_arguments_charged"`

	// RateLimitField names the root field that reports the budget in the
	// response, GitHub's rateLimit (see RateLimitFrom). When the schema's
	// Query type has a field of this name with a Boolean argument dryRun,
	// an operation selecting it with dryRun: true is priced and answered
	// without running any other root field or debiting anything. Default
	// "rateLimit"; a schema without that field
	// simply has no dry runs, while another name the schema lacks is an
	// error when the extension is added to a server.
	RateLimitField string `yaml:"-"`
}

// MemoryStoreOptions size the in-memory stores the Limiter creates: the
// budgets when Dependencies.Store is nil, and FailOpen's local fallback buckets.
type MemoryStoreOptions struct {
	// MaxKeys bounds the identities held. A full store never resets a
	// budget to make room: it only drops budgets that are whole, and
	// otherwise admits new identities through one overflow bucket per
	// plan (see docs/middleware.md). Default memorystore.DefaultMaxKeys
	// (100,000).
	MaxKeys int `yaml:"max_keys"`
}

// RESTOptions price REST requests.
type RESTOptions struct {
	// DefaultCost is the cost of a request no route matches. Default 1.
	DefaultCost int64 `yaml:"default_cost"`
	// Routes maps a net/http ServeMux pattern ("GET /api/search",
	// "/api/users/{login}") to its cost. Matching follows ServeMux rules:
	// the most specific pattern wins. A cost of 0 makes a route free (its
	// responses still carry the headers).
	Routes map[string]int64 `yaml:"routes"`
	// RouteLimits give a route a limit of its own beside the shared
	// budget, by ServeMux pattern ("POST /api/login": 5 per 15m by ip,
	// sliding_log), matched as Routes are (the most specific pattern
	// wins; a request matching none has no route limit). Each request
	// counts 1, decided with the plan's bucket and quota, all or nothing
	// (429 route_rate_limited). budget.FieldLimit documents the
	// algorithms and how they count; a leaky_bucket_shaping limit holds
	// an admitted request for its turn (at most MaxDelay) before next
	// runs.
	RouteLimits map[string]budget.FieldLimit `yaml:"route_limits"`
}

// A Limiter is built from two values (New): its Dependencies, what the
// process is wired with and sized by, fixed for the Limiter's life; and
// its Policy, plain data that Reload replaces whole while requests run.
//
// One rule for zero holds across both: a zero field takes its documented
// default (for some, such as GraphQLOptions.MaxCost or
// Concurrency.PerPrincipal, that default is "no cap"), and None (-1) says
// "nothing" (no cap, no cost) where the default is something. Other
// negative values are refused.
//
// The yaml tags, on both types and on their option types, are the keys of
// a YAML configuration file (the example server's, docs/server.md), so
// that one decodes straight into them: a key left out and a key written
// as 0 both take the default, and -1 is None. A field tagged "-" is set in
// code, or has a form of its own in such a file (Plans, GraphQL). The
// package itself reads no YAML.

// Dependencies are what a Limiter is wired with and sized by for the life
// of the process: the stores, the observer, the logger, the clock, the
// challenger, how API keys are looked up, and the bounds of what New
// builds (the in-memory stores, the body bounds, the shedder, the store's
// timeout and breaker). New sets them once; Reload does not see them, so
// changing one takes a new Limiter.
type Dependencies struct {
	// Store holds the budgets. Nil: an in-memory store owned by the Limiter
	// (released by Close). Share a redisstore between processes. Quotas
	// and field limits need a store that also decides several budgets at
	// once (limiter.MultiTaker and limiter.MultiRefunder: memorystore,
	// redisstore); New refuses them on another. A store that keeps its
	// budgets in this process says so (limiter.Local) and gets no
	// timeout, breaker or over-limit cache.
	Store limiter.Store `yaml:"-"`
	// KeyLookup resolves the API keys Policy.APIKeys does not list (a
	// database: identity/pgkeys behind identity/keycache). Nil: a key the
	// policy does not list is unknown (401).
	KeyLookup identity.KeyLookup `yaml:"-"`
	// Identifier replaces the default chain (WithPrincipal principal, then
	// API key through Policy.APIKeys and KeyLookup, then client address on
	// Policy.AnonymousPlan).
	Identifier identity.Identifier `yaml:"-"`
	// Challenger issues and checks the challenge of lanes with Challenge
	// "pow" (challenge.NewPoW). Required when a lane asks for one, at New
	// or at a Reload.
	Challenger challenge.Challenger `yaml:"-"`
	// Observer receives an Event for every decision (nil: none). Package
	// middleware/prommetrics turns them into Prometheus metrics.
	Observer Observer `yaml:"-"`
	// Logger receives store-failure warnings and identification errors.
	// Default slog.Default().
	Logger *slog.Logger `yaml:"-"`
	// ListSizeRecorder, when set, records the sizes of the lists each
	// GraphQL response returned where their price rested on an assumed
	// size, read while the response's actual cost is (in enforce and
	// shadow mode alike; an operation a static cap refused and shadow
	// mode let run is read for it with the caps lifted), to suggest
	// Policy.ListSizes
	// (complexity.WithListSizeRecorder; admin.Config.ListSizes serves it).
	ListSizeRecorder *complexity.ListSizeRecorder `yaml:"-"`
	// Clock is the time source of the headers and of the in-memory stores
	// the Limiter creates. Default limiter.SystemClock.
	Clock limiter.Clock `yaml:"-"`

	// Overrides say where the per-principal overrides live
	// (Limiter.SetOverride); by default in this process's memory.
	Overrides OverrideOptions `yaml:"overrides"`
	// Slots keeps the leases of the requests each principal has in flight
	// (Policy.Concurrency). Nil: Store when it keeps slots too (a
	// redisstore.Store, exact across processes), else an in-memory store
	// of this process.
	Slots concurrency.Slots `yaml:"-"`
	// SlotTTL is how long a lease of Slots lives unless its request ends
	// first; a request running longer loses its slot. Default
	// concurrency.DefaultTTL (60 s).
	SlotTTL time.Duration `yaml:"-"`
	// MemoryStore sizes the in-memory stores the Limiter creates.
	MemoryStore MemoryStoreOptions `yaml:"memory_store"`
	// OverLimitCache remembers rejections locally. Default
	// OverLimitCacheAuto: on for a shared Store, off for an in-memory one.
	OverLimitCache stack.OverLimitCache `yaml:"over_limit_cache"`
	// SplitBudget tunes the leases of plans with Plan.SplitBudget set. A
	// Reload may give a plan SplitBudget only if some plan had it at New.
	SplitBudget SplitBudgetOptions `yaml:"split_budget"`
	// StoreTimeout bounds every store call. Default
	// stack.DefaultStoreTimeout (100 ms).
	StoreTimeout time.Duration `yaml:"store_timeout"`
	// Breaker tunes the circuit breaker in front of a shared store
	// (limiter/breaker, run by limiter/guard). After Failures store
	// failures or timeouts in a row it opens: for CoolDown no request calls
	// the store, and each is decided at once by its plan's failure mode
	// (budget.FailOpen: the local fallback bucket; budget.FailClosed: 503).
	// Then one request at a time probes the store; the first that succeeds
	// closes the breaker, a failure re-opens it. A request whose client
	// left before the store answered counts for nothing. Refunds are
	// skipped while it is open (the points return by refill). Defaults:
	// breaker.DefaultFailures (5) in a row, breaker.DefaultCoolDown (1 s);
	// Failures None disables it. An in-memory store has none: it never
	// waits.
	Breaker breaker.Config `yaml:"breaker"`

	// MaxBodyBytes bounds a request body in the GraphQL and REST wrappers:
	// a larger one, declared or chunked, is answered 413 before anything
	// reads it into memory beyond the limit. Of a GraphQL multipart
	// request it bounds the operations part (MaxUploadBytes the whole).
	// Default 1 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxUploadBytes bounds a GraphQL multipart request (file uploads),
	// which the wrapper streams to gqlgen rather than reading it: a larger
	// one is answered 413, declared or once that much has arrived. Its
	// first part, operations, is bounded by MaxBodyBytes and screened like
	// a JSON body. gqlgen's MultipartForm limits (MaxUploadSize, MaxMemory)
	// apply too. Default 32 MiB (or MaxBodyBytes when larger).
	MaxUploadBytes int64 `yaml:"max_upload_bytes"`
	// MaxBodyBytesInFlight bounds the GraphQL request bodies larger than
	// 64 KiB that are screened and handed to gqlgen at once, in bytes:
	// gqlgen reads and decodes a body into seven to ten times its size, so
	// this is what bounds the memory of many large requests at once. A
	// body that finds no room waits (until its request's context ends).
	// Default 1 MiB (or MaxBodyBytes when larger); at least MaxBodyBytes.
	MaxBodyBytesInFlight int64 `yaml:"max_body_bytes_in_flight"`
	// RetryAfterJitter adds up to this fraction of Retry-After, at random,
	// so rejected clients do not return in lockstep. It only ever adds.
	// Between 0 (default) and 1.
	RetryAfterJitter float64 `yaml:"retry_after_jitter"`
	// Overload, when set, sheds requests by their lane's priority once this
	// process has too many in flight, and switches named features off as
	// load rises (package overload). Nil: nothing is shed.
	Overload *overload.Config `yaml:"overload"`
}

// Policy is what operators change while requests run: the plans, who pays
// (API keys, trusted proxies), the GraphQL caps and prices, the REST costs,
// the field and route limits, the lanes, the concurrency and subscription
// caps, the trusted documents and the modes. It is plain data. New
// validates it, and Reload validates a new one exactly as New does and
// swaps it in whole.
type Policy struct {
	// Plans maps a plan name to its budget. Required. Names must be 1 to
	// budget.MaxNameBytes bytes of printable ASCII; they appear in the
	// RateLimit headers.
	Plans map[string]budget.Plan `yaml:"-"`
	// AnonymousPlan is the plan of requests without a principal or API key,
	// which are keyed by client address. Required.
	AnonymousPlan string `yaml:"anonymous_plan"`
	// APIKeys maps an API key to the principal and plan it grants. Only
	// the SHA-256 of each key is kept. A key it does not list is asked of
	// Dependencies.KeyLookup, if any; else it is unknown (401).
	APIKeys map[string]identity.APIKey `yaml:"api_keys"`
	// TrustedProxies lists CIDRs (or single addresses) of reverse proxies
	// whose forwarding header is believed. Empty: the peer address is the
	// client, whatever the headers say.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// ProxyHeader names the forwarding header trusted proxies set:
	// "X-Forwarded-For" (default) or "Forwarded". Only one is read, so a
	// client cannot slip a spoofed value through the header a proxy passes
	// along untouched.
	ProxyHeader string `yaml:"-"`

	GraphQL GraphQLOptions `yaml:"-"`
	REST    RESTOptions    `yaml:"rest"`
	// FieldLimits attach a rate to schema coordinates ("Mutation.login"),
	// counted per selection, every alias and list item included, and
	// decided with the plan's bucket and quota, all or nothing (429
	// FIELD_RATE_LIMITED). Coordinates the schema lacks are an error when
	// the Limiter is installed on a server.
	FieldLimits map[string]budget.FieldLimit `yaml:"field_limits"`
	// ListSizes maps a list field's coordinate ("Scene.galleries") to the
	// size assumed for it where no argument bounds it, as
	// @listSize(assumedSize:) on the field would, without editing the
	// schema (complexity.WithAssumedSizes): the sizes a
	// Dependencies.ListSizeRecorder suggests. A coordinate the schema
	// lacks, or a field that is not a list, is an error when the Limiter
	// is installed on a server.
	ListSizes map[string]int `yaml:"list_sizes"`

	// Lanes classify requests by priority (first match wins; a request no
	// lane matches goes to the last). Empty: no lanes.
	Lanes []Lane `yaml:"lanes"`
	// Concurrency caps the requests one principal has in flight at once,
	// REST and GraphQL together (per plan: Plan.MaxConcurrent).
	Concurrency ConcurrencyOptions `yaml:"concurrency"`
	// Subscriptions caps the GraphQL subscriptions one principal holds
	// open (default 100 each).
	Subscriptions SubscriptionOptions `yaml:"subscriptions"`
	// TrustedDocuments are the documents a server's own clients send,
	// which may be named by hash and, in mode enforce, the only ones that
	// run. None by default.
	TrustedDocuments TrustedDocumentsOptions `yaml:"trusted_documents"`
	// Mode applies to the plans that set none: Enforce (the default) or
	// Shadow, to watch what the Limiter would refuse before it does.
	Mode budget.Mode `yaml:"mode"`
	// FailureMode applies when the store fails or times out and the plan
	// sets none. Default FailOpen.
	FailureMode budget.FailureMode `yaml:"failure_mode"`
}

// Defaults New applies to zero fields of Dependencies and Policy itself;
// Defaults lists them all.
const (
	defaultRESTCost             = 1
	defaultMaxBodyBytes         = 1 << 20
	defaultMaxBodyBytesInFlight = 1 << 20
)

// boundBodies sets l's body bounds from deps, their defaults for zero.
func (l *Limiter) boundBodies(deps Dependencies) error {
	switch {
	case l.maxBody < 0:
		return keyed(fmt.Errorf("%w: MaxBodyBytes %d is negative", ErrInvalidConfig, l.maxBody), "max_body_bytes")
	case l.maxBody == 0:
		l.maxBody = defaultMaxBodyBytes
	}
	switch l.maxUpload = deps.MaxUploadBytes; {
	case l.maxUpload < 0:
		return keyed(fmt.Errorf("%w: MaxUploadBytes %d is negative", ErrInvalidConfig, l.maxUpload), "max_upload_bytes")
	case l.maxUpload == 0:
		l.maxUpload = max(defaultMaxUploadBytes, l.maxBody)
	}
	inFlight := deps.MaxBodyBytesInFlight
	if inFlight == 0 {
		inFlight = max(defaultMaxBodyBytesInFlight, l.maxBody)
	}
	if inFlight < l.maxBody {
		return keyed(fmt.Errorf("%w: MaxBodyBytesInFlight %d is less than MaxBodyBytes %d: the largest body would never fit",
			ErrInvalidConfig, inFlight, l.maxBody), "max_body_bytes_in_flight")
	}
	l.bodies = semaphore.NewWeighted(inFlight)
	return nil
}

// Defaults returns the value New gives each zero field of Dependencies and
// Policy, each read from where it is defined (this package, limiter/stack,
// limiter/breaker, …). MaxUploadBytes and MaxBodyBytesInFlight are those
// of the default MaxBodyBytes: a zero one takes MaxBodyBytes when that is
// larger. Left zero: what New builds (Store, Slots, Logger, Clock, an
// Identifier chain), the fields whose zero is their default (GraphQL.MaxCost
// and Concurrency.PerPrincipal: no cap; RetryAfterJitter), and
// TrustedDocuments, whose Mode defaults to trusteddocs.Enforce once a
// manifest is set. Given to New with Plans and AnonymousPlan filled in,
// they make the Limiter zero fields make.
func Defaults() (Dependencies, Policy) {
	deps := Dependencies{
		Overrides:            OverrideOptions{MaxOverrides: override.DefaultMaxOverrides, PollInterval: override.DefaultPollInterval},
		SlotTTL:              concurrency.DefaultTTL,
		MemoryStore:          MemoryStoreOptions{MaxKeys: memorystore.DefaultMaxKeys},
		OverLimitCache:       stack.OverLimitCacheAuto,
		SplitBudget:          SplitBudgetOptions{LeaseFraction: splitbudget.DefaultLeaseFraction, SettleInterval: splitbudget.DefaultSettleInterval},
		StoreTimeout:         stack.DefaultStoreTimeout,
		Breaker:              breaker.Config{Failures: breaker.DefaultFailures, CoolDown: breaker.DefaultCoolDown},
		MaxBodyBytes:         defaultMaxBodyBytes,
		MaxUploadBytes:       defaultMaxUploadBytes,
		MaxBodyBytesInFlight: defaultMaxBodyBytesInFlight,
	}
	policy := Policy{
		ProxyHeader:   identity.DefaultProxyHeader,
		GraphQL:       defaultGraphQLOptions(),
		REST:          RESTOptions{DefaultCost: defaultRESTCost},
		Subscriptions: SubscriptionOptions{MaxPerPrincipal: defaultMaxSubscriptionsPerPrincipal},
		Mode:          budget.Enforce,
		FailureMode:   budget.FailOpen,
	}
	return deps, policy
}

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
	graphQLResponseMIME = "application/graphql-response+json"
	jsonMIME            = "application/json"
	formMIME            = "application/x-www-form-urlencoded"
	jsonUTF8            = "application/json; charset=utf-8"
)

// Sentinel errors.
var (
	// ErrInvalidConfig wraps every configuration error New returns.
	ErrInvalidConfig = errors.New("middleware: invalid config")
)

// plan is a compiled plan (budget.Rule) with its rate-limit headers
// precomputed for the hot path.
type plan struct {
	*budget.Rule
	quotedName   string
	policyHeader string
	burstText    string  // Burst in decimal, X-RateLimit-Limit
	restoreRate  float64 // points per second
	// quotaQuoted and quotaPolicy are the quota's name and RateLimit-Policy
	// item, bothPolicies the plan's and the quota's ("" without a quota).
	quotaQuoted, quotaPolicy, bothPolicies string
	// base is, for an override's plan, the name of the plan it was
	// compiled over: the principal's own ("" for a plan's own rule).
	base string
}

// principalPlan is the name of the plan the principal is on by its
// identity: p's, or for an override's plan the one it was compiled over.
func (p *plan) principalPlan() string {
	if p.base != "" {
		return p.base
	}
	return p.Name()
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
	// engine decides every cost on the stores, by the policy of the
	// settings in force.
	engine *budget.Engine
	// overrides are the per-principal overrides, watched in their store.
	overrides *overrides
	maxBody   int64
	maxUpload int64 // MaxUploadBytes
	observer  Observer
	shed      *overload.Shedder // nil: nothing is shed
	// noLaneInFlight counts the requests in flight that no lane took (each
	// lane counts its own: lane.inFlight), for Load.
	noLaneInFlight atomic.Int64
	// reloadMu makes Reloads one at a time: each carries the lane counts
	// of the settings it replaces, and installs settings and policy as one.
	reloadMu   sync.Mutex
	challenger challenge.Challenger
	subs       subscriptionSlots   // the subscriptions open, by principal
	bodies     *semaphore.Weighted // the large GraphQL bodies in flight, in bytes
	log        *slog.Logger
	clock      limiter.Clock
	// timer starts the waits of requests held for their turn under a
	// shaping limit (hold); tests replace it.
	timer limiter.Timer
	start time.Time
	// sizes records the lists priced at an assumed size
	// (Dependencies.ListSizeRecorder); nil: not recorded.
	sizes *complexity.ListSizeRecorder
	// keys and ident are Dependencies.KeyLookup and .Identifier, which
	// each Policy's identification is compiled with.
	keys  identity.KeyLookup
	ident identity.Identifier

	// Warnings logged at most once a minute: an operation that did not
	// pass Handler's wrapper (the others are per plan).
	notInstalledWarn logevery.Gate
	// directiveWarn: gqlgen generated runtime hooks for @cost or
	// @listSize (no skip_runtime) and a field failed for it.
	directiveWarn logevery.Gate
	// fallbackWarn: the fail-open fallback decided (fallbackDecided).
	fallbackWarn logevery.Gate
	// screened remembers the queries that passed the document bounds.
	screened *screenCache
	// exts are the Extensions of this Limiter on servers, held weakly (a
	// server dropped takes its extension with it), so that Reload checks
	// new options and field limits against their schemas and compiles
	// their trusted documents' plans before a request needs them.
	schemasMu sync.Mutex
	exts      []weak.Pointer[costExtension]
}

// systemTimer is time.NewTimer as a limiter.Timer.
func systemTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// New validates deps and policy and builds a Limiter: deps for its whole
// life, policy until a Reload replaces it.
func New(deps Dependencies, policy Policy) (*Limiter, error) {
	l := &Limiter{
		log:      deps.Logger,
		clock:    deps.Clock,
		maxBody:  deps.MaxBodyBytes,
		keys:     deps.KeyLookup,
		ident:    deps.Identifier,
		screened: newScreenCache(),
		timer:    systemTimer,
		sizes:    deps.ListSizeRecorder,
	}
	if deps.StoreTimeout < 0 {
		return nil, keyed(fmt.Errorf("%w: StoreTimeout %v is negative", ErrInvalidConfig, deps.StoreTimeout), "store_timeout")
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.clock == nil {
		l.clock = limiter.SystemClock{}
	}
	l.start = l.clock.Now()

	if err := l.boundBodies(deps); err != nil {
		return nil, err
	}
	if deps.MemoryStore.MaxKeys < 0 {
		return nil, keyed(fmt.Errorf("%w: MemoryStore.MaxKeys %d is negative", ErrInvalidConfig, deps.MemoryStore.MaxKeys), "memory_store", "max_keys")
	}
	st, err := l.compileSettings(policy)
	if err != nil {
		return nil, err
	}
	l.observer, l.challenger = deps.Observer, deps.Challenger
	if deps.Overload != nil {
		oc := *deps.Overload
		if oc.Clock == nil {
			oc.Clock = l.clock
		}
		if l.shed, err = overload.New(oc); err != nil {
			return nil, keyed(fmt.Errorf("%w: Overload: %w", ErrInvalidConfig, err), "overload")
		}
	}
	if err := l.checkChallenges(st); err != nil {
		return nil, err
	}
	slots, ttl, err := l.buildSlots(deps)
	if err != nil {
		return nil, err
	}
	if err := checkStoreOptions(deps); err != nil {
		return nil, err
	}
	if l.stores, err = l.buildStores(deps, st); err != nil {
		return nil, err
	}
	localSlots := limiter.IsLocal(slots)
	hasBreaker := l.stores.BreakerState() != ""
	l.engine, err = budget.NewEngine(l.stores, st.pol,
		budget.WithClock(l.clock),
		budget.WithLogger(l.log),
		budget.WithRetryAfterJitter(deps.RetryAfterJitter),
		budget.WithSlots(slots, ttl, hasBreaker && !localSlots))
	if err != nil {
		l.stores.Close()
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if l.overrides, err = l.watchOverrides(deps.Overrides, deps.Store != nil); err != nil {
		l.stores.Close()
		return nil, err
	}

	st.overrides = l.overrides
	l.settings.Store(st)
	return l, nil
}

// watchOverrides starts watching the override store (a memory one by
// default); it reads the store once, so one that cannot be read fails New.
// sharedBudgets: the budgets are in a store of the caller's.
func (l *Limiter) watchOverrides(o OverrideOptions, sharedBudgets bool) (*overrides, error) {
	store := o.Store
	if store == nil {
		m, err := override.NewMemory(o.MaxOverrides)
		if err != nil {
			return nil, keyed(fmt.Errorf("%w: Overrides: %w", ErrInvalidConfig, err), "overrides", "max_overrides")
		}
		store = m
	}
	interval := o.PollInterval
	switch {
	case interval == None:
		interval = 0
	case interval < 0:
		return nil, keyed(fmt.Errorf("%w: Overrides.PollInterval %v is negative (None: never)", ErrInvalidConfig, interval), "overrides")
	case interval == 0:
		interval = override.DefaultPollInterval
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	w, err := override.NewWatcher(ctx, store, override.WithClock(l.clock), override.WithLogger(l.log), override.WithPollInterval(interval))
	if err != nil {
		return nil, fmt.Errorf("%w: Overrides: %w", ErrInvalidConfig, err)
	}
	return &overrides{w: w, engine: l.engine, clock: l.clock, log: l.log.Warn, start: l.start,
		localOnly: o.Store == nil && sharedBudgets}, nil
}

// checkStoreOptions runs the checks of the stack's options (package
// limiter/stack runs them again) with the key of each, so that a mistake in
// them is named as a configuration file spells it.
func checkStoreOptions(cfg Dependencies) error {
	if err := cfg.OverLimitCache.Validate(); err != nil {
		return keyed(fmt.Errorf("%w: %w", ErrInvalidConfig, err), "over_limit_cache")
	}
	if err := (splitbudget.Config{LeaseFraction: cfg.SplitBudget.LeaseFraction, SettleInterval: cfg.SplitBudget.SettleInterval}).Validate(); err != nil {
		return keyed(fmt.Errorf("%w: SplitBudget: %w", ErrInvalidConfig, err), "split_budget")
	}
	if cfg.Breaker.Failures != None {
		if _, err := breaker.New(cfg.Breaker); err != nil {
			return keyed(fmt.Errorf("%w: Breaker: %w", ErrInvalidConfig, err), "breaker")
		}
	}
	return nil
}

// Close stops watching the override store, stops the background repayment of what the fail-open fallback
// admitted (a debit in flight ends within StoreTimeout), gives the leases
// of SplitBudget plans back to the store and releases the in-memory
// stores the Limiter created. It does not close Dependencies.Store.
func (l *Limiter) Close() error {
	l.overrides.w.Close()
	return l.stores.Close()
}

// buildStores puts the stores together (package limiter/stack): the store
// behind the over-limit cache when that is on, split-budget leases when a
// plan asks for them, the fail-open fallback and the overflow buckets.
func (l *Limiter) buildStores(cfg Dependencies, set *settings) (*stack.Stack, error) {
	split := set.pol.SplitBudget()
	st, err := stack.New(stack.Config{
		Store:          cfg.Store,
		MemoryMaxKeys:  cfg.MemoryStore.MaxKeys,
		OverflowKeys:   overflowKeys(set.pol.OverflowBudgets()),
		OverLimitCache: cfg.OverLimitCache,
		SplitBudget:    split != "",
		LeaseFraction:  cfg.SplitBudget.LeaseFraction,
		SettleInterval: cfg.SplitBudget.SettleInterval,
		OnSettleError: func(key string, err error) {
			l.log.Warn("middleware: giving split-budget tokens back failed; they return by refill", "err", err)
		},
		StoreTimeout: cfg.StoreTimeout,
		Breaker:      cfg.Breaker,
		NoBreaker:    cfg.Breaker.Failures == None,
		Logger:       l.log,
		Clock:        l.clock,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return st, nil
}
