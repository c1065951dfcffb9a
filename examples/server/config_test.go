package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/middleware"
)

// issueExample is the configuration example of the issue that specified the
// server; the built-in defaults must equal it, but for max_depth, which was
// 10 there: issue 9 counts introspection fields toward depth, and the schema
// query GraphiQL sends is 13 deep, so the default became 15.
const issueExample = `
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

func TestDefaultsEqualIssueExample(t *testing.T) {
	got, err := parseConfig([]byte(issueExample))
	require.NoError(t, err)
	assert.Equal(t, defaultConfig(), got)

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

// docsPath is the configuration reference, relative to this package.
var docsPath = filepath.Join("..", "..", "docs", "server.md")

func TestDocsMatchDefaults(t *testing.T) {
	doc, err := os.ReadFile(docsPath)
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- begin defaults -->\\s*```yaml\\n(.*?)```\\s*<!-- end defaults -->").FindSubmatch(doc)
	require.NotNil(t, m, "docs/server.md has no defaults block")
	got, err := parseConfig(m[1])
	require.NoError(t, err)
	assert.Equal(t, defaultConfig(), got, "docs/server.md's defaults drifted from defaultConfig")

	// The documented defaults must start a server: no key is defaulted in
	// the middleware behind the document's back.
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

func TestDefaultsMapOntoMiddleware(t *testing.T) {
	m := defaultConfig().limiterConfig()
	assert.Equal(t, map[string]budget.Plan{
		"free": {Burst: 5000, Rate: 5000, Per: time.Hour},
		"anon": {Burst: 500, Rate: 500, Per: time.Hour},
	}, m.Plans)
	assert.Equal(t, "anon", m.AnonymousPlan)
	assert.Equal(t, middleware.GraphQLOptions{
		MaxDepth: 15, MaxBreadth: 100, MaxNodes: 500_000, MaxCost: 0, DefaultListSize: 10, MutationCost: 10,
		MaxAliases: 100, MaxRootFields: 100, MaxTokens: 20_000, MaxSelections: 500,
		MaxVariableValues: 10_000, MaxVariablesDepth: 32, InvalidCost: 1, MinCost: 1, IntrospectionCost: 50,
	}, m.GraphQL)
	assert.Equal(t, int64(1<<20), m.MaxBodyBytes)
	assert.Equal(t, int64(1<<20), m.MaxBodyBytesInFlight)
	assert.Equal(t, 100_000, m.MemoryStore.MaxKeys)
	assert.Equal(t, middleware.RESTOptions{DefaultCost: 1, Routes: map[string]int64{"GET /api/search": 10}}, m.REST)
	assert.Equal(t, budget.FailOpen, m.FailureMode)
	assert.Equal(t, breaker.Config{Failures: 5, CoolDown: time.Second}, m.Breaker)
	assert.Equal(t, budget.Enforce, m.Mode)
	assert.Empty(t, m.TrustedProxies)
	assert.Zero(t, m.RetryAfterJitter)
	assert.Equal(t, stack.OverLimitCacheAuto, m.OverLimitCache)
	assert.Equal(t, middleware.SplitBudgetOptions{LeaseFraction: 0.05, SettleInterval: 100 * time.Millisecond}, m.SplitBudget)
	principal, plan, err := m.APIKeys.LookupAPIKey(t.Context(), demoAPIKey)
	require.NoError(t, err)
	assert.Equal(t, []string{"alice", "free"}, []string{principal, plan})
}

// The top-level mode applies to every plan that names none; a plan's own
// mode overrides it. The middleware resolves the inheritance; the file
// maps each key onto its field.
func TestModesMapOntoMiddleware(t *testing.T) {
	cfg, err := parseConfig([]byte(`
mode: shadow
plans:
  anon: {burst: 10, rate: 10, per: 1m}
  free: {burst: 100, rate: 100, per: 1m, mode: enforce}
  trial: {burst: 100, rate: 100, per: 1m, mode: shadow}
`))
	require.NoError(t, err)
	m := cfg.limiterConfig()
	assert.Equal(t, budget.Shadow, m.Mode)
	assert.Equal(t, budget.Mode(""), m.Plans["anon"].Mode, "unset: inherits the top-level mode")
	assert.Equal(t, budget.Enforce, m.Plans["free"].Mode)
	assert.Equal(t, budget.Shadow, m.Plans["trial"].Mode)
	_, cleanup, err := newServer(cfg, deps{})
	require.NoError(t, err, "the middleware takes both modes")
	require.NoError(t, cleanup())

	// A configuration built in code is checked too.
	cfg = defaultConfig()
	cfg.Mode = "observe"
	assert.ErrorContains(t, cfg.validate(), `mode: "observe" is not "enforce" or "shadow"`)
	cfg = defaultConfig()
	cfg.Plans["free"] = planConfig{Burst: 1, Rate: 1, Per: time.Hour, Mode: "off"}
	assert.ErrorContains(t, cfg.validate(), `plans.free.mode: "off" is not "enforce" or "shadow"`)
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
				c.Plans = map[string]planConfig{"anon": {Burst: 50, Rate: 5, Per: time.Minute, FailureMode: "closed"}}
				c.APIKeys = map[string]apiKeyConfig{}
			},
		},
		{
			// A new user's first file: the demo key's plan free is gone,
			// and so is the demo key, as if the file said api_keys: {}.
			"plans without api_keys drop the demo key",
			"plans: {anon: {burst: 50, rate: 5, per: 1m}}",
			func(c *config) {
				c.Plans = map[string]planConfig{"anon": {Burst: 50, Rate: 5, Per: time.Minute}}
				c.APIKeys = map[string]apiKeyConfig{}
			},
		},
		{
			"plans and api_keys together",
			"plans: {anon: {burst: 50, rate: 5, per: 1m}}\napi_keys: {k1: {principal: bob, plan: anon}}",
			func(c *config) {
				c.Plans = map[string]planConfig{"anon": {Burst: 50, Rate: 5, Per: time.Minute}}
				c.APIKeys = map[string]apiKeyConfig{"k1": {Principal: "bob", Plan: "anon"}}
			},
		},
		{
			"api_keys replace the demo key",
			"api_keys: {k1: {principal: bob, plan: anon}}",
			func(c *config) { c.APIKeys = map[string]apiKeyConfig{"k1": {Principal: "bob", Plan: "anon"}} },
		},
		{
			"routes replace the default routes; default_cost stays",
			`rest: {routes: {"GET /api/users/{login}": 3}}`,
			func(c *config) { c.REST.Routes = map[string]whole{"GET /api/users/{login}": 3} },
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
				c.SplitBudget = splitBudgetConfig{LeaseFraction: 0.1, SettleInterval: 250 * time.Millisecond}
				c.Plans = map[string]planConfig{
					"free": {Burst: 100, Rate: 100, Per: time.Minute, SplitBudget: true},
					"anon": {Burst: 10, Rate: 10, Per: time.Minute},
				}
				c.APIKeys = map[string]apiKeyConfig{} // own plans, no api_keys: no demo key
			},
		},
		{
			"modes",
			"mode: shadow\nplans: {free: {burst: 100, rate: 100, per: 1m, mode: enforce}, anon: {burst: 10, rate: 10, per: 1m}}",
			func(c *config) {
				c.Mode = "shadow"
				c.Plans = map[string]planConfig{
					"free": {Burst: 100, Rate: 100, Per: time.Minute, Mode: "enforce"},
					"anon": {Burst: 10, Rate: 10, Per: time.Minute},
				}
				c.APIKeys = map[string]apiKeyConfig{}
			},
		},
		{
			"quota and field limits",
			"plans: {free: {burst: 100, rate: 100, per: 1m, quota: {limit: 100000, per: 24h}}, anon: {burst: 10, rate: 10, per: 1m, quota: {limit: 10, per: 1h, name: anon-hour}}}\n" +
				`field_limits: {"Mutation.createIssue": {limit: 3, per: 1m}, "Query.search": {limit: 10, per: 1h, by: ip}}`,
			func(c *config) {
				c.Plans = map[string]planConfig{
					"free": {Burst: 100, Rate: 100, Per: time.Minute, Quota: &quotaConfig{Limit: 100000, Per: 24 * time.Hour}},
					"anon": {Burst: 10, Rate: 10, Per: time.Minute, Quota: &quotaConfig{Limit: 10, Per: time.Hour, Name: "anon-hour"}},
				}
				c.APIKeys = map[string]apiKeyConfig{}
				c.FieldLimits = map[string]fieldLimitConfig{
					"Mutation.createIssue": {Limit: 3, Per: time.Minute},
					"Query.search":         {Limit: 10, Per: time.Hour, By: "ip"},
				}
			},
		},
		{
			"a free route",
			`rest: {routes: {"GET /api/search": 0}}`,
			func(c *config) { c.REST.Routes = map[string]whole{"GET /api/search": 0} },
		},
		{
			"per-plan switches",
			"plans: {free: {burst: 100, rate: 100, per: 1m, introspection: false, cost_report: false}, anon: {burst: 10, rate: 10, per: 1m, cost_report: true}}",
			func(c *config) {
				c.Plans = map[string]planConfig{
					"free": {Burst: 100, Rate: 100, Per: time.Minute, Introspection: new(false), CostReport: new(false)},
					"anon": {Burst: 10, Rate: 10, Per: time.Minute, CostReport: new(true)},
				}
				c.APIKeys = map[string]apiKeyConfig{}
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
		{"unknown top-level key", "plan: {}", "line 1: plan: unknown key; the keys here are plans, anonymous_plan, api_keys, graphql,"},
		{"unknown nested key", "graphql: {max_dept: 3}", "line 1: graphql.max_dept: unknown key; the keys here are max_depth,"},
		{"unknown plan key", "plans:\n  free: {burst: 1, rate: 1, per: 1h, brust: 2}", "line 2: plans.free.brust: unknown key; the keys here are burst, rate, per, failure_mode, mode, split_budget, introspection, refund_unused, cost_report"},
		{"unknown API key field", "api_keys: {s3cret-key: {principal: p, plna: free}}", "api_keys[SHA-256 " + identity.HashAPIKey("s3cret-key") + "].plna: unknown key"},
		{"float count", "plans: {free: {burst: 1.5, rate: 1, per: 1h}}", "line 1: plans.free.burst: 1.5 is not a whole number"},
		{"string count", "graphql: {max_depth: ten}", `graphql.max_depth: "ten" is not a whole number`},
		{"count out of range", "graphql: {max_nodes: 99999999999999999999}", "graphql.max_nodes: 99999999999999999999 is not a whole number"},
		{"duration without unit", "plans:\n  anon: {burst: 1, rate: 1, per: 3600}", "line 2: plans.anon.per: 3600 is not a duration; write a Go duration with a unit, such as 1h or 90s"},
		{"bad duration", "plans: {free: {burst: 1, rate: 1, per: soon}}", `plans.free.per: "soon" is not a duration; write a Go duration with a unit, such as 1h or 90s`},
		{"settle_interval without unit", "split_budget: {settle_interval: 100}", "split_budget.settle_interval: 100 is not a duration; write a Go duration"},
		{"route cost not a count", `rest: {routes: {"GET /x": cheap}}`, `rest.routes["GET /x"]: "cheap" is not a whole number`},
		{"section not a mapping", "graphql: 5", "line 1: graphql: 5 is not a mapping of the keys max_depth,"},
		{"list not a list", "trusted_proxies: 10.0.0.0/8", `trusted_proxies: "10.0.0.0/8" is not a list`},
		{"list item not a string", "trusted_proxies: [[1]]", "trusted_proxies[0]: a list is not a string"},
		{"bool not a bool", "plans: {free: {burst: 1, rate: 1, per: 1h, split_budget: maybe}}", `plans.free.split_budget: "maybe" is not true or false`},
		{"jitter not a number", "retry_after_jitter: lots", `retry_after_jitter: "lots" is not a number`},
		{"two documents", "failure_mode: open\n---\nfailure_mode: closed\n", "more than one YAML document"},
		{"not a mapping", "- a\n- b\n", "line 1: the file must be a mapping of keys such as plans: and graphql:"},
		{"bad YAML", "plans: {free: [", "yaml:"},
		{"zero max_depth", "graphql: {max_depth: 0}", "graphql.max_depth is 0; it must be between 1 and 2147483647"},
		{"negative max_cost", "graphql: {max_cost: -1}", "graphql.max_cost is -1; it must be between 0 and"},
		{"huge max_breadth", "graphql: {max_breadth: 3000000000}", "graphql.max_breadth is 3000000000"},
		{"zero mutation_cost", "graphql: {mutation_cost: 0}", "graphql.mutation_cost is 0"},
		{"bad over_limit_cache", "over_limit_cache: sometimes", `over_limit_cache is "sometimes"; it must be "auto", "on" or "off"`},
		{"zero lease_fraction", "split_budget: {lease_fraction: 0}", "split_budget.lease_fraction is 0; it must be above 0 and at most 1"},
		{"lease_fraction above 1", "split_budget: {lease_fraction: 1.5}", "split_budget.lease_fraction is 1.5"},
		{"zero settle_interval", "split_budget: {settle_interval: 0s}", "split_budget.settle_interval is 0s; it must be positive"},
		{"zero default_list_size", "graphql: {default_list_size: 0}", "graphql.default_list_size is 0"},
		{"zero max_nodes", "graphql: {max_nodes: 0}", "graphql.max_nodes is 0"},
		{"zero default_cost", "rest: {default_cost: 0}", "rest.default_cost is 0"},
		{"negative route", `rest: {routes: {"GET /x": -1}}`, `rest.routes["GET /x"] is -1; a cost must not be negative`},
		{"failure mode", "failure_mode: maybe", `failure_mode is "maybe"; it must be "open" or "closed"`},
		{"mode", "mode: shadw", `line 1: mode: "shadw" is not "enforce" or "shadow"`},
		{"mode not a string", "mode: [shadow]", `line 1: mode: a list is not "enforce" or "shadow"`},
		{"mode in capitals", "mode: Shadow", `line 1: mode: "Shadow" is not "enforce" or "shadow"`},
		{"plan mode", "plans:\n  anon: {burst: 1, rate: 1, per: 1h, mode: dry-run}", `line 2: plans.anon.mode: "dry-run" is not "enforce" or "shadow"`},
		{"empty plan mode", "plans:\n  anon: {burst: 1, rate: 1, per: 1h, mode: \"\"}", `line 2: plans.anon.mode: "" is not "enforce" or "shadow"`},
		{"plan failure mode", "plans: {anon: {burst: 1, rate: 1, per: 1h, failure_mode: shut}}", `plans.anon.failure_mode is "shut"`},
		{"jitter above 1", "retry_after_jitter: 1.5", "retry_after_jitter is 1.5; it must be between 0 and 1"},
		{"negative jitter", "retry_after_jitter: -0.1", "retry_after_jitter is -0.1"},
		{"no plans", "plans: {}", "plans is empty; it must name at least one plan"},
		{"plan with zero burst", "plans: {anon: {burst: 0, rate: 1, per: 1h}}", "plans.anon.burst is 0; it must be at least 1"},
		{"plan with zero rate", "plans: {anon: {burst: 1, rate: 0, per: 1h}}", "plans.anon.rate is 0; it must be at least 1"},
		{"plan without per", "plans: {anon: {burst: 1, rate: 1}}", "plans.anon.per is 0s; it must be positive, a Go duration with a unit, such as 1h or 90s"},
		{"plan name with a space", `plans: {"a b": {burst: 1, rate: 1, per: 0s}}`, `plans["a b"].per is 0s`},
		{"anonymous plan missing", "anonymous_plan: guest", `anonymous_plan is "guest"; it must be one of the plans (anon, free)`},
		{"API key on a missing plan", "api_keys: {s3cret-key: {principal: p, plan: gold}}",
			"api_keys[SHA-256 " + identity.HashAPIKey("s3cret-key") + `].plan is "gold"; it must be one of the plans (anon, free)`},
		{"demo key kept on a missing plan", "plans: {anon: {burst: 1, rate: 1, per: 1h}}\napi_keys: {demo-free-key: {principal: alice, plan: free}}",
			`.plan is "free"; it must be one of the plans (anon)`},
		{"key without principal", "api_keys: {s3cret-key: {plan: free}}", "api_keys[SHA-256 " + identity.HashAPIKey("s3cret-key") + "].principal is empty"},
		{"empty key", `api_keys: {"": {principal: x, plan: free}}`, "an API key must not be empty"},
		{"quota below the burst", "plans: {anon: {burst: 10, rate: 1, per: 1h, quota: {limit: 5, per: 24h}}}", "plans.anon.quota.limit is 5; it must be at least the plan's burst, 10"},
		{"quota without per", "plans: {anon: {burst: 10, rate: 1, per: 1h, quota: {limit: 50}}}", "plans.anon.quota.per is 0s; it must be positive"},
		{"quota with split budget", "plans: {anon: {burst: 10, rate: 1, per: 1h, split_budget: true, quota: {limit: 50, per: 1h}}}", "plans.anon: quota and split_budget cannot be combined"},
		{"field limit of zero", `field_limits: {"Mutation.createIssue": {limit: 0, per: 1m}}`, `field_limits["Mutation.createIssue"].limit is 0; it must be at least 1`},
		{"field limit without per", `field_limits: {"Mutation.createIssue": {limit: 3}}`, `field_limits["Mutation.createIssue"].per is 0s`},
		{"field limit by whom", `field_limits: {"Mutation.createIssue": {limit: 3, per: 1m, by: user}}`, `field_limits["Mutation.createIssue"].by is "user"; it must be "principal" or "ip"`},
		{"unknown field limit key", `field_limits: {"Mutation.createIssue": {limit: 3, per: 1m, per_ip: true}}`, "per_ip: unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig([]byte(tt.src))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "s3cret-key", "an API key leaked into an error")
		})
	}
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
		{"invalid file", write("bad.yaml", "graphql: {max_depth: 0}\n"), "bad.yaml: graphql.max_depth is 0"},
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
