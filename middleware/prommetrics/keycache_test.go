package prommetrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/identity/keycache"
	"github.com/costguard/costguard/middleware/prommetrics"
)

// failingKeys knows "k1", fails on "broken" and knows nothing else.
type failingKeys struct{}

func (failingKeys) LookupAPIKey(_ context.Context, key string) (string, string, error) {
	switch key {
	case "k1":
		return "alice", "pro", nil
	case "broken":
		return "", "", errors.New("database down")
	}
	return "", "", identity.ErrUnknownAPIKey
}

func TestKeyCacheCollector(t *testing.T) {
	c, err := keycache.New(failingKeys{}, keycache.WithLookupBudget(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []string{
		"k1", "k1", "k1", // one lookup, whose token a known key gives back; two hits
		"nope", "nope", // one lookup (the budget's first token), one unknown hit
		"broken", // one lookup, an error (the second token)
		"fresh",  // one lookup (the third: the budget is spent)
		"fresh2", // not looked up
	} {
		_, _, _ = c.LookupAPIKey(ctx, k)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(prommetrics.KeyCache(c))
	want := `
# HELP costguard_key_cache_answers_total API keys the key cache answered without a lookup of their own, by result.
# TYPE costguard_key_cache_answers_total counter
costguard_key_cache_answers_total{result="hit"} 2
costguard_key_cache_answers_total{result="joined"} 0
costguard_key_cache_answers_total{result="not_looked_up"} 1
costguard_key_cache_answers_total{result="unknown_hit"} 1
# HELP costguard_key_cache_entries Entries the key cache holds, by kind.
# TYPE costguard_key_cache_entries gauge
costguard_key_cache_entries{kind="known"} 1
costguard_key_cache_entries{kind="unknown"} 2
# HELP costguard_key_cache_lookup_errors_total Backing key lookups that failed with another error than an unknown key.
# TYPE costguard_key_cache_lookup_errors_total counter
costguard_key_cache_lookup_errors_total 1
# HELP costguard_key_cache_lookups_total Calls of the key cache to its backing key lookup.
# TYPE costguard_key_cache_lookups_total counter
costguard_key_cache_lookups_total 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
