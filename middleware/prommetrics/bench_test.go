package prommetrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/middleware"
)

// benchEvent is an admitted GraphQL operation with a refund and a store
// call: every metric but the fallback counter moves.
var benchEvent = middleware.Event{
	Plan: "pro", Kind: middleware.KindGraphQL, Outcome: budget.ClassAdmitted,
	RequestedCost: 120, Charged: 120, ActualCost: 45, HasActualCost: true, Refunded: 75,
	StoreDuration: 300 * time.Microsecond, StoreResult: guard.ResultOK,
}

// BenchmarkObserveDecision measures ObserveDecision against the peer a
// first adapter would write: the same metrics, each child looked up with
// WithLabelValues on every event.
func BenchmarkObserveDecision(b *testing.B) {
	b.Run("prommetrics", func(b *testing.B) {
		m, _ := newMetrics(b)
		e := benchEvent
		m.ObserveDecision(&e) // the plan's series exist from here
		b.ReportAllocs()
		for b.Loop() {
			m.ObserveDecision(&e)
		}
	})
	b.Run("WithLabelValues", func(b *testing.B) {
		o := newLabelValuesObserver(prometheus.NewRegistry())
		e := benchEvent
		o.ObserveDecision(&e)
		b.ReportAllocs()
		for b.Loop() {
			o.ObserveDecision(&e)
		}
	})
	b.Run("prommetrics/parallel", func(b *testing.B) {
		m, _ := newMetrics(b)
		e := benchEvent
		m.ObserveDecision(&e)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.ObserveDecision(&e)
			}
		})
	})
	b.Run("WithLabelValues/parallel", func(b *testing.B) {
		o := newLabelValuesObserver(prometheus.NewRegistry())
		e := benchEvent
		o.ObserveDecision(&e)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				o.ObserveDecision(&e)
			}
		})
	})
}

// labelValuesObserver is the benchmark's peer: the same metrics, with no
// resolved children and no guard on label values.
type labelValuesObserver struct {
	decisions, fallback, charged, refunded *prometheus.CounterVec
	cost, actual, store                    *prometheus.HistogramVec
}

func newLabelValuesObserver(reg prometheus.Registerer) *labelValuesObserver {
	counter := func(name string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: name}, labels)
	}
	histogram := func(name string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: name,
			Buckets: prometheus.ExponentialBuckets(1, 2, 16)}, labels)
	}
	o := &labelValuesObserver{
		decisions: counter("costguard_decisions_total", "plan", "kind", "outcome"),
		fallback:  counter("costguard_fallback_decisions_total", "plan"),
		charged:   counter("costguard_charged_points_total", "plan", "kind"),
		refunded:  counter("costguard_refunded_points_total", "plan"),
		cost:      histogram("costguard_operation_cost_points", "plan", "kind"),
		actual:    histogram("costguard_operation_actual_cost_points", "plan"),
		store:     histogram("costguard_store_duration_seconds", "result"),
	}
	reg.MustRegister(o.decisions, o.fallback, o.charged, o.refunded, o.cost, o.actual, o.store)
	return o
}

func (o *labelValuesObserver) ObserveDecision(e *middleware.Event) {
	kind := string(e.Kind)
	o.decisions.WithLabelValues(e.Plan, kind, string(e.Outcome)).Inc()
	if e.Fallback {
		o.fallback.WithLabelValues(e.Plan).Inc()
	}
	if e.RequestedCost > 0 {
		o.cost.WithLabelValues(e.Plan, kind).Observe(float64(e.RequestedCost))
	}
	if e.Charged > 0 {
		o.charged.WithLabelValues(e.Plan, kind).Add(float64(e.Charged))
	}
	if e.HasActualCost {
		o.actual.WithLabelValues(e.Plan).Observe(float64(e.ActualCost))
	}
	if e.Refunded > 0 {
		o.refunded.WithLabelValues(e.Plan).Add(float64(e.Refunded))
	}
	if e.StoreResult != "" {
		o.store.WithLabelValues(string(e.StoreResult)).Observe(e.StoreDuration.Seconds())
	}
}

var _ middleware.Observer = (*labelValuesObserver)(nil)
