package serve

import (
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/challenge"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/querycache"
	"github.com/costguard/costguard/overload"
)

// spelledOut is a configuration file that writes out the basic keys; the
// built-in defaults must equal it. max_depth is 15 because introspection
// fields count toward depth and the schema query GraphiQL sends is 13 deep,
// 14 with one more ofType level (graphiQLSchemaQuery).
const spelledOut = `
plans:                 # name -> token bucket, in points; optional per-plan failure_mode
  free: {burst: 5000, rate: 5000, per: 1h}
  anon: {burst: 500, rate: 500, per: 1h}
anonymous_plan: anon    # plan for requests without an API key (keyed by client IP)
api_keys:              # demo principals
  demo-free-key: {principal: alice, plan: free}
graphql: {max_depth: 15, max_breadth: 100, max_nodes: 500000, max_cost: 0, default_list_size: 10, mutation_cost: 10}   # max_cost 0: the plan's burst is the only ceiling
rest: {default_cost: 1, routes: {"GET /api/search": 10}}
failure_mode: open      # or closed
trusted_proxies: []     # CIDRs whose X-Forwarded-For is believed
retry_after_jitter: 0   # fraction added at random to Retry-After, e.g. 0.2
`

func TestDefaultsEqualSpelledOut(t *testing.T) {
	got, err := parseConfig([]byte(spelledOut))
	require.NoError(t, err)
	assert.Equal(t, withLibraryDefaults(defaultConfig()), withLibraryDefaults(got))

	// An empty file and a comment-only file are the defaults too.
	for _, src := range []string{"", "# nothing here\n"} {
		got, err := parseConfig([]byte(src))
		require.NoError(t, err)
		assert.Equal(t, defaultConfig(), got)
	}
	// No file at all.
	got, err = loadConfig("")
	require.NoError(t, err)
	assert.Equal(t, defaultConfig(), got)
}

// withLibraryDefaults fills the keys c leaves zero with the library's
// defaults, as middleware.Defaults gives them, and with this server's
// own (the query cache, the challenge): the configuration in force.
func withLibraryDefaults(c config) config {
	fill := func(v, def any) {
		if p := reflect.ValueOf(v).Elem(); p.IsZero() {
			p.Set(reflect.ValueOf(def))
		}
	}
	deps, policy := middleware.Defaults()
	fillZero(reflect.ValueOf(&c.Dependencies).Elem(), reflect.ValueOf(deps))
	fillZero(reflect.ValueOf(&c.Policy).Elem(), reflect.ValueOf(policy))
	fillZero(reflect.ValueOf(&c.GraphQL.GraphQLOptions).Elem(), reflect.ValueOf(policy.GraphQL))
	fill(&c.GraphQL.QueryCacheEntries, querycache.DefaultEntries)
	fill(&c.GraphQL.QueryCacheBytes, int64(querycache.DefaultBytes))
	fill(&c.Challenge.Bits, challenge.DefaultBits)
	if len(c.TrustedProxies) == 0 {
		c.TrustedProxies = nil
	}
	if c.Overload != nil {
		oc := *c.Overload
		oc.ShedAt = overload.DefaultShedAt()
		maps.Copy(oc.ShedAt, c.Overload.ShedAt)
		c.Overload = &oc
	}
	return c
}

// fillZero sets each zero field of dst, a struct, to src's, field by
// field into nested structs.
func fillZero(dst, src reflect.Value) {
	for i := range dst.NumField() {
		d, v := dst.Field(i), src.Field(i)
		switch {
		case !d.CanSet():
		case d.Kind() == reflect.Struct:
			fillZero(d, v)
		case d.IsZero():
			d.Set(v)
		}
	}
}

// docsPath is the configuration reference, relative to this package.
var docsPath = filepath.Join("..", "..", "docs", "server.md")

// exampleDir is the example server's directory, which keeps the sample
// configuration (costguard.yaml) and trusted documents
// (trusted-documents.json) the docs run it with.
var exampleDir = filepath.Join("..", "..", "examples", "server")

// The defaults block of docs/server.md writes out every default: the
// example's choices (defaultConfig) and the library's.
func TestDocsMatchDefaults(t *testing.T) {
	doc, err := os.ReadFile(docsPath)
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- begin defaults -->\\s*```yaml\\n(.*?)```\\s*<!-- end defaults -->").FindSubmatch(doc)
	require.NotNil(t, m, "docs/server.md has no defaults block")
	got, err := parseConfig(m[1])
	require.NoError(t, err)
	assert.Equal(t, withLibraryDefaults(defaultConfig()), withLibraryDefaults(got), "docs/server.md's defaults drifted from the server's and the library's")

	// The sample configuration the docs start the server with is that block.
	sample, err := os.ReadFile(filepath.Join(exampleDir, "costguard.yaml"))
	require.NoError(t, err)
	assert.Equal(t, string(m[1]), regexp.MustCompile("(?m)\\A(#.*\n)*").ReplaceAllString(string(sample), ""),
		"examples/server/costguard.yaml is not docs/server.md's defaults block under its comment")
	loaded, err := loadConfig(filepath.Join(exampleDir, "costguard.yaml"))
	require.NoError(t, err)
	loaded.file, loaded.doc = "", nil // where it came from, not what it says
	assert.Equal(t, withLibraryDefaults(defaultConfig()), withLibraryDefaults(loaded))

	// The documented defaults must start a server.
	_, cleanup, err := newServer(got, deps{})
	require.NoError(t, err)
	require.NoError(t, cleanup())

	// Every other YAML example of the page is a configuration that starts.
	blocks := regexp.MustCompile("(?s)```yaml\\n(.*?)```").FindAllSubmatch(doc, -1)
	require.GreaterOrEqual(t, len(blocks), 2)
	for _, b := range blocks {
		cfg, err := parseConfig(b[1])
		require.NoError(t, err, "%s", b[1])
		_, cleanup, err := newServer(cfg, deps{})
		require.NoError(t, err, "%s", b[1])
		require.NoError(t, cleanup())
	}
}

// The defaults reach the middleware: the example's choices as they are,
// the rest as zero, which the library reads as its default.
func TestDefaultsMapOntoMiddleware(t *testing.T) {
	d, m := defaultConfig().limiterConfig()
	assert.Equal(t, map[string]budget.Plan{
		"free": {Burst: 5000, Rate: 5000, Per: time.Hour},
		"anon": {Burst: 500, Rate: 500, Per: time.Hour},
	}, m.Plans)
	assert.Equal(t, "anon", m.AnonymousPlan)
	assert.Equal(t, middleware.GraphQLOptions{}, m.GraphQL)
	assert.Equal(t, middleware.RESTOptions{
		Routes: map[string]int64{"GET /api/search": 10},
		RouteLimits: map[string]budget.FieldLimit{
			"POST /api/login": {Limit: 5, Per: 15 * time.Minute, Algorithm: budget.SlidingLog, By: budget.ByIP},
		},
	}, m.REST)
	assert.Equal(t, middleware.ConcurrencyOptions{PerPrincipal: 100}, m.Concurrency)
	require.NotNil(t, d.Overload)
	assert.Equal(t, 64, d.Overload.MaxInFlight)
	assert.Len(t, d.Overload.Degradation, 2)
	assert.Len(t, m.Lanes, 3)
	assert.Equal(t, map[string]identity.APIKey{demoAPIKey: {Principal: "alice", Plan: "free"}}, m.APIKeys)
}

// The top-level mode applies to every plan that names none; a plan's own
// mode overrides it. The middleware resolves the inheritance; the file
// maps each key onto its field.
// plans.<name>.unlimited reaches the library's plan; unset, a plan is
// limited.
func TestUnlimitedMapsOntoMiddleware(t *testing.T) {
	cfg, err := parseConfig([]byte(`
plans:
  anon: {burst: 10, rate: 10, per: 1m}
  internal: {burst: 100, rate: 100, per: 1m, unlimited: true}
`))
	require.NoError(t, err)
	_, m := cfg.limiterConfig()
	assert.True(t, m.Plans["internal"].Unlimited)
	assert.False(t, m.Plans["anon"].Unlimited)
}

// plans.<name>.relax_structural_limits reaches the library's plan; unset,
// a plan is under the structural caps.
func TestRelaxStructuralLimitsMapsOntoMiddleware(t *testing.T) {
	cfg, err := parseConfig([]byte(`
plans:
  anon: {burst: 10, rate: 10, per: 1m}
  internal: {burst: 100, rate: 100, per: 1m, relax_structural_limits: true}
`))
	require.NoError(t, err)
	_, m := cfg.limiterConfig()
	assert.True(t, m.Plans["internal"].RelaxStructuralLimits)
	assert.False(t, m.Plans["anon"].RelaxStructuralLimits)
	_, cleanup, err := newServer(cfg, deps{})
	require.NoError(t, err, "the middleware takes the switch")
	require.NoError(t, cleanup())

	_, err = parseConfig([]byte("plans: {anon: {burst: 1, rate: 1, per: 1h, relax_structural_limits: maybe}}"))
	assert.ErrorContains(t, err, `plans.anon.relax_structural_limits: "maybe" is not true or false`)
}

func TestModesMapOntoMiddleware(t *testing.T) {
	cfg, err := parseConfig([]byte(`
mode: shadow
plans:
  anon: {burst: 10, rate: 10, per: 1m}
  free: {burst: 100, rate: 100, per: 1m, mode: enforce}
  trial: {burst: 100, rate: 100, per: 1m, mode: shadow}
`))
	require.NoError(t, err)
	_, m := cfg.limiterConfig()
	assert.Equal(t, budget.Shadow, m.Mode)
	assert.Equal(t, budget.Mode(""), m.Plans["anon"].Mode, "unset: inherits the top-level mode")
	assert.Equal(t, budget.Enforce, m.Plans["free"].Mode)
	assert.Equal(t, budget.Shadow, m.Plans["trial"].Mode)
	_, cleanup, err := newServer(cfg, deps{})
	require.NoError(t, err, "the middleware takes both modes")
	require.NoError(t, cleanup())

	// A configuration built in code is checked too, by the middleware.
	cfg = defaultConfig()
	cfg.Mode = "observe"
	_, _, err = newServer(cfg, deps{})
	assert.ErrorContains(t, err, `mode "observe" is neither "enforce" nor "shadow"`)
	cfg = defaultConfig()
	cfg.Plans["free"] = planConfig{Plan: budget.Plan{Burst: 1, Rate: 1, Per: time.Hour, Mode: "off"}}
	_, _, err = newServer(cfg, deps{})
	assert.ErrorContains(t, err, `plan "free": mode "off" is neither "enforce" nor "shadow"`)
}

func TestParseOverrides(t *testing.T) {
	tests := []struct {
		name, src string
		want      func(c *config)
	}{
		{
			"a section keeps the keys it leaves out",
			"graphql: {max_depth: 4, max_cost: 900}",
			func(c *config) { c.GraphQL.MaxDepth, c.GraphQL.MaxCost = 4, 900 },
		},
		{
			"plans replace the default plans",
			"plans: {anon: {burst: 50, rate: 5, per: 1m, failure_mode: closed}}\napi_keys: {}",
			func(c *config) {
				c.Plans = map[string]planConfig{"anon": {Plan: budget.Plan{Burst: 50, Rate: 5, Per: time.Minute, FailureMode: "closed"}}}
				c.APIKeys = map[string]identity.APIKey{}
			},
		},
		{
			// A new user's first file: the demo key's plan free is gone,
			// and so is the demo key, as if the file said api_keys: {}.
			"plans without api_keys drop the demo key",
			"plans: {anon: {burst: 50, rate: 5, per: 1m}}",
			func(c *config) {
				c.Plans = map[string]planConfig{"anon": {Plan: budget.Plan{Burst: 50, Rate: 5, Per: time.Minute}}}
				c.APIKeys = map[string]identity.APIKey{}
			},
		},
		{
			"a name that reads as 0",
			"plans: {\"0\": {burst: 50, rate: 5, per: 1m}}\nanonymous_plan: \"0\"",
			func(c *config) {
				c.Plans = map[string]planConfig{"0": {Plan: budget.Plan{Burst: 50, Rate: 5, Per: time.Minute}}}
				c.AnonymousPlan = "0"
				c.APIKeys = map[string]identity.APIKey{}
			},
		},
		{
			"plans and api_keys together",
			"plans: {anon: {burst: 50, rate: 5, per: 1m}}\napi_keys: {k1: {principal: bob, plan: anon}}",
			func(c *config) {
				c.Plans = map[string]planConfig{"anon": {Plan: budget.Plan{Burst: 50, Rate: 5, Per: time.Minute}}}
				c.APIKeys = map[string]identity.APIKey{"k1": {Principal: "bob", Plan: "anon"}}
			},
		},
		{
			"api_keys replace the demo key",
			"api_keys: {k1: {principal: bob, plan: anon}}",
			func(c *config) { c.APIKeys = map[string]identity.APIKey{"k1": {Principal: "bob", Plan: "anon"}} },
		},
		{
			"routes replace the default routes; default_cost stays",
			`rest: {routes: {"GET /api/users/{login}": 3}}`,
			func(c *config) { c.REST.Routes = map[string]int64{"GET /api/users/{login}": 3} },
		},
		{
			"default_cost alone keeps the routes",
			"rest: {default_cost: 2}",
			func(c *config) { c.REST.DefaultCost = 2 },
		},
		{
			"scalars",
			"failure_mode: closed\ntrusted_proxies: [10.0.0.0/8, 192.0.2.1]\nretry_after_jitter: 0.25\nanonymous_plan: free",
			func(c *config) {
				c.FailureMode = "closed"
				c.TrustedProxies = []string{"10.0.0.0/8", "192.0.2.1"}
				c.RetryAfterJitter = 0.25
				c.AnonymousPlan = "free"
			},
		},
		{
			"scaling keys",
			"over_limit_cache: off\nsplit_budget: {lease_fraction: 0.1, settle_interval: 250ms}\n" +
				"plans: {free: {burst: 100, rate: 100, per: 1m, split_budget: true}, anon: {burst: 10, rate: 10, per: 1m}}",
			func(c *config) {
				c.OverLimitCache = "off"
				c.SplitBudget = middleware.SplitBudgetOptions{LeaseFraction: 0.1, SettleInterval: 250 * time.Millisecond}
				c.Plans = map[string]planConfig{
					"free": {Plan: budget.Plan{Burst: 100, Rate: 100, Per: time.Minute, SplitBudget: true}},
					"anon": {Plan: budget.Plan{Burst: 10, Rate: 10, Per: time.Minute}},
				}
				c.APIKeys = map[string]identity.APIKey{} // own plans, no api_keys: no demo key
			},
		},
		{
			"modes",
			"mode: shadow\nplans: {free: {burst: 100, rate: 100, per: 1m, mode: enforce}, anon: {burst: 10, rate: 10, per: 1m}}",
			func(c *config) {
				c.Mode = "shadow"
				c.Plans = map[string]planConfig{
					"free": {Plan: budget.Plan{Burst: 100, Rate: 100, Per: time.Minute, Mode: "enforce"}},
					"anon": {Plan: budget.Plan{Burst: 10, Rate: 10, Per: time.Minute}},
				}
				c.APIKeys = map[string]identity.APIKey{}
			},
		},
		{
			"quota and field limits",
			"plans: {free: {burst: 100, rate: 100, per: 1m, quota: {limit: 100000, per: 24h}}, anon: {burst: 10, rate: 10, per: 1m, quota: {limit: 10, per: 1h, name: anon-hour}}}\n" +
				`field_limits: {"Mutation.createIssue": {limit: 3, per: 1m}, "Query.search": {limit: 10, per: 1h, by: ip}}`,
			func(c *config) {
				c.Plans = map[string]planConfig{
					"free": {Plan: budget.Plan{Burst: 100, Rate: 100, Per: time.Minute, Quota: &budget.Quota{Limit: 100000, Per: 24 * time.Hour}}},
					"anon": {Plan: budget.Plan{Burst: 10, Rate: 10, Per: time.Minute, Quota: &budget.Quota{Limit: 10, Per: time.Hour, Name: "anon-hour"}}},
				}
				c.APIKeys = map[string]identity.APIKey{}
				c.FieldLimits = map[string]budget.FieldLimit{
					"Mutation.createIssue": {Limit: 3, Per: time.Minute},
					"Query.search":         {Limit: 10, Per: time.Hour, By: "ip"},
				}
			},
		},
		{
			"a free route",
			`rest: {routes: {"GET /api/search": 0}}`,
			func(c *config) { c.REST.Routes = map[string]int64{"GET /api/search": 0} },
		},
		{
			"per-plan switches",
			"plans: {free: {burst: 100, rate: 100, per: 1m, introspection: false, cost_report: false}, anon: {burst: 10, rate: 10, per: 1m, cost_report: true}}",
			func(c *config) {
				c.Plans = map[string]planConfig{
					"free": {Plan: budget.Plan{Burst: 100, Rate: 100, Per: time.Minute}, Introspection: new(false), CostReport: new(false)},
					"anon": {Plan: budget.Plan{Burst: 10, Rate: 10, Per: time.Minute}, CostReport: new(true)},
				}
				c.APIKeys = map[string]identity.APIKey{}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseConfig([]byte(tt.src))
			require.NoError(t, err)
			want := defaultConfig()
			tt.want(&want)
			assert.Equal(t, want, got)
			_, cleanup, err := newServer(got, deps{})
			require.NoError(t, err)
			require.NoError(t, cleanup())
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"unknown top-level key", "plan: {}", "line 1: plan: unknown key"},
		{"unknown nested key", "graphql: {max_dept: 3}", "line 1: graphql.max_dept: unknown key"},
		{"unknown plan key", "plans:\n  free: {burst: 1, rate: 1, per: 1h, brust: 2}", "line 2: plans.free.brust: unknown key"},
		{"unknown API key field", "api_keys: {s3cret-key: {principal: p, plna: free}}", "api_keys[SHA-256 " + identity.HashAPIKey("s3cret-key") + "].plna: unknown key"},
		{"float count", "plans: {free: {burst: 1.5, rate: 1, per: 1h}}", "line 1: plans.free.burst: 1.5 is not a whole number"},
		{"string count", "graphql: {max_depth: ten}", `graphql.max_depth: "ten" is not a whole number`},
		{"count out of range", "graphql: {max_nodes: 99999999999999999999}", "graphql.max_nodes: 99999999999999999999 is not a whole number"},
		{"duration without unit", "plans:\n  anon: {burst: 1, rate: 1, per: 3600}", "line 2: plans.anon.per: 3600 is not a duration; write a Go duration with a unit, such as 1h or 90s"},
		{"bad duration", "plans: {free: {burst: 1, rate: 1, per: soon}}", `plans.free.per: "soon" is not a duration; write a Go duration with a unit, such as 1h or 90s`},
		{"settle_interval without unit", "split_budget: {settle_interval: 100}", "split_budget.settle_interval: 100 is not a duration; write a Go duration"},
		{"route cost not a count", `rest: {routes: {"GET /x": cheap}}`, `rest.routes["GET /x"]: "cheap" is not a whole number`},
		{"section not a mapping", "graphql: 5", "line 1: graphql: 5 is not a mapping"},
		{"plan not a mapping", "plans:\n  free: [1]", "line 2: plans.free: a list is not a mapping"},
		{"list not a list", "trusted_proxies: 10.0.0.0/8", `trusted_proxies: "10.0.0.0/8" is not a list`},
		{"list item not a string", "trusted_proxies: [[1]]", "trusted_proxies[0]: a list is not a string"},
		{"bool not a bool", "plans: {free: {burst: 1, rate: 1, per: 1h, split_budget: maybe}}", `plans.free.split_budget: "maybe" is not true or false`},
		{"jitter not a number", "retry_after_jitter: lots", `retry_after_jitter: "lots" is not a number`},
		{"two documents", "failure_mode: open\n---\nfailure_mode: closed\n", "more than one YAML document"},
		{"not a mapping", "- a\n- b\n", "line 1: the file must be a mapping of keys such as plans: and graphql:"},
		{"bad YAML", "plans: {free: [", "yaml:"},
		{"bad over_limit_cache", "over_limit_cache: sometimes", `line 1: over_limit_cache: stack: invalid config: OverLimitCache "sometimes" is none of "auto", "on", "off"`},
		{"lease_fraction above 1", "split_budget: {lease_fraction: 1.5}", "line 1: split_budget: SplitBudget: splitbudget: invalid config: LeaseFraction 1.5 is not in (0, 1]"},
		{"negative route", `rest: {routes: {"GET /x": -1}}`, `line 1: rest.routes["GET /x"]: REST route "GET /x" has negative cost -1`},
		{"failure mode", "failure_mode: maybe", `line 1: failure_mode: failure mode "maybe" is neither "open" nor "closed"`},
		{"mode", "mode: shadw", `line 1: mode: mode "shadw" is neither "enforce" nor "shadow"`},
		{"mode not a string", "mode: [shadow]", `line 1: mode: a list is not a budget.Mode`},
		{"mode in capitals", "mode: Shadow", `line 1: mode: mode "Shadow" is neither "enforce" nor "shadow"`},
		{"plan mode", "plans:\n  anon: {burst: 1, rate: 1, per: 1h, mode: dry-run}", `line 2: plans.anon.mode: plan "anon": mode "dry-run" is neither "enforce" nor "shadow"`},
		{"plan failure mode", "plans: {anon: {burst: 1, rate: 1, per: 1h, failure_mode: shut}}", `line 1: plans.anon.failure_mode: plan "anon": failure mode "shut" is neither "open" nor "closed"`},
		{"jitter above 1", "retry_after_jitter: 1.5", "line 1: retry_after_jitter: RetryAfterJitter 1.5 is not between 0 and 1"},
		{"negative jitter", "retry_after_jitter: -0.1", "line 1: retry_after_jitter: RetryAfterJitter -0.1 is not between 0 and 1"},
		{"no plans", "plans: {}", "line 1: plans: no plans"},
		{"plan with zero burst", "plans: {anon: {burst: 0, rate: 1, per: 1h}}", `line 1: plans.anon.burst: plan "anon": burst (0), rate (1) and per (1h0m0s) must be positive`},
		{"plan with zero rate", "plans: {anon: {burst: 1, rate: 0, per: 1h}}", `line 1: plans.anon.rate: plan "anon": burst (1), rate (0) and per (1h0m0s) must be positive`},
		{"plan without per", "plans: {anon: {burst: 1, rate: 1}}", `line 1: plans.anon.per: plan "anon": burst (1), rate (1) and per (0s) must be positive`},
		{"plan name with a space", `plans: {"a b": {burst: 1, rate: 1, per: 0s}}`, `line 1: plans["a b"].per: plan "a b": burst (1), rate (1) and per (0s) must be positive`},
		{"anonymous plan missing", "anonymous_plan: guest", `line 1: anonymous_plan: anonymous plan "guest" is not among the plans ("anon", "free")`},
		{"API key on a missing plan", "api_keys: {s3cret-key: {principal: p, plan: gold}}",
			"api_keys[SHA-256 " + identity.HashAPIKey("s3cret-key") + `].plan is "gold"; it must be one of the plans (anon, free)`},
		{"demo key kept on a missing plan", "plans: {anon: {burst: 1, rate: 1, per: 1h}}\napi_keys: {demo-free-key: {principal: alice, plan: free}}",
			`.plan is "free"; it must be one of the plans (anon)`},
		{"key without principal", "api_keys: {s3cret-key: {plan: free}}", "api_keys[SHA-256 " + identity.HashAPIKey("s3cret-key") + "].principal is empty"},
		{"empty key", `api_keys: {"": {principal: x, plan: free}}`, "an API key must not be empty"},
		{"quota below the burst", "plans: {anon: {burst: 10, rate: 1, per: 1h, quota: {limit: 5, per: 24h}}}", `line 1: plans.anon.quota.limit: plan "anon": quota limit 5 is below the burst 10`},
		{"quota without per", "plans: {anon: {burst: 10, rate: 1, per: 1h, quota: {limit: 50}}}", `line 1: plans.anon.quota.per: plan "anon": quota limit (50) and per (0s) must be positive`},
		{"quota with split budget", "plans: {anon: {burst: 10, rate: 1, per: 1h, split_budget: true, quota: {limit: 50, per: 1h}}}", `line 1: plans.anon.quota: plan "anon": a quota cannot be combined with SplitBudget`},
		{"field limit of zero", `field_limits: {"Mutation.createIssue": {limit: 0, per: 1m}}`, `line 1: field_limits["Mutation.createIssue"].limit: field limit "Mutation.createIssue": limit (0) and per (1m0s) must be positive`},
		{"field limit without per", `field_limits: {"Mutation.createIssue": {limit: 3}}`, `line 1: field_limits["Mutation.createIssue"].per: field limit "Mutation.createIssue": limit (3) and per (0s) must be positive`},
		{"field limit by whom", `field_limits: {"Mutation.createIssue": {limit: 3, per: 1m, by: user}}`, `line 1: field_limits["Mutation.createIssue"].by: field limit "Mutation.createIssue": by "user" is none of "principal", "ip" and "both"`},
		{"route limit algorithm", `rest: {route_limits: {"POST /api/login": {limit: 5, per: 15m, algorithm: gcra}}}`, `line 1: rest.route_limits["POST /api/login"].algorithm: route limit "POST /api/login": algorithm "gcra" is none of`},
		{"route limit shaping by both", `rest: {route_limits: {"POST /api/login": {limit: 5, per: 1s, algorithm: leaky_bucket_shaping, by: both}}}`, `rest.route_limits["POST /api/login"].by: route limit "POST /api/login": leaky_bucket_shaping cannot count by "both"`},
		{"negative store_timeout", "store_timeout: -1s", "store_timeout is -1s; it must be above 0 and at most 10s"},
		{"store_timeout without unit", "store_timeout: 100", "line 1: store_timeout: 100 is not a duration"},
		{"store_timeout too long", "store_timeout: 11s", "store_timeout is 11s; it must be above 0 and at most 10s"},
		{"unknown field limit key", `field_limits: {"Mutation.createIssue": {limit: 3, per: 1m, per_ip: true}}`, "per_ip: unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := startErr(t, tt.src)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "s3cret-key", "an API key leaked into an error")
		})
	}
}

// startErr is the error the server stops with at start on the file src:
// a mistake of shape from the file's decoding, one of meaning from
// middleware.New, each naming the file, the key path and, where the file
// writes the key, its line.
func startErr(t *testing.T, src string) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	_, cleanup, err := newServer(cfg, deps{logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		require.NoError(t, cleanup())
	}
	return err
}

// Configurations that parse but that the middleware refuses: newServer
// fails, so the server never starts with them.
func TestNewServerRefusesConfig(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"route costs more than a burst", `rest: {routes: {"GET /api/search": 501}}`,
			`REST route "GET /api/search" costs 501, more than the burst 500 of plan "anon"`},
		{"default cost more than a burst", `rest: {default_cost: 600}`, `REST default cost 600 is more than the burst 500 of plan "anon"`},
		{"bad proxy", "trusted_proxies: [not-a-cidr]", "not-a-cidr"},
		{"bad route pattern", `rest: {routes: {"GET": 1}}`, `REST route "GET"`},
		{"field limit on a field the schema lacks", `field_limits: {"Mutation.deleteEverything": {limit: 1, per: 1m}}`, "Mutation.deleteEverything"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseConfig([]byte(tt.src))
			require.NoError(t, err)
			_, _, err = newServer(cfg, deps{})
			require.Error(t, err)
			assert.ErrorIs(t, err, errConfig)
			assert.ErrorIs(t, err, middleware.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestLoadConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}

	good := write("good.yaml", "graphql: {max_depth: 7}\n")
	cfg, err := loadConfig(good)
	require.NoError(t, err)
	assert.EqualValues(t, 7, cfg.GraphQL.MaxDepth)

	for _, tt := range []struct{ name, path, want string }{
		{"missing file", filepath.Join(dir, "absent.yaml"), "absent.yaml"},
		{"invalid file", write("bad.yaml", "graphql: {max_depth: 1.5}\n"), "bad.yaml: line 1: graphql.max_depth: 1.5 is not a whole number"},
		{"huge file", write("huge.yaml", "#"+strings.Repeat("x", maxConfigBytes)+"\n"), "huge.yaml: larger than 1048576 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadConfig(tt.path)
			require.Error(t, err)
			assert.True(t, errors.Is(err, errConfig), "%v does not wrap errConfig", err)
			assert.Contains(t, err.Error(), "invalid configuration: ")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// The pricing rules where the peers' models differ are keys of graphql,
// off unless set.
func TestPricingRulesMapOntoMiddleware(t *testing.T) {
	_, m := defaultConfig().limiterConfig()
	assert.False(t, m.GraphQL.SubtreeDiscounts)
	assert.False(t, m.GraphQL.NullArgumentsCharged)
	cfg, err := parseConfig([]byte("graphql: {subtree_discounts: true, null_arguments_charged: true}\n"))
	require.NoError(t, err)
	_, m = cfg.limiterConfig()
	assert.True(t, m.GraphQL.SubtreeDiscounts)
	assert.True(t, m.GraphQL.NullArgumentsCharged)
}

// The analyzer's naming conventions are on unless a key of graphql turns
// one off: a schema whose argument named like a count is not one prices
// right without editing the schema.
func TestConventionsMapOntoMiddleware(t *testing.T) {
	_, m := defaultConfig().limiterConfig()
	off := []*bool{&m.GraphQL.DisableFirstLastConvention, &m.GraphQL.DisableConnectionConvention,
		&m.GraphQL.DisableCountArgumentConvention, &m.GraphQL.DisableKeyListConvention,
		&m.GraphQL.DisableMutationListConvention, &m.GraphQL.PriceIntrospectionFields}
	for i, b := range off {
		assert.False(t, *b, "option %d set by default", i)
	}
	cfg, err := parseConfig([]byte("graphql: {disable_first_last_convention: true, disable_connection_convention: true,\n" +
		"  disable_count_argument_convention: true, disable_key_list_convention: true,\n" +
		"  disable_mutation_list_convention: true, price_introspection_fields: true}\n"))
	require.NoError(t, err)
	_, m = cfg.limiterConfig()
	assert.True(t, m.GraphQL.DisableFirstLastConvention)
	assert.True(t, m.GraphQL.DisableConnectionConvention)
	assert.True(t, m.GraphQL.DisableCountArgumentConvention)
	assert.True(t, m.GraphQL.DisableKeyListConvention)
	assert.True(t, m.GraphQL.DisableMutationListConvention)
	assert.True(t, m.GraphQL.PriceIntrospectionFields)
}

// A 0 in the file means what 0 means in Go: the library's default, as if
// the key were left out; -1 is middleware.None, "nothing" where the
// default is something.
func TestZeroMeansTheDefault(t *testing.T) {
	cfg, err := parseConfig([]byte("concurrency: {per_principal: 0}\nsubscriptions: {max_per_principal: 0}\ngraphql: {max_cost: 0, max_depth: 0}\nstore_timeout: 0s\n"))
	require.NoError(t, err)
	d, m := cfg.limiterConfig()
	assert.Zero(t, m.Concurrency.PerPrincipal, "the library's default: no cap")
	assert.Zero(t, m.Subscriptions.MaxPerPrincipal, "the library's default, 100")
	assert.Zero(t, m.GraphQL.MaxCost, "the library's default: no cap besides the burst")
	assert.Zero(t, m.GraphQL.MaxDepth, "the library's default, 15")
	assert.Zero(t, d.StoreTimeout, "the library's default, 100ms")
	_, cleanup, err := newServer(cfg, deps{logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err, "the library takes its defaults")
	require.NoError(t, cleanup())

	cfg, err = parseConfig([]byte("subscriptions: {max_per_principal: -1}\ngraphql: {max_depth: -1}\n"))
	require.NoError(t, err)
	_, m = cfg.limiterConfig()
	assert.Equal(t, middleware.None, m.Subscriptions.MaxPerPrincipal)
	assert.Equal(t, middleware.None, m.GraphQL.MaxDepth)
	_, cleanup, err = newServer(cfg, deps{logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err, "the library takes None")
	require.NoError(t, cleanup())

	cfg, err = parseConfig(nil)
	require.NoError(t, err)
	_, m = cfg.limiterConfig()
	assert.Equal(t, 100, m.Concurrency.PerPrincipal, "the example's cap")
	assert.Zero(t, m.Subscriptions.MaxPerPrincipal, "the library's default, 100")
}

// limiterPolicy is the middleware.Policy of c.
func limiterPolicy(c config) middleware.Policy {
	_, p := c.limiterConfig()
	return p
}
