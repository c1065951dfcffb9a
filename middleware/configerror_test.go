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
		change func(c *middleware.Config)
		path   []string
	}{
		{"plan burst", func(c *middleware.Config) { c.Plans["free"] = budget.Plan{Rate: 1, Per: time.Second} }, []string{"plans", "free", "burst"}},
		{"plan per", func(c *middleware.Config) { c.Plans["free"] = budget.Plan{Burst: 1, Rate: 1} }, []string{"plans", "free", "per"}},
		{"quota below the burst", func(c *middleware.Config) {
			c.Plans["free"] = budget.Plan{Burst: 10, Rate: 1, Per: time.Second, Quota: &budget.Quota{Limit: 5, Per: time.Hour}}
		}, []string{"plans", "free", "quota", "limit"}},
		{"field limit", func(c *middleware.Config) {
			c.FieldLimits = map[string]budget.FieldLimit{"Query.search": {Limit: 1}}
		}, []string{"field_limits", "Query.search", "per"}},
		{"route limit", func(c *middleware.Config) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST /login": {Limit: 5, Per: time.Minute, Algorithm: "gcra"}}
		}, []string{"rest", "route_limits", "POST /login", "algorithm"}},
		{"route limit pattern", func(c *middleware.Config) {
			c.REST.RouteLimits = map[string]budget.FieldLimit{"POST": {Limit: 5, Per: time.Minute}}
		}, []string{"rest", "route_limits", "POST"}},
		{"anonymous plan", func(c *middleware.Config) { c.AnonymousPlan = "guest" }, []string{"anonymous_plan"}},
		{"route", func(c *middleware.Config) { c.REST.Routes = map[string]int64{"GET /x": 1000} }, []string{"rest", "routes", "GET /x"}},
		{"graphql invalid cost", func(c *middleware.Config) { c.GraphQL.InvalidCost = 1000 }, []string{"graphql", "invalid_cost"}},
		{"lane challenge", func(c *middleware.Config) {
			c.Lanes = []middleware.Lane{{Name: "a"}, {Name: "b", Challenge: "captcha"}}
		}, []string{"lanes", "1", "challenge"}},
		{"lane queue", func(c *middleware.Config) {
			c.Lanes = []middleware.Lane{{Name: "a", Priority: overload.Normal, Queue: time.Second}}
		}, []string{"lanes", "0", "queue"}},
		{"lane budget, by index", func(c *middleware.Config) {
			c.Lanes = []middleware.Lane{{Name: "a"}, {Name: "b", Budget: &budget.Plan{Burst: 1, Per: time.Second}}}
		}, []string{"lanes", "1", "budget", "rate"}},
		{"lane budget with a plan's field", func(c *middleware.Config) {
			c.Lanes = []middleware.Lane{{Name: "a", Budget: &budget.Plan{Burst: 1, Rate: 1, Per: time.Second, Mode: budget.Shadow}}}
		}, []string{"lanes", "0", "budget"}},
		{"jitter", func(c *middleware.Config) { c.RetryAfterJitter = 2 }, []string{"retry_after_jitter"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, newClock())
			tt.change(&cfg)
			_, err := middleware.New(cfg)
			require.Error(t, err)
			assert.ErrorIs(t, err, middleware.ErrInvalidConfig)
			var ce *budget.ConfigError
			require.True(t, errors.As(err, &ce), "%v carries no budget.ConfigError", err)
			assert.Equal(t, tt.path, ce.Path)
		})
	}
}
