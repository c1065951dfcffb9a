package prommetrics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/costguard/costguard/middleware/prommetrics"
	"github.com/costguard/costguard/opcosts"
)

func TestOperationsCollector(t *testing.T) {
	tr, err := opcosts.New(opcosts.Config{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	tr.Add(at, opcosts.Decision{Operation: "Repos", Requested: 61, Actual: 14, HasActual: true})
	tr.Add(at, opcosts.Decision{Operation: "Repos", Requested: 61, Refused: true})
	tr.Add(at, opcosts.Decision{Operation: "Cheap", Requested: 2, Actual: 2, HasActual: true})
	c, err := prommetrics.Operations(tr, 1) // Repos only
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	want := `
# HELP costguard_graphql_operation_refused_total GraphQL operations refused, by operation name (the costliest names only).
# TYPE costguard_graphql_operation_refused_total counter
costguard_graphql_operation_refused_total{operation="Repos"} 1
# HELP costguard_graphql_operation_runs_total GraphQL operations that ran, by operation name (the costliest names only).
# TYPE costguard_graphql_operation_runs_total counter
costguard_graphql_operation_runs_total{operation="Repos"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "costguard_graphql_operation_runs_total", "costguard_graphql_operation_refused_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 4 {
		t.Errorf("%d series (%v), want 4: one operation's two counters and two histograms", n, err)
	}
	for _, n := range []int{0, prommetrics.MaxOperations + 1} {
		if _, err := prommetrics.Operations(tr, n); !errors.Is(err, prommetrics.ErrInvalidOption) {
			t.Errorf("n %d: %v", n, err)
		}
	}
}
