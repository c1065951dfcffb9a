package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/challenge"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/splitbudget"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/querycache"
	"github.com/costguard/costguard/overload"
)

// errConfig wraps every configuration error, so run can tell a bad file
// (exit status 2, like a bad flag) from a failure to serve.
var errConfig = errors.New("invalid configuration")

// config is the server's YAML configuration (docs/server.md is its
// reference). defaultConfig holds every default; a file overrides only the
// keys it names, except that a map it names (plans, api_keys, rest.routes)
// replaces the default map instead of merging with it, so a production file
// never inherits the demo API key by accident of omission: write
// `api_keys: {}` to have none. A file that names plans but not api_keys has
// no API key either: the demo key's plan may be gone with the default plans.
type config struct {
	// Plans maps a plan name to a token bucket in points.
	Plans map[string]planConfig `yaml:"plans"`
	// AnonymousPlan is the plan of requests without an API key, keyed by
	// client IP.
	AnonymousPlan string `yaml:"anonymous_plan"`
	// APIKeys maps an API key to the principal and plan it grants.
	APIKeys map[string]apiKeyConfig `yaml:"api_keys"`
	GraphQL graphQLConfig           `yaml:"graphql"`
	REST    restConfig              `yaml:"rest"`
	// FieldLimits maps a schema coordinate ("Mutation.createIssue") to a
	// rate counted per selection (aliases, fragments and list items
	// included).
	FieldLimits map[string]fieldLimitConfig `yaml:"field_limits"`
	// FailureMode is "open" or "closed": what a store failure does to plans
	// that do not choose for themselves.
	FailureMode string `yaml:"failure_mode"`
	// Breaker stops calling a failing store for a cool-down, deciding by
	// the failure mode at once.
	Breaker breakerConfig `yaml:"breaker"`
	// Mode is "enforce" or "shadow": whether plans that do not choose for
	// themselves refuse what they would refuse, or only report it.
	Mode modeName `yaml:"mode"`
	// TrustedProxies lists CIDRs whose X-Forwarded-For is believed.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// RetryAfterJitter is the largest fraction added, at random, to
	// Retry-After.
	RetryAfterJitter float64 `yaml:"retry_after_jitter"`
	// OverLimitCache is "auto", "on" or "off": whether rejections are
	// remembered in this process until their Retry-After has passed.
	OverLimitCache string `yaml:"over_limit_cache"`
	// SplitBudget tunes the local leases of plans with split_budget: true.
	SplitBudget splitBudgetConfig `yaml:"split_budget"`
	// MaxBodyBytes bounds a request body on /graphql and /api/ (413).
	MaxBodyBytes whole `yaml:"max_body_bytes"`
	// MaxBodyBytesInFlight bounds the large GraphQL bodies handled at once.
	MaxBodyBytesInFlight whole `yaml:"max_body_bytes_in_flight"`
	// MaxUploadBytes bounds a multipart request (file uploads), which
	// streams to gqlgen rather than being read first (413).
	MaxUploadBytes whole `yaml:"max_upload_bytes"`
	// UploadCostPerMiB is what each MiB begun of a multipart request adds
	// to its operation's price.
	UploadCostPerMiB whole `yaml:"upload_cost_per_mib"`
	// MemoryStore sizes the in-memory budgets (and the fail-open fallback).
	MemoryStore memoryStoreConfig `yaml:"memory_store"`
	// Lanes classify requests by priority, in order: the first whose match
	// holds takes a request; one no lane matches goes to the last.
	Lanes []laneConfig `yaml:"lanes"`
	// Overload sheds requests by their lane's priority when this process
	// has too many in flight (overload).
	Overload overloadConfig `yaml:"overload"`
	// Concurrency caps one principal's requests in flight (per plan:
	// plans.<name>.concurrency).
	Concurrency concurrencyConfig `yaml:"concurrency"`
	// Subscriptions caps the GraphQL subscriptions one principal holds
	// open.
	Subscriptions subscriptionsConfig `yaml:"subscriptions"`
	// Degradation lists the features switched off, in order, as load rises.
	Degradation []featureConfig `yaml:"degradation"`
	// Challenge configures the proof-of-work challenge of lanes with
	// challenge: pow.
	Challenge challengeConfig `yaml:"challenge"`
	// DemoLatency makes the example's root resolvers and REST handlers
	// take this long, to fill the server with requests in flight in a
	// demo. 0: none.
	DemoLatency time.Duration `yaml:"demo_latency"`

	// file is where the configuration was read from, for error messages;
	// "" for the built-in defaults and for tests.
	file string `yaml:"-"`
}

// laneConfig is one lane (middleware.Lane).
type laneConfig struct {
	Name     string          `yaml:"name"`
	Priority string          `yaml:"priority"`
	Match    laneMatchConfig `yaml:"match"`
	// Queue is how long a request of a critical lane waits for a slot
	// under overload before it is shed (0: not at all).
	Queue time.Duration `yaml:"queue,omitempty"`
	// Challenge "pow" puts a proof-of-work challenge on the lane's shed
	// and rate-limited answers; "" none.
	Challenge string `yaml:"challenge,omitempty"`
	// Budget is a token bucket per principal for this lane, paid on top
	// of the plan's; unset: none.
	Budget *laneBudgetConfig `yaml:"budget,omitempty"`
}

// plan is the middleware's form of b (nil for none).
func (b *laneBudgetConfig) plan() *budget.Plan {
	if b == nil {
		return nil
	}
	return &budget.Plan{Burst: int64(b.Burst), Rate: int64(b.Rate), Per: b.Per}
}

// laneBudgetConfig is a lane's own bucket, in points.
type laneBudgetConfig struct {
	Burst whole         `yaml:"burst"`
	Rate  whole         `yaml:"rate"`
	Per   time.Duration `yaml:"per"`
}

// overloadConfig is overload's Config, less the degradation
// list, which is a top-level key.
type overloadConfig struct {
	MaxInFlight whole `yaml:"max_in_flight"`
	// ShedAt maps a priority name to the fraction of max_in_flight at or
	// above which its requests are shed. A file's map merges with the
	// default one: a priority it leaves out keeps its default.
	ShedAt   map[string]float64 `yaml:"shed_at"`
	Adaptive bool               `yaml:"adaptive"`
	// MaxQueue bounds the critical requests waiting for a slot at once;
	// unset (0): max_in_flight.
	MaxQueue whole `yaml:"max_queue,omitempty"`
}

// concurrencyConfig caps one principal's requests in flight; 0: no cap.
type concurrencyConfig struct {
	PerPrincipal whole `yaml:"per_principal"`
}

// subscriptionsConfig caps one principal's open subscriptions; 0: no cap.
type subscriptionsConfig struct {
	MaxPerPrincipal whole `yaml:"max_per_principal"`
}

// maxPerPrincipal maps the cap onto middleware.SubscriptionOptions.
func (sc subscriptionsConfig) maxPerPrincipal() int {
	if sc.MaxPerPrincipal == 0 {
		return middleware.None
	}
	return int(sc.MaxPerPrincipal)
}

// featureConfig is one entry of the degradation list (overload.Feature).
type featureConfig struct {
	Name string  `yaml:"name"`
	At   float64 `yaml:"at"`
}

// challengeConfig configures challenge.NewPoW.
type challengeConfig struct {
	// Secret keys the tokens; at least 32 bytes, shared by every process
	// that may verify a token. "": 32 random bytes drawn at start.
	Secret secret `yaml:"secret,omitempty"`
	Bits   whole  `yaml:"bits"`
}

// secret is a string that never prints: fmt shows it redacted.
type secret string

func (secret) String() string   { return "[redacted]" }
func (secret) GoString() string { return `"[redacted]"` }

// laneMatchConfig says which requests a lane takes (middleware.LaneMatch).
type laneMatchConfig struct {
	GraphQL       []string `yaml:"graphql,omitempty"`
	REST          []string `yaml:"rest,omitempty"`
	Plans         []string `yaml:"plans,omitempty"`
	Authenticated bool     `yaml:"authenticated,omitempty"`
	Anonymous     bool     `yaml:"anonymous,omitempty"`
}

type memoryStoreConfig struct {
	MaxKeys whole `yaml:"max_keys"`
}

type breakerConfig struct {
	Failures whole         `yaml:"failures"`
	CoolDown time.Duration `yaml:"cool_down"`
}

type splitBudgetConfig struct {
	LeaseFraction  float64       `yaml:"lease_fraction"`
	SettleInterval time.Duration `yaml:"settle_interval"`
}

type planConfig struct {
	Burst       whole         `yaml:"burst"`
	Rate        whole         `yaml:"rate"`
	Per         time.Duration `yaml:"per"`
	FailureMode string        `yaml:"failure_mode,omitempty"`
	// Mode overrides the top-level mode for this plan; unset inherits it.
	Mode modeName `yaml:"mode,omitempty"`
	// SplitBudget trades exactness for fewer store round trips (UX-grade
	// limits only; docs/scaling.md bounds the overshoot).
	SplitBudget bool `yaml:"split_budget,omitempty"`
	// Introspection false refuses __schema and __type for this plan; unset
	// means allowed.
	Introspection *bool `yaml:"introspection,omitempty"`
	// RefundUnused false keeps the whole requested cost of a GraphQL
	// operation; unset means the unused part is refunded.
	RefundUnused *bool `yaml:"refund_unused,omitempty"`
	// CostReport false refuses "GraphQL-Cost: report" for this plan (400
	// COST_REPORT_DISABLED); unset means allowed.
	CostReport *bool `yaml:"cost_report,omitempty"`
	// Concurrency overrides the top-level concurrency for this plan; unset
	// inherits it, per_principal 0 lifts the cap.
	Concurrency *concurrencyConfig `yaml:"concurrency,omitempty"`
	// Quota is a second budget drawn by the same cost, in fixed windows
	// aligned to UTC; unset: none.
	Quota *quotaConfig `yaml:"quota,omitempty"`
}

// quotaConfig is plans.<name>.quota.
type quotaConfig struct {
	Limit whole         `yaml:"limit"`
	Per   time.Duration `yaml:"per"`
	// Name is the policy's name in RateLimit-Policy; unset: the plan's
	// name with -daily, -hourly, -weekly or -quota.
	Name string `yaml:"name,omitempty"`
}

// fieldLimitConfig is field_limits.<coordinate>.
type fieldLimitConfig struct {
	Limit whole         `yaml:"limit"`
	Per   time.Duration `yaml:"per"`
	// By is principal (the default) or ip.
	By string `yaml:"by,omitempty"`
}

type apiKeyConfig struct {
	Principal string `yaml:"principal"`
	Plan      string `yaml:"plan"`
}

type graphQLConfig struct {
	MaxDepth        whole `yaml:"max_depth"`
	MaxBreadth      whole `yaml:"max_breadth"`
	MaxNodes        whole `yaml:"max_nodes"`
	MaxCost         whole `yaml:"max_cost"`
	DefaultListSize whole `yaml:"default_list_size"`
	MutationCost    whole `yaml:"mutation_cost"`
	MaxAliases      whole `yaml:"max_aliases"`
	MaxRootFields   whole `yaml:"max_root_fields"`
	// The bounds on a request before it is parsed.
	MaxTokens         whole `yaml:"max_tokens"`
	MaxSelections     whole `yaml:"max_selections"`
	MaxVariableValues whole `yaml:"max_variable_values"`
	MaxVariablesDepth whole `yaml:"max_variables_depth"`
	// What requests pay besides their price.
	InvalidCost       whole `yaml:"invalid_cost"`
	MinCost           whole `yaml:"min_cost"`
	IntrospectionCost whole `yaml:"introspection_cost"`
	// gqlgen's cache of parsed documents.
	QueryCacheEntries whole `yaml:"query_cache_entries"`
	QueryCacheBytes   whole `yaml:"query_cache_bytes"`
}

type restConfig struct {
	DefaultCost whole            `yaml:"default_cost"`
	Routes      map[string]whole `yaml:"routes"`
}

// The demo API key of the default configuration, used by the README.
const demoAPIKey = "demo-free-key"

// defaultConfig returns the configuration the server runs with when no file
// is given: the example of docs/server.md (a test holds them equal).
func defaultConfig() config {
	gql := middleware.DefaultGraphQLOptions()
	return config{
		Plans: map[string]planConfig{
			"free": {Burst: 5000, Rate: 5000, Per: time.Hour},
			"anon": {Burst: 500, Rate: 500, Per: time.Hour},
		},
		AnonymousPlan: "anon",
		APIKeys: map[string]apiKeyConfig{
			demoAPIKey: {Principal: "alice", Plan: "free"},
		},
		// The middleware's defaults, each defined there once.
		GraphQL: graphQLConfig{
			MaxDepth:        whole(gql.MaxDepth),
			MaxBreadth:      whole(gql.MaxBreadth),
			MaxNodes:        whole(gql.MaxNodes),
			MaxCost:         0, // no cap but the plan's burst
			DefaultListSize: whole(gql.DefaultListSize),
			MutationCost:    whole(gql.MutationCost),

			MaxAliases:        whole(gql.MaxAliases),
			MaxRootFields:     whole(gql.MaxRootFields),
			MaxTokens:         whole(gql.MaxTokens),
			MaxSelections:     whole(gql.MaxSelections),
			MaxVariableValues: whole(gql.MaxVariableValues),
			MaxVariablesDepth: whole(gql.MaxVariablesDepth),
			InvalidCost:       whole(gql.InvalidCost),
			MinCost:           whole(gql.MinCost),
			IntrospectionCost: whole(gql.IntrospectionCost),
			QueryCacheEntries: querycache.DefaultEntries,
			QueryCacheBytes:   querycache.DefaultBytes,
		},
		REST: restConfig{
			DefaultCost: middleware.DefaultRESTCost,
			Routes:      map[string]whole{"GET /api/search": 10},
		},
		FailureMode:      string(budget.FailOpen),
		Breaker:          breakerConfig{Failures: breaker.DefaultFailures, CoolDown: breaker.DefaultCoolDown},
		Mode:             modeName(budget.Enforce),
		TrustedProxies:   []string{},
		RetryAfterJitter: 0,
		OverLimitCache:   string(stack.OverLimitCacheAuto),
		SplitBudget: splitBudgetConfig{
			LeaseFraction:  splitbudget.DefaultLeaseFraction,
			SettleInterval: splitbudget.DefaultSettleInterval,
		},
		MaxBodyBytes:         middleware.DefaultMaxBodyBytes,
		MaxBodyBytesInFlight: middleware.DefaultMaxBodyBytesInFlight,
		MaxUploadBytes:       middleware.DefaultMaxUploadBytes,
		UploadCostPerMiB:     0,
		MemoryStore:          memoryStoreConfig{MaxKeys: memorystore.DefaultMaxKeys},
		// The seed documents' lanes over the example schema: opening an
		// issue stands for checkout.
		Lanes: []laneConfig{
			{Name: "checkout", Priority: overload.Critical.String(), Queue: 2 * time.Second,
				Match: laneMatchConfig{GraphQL: []string{"Mutation.createIssue"}, REST: []string{"POST /api/orders"}, Authenticated: true}},
			{Name: "authenticated", Priority: overload.Normal.String(), Match: laneMatchConfig{Authenticated: true}},
			{Name: "anonymous", Priority: overload.Sheddable.String(), Match: laneMatchConfig{Anonymous: true},
				Challenge: middleware.ChallengePoW},
		},
		Overload: overloadConfig{
			MaxInFlight: 64,
			ShedAt: map[string]float64{
				overload.Sheddable.String(): overload.DefaultShedSheddable,
				overload.Normal.String():    overload.DefaultShedNormal,
				overload.High.String():      overload.DefaultShedHigh,
			},
		},
		Concurrency:   concurrencyConfig{PerPrincipal: 100},
		Subscriptions: subscriptionsConfig{MaxPerPrincipal: middleware.DefaultMaxSubscriptionsPerPrincipal},
		Degradation: []featureConfig{
			{Name: graph.FeatureRecommendations, At: 0.7},
			{Name: featureSearch, At: 0.85},
		},
		Challenge:   challengeConfig{Bits: challenge.DefaultBits},
		DemoLatency: 0,
	}
}

// maxConfigBytes bounds what loadConfig reads: a configuration is small.
const maxConfigBytes = 1 << 20

// loadConfig reads the file at path over the defaults; path "" means the
// defaults alone. Every error wraps errConfig and names the file.
func loadConfig(path string) (config, error) {
	if path == "" {
		cfg := defaultConfig()
		if err := cfg.validate(); err != nil {
			return config{}, fmt.Errorf("%w: built-in defaults: %w", errConfig, err)
		}
		return cfg, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return config{}, fmt.Errorf("%w: %w", errConfig, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err == nil && len(data) > maxConfigBytes {
		err = fmt.Errorf("larger than %d bytes", maxConfigBytes)
	}
	if err == nil {
		var cfg config
		if cfg, err = parseConfig(data); err == nil {
			cfg.file = path
			return cfg, nil
		}
	}
	return config{}, fmt.Errorf("%w: %s: %w", errConfig, path, err)
}

// parseConfig decodes one YAML document over the defaults and validates
// the result. Unknown keys, a second document and non-integer counts are
// errors, each naming its line and key path.
func parseConfig(data []byte) (config, error) {
	cfg := defaultConfig()

	// First pass: check the document's shape against config, so an error
	// names its key, and find which maps the file names: those replace the
	// defaults.
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return config{}, err
	}
	if err := checkDocument(&doc); err != nil {
		return config{}, err
	}
	if top := mappingValue(&doc, ""); top != nil {
		names := func(key string) bool { return mappingValue(top, key) != nil }
		if names("plans") {
			cfg.Plans = nil
			if !names("api_keys") {
				// The demo key grants a default plan the file may have
				// dropped: a file with its own plans gets no API key
				// unless it lists them.
				cfg.APIKeys = map[string]apiKeyConfig{}
			}
		}
		if names("api_keys") {
			cfg.APIKeys = nil
		}
		if rest := mappingValue(top, "rest"); rest != nil && mappingValue(rest, "routes") != nil {
			cfg.REST.Routes = nil
		}
	}

	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return config{}, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return config{}, errors.New("more than one YAML document")
	}
	if err := cfg.validate(); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// mappingValue returns the value node of key in the mapping n (or, for key
// "", the document's top-level mapping); nil when absent.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
		if key == "" {
			if n.Kind != yaml.MappingNode {
				return nil
			}
			return n
		}
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// validate checks what the middleware cannot see: it treats 0 as "use the
// default", while in this file 0 would be taken literally, so a count that
// must be positive is refused rather than silently replaced. It also
// checks the plans and the references to them, which middleware.New checks
// too, so that the message names the key to fix. Everything else (routes
// against bursts, proxies, route patterns) is checked by middleware.New
// when the server starts, through limiterConfig.
func (c config) validate() error {
	if err := c.validatePlans(); err != nil {
		return err
	}
	if err := c.validateLanes(); err != nil {
		return err
	}
	if err := c.validateOverload(); err != nil {
		return err
	}
	if err := c.validateChallenge(); err != nil {
		return err
	}
	if c.DemoLatency < 0 {
		return fmt.Errorf("demo_latency is %v; it must not be negative", c.DemoLatency)
	}
	for _, f := range []struct {
		key      string
		v        whole
		min, max int64
	}{
		{"graphql.max_depth", c.GraphQL.MaxDepth, 1, math.MaxInt32},
		{"graphql.max_breadth", c.GraphQL.MaxBreadth, 1, math.MaxInt32},
		{"graphql.max_nodes", c.GraphQL.MaxNodes, 1, math.MaxInt64},
		{"graphql.max_cost", c.GraphQL.MaxCost, 0, math.MaxInt64},
		{"graphql.default_list_size", c.GraphQL.DefaultListSize, 1, math.MaxInt32},
		{"graphql.mutation_cost", c.GraphQL.MutationCost, 1, math.MaxInt64},
		{"graphql.max_aliases", c.GraphQL.MaxAliases, 1, math.MaxInt32},
		{"graphql.max_root_fields", c.GraphQL.MaxRootFields, 1, math.MaxInt32},
		{"graphql.max_tokens", c.GraphQL.MaxTokens, 1, math.MaxInt32},
		{"graphql.max_selections", c.GraphQL.MaxSelections, 1, math.MaxInt32},
		{"graphql.max_variable_values", c.GraphQL.MaxVariableValues, 1, math.MaxInt32},
		{"graphql.max_variables_depth", c.GraphQL.MaxVariablesDepth, 1, math.MaxInt32},
		{"graphql.invalid_cost", c.GraphQL.InvalidCost, 1, math.MaxInt64},
		{"graphql.min_cost", c.GraphQL.MinCost, 1, math.MaxInt64},
		{"graphql.introspection_cost", c.GraphQL.IntrospectionCost, 1, math.MaxInt64},
		{"graphql.query_cache_entries", c.GraphQL.QueryCacheEntries, 1, math.MaxInt32},
		{"graphql.query_cache_bytes", c.GraphQL.QueryCacheBytes, 1, math.MaxInt64},
		{"max_body_bytes", c.MaxBodyBytes, 1, math.MaxInt64},
		{"max_body_bytes_in_flight", c.MaxBodyBytesInFlight, 1, math.MaxInt64},
		{"max_upload_bytes", c.MaxUploadBytes, 1, math.MaxInt64},
		{"upload_cost_per_mib", c.UploadCostPerMiB, 0, math.MaxInt64},
		{"memory_store.max_keys", c.MemoryStore.MaxKeys, 1, math.MaxInt32},
		{"rest.default_cost", c.REST.DefaultCost, 1, math.MaxInt64},
		{"concurrency.per_principal", c.Concurrency.PerPrincipal, 0, concurrency.MaxLimit},
		{"subscriptions.max_per_principal", c.Subscriptions.MaxPerPrincipal, 0, math.MaxInt32},
	} {
		if int64(f.v) < f.min || int64(f.v) > f.max {
			return fmt.Errorf("%s is %d; it must be between %d and %d", f.key, f.v, f.min, f.max)
		}
	}
	for pattern, cost := range c.REST.Routes {
		if cost < 0 {
			return fmt.Errorf("rest.routes[%q] is %d; a cost must not be negative", pattern, cost)
		}
	}
	if err := checkFailureMode("failure_mode", c.FailureMode); err != nil {
		return err
	}
	if err := c.Mode.check(); err != nil {
		return fmt.Errorf("mode: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Plans)) {
		p, key := c.Plans[name], mapPath("plans", name)
		if p.FailureMode != "" {
			if err := checkFailureMode(key+".failure_mode", p.FailureMode); err != nil {
				return err
			}
		}
		if p.Mode != "" {
			if err := p.Mode.check(); err != nil {
				return fmt.Errorf("%s.mode: %w", key, err)
			}
		}
		if p.Concurrency != nil {
			if n := p.Concurrency.PerPrincipal; n < 0 || n > concurrency.MaxLimit {
				return fmt.Errorf("%s.concurrency.per_principal is %d; it must be between 0 (no cap) and %d", key, n, concurrency.MaxLimit)
			}
		}
	}
	if j := c.RetryAfterJitter; math.IsNaN(j) || j < 0 || j > 1 {
		return fmt.Errorf("retry_after_jitter is %v; it must be between 0 and 1", j)
	}
	switch stack.OverLimitCache(c.OverLimitCache) {
	case stack.OverLimitCacheAuto, stack.OverLimitCacheOn, stack.OverLimitCacheOff:
	default:
		return fmt.Errorf("over_limit_cache is %q; it must be %q, %q or %q", c.OverLimitCache,
			stack.OverLimitCacheAuto, stack.OverLimitCacheOn, stack.OverLimitCacheOff)
	}
	// Like the counts above, a 0 here would be read by the middleware as
	// "use the default", so it is refused rather than silently replaced.
	if f := c.SplitBudget.LeaseFraction; math.IsNaN(f) || f <= 0 || f > 1 {
		return fmt.Errorf("split_budget.lease_fraction is %v; it must be above 0 and at most 1", f)
	}
	if c.SplitBudget.SettleInterval <= 0 {
		return fmt.Errorf("split_budget.settle_interval is %v; it must be positive", c.SplitBudget.SettleInterval)
	}
	if c.Breaker.Failures < 1 || c.Breaker.CoolDown <= 0 {
		return fmt.Errorf("breaker: failures (%d) must be at least 1 and cool_down (%v) positive", c.Breaker.Failures, c.Breaker.CoolDown)
	}
	for key, k := range c.APIKeys {
		if key == "" {
			return errors.New("api_keys: an API key must not be empty")
		}
		if k.Principal == "" {
			// mapPath prints only a hash of the key.
			return fmt.Errorf("%s.principal is empty; every API key needs one", mapPath("api_keys", key))
		}
	}
	return nil
}

// validatePlans checks each plan's bucket, and that anonymous_plan and
// every API key name one of the plans.
func (c config) validatePlans() error {
	if len(c.Plans) == 0 {
		return errors.New("plans is empty; it must name at least one plan")
	}
	names := slices.Sorted(maps.Keys(c.Plans))
	for _, name := range names {
		p, key := c.Plans[name], mapPath("plans", name)
		if p.Burst < 1 {
			return fmt.Errorf("%s.burst is %d; it must be at least 1", key, p.Burst)
		}
		if p.Rate < 1 {
			return fmt.Errorf("%s.rate is %d; it must be at least 1", key, p.Rate)
		}
		if p.Per <= 0 {
			return fmt.Errorf("%s.per is %v; it must be positive, %s", key, p.Per, durationForm)
		}
		if q := p.Quota; q != nil {
			if q.Limit < p.Burst {
				return fmt.Errorf("%s.quota.limit is %d; it must be at least the plan's burst, %d", key, q.Limit, p.Burst)
			}
			if q.Per <= 0 {
				return fmt.Errorf("%s.quota.per is %v; it must be positive, %s", key, q.Per, durationForm)
			}
			if p.SplitBudget {
				return fmt.Errorf("%s: quota and split_budget cannot be combined", key)
			}
		}
	}
	for _, coord := range slices.Sorted(maps.Keys(c.FieldLimits)) {
		fl, key := c.FieldLimits[coord], mapPath("field_limits", coord)
		if fl.Limit < 1 {
			return fmt.Errorf("%s.limit is %d; it must be at least 1", key, fl.Limit)
		}
		if fl.Per <= 0 {
			return fmt.Errorf("%s.per is %v; it must be positive, %s", key, fl.Per, durationForm)
		}
		switch budget.FieldLimitBy(fl.By) {
		case "", budget.ByPrincipal, budget.ByIP:
		default:
			return fmt.Errorf("%s.by is %q; it must be %q or %q", key, fl.By, budget.ByPrincipal, budget.ByIP)
		}
	}
	list := strings.Join(names, ", ")
	if _, ok := c.Plans[c.AnonymousPlan]; !ok {
		return fmt.Errorf("anonymous_plan is %q; it must be one of the plans (%s)", c.AnonymousPlan, list)
	}
	for _, key := range slices.Sorted(maps.Keys(c.APIKeys)) {
		plan := c.APIKeys[key].Plan
		if _, ok := c.Plans[plan]; !ok {
			return fmt.Errorf("%s.plan is %q; it must be one of the plans (%s)", mapPath("api_keys", key), plan, list)
		}
	}
	return nil
}

// validateLanes checks each lane's priority, queue and challenge.
func (c config) validateLanes() error {
	for i, l := range c.Lanes {
		p, err := overload.ParsePriority(l.Priority)
		if err != nil {
			return fmt.Errorf("lanes[%d].priority is %q; it must be critical, high, normal or sheddable", i, l.Priority)
		}
		switch {
		case l.Queue < 0:
			return fmt.Errorf("lanes[%d].queue is %v; it must not be negative", i, l.Queue)
		case l.Queue > 0 && p != overload.Critical:
			return fmt.Errorf("lanes[%d].queue is %v; only a critical lane may queue, and this one is %s", i, l.Queue, p)
		}
		if l.Challenge != "" && l.Challenge != middleware.ChallengePoW {
			return fmt.Errorf("lanes[%d].challenge is %q; it must be %q or unset", i, l.Challenge, middleware.ChallengePoW)
		}
		if b := l.Budget; b != nil {
			switch {
			case b.Burst < 1:
				return fmt.Errorf("lanes[%d].budget.burst is %d; it must be at least 1", i, b.Burst)
			case b.Rate < 1:
				return fmt.Errorf("lanes[%d].budget.rate is %d; it must be at least 1", i, b.Rate)
			case b.Per <= 0:
				return fmt.Errorf("lanes[%d].budget.per is %v; it must be positive, a Go duration with a unit, such as 1h or 90s", i, b.Per)
			}
		}
	}
	return nil
}

// validateOverload checks overload and degradation key by key, then asks
// the overload package about what only the whole decides (whether every
// priority gets a slot).
func (c config) validateOverload() error {
	o := c.Overload
	if o.MaxInFlight < 1 || o.MaxInFlight > overload.MaxCapacity {
		return fmt.Errorf("overload.max_in_flight is %d; it must be between 1 and %d", o.MaxInFlight, overload.MaxCapacity)
	}
	if o.MaxQueue < 0 || o.MaxQueue > overload.MaxCapacity {
		return fmt.Errorf("overload.max_queue is %d; it must be between 0 (max_in_flight) and %d", o.MaxQueue, overload.MaxCapacity)
	}
	for _, name := range slices.Sorted(maps.Keys(o.ShedAt)) {
		f, key := o.ShedAt[name], "overload.shed_at."+name
		p, err := overload.ParsePriority(name)
		switch {
		case err != nil:
			return fmt.Errorf("%s: unknown priority; the keys here are sheddable, normal, high and critical", mapPath("overload.shed_at", name))
		case math.IsNaN(f) || f <= 0 || f > 1:
			return fmt.Errorf("%s is %v; it must be above 0 and at most 1", key, f)
		case p == overload.Critical && f != 1:
			return fmt.Errorf("%s is %v; critical may always use the whole capacity: 1", key, f)
		}
	}
	shed := c.shedAt()
	order := overload.Priorities() // the first is shed first
	for i := 1; i < len(order); i++ {
		lo, hi := order[i-1], order[i]
		if shed[lo] > shed[hi] {
			return fmt.Errorf("overload.shed_at.%s is %v, above overload.shed_at.%s (%v); a lower priority must be shed first",
				lo, shed[lo], hi, shed[hi])
		}
	}
	seen := make(map[string]bool, len(c.Degradation))
	for i, f := range c.Degradation {
		switch {
		case f.Name == "":
			return fmt.Errorf("degradation[%d].name is empty; every feature needs one", i)
		case seen[f.Name]:
			return fmt.Errorf("degradation[%d].name %q is listed twice", i, f.Name)
		case math.IsNaN(f.At) || f.At <= overload.DefaultHysteresis || f.At > 1:
			return fmt.Errorf("degradation[%d].at is %v; it must be above %v (a feature comes back %v below its at) and at most 1",
				i, f.At, overload.DefaultHysteresis, overload.DefaultHysteresis)
		case i > 0 && f.At < c.Degradation[i-1].At:
			return fmt.Errorf("degradation[%d].at is %v, below degradation[%d].at (%v); features go off in list order",
				i, f.At, i-1, c.Degradation[i-1].At)
		}
		seen[f.Name] = true
	}
	if err := c.overloadConfig().Validate(); err != nil {
		return fmt.Errorf("overload: %w", err)
	}
	return nil
}

// shedAt is overload.shed_at by priority, the defaults filled in.
func (c config) shedAt() map[overload.Priority]float64 {
	shed := overload.DefaultShedAt()
	for name, f := range c.Overload.ShedAt {
		if p, err := overload.ParsePriority(name); err == nil {
			shed[p] = f
		}
	}
	return shed
}

// validateChallenge checks challenge.bits and, without ever printing it,
// challenge.secret.
func (c config) validateChallenge() error {
	if b := c.Challenge.Bits; b < challenge.MinBits || b > challenge.MaxBits {
		return fmt.Errorf("challenge.bits is %d; it must be between %d and %d", b, challenge.MinBits, challenge.MaxBits)
	}
	if n := len(c.Challenge.Secret); n > 0 && n < challenge.MinSecretLen {
		return fmt.Errorf("challenge.secret is %d bytes; it must be at least %d (32 random bytes, e.g. `openssl rand -base64 32`), or unset for a random one per process",
			n, challenge.MinSecretLen)
	}
	return nil
}

// needsChallenger reports whether some lane asks for the PoW challenge.
func (c config) needsChallenger() bool {
	for _, l := range c.Lanes {
		if l.Challenge == middleware.ChallengePoW {
			return true
		}
	}
	return false
}

func checkFailureMode(key, mode string) error {
	switch budget.FailureMode(mode) {
	case budget.FailOpen, budget.FailClosed:
		return nil
	}
	return fmt.Errorf("%s is %q; it must be %q or %q", key, mode, budget.FailOpen, budget.FailClosed)
}

// limiterConfig maps the file onto the middleware's configuration. The
// caller adds the store, clock and logger.
func (c config) limiterConfig() middleware.Config {
	plans := make(map[string]budget.Plan, len(c.Plans))
	for name, p := range c.Plans {
		plans[name] = budget.Plan{
			Burst: int64(p.Burst), Rate: int64(p.Rate), Per: p.Per,
			FailureMode:          budget.FailureMode(p.FailureMode),
			Mode:                 budget.Mode(p.Mode),
			SplitBudget:          p.SplitBudget,
			DisableIntrospection: p.Introspection != nil && !*p.Introspection,
			DisableRefund:        p.RefundUnused != nil && !*p.RefundUnused,
			DisableCostReport:    p.CostReport != nil && !*p.CostReport,
			MaxConcurrent:        p.Concurrency.maxConcurrent(),
		}
		if p.Quota != nil {
			pl := plans[name]
			pl.Quota = &budget.Quota{Limit: int64(p.Quota.Limit), Per: p.Quota.Per, Name: p.Quota.Name}
			plans[name] = pl
		}
	}
	var fieldLimits map[string]budget.FieldLimit
	if len(c.FieldLimits) > 0 {
		fieldLimits = make(map[string]budget.FieldLimit, len(c.FieldLimits))
		for coord, fl := range c.FieldLimits {
			fieldLimits[coord] = budget.FieldLimit{Limit: int64(fl.Limit), Per: fl.Per, By: budget.FieldLimitBy(fl.By)}
		}
	}
	keys := make(map[string]identity.APIKey, len(c.APIKeys))
	for key, k := range c.APIKeys {
		keys[key] = identity.APIKey{Principal: k.Principal, Plan: k.Plan}
	}
	routes := make(map[string]int64, len(c.REST.Routes))
	for pattern, cost := range c.REST.Routes {
		routes[pattern] = int64(cost)
	}
	lanes := make([]middleware.Lane, 0, len(c.Lanes))
	for _, l := range c.Lanes {
		priority, _ := overload.ParsePriority(l.Priority) // checked by validate
		lanes = append(lanes, middleware.Lane{
			Name:     l.Name,
			Priority: priority,
			Match: middleware.LaneMatch{
				GraphQL: l.Match.GraphQL, REST: l.Match.REST, Plans: l.Match.Plans,
				Authenticated: l.Match.Authenticated, Anonymous: l.Match.Anonymous,
			},
			Queue:     l.Queue,
			Challenge: l.Challenge,
			Budget:    l.Budget.plan(),
		})
	}
	oc := c.overloadConfig()
	return middleware.Config{
		Lanes:          lanes,
		Overload:       &oc,
		Concurrency:    middleware.ConcurrencyOptions{PerPrincipal: int(c.Concurrency.PerPrincipal)},
		Subscriptions:  middleware.SubscriptionOptions{MaxPerPrincipal: c.Subscriptions.maxPerPrincipal()},
		Plans:          plans,
		FieldLimits:    fieldLimits,
		AnonymousPlan:  c.AnonymousPlan,
		APIKeys:        identity.NewStaticKeys(keys),
		TrustedProxies: c.TrustedProxies,
		GraphQL: middleware.GraphQLOptions{
			MaxDepth:        int(c.GraphQL.MaxDepth),
			MaxBreadth:      int(c.GraphQL.MaxBreadth),
			MaxNodes:        int64(c.GraphQL.MaxNodes),
			MaxCost:         int64(c.GraphQL.MaxCost),
			DefaultListSize: int(c.GraphQL.DefaultListSize),
			MutationCost:    int64(c.GraphQL.MutationCost),

			MaxAliases:        int(c.GraphQL.MaxAliases),
			MaxRootFields:     int(c.GraphQL.MaxRootFields),
			MaxTokens:         int(c.GraphQL.MaxTokens),
			MaxSelections:     int(c.GraphQL.MaxSelections),
			MaxVariableValues: int(c.GraphQL.MaxVariableValues),
			MaxVariablesDepth: int(c.GraphQL.MaxVariablesDepth),
			InvalidCost:       int64(c.GraphQL.InvalidCost),
			MinCost:           int64(c.GraphQL.MinCost),
			IntrospectionCost: int64(c.GraphQL.IntrospectionCost),
			UploadCostPerMiB:  int64(c.UploadCostPerMiB), // 0, the default, is no cost
		},
		MaxBodyBytes:         int64(c.MaxBodyBytes),
		MaxBodyBytesInFlight: int64(c.MaxBodyBytesInFlight),
		MaxUploadBytes:       int64(c.MaxUploadBytes),
		MemoryStore:          middleware.MemoryStoreOptions{MaxKeys: int(c.MemoryStore.MaxKeys)},
		REST: middleware.RESTOptions{
			DefaultCost: int64(c.REST.DefaultCost),
			Routes:      routes,
		},
		FailureMode:      budget.FailureMode(c.FailureMode),
		Breaker:          breaker.Config{Failures: int(c.Breaker.Failures), CoolDown: c.Breaker.CoolDown},
		Mode:             budget.Mode(c.Mode),
		RetryAfterJitter: c.RetryAfterJitter,
		OverLimitCache:   stack.OverLimitCache(c.OverLimitCache),
		SplitBudget: middleware.SplitBudgetOptions{
			LeaseFraction:  c.SplitBudget.LeaseFraction,
			SettleInterval: c.SplitBudget.SettleInterval,
		},
	}
}

// overloadConfig maps overload and degradation onto the shedder's
// configuration.
func (c config) overloadConfig() overload.Config {
	features := make([]overload.Feature, 0, len(c.Degradation))
	for _, f := range c.Degradation {
		features = append(features, overload.Feature{Name: f.Name, At: f.At})
	}
	return overload.Config{
		MaxInFlight: int(c.Overload.MaxInFlight),
		MaxQueue:    int(c.Overload.MaxQueue),
		ShedAt:      c.shedAt(),
		Adaptive:    c.Overload.Adaptive,
		Degradation: features,
	}
}

// maxConcurrent maps a plan's concurrency onto budget.Plan.MaxConcurrent:
// unset inherits the top-level cap (0 there), per_principal 0 lifts the cap
// for the plan (middleware.None), any other value is the plan's cap.
func (pc *concurrencyConfig) maxConcurrent() int {
	switch {
	case pc == nil:
		return 0
	case pc.PerPrincipal == 0:
		return middleware.None
	}
	return int(pc.PerPrincipal)
}

var _ yaml.Unmarshaler = (*whole)(nil)

// whole is an integer count in the YAML file. It refuses floats (yaml.v3
// would truncate 1.5 to 1) and anything that is not a plain integer.
type whole int64

// UnmarshalYAML implements yaml.Unmarshaler.
func (w *whole) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return fmt.Errorf("%s is not a whole number", describe(n))
	}
	var v int64
	if err := n.Decode(&v); err != nil {
		return fmt.Errorf("%s is out of range", n.Value)
	}
	*w = whole(v)
	return nil
}

var _ yaml.Unmarshaler = (*modeName)(nil)

// modeName is an enforcement mode in the YAML file: "enforce" or "shadow"
// (budget.Enforce, budget.Shadow). Decoding refuses anything else,
// so checkDocument names the line and key path of a bad one.
type modeName string

// UnmarshalYAML implements yaml.Unmarshaler.
func (m *modeName) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return fmt.Errorf("%s is not %q or %q", describe(n), budget.Enforce, budget.Shadow)
	}
	v := modeName(n.Value)
	if err := v.check(); err != nil {
		return err
	}
	*m = v
	return nil
}

// check refuses a mode the middleware does not have.
func (m modeName) check() error {
	switch budget.Mode(m) {
	case budget.Enforce, budget.Shadow:
		return nil
	}
	return fmt.Errorf("%q is not %q or %q", string(m), budget.Enforce, budget.Shadow)
}
