package middleware_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/overload"
)

// A configuration error about one key carries the key's path as a file
// spells it (the yaml tags), for a caller that read the configuration from
// a file to point at the line; errors.Is still finds ErrInvalidConfig.
func TestConfigErrorNamesTheKey(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *config)
		path   []string
	}{
		{"plan burst", func(c *config) { c.Plans["free"] = budget.Plan{Rate: 1, Per: time.Second} }, []string{"plans", "free", "burst"}},
		{"plan per", func(c *config) { c.Plans["free"] = budget.Plan{Burst: 1, Rate: 1} }, []string{"plans", "free", "per"}},
		{"quota below the burst", func(c *config) {
			c.Plans["free"] = budget.Plan{Burst: 10, Rate: 1, Per: time.Second, Quota: &budget.Quota{Limit: 5, Per: time.Hour}}
		}, []string{"plans", "free", "quota", "limit"}},
		{"field limit", func(c *config) {
			c.FieldLimits = map[string]budget.FieldLimit{"Query.search": {Limit: 1}}
		}, []string{"field_limits", "Query.search", "per"}},
		{"route limit", func(c *config) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 5, Per: time.Minute, Algorithm: "gcra"}}
		}, []string{"rest", "route_limits", "POST /login", "algorithm"}},
		{"route limit pattern", func(c *config) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST": {Limit: 5, Per: time.Minute}}
		}, []string{"rest", "route_limits", "POST"}},
		{"anonymous plan", func(c *config) { c.AnonymousPlan = "guest" }, []string{"anonymous_plan"}},
		{"route", func(c *config) { c.REST.Routes = map[string]int64{"GET /x": 1000} }, []string{"rest", "routes", "GET /x"}},
		{"graphql invalid cost", func(c *config) { c.GraphQL.InvalidCost = 1000 }, []string{"graphql", "invalid_cost"}},
		{"lane challenge", func(c *config) {
			c.Lanes = []middleware.Lane{{Name: "a"}, {Name: "b", Challenge: "captcha"}}
		}, []string{"lanes", "1", "challenge"}},
		{"lane queue", func(c *config) {
			c.Lanes = []middleware.Lane{{Name: "a", Priority: overload.Normal, Queue: time.Second}}
		}, []string{"lanes", "0", "queue"}},
		{"lane budget, by index", func(c *config) {
			c.Lanes = []middleware.Lane{{Name: "a"}, {Name: "b", Budget: &middleware.LaneBudget{Burst: 1, Per: time.Second}}}
		}, []string{"lanes", "1", "budget", "rate"}},
		{"jitter", func(c *config) { c.RetryAfterJitter = 2 }, []string{"retry_after_jitter"}},
		{"store timeout", func(c *config) { c.StoreTimeout = -time.Second }, []string{"store_timeout"}},
		{"body bound", func(c *config) { c.MaxBodyBytes = -1 }, []string{"max_body_bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, newClock())
			tt.change(&cfg)
			_, err := middleware.New(cfg.Dependencies, cfg.Policy)
			require.Error(t, err)
			assert.ErrorIs(t, err, middleware.ErrInvalidConfig)
			var ce *budget.ConfigError
			require.True(t, errors.As(err, &ce), "%v carries no budget.ConfigError", err)
			assert.Equal(t, tt.path, ce.Path)
		})
	}
}
