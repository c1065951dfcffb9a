package serve

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/challenge"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/overload"
)

// errConfig wraps every configuration error, so Main can tell a bad file
// (exit status 2, like a bad flag) from a failure to serve.
var errConfig = errors.New("invalid configuration")

// config is the server's YAML configuration (docs/server.md is its
// reference). Most keys decode straight into the library's own types,
// middleware.Policy, middleware.Dependencies and their option structs,
// whose yaml tags name them; the library's defaults apply to what is left
// out or written as 0 (-1 is middleware.None), and middleware.New
// validates the whole. The fields here are only those whose form in the
// file differs from the library's, and those only the server has.
//
// defaultConfig holds what this example chooses besides the library's
// defaults; a file overrides only the keys it names, except that a map it
// names (plans, api_keys, rest.routes, rest.route_limits) replaces the
// default map instead of merging with it, so a production file never
// inherits the demo API key by accident of omission: write `api_keys: {}`
// to have none. A file that names plans but not api_keys has no API key
// either: the demo key's plan may be gone with the default plans.
type config struct {
	// Plans maps a plan name to a token bucket in points.
	Plans map[string]planConfig `yaml:"plans"`

	// The library's keys: what a reload swaps (its Plans and GraphQL are
	// set from the fields here, limiterConfig), and what takes a restart.
	middleware.Policy       `yaml:",inline"`
	middleware.Dependencies `yaml:",inline"`

	GraphQL graphQLConfig `yaml:"graphql"`
	// UploadCostPerMiB is middleware.GraphQLOptions.UploadCostPerMiB, a
	// top-level key in the file.
	UploadCostPerMiB int64 `yaml:"upload_cost_per_mib"`
	// Degradation is overload.Config.Degradation, a top-level key in the
	// file: the features switched off, in order, as load rises.
	Degradation []overload.Feature `yaml:"degradation"`
	// Challenge configures the proof-of-work challenge of lanes with
	// challenge: pow.
	Challenge challengeConfig `yaml:"challenge"`
	// Admin configures the admin listener's override API.
	Admin adminConfig `yaml:"admin"`
	// DemoLatency makes the example's root resolvers and REST handlers
	// take this long, to fill the server with requests in flight in a
	// demo. 0: none.
	DemoLatency time.Duration `yaml:"demo_latency"`

	// file is where the configuration was read from, and doc its YAML, for
	// error messages; "" and nil for the built-in defaults and for tests.
	file string     `yaml:"-"`
	doc  *yaml.Node `yaml:"-"`
}

// planConfig is a plan: budget.Plan, whose switches the file says the
// other way round (true by default) and whose concurrency is a section.
type planConfig struct {
	budget.Plan `yaml:",inline"`
	// Introspection false refuses __schema and __type for this plan; unset
	// means allowed.
	Introspection *bool `yaml:"introspection,omitempty"`
	// RefundUnused false keeps the whole requested cost of a GraphQL
	// operation; unset means the unused part is refunded.
	RefundUnused *bool `yaml:"refund_unused,omitempty"`
	// CostReport false refuses "GraphQL-Cost: report" for this plan (400
	// COST_REPORT_DISABLED); unset means allowed.
	CostReport *bool `yaml:"cost_report,omitempty"`
	// Concurrency is budget.Plan.MaxConcurrent as a section, like the
	// top-level one: per_principal unset or 0 inherits the top-level cap,
	// -1 (None) lifts it for this plan.
	Concurrency middleware.ConcurrencyOptions `yaml:"concurrency,omitempty"`
}

// plan is the library's form of p.
func (p planConfig) plan() budget.Plan {
	pl := p.Plan
	pl.DisableIntrospection = p.Introspection != nil && !*p.Introspection
	pl.DisableRefund = p.RefundUnused != nil && !*p.RefundUnused
	pl.DisableCostReport = p.CostReport != nil && !*p.CostReport
	pl.MaxConcurrent = p.Concurrency.PerPrincipal
	return pl
}

// graphQLConfig is middleware.GraphQLOptions and the bounds of gqlgen's
// cache of parsed documents (querycache.New; 0: its defaults).
type graphQLConfig struct {
	middleware.GraphQLOptions `yaml:",inline"`
	QueryCacheEntries         int   `yaml:"query_cache_entries"`
	QueryCacheBytes           int64 `yaml:"query_cache_bytes"`
}

// maxTokens is graphql.max_tokens in force, the default filled in: the
// gqlgen parser's token limit.
func (g graphQLConfig) maxTokens() int {
	if g.MaxTokens == 0 {
		_, def := middleware.Defaults()
		return def.GraphQL.MaxTokens
	}
	return g.MaxTokens
}

// challengeConfig configures challenge.NewPoW.
type challengeConfig struct {
	// Secret keys the tokens; at least 32 bytes, shared by every process
	// that may verify a token. "": 32 random bytes drawn at start.
	Secret secret `yaml:"secret,omitempty"`
	// Bits is the work asked for; 0: challenge.DefaultBits.
	Bits int `yaml:"bits"`
}

// secret is a string that never prints: fmt shows it redacted.
type secret string

func (secret) String() string   { return "[redacted]" }
func (secret) GoString() string { return `"[redacted]"` }

// adminConfig configures the override API on the admin listener
// (/admin/principals/…).
type adminConfig struct {
	// TokenSHA256 is the hex SHA-256 of the API's bearer token
	// (-admin-token-file gives the token itself instead). Without either,
	// the API is served only on a loopback-only admin listener.
	TokenSHA256 string `yaml:"token_sha256"`
}

// The demo API key of the default configuration, used by the README.
const demoAPIKey = "demo-free-key"

// defaultConfig returns the configuration the server runs with when no file
// is given: the example of docs/server.md, where the library's defaults
// are written out (a test holds them equal). It sets only what the example
// chooses: its plans and demo key, a priced route, a limited login route,
// its lanes, capacity, concurrency cap and degradation list.
func defaultConfig() config {
	return config{
		Policy: middleware.Policy{
			AnonymousPlan: "anon",
			APIKeys: map[string]identity.APIKey{
				demoAPIKey: {Principal: "alice", Plan: "free"},
			},
			REST: middleware.RESTOptions{
				Routes: map[string]int64{"GET /api/search": 10},
				// Password guessing: 5 attempts in any 15 minutes per
				// client address, whoever they claim to be.
				RouteLimits: map[string]budget.FieldLimit{
					"POST /api/login": {Limit: 5, Per: 15 * time.Minute, Algorithm: budget.SlidingLog, By: budget.ByIP},
				},
			},
			// The seed documents' lanes over the example schema: opening an
			// issue stands for checkout.
			Lanes: []middleware.Lane{
				{Name: "checkout", Priority: overload.Critical, Queue: 2 * time.Second,
					Match: middleware.LaneMatch{GraphQL: []string{"Mutation.createIssue"}, REST: []string{"POST /api/orders"}, Authenticated: true}},
				{Name: "authenticated", Priority: overload.Normal, Match: middleware.LaneMatch{Authenticated: true}},
				{Name: "anonymous", Priority: overload.Sheddable, Match: middleware.LaneMatch{Anonymous: true},
					Challenge: middleware.ChallengePoW},
			},
			Concurrency: middleware.ConcurrencyOptions{PerPrincipal: 100},
		},
		Dependencies: middleware.Dependencies{
			Overload: &overload.Config{MaxInFlight: 64},
		},
		Plans: map[string]planConfig{
			"free": {Plan: budget.Plan{Burst: 5000, Rate: 5000, Per: time.Hour}},
			"anon": {Plan: budget.Plan{Burst: 500, Rate: 500, Per: time.Hour}},
		},
		Degradation: []overload.Feature{
			{Name: graph.FeatureRecommendations, At: 0.7},
			{Name: featureSearch, At: 0.85},
		},
	}
}

// noDemoConfig is defaultConfig without what names the demo's API and
// data: the demo API key (a key anyone reading the README knows), the
// REST demo routes' costs and limits, the checkout lane of the demo's
// createIssue, and the demo's degradable features. The defaults of a
// binary without the demo parts (Options.NoDemo), under its file too.
func noDemoConfig() config {
	cfg := defaultConfig()
	cfg.APIKeys = map[string]identity.APIKey{}
	cfg.REST = middleware.RESTOptions{}
	cfg.Lanes = slices.DeleteFunc(cfg.Lanes, func(l middleware.Lane) bool { return l.Name == "checkout" })
	cfg.Degradation = nil
	return cfg
}

// maxConfigBytes bounds what loadConfig reads: a configuration is small.
const maxConfigBytes = 1 << 20

// loadConfig reads the file at path over the defaults; path "" means the
// defaults alone. Every error wraps errConfig and names the file.
func loadConfig(path string) (config, error) { return loadConfigOver(path, defaultConfig) }

// loadConfigOver is loadConfig over the given defaults.
func loadConfigOver(path string, defaults func() config) (config, error) {
	if path == "" {
		cfg := defaults()
		if err := cfg.validate(); err != nil {
			return config{}, fmt.Errorf("%w: built-in defaults: %w", errConfig, err)
		}
		return cfg, nil
	}
	// Opened without blocking, so that a named pipe with no writer does
	// not hold the reload (and every later one) forever; only a regular
	// file (or a link to one) is read.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return config{}, fmt.Errorf("%w: %w", errConfig, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return config{}, fmt.Errorf("%w: %w", errConfig, err)
	}
	if !info.Mode().IsRegular() {
		return config{}, fmt.Errorf("%w: %s is %s, not a regular file: write the configuration to a file", errConfig, path, fileKind(info.Mode()))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err == nil && len(data) > maxConfigBytes {
		err = fmt.Errorf("larger than %d bytes", maxConfigBytes)
	}
	if err == nil {
		var cfg config
		var doc *yaml.Node
		if cfg, doc, err = decodeConfigOver(data, defaults); err == nil {
			cfg.file, cfg.doc = path, doc
			return cfg, nil
		}
	}
	return config{}, fmt.Errorf("%w: %s: %w", errConfig, path, err)
}

// fileKind names what a file that is not a regular one is.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	default:
		return "a special file"
	}
}

// parseConfig decodes one YAML document over the defaults. Unknown keys, a
// second document and values of the wrong shape are errors, each naming
// its line and key path (decodeStrict). What the values mean is for
// middleware.New to judge, when the server starts.
func parseConfig(data []byte) (config, error) {
	cfg, _, err := decodeConfig(data)
	return cfg, err
}

// decodeConfig is parseConfig, returning the document too.
func decodeConfig(data []byte) (config, *yaml.Node, error) {
	return decodeConfigOver(data, defaultConfig)
}

// decodeConfigOver is decodeConfig over the given defaults.
func decodeConfigOver(data []byte, defaults func() config) (config, *yaml.Node, error) {
	cfg := defaults()

	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return config{}, nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return config{}, nil, errors.New("more than one YAML document")
	}
	if len(doc.Content) > 0 && doc.Content[0].Kind != yaml.MappingNode && doc.Content[0].ShortTag() != "!!null" {
		return config{}, nil, fmt.Errorf("line %d: the file must be a mapping of keys such as plans: and graphql:", doc.Content[0].Line)
	}
	// The maps the file names replace the defaults.
	if top := mappingValue(&doc, ""); top != nil {
		names := func(key string) bool { return mappingValue(top, key) != nil }
		if names("plans") {
			cfg.Plans = nil
			if !names("api_keys") {
				// The demo key grants a default plan the file may have
				// dropped: a file with its own plans gets no API key
				// unless it lists them.
				cfg.APIKeys = map[string]identity.APIKey{}
			}
		}
		if names("api_keys") {
			cfg.APIKeys = nil
		}
		if rest := mappingValue(top, "rest"); rest != nil {
			if mappingValue(rest, "routes") != nil {
				cfg.REST.Routes = nil
			}
			if mappingValue(rest, "route_limits") != nil {
				cfg.REST.RouteLimits = nil
			}
		}
		if err := decodeStrict(data, &doc, &cfg); err != nil {
			return config{}, nil, err
		}
	}
	if err := cfg.validate(); err != nil {
		return config{}, nil, err
	}
	return cfg, &doc, nil
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

// validate checks what only the server asks of its keys: every API key
// names a principal (the library would key a key without one by its
// hash), a key's missing plan is named by the key's hash, the store
// timeout is bounded, and the challenge, whose PoW is built only when a
// lane asks for it, is checked now. Everything else is the library's to
// check, at middleware.New.
func (c config) validate() error {
	for key, k := range c.APIKeys {
		if key == "" {
			return errors.New("api_keys: an API key must not be empty")
		}
		if k.Principal == "" {
			// mapPath prints only a hash of the key.
			return fmt.Errorf("%s.principal is empty; every API key needs one", mapPath("api_keys", key))
		}
	}
	// Checked here, not left to the library, so that the message names
	// the key (by its hash) whose plan is missing.
	for _, key := range slices.Sorted(maps.Keys(c.APIKeys)) {
		if plan := c.APIKeys[key].Plan; !hasPlan(c.Plans, plan) {
			return fmt.Errorf("%s.plan is %q; it must be one of the plans (%s)", mapPath("api_keys", key), plan,
				strings.Join(slices.Sorted(maps.Keys(c.Plans)), ", "))
		}
	}
	if c.StoreTimeout < 0 || c.StoreTimeout > maxStoreTimeout {
		return fmt.Errorf("store_timeout is %v; it must be above 0 and at most %v: each request may wait that long on each store call", c.StoreTimeout, maxStoreTimeout)
	}
	if c.DemoLatency < 0 {
		return fmt.Errorf("demo_latency is %v; it must not be negative", c.DemoLatency)
	}
	if h := c.Admin.TokenSHA256; h != "" && !isSHA256Hex(h) {
		return errors.New("admin.token_sha256 must be a SHA-256 in hex, 64 digits (printf %s \"$TOKEN\" | sha256sum)")
	}
	// The secret is checked now even when no lane asks for a challenge
	// yet: a reload may add one. Unset, one is drawn at start.
	key := []byte(c.Challenge.Secret)
	if len(key) == 0 {
		key = make([]byte, challenge.MinSecretLen)
	}
	if _, err := challenge.NewPoW(challenge.Config{Secret: key, Bits: c.Challenge.Bits}); err != nil {
		return fmt.Errorf("challenge: %w", err)
	}
	return nil
}

// maxStoreTimeout bounds store_timeout: every request may wait this long
// on each store call before the failure mode decides it, holding its slot
// in flight all the while.
const maxStoreTimeout = 10 * time.Second

// isSHA256Hex reports whether s is a SHA-256 in hex.
func isSHA256Hex(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size
}

// hasPlan reports whether plans has one named name.
func hasPlan(plans map[string]planConfig, name string) bool {
	_, ok := plans[name]
	return ok
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

// limiterConfig is the middleware's configuration: the library's keys as
// decoded, and the keys whose form differs mapped onto them. The caller
// adds the store, clock, logger, challenger and key lookup.
func (c config) limiterConfig() (middleware.Dependencies, middleware.Policy) {
	deps, policy := c.Dependencies, c.Policy
	policy.Plans = make(map[string]budget.Plan, len(c.Plans))
	for name, p := range c.Plans {
		policy.Plans[name] = p.plan()
	}
	policy.GraphQL = c.GraphQL.GraphQLOptions
	policy.GraphQL.UploadCostPerMiB = c.UploadCostPerMiB
	if deps.Overload != nil {
		oc := *deps.Overload
		oc.Degradation = c.Degradation
		deps.Overload = &oc
	}
	return deps, policy
}
