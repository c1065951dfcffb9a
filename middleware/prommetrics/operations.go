package prommetrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/costguard/costguard/opcosts"
)

// MaxOperations bounds Operations' n: the operation label's cardinality.
const MaxOperations = 100

// Operations exports what GraphQL operations cost, by name, read from an
// opcosts.Tracker at each scrape, for the n operations with the most
// requested points that it keeps by name (n from 1 to MaxOperations: the
// operation label never takes more values than that):
//
//	costguard_graphql_operation_runs_total{operation}              counter
//	costguard_graphql_operation_refused_total{operation}           counter
//	costguard_graphql_operation_requested_points{operation}        histogram
//	costguard_graphql_operation_actual_points{operation}           histogram
//
// The histograms have opcosts.Buckets. An operation's series count from
// when it got its place in the Tracker; one that loses its place and gets
// it back starts again from zero, which Prometheus reads as a counter
// reset. The operations without a place of their own are not exported
// (the admin API's /admin/operations reports them as one).
func Operations(t *opcosts.Tracker, n int) (prometheus.Collector, error) {
	if n < 1 || n > MaxOperations {
		return nil, fmt.Errorf("%w: Operations: %d operations; want 1 to %d", ErrInvalidOption, n, MaxOperations)
	}
	return operationsCollector{t: t, n: n}, nil
}

type operationsCollector struct {
	t *opcosts.Tracker
	n int
}

var (
	opRuns = prometheus.NewDesc("costguard_graphql_operation_runs_total",
		"GraphQL operations that ran, by operation name (the costliest names only).", []string{"operation"}, nil)
	opRefused = prometheus.NewDesc("costguard_graphql_operation_refused_total",
		"GraphQL operations refused, by operation name (the costliest names only).", []string{"operation"}, nil)
	opRequested = prometheus.NewDesc("costguard_graphql_operation_requested_points",
		"Requested cost of the GraphQL operations that ran, by operation name (the costliest names only).", []string{"operation"}, nil)
	opActual = prometheus.NewDesc("costguard_graphql_operation_actual_points",
		"Actual cost of the GraphQL operations that ran, by operation name (the costliest names only).", []string{"operation"}, nil)
)

func (operationsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range [...]*prometheus.Desc{opRuns, opRefused, opRequested, opActual} {
		ch <- d
	}
}

func (c operationsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, op := range c.t.Report(c.n).Operations {
		ch <- prometheus.MustNewConstMetric(opRuns, prometheus.CounterValue, float64(op.Runs), op.Name)
		ch <- prometheus.MustNewConstMetric(opRefused, prometheus.CounterValue, float64(op.Refused), op.Name)
		var actualRuns int64
		for _, n := range op.ActualHistogram {
			actualRuns += n
		}
		ch <- prometheus.MustNewConstHistogram(opRequested, uint64(op.Runs), float64(op.RequestedPoints), cumulative(op.RequestedHistogram), op.Name)
		ch <- prometheus.MustNewConstHistogram(opActual, uint64(actualRuns), float64(op.ActualPoints), cumulative(op.ActualHistogram), op.Name)
	}
}

// cumulative turns counts per bucket of opcosts.Buckets (the last past
// them) into Prometheus's cumulative counts per upper bound.
func cumulative(counts []int64) map[float64]uint64 {
	out := make(map[float64]uint64, len(opcosts.Buckets))
	var sum uint64
	for i, le := range opcosts.Buckets {
		sum += uint64(counts[i])
		out[float64(le)] = sum
	}
	return out
}
