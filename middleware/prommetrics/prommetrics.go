// Package prommetrics turns the Limiter's decision events into Prometheus
// metrics. It is a module of its own, so that the library's module does
// not require client_golang: a *Metrics is a middleware.Observer, given to
// the Limiter as Dependencies.Observer, and a prometheus.Collector,
// registered by New.
//
//	reg := prometheus.NewRegistry()
//	m, err := prommetrics.New(prommetrics.WithRegisterer(reg), prommetrics.WithPlans("free", "pro"))
//	lim, err := middleware.New(middleware.Dependencies{..., Observer: m}, policy)
//	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Without WithRegisterer, New registers on prometheus.DefaultRegisterer, as
// promauto and most instrumented libraries do, and promhttp.Handler()
// serves the metrics next to the Go runtime's. The package has no handler
// of its own: /metrics serves a registry, which holds more than these
// metrics. Tests give each Metrics a registry of its own.
//
// # Metrics
//
// Names, label names and label values are a contract that dashboards and
// alerts rely on: metrics and label values may be added, none renamed.
//
//	costguard_decisions_total{plan, kind, outcome}            counter
//	    every Event; outcome is Event.Outcome (admitted, rate_limited,
//	    cost_exceeded, unavailable, shadow_rejected, shed), kind is graphql, rest
//	    or subscription_event (the debit of one event of a subscription)
//	costguard_fallback_decisions_total{plan}                  counter
//	    Events decided by the fail-open local bucket (Event.Fallback)
//	costguard_operation_cost_points{plan, kind}               histogram
//	    Event.RequestedCost, for Events with RequestedCost > 0
//	costguard_operation_actual_cost_points{plan}              histogram
//	    Event.ActualCost, for Events with HasActualCost (GraphQL)
//	costguard_store_duration_seconds{result}                  histogram
//	    Event.StoreDuration, for Events with a StoreResult (ok, error, timeout,
//	    skipped: the store's circuit breaker was open)
//	costguard_store_breaker_open                               gauge
//	    1 while the store's circuit breaker is open or half-open, 0 once
//	    closed, as of the last Event with a Breaker state (Event.Breaker)
//	costguard_charged_points_total{plan, kind}                counter
//	    Event.Charged: points debited from budgets
//	costguard_refunded_points_total{plan}                     counter
//	    Event.Refunded: points given back after execution
//	costguard_excess_points_total{plan}                       counter
//	    Event.Excess: points debited after execution beyond the price, for
//	    responses that held more than it (a list overran its priced size)
//
//	costguard_net_points_total{plan}                          counter
//	    Event.Charged − Event.Refunded + Event.Excess when above 0: what
//	    stayed debited once each request was settled
//	costguard_near_limit_decisions_total{plan}                counter
//	    admitted Events that left the bucket under 20 % of its limit
//	    (Event.Remaining × 5 < Event.Limit)
//	costguard_plan_limit_points{plan}                         gauge
//	    Event.Limit of the plan's last Event that knew it (the plan's
//	    burst; an override of limits reports under its own plan name)
//
// Points debited net of refunds are charged minus refunded plus excess,
// which costguard_net_points_total counts in one series.
//
// KeyCache is a second collector, for the API-key cache in front of a
// database (identity/keycache): its costguard_key_cache_* metrics.
// Operations a third, for what the costliest GraphQL operation names cost
// (package opcosts), its operation label bounded.
//
// The cost histograms have the buckets 1, 2, 5, 10, 20, 50, …, 50000,
// 100000 points. costguard_operation_cost_points leaves out requests that
// were never priced (a GraphQL document refused before pricing has
// RequestedCost 0) and free REST routes: both are counted by
// costguard_decisions_total only. costguard_operation_actual_cost_points
// includes an actual cost of 0. The store histogram has the buckets 50µs,
// 100µs, 250µs, 500µs, 1ms, 2.5ms, 5ms, 10ms, 25ms, 50ms, 100ms and 250ms:
// a store call takes from tens of microseconds (a local Redis) to the
// default StoreTimeout of 100ms.
//
// # Cardinality
//
// Every label but plan takes values from a fixed set. A kind, outcome or
// store result that is not among them (a value added to package
// middleware later, or an Event built by hand) is counted under the label
// value "other", never passed through. Plan names pass through: the
// Limiter only reports plans of its Config, which are few. WithPlans bounds
// them for certain: a plan it does not name is counted as "other".
//
// Negative counts and costs, which no Event of the Limiter carries, are
// never added (a counter cannot go down); a negative StoreDuration is
// observed as 0.
//
// # Cost
//
// ObserveDecision allocates nothing once a plan's series exist: they are
// resolved the first time the plan is seen (at New for the plans of
// WithPlans) and found again through a map read without a lock.
package prommetrics

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/middleware"
)

// Other is the label value that stands for an unexpected kind, outcome or
// store result, and for a plan that WithPlans did not name.
const Other = "other"

// The label names.
const (
	labelPlan    = "plan"
	labelKind    = "kind"
	labelOutcome = "outcome"
	labelResult  = "result"
	labelLane    = "lane"
)

// The expected label values, in the order of the arrays of series.
var (
	kinds    = [...]middleware.Kind{middleware.KindGraphQL, middleware.KindREST, middleware.KindSubscriptionEvent}
	outcomes = [...]budget.Class{
		budget.ClassAdmitted,
		budget.ClassRateLimited,
		budget.ClassCostExceeded,
		budget.ClassUnavailable,
		budget.ClassShadowRejected,
		budget.ClassShed,
	}
	results = [...]guard.Result{guard.ResultOK, guard.ResultError, guard.ResultTimeout}
)

// ErrInvalidOption reports an option that New refuses.
var ErrInvalidOption = errors.New("prommetrics: invalid option")

// Option configures New.
type Option func(*options)

type options struct {
	reg    prometheus.Registerer
	regSet bool
	plans  []string
	bound  bool // WithPlans was given
}

// WithRegisterer registers the metrics on r instead of
// prometheus.DefaultRegisterer: a *prometheus.Registry of your own (served
// with promhttp.HandlerFor), one per test, or a registerer wrapped with
// prometheus.WrapRegistererWith to tell two Limiters of one process apart.
// r must not be nil.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *options) { o.reg, o.regSet = r, true }
}

// WithPlans names every plan there is. Their series are created at New,
// at zero, so that the first decision of a plan counts in rate() and
// increase() (a series born at 1 hides its first increment), and an Event
// of any other plan is counted under the plan "other". Without WithPlans a
// plan's series appear with its first Event, and plan names pass through.
// The names must be non-empty and not "other"; repeating one is harmless.
func WithPlans(names ...string) Option {
	return func(o *options) { o.plans, o.bound = append(o.plans, names...), true }
}

// Metrics turns Events into Prometheus metrics. It is safe for concurrent
// use. Build it with New.
type Metrics struct {
	decisions *prometheus.CounterVec
	fallback  *prometheus.CounterVec
	cost      *prometheus.HistogramVec
	actual    *prometheus.HistogramVec
	store     *prometheus.HistogramVec
	charged   *prometheus.CounterVec
	refunded  *prometheus.CounterVec
	excess    *prometheus.CounterVec
	net       *prometheus.CounterVec
	nearLimit *prometheus.CounterVec
	limit     *prometheus.GaugeVec
	breaker   *prometheus.GaugeVec // no labels: absent until a Limiter with a breaker reports

	storeBy [len(results)]prometheus.Observer

	// plans maps a plan label value to its series. It is replaced, never
	// changed, so ObserveDecision reads it without a lock; mu orders the
	// writers. The lane label planned for costguard_decisions_total would
	// come as an option (series of setups without it unchanged) and join
	// the plan in this key: one planSeries per (plan, lane).
	plans atomic.Pointer[map[seriesID]*planSeries]
	mu    sync.Mutex
	bound bool // only the plans of WithPlans have their own label value
}

var (
	_ middleware.Observer  = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// planSeries holds one plan's series for the expected label values.
type planSeries struct {
	name      string
	lane      string
	decisions [len(kinds)][len(outcomes)]prometheus.Counter
	cost      [len(kinds)]prometheus.Observer
	charged   [len(kinds)]prometheus.Counter
	fallback  prometheus.Counter
	actual    prometheus.Observer
	refunded  prometheus.Counter
	excess    prometheus.Counter
	net       prometheus.Counter
	nearLimit prometheus.Counter
	// limit is made on the plan's first Event that knows its limit, so a
	// plan never reports a limit of 0 it does not have.
	limit    atomic.Pointer[prometheus.Gauge]
	limitVec *prometheus.GaugeVec
}

// costBuckets are the buckets of the cost histograms, in points: 1, 2, 5
// in every decade from 1 to 100,000.
func costBuckets() []float64 {
	var b []float64
	for decade := 1.0; decade <= 10000; decade *= 10 {
		b = append(b, decade, 2*decade, 5*decade)
	}
	return append(b, 100000)
}

// storeBuckets are the buckets of costguard_store_duration_seconds.
func storeBuckets() []float64 {
	return []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3}
}

// New builds the metrics and registers them (by default on
// prometheus.DefaultRegisterer, which promhttp.Handler serves). It fails
// on a bad option and when the registerer refuses them: registering a
// second Metrics on one registerer returns a
// prometheus.AlreadyRegisteredError.
func New(opts ...Option) (*Metrics, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if !o.regSet {
		o.reg = prometheus.DefaultRegisterer
	}
	if o.reg == nil {
		return nil, fmt.Errorf("%w: nil registerer", ErrInvalidOption)
	}
	if o.bound && len(o.plans) == 0 {
		return nil, fmt.Errorf("%w: WithPlans names no plan", ErrInvalidOption)
	}
	for _, p := range o.plans {
		if p == "" || p == Other {
			return nil, fmt.Errorf("%w: WithPlans: plan name %q is reserved", ErrInvalidOption, p)
		}
	}

	m := newMetrics(o.bound)
	for i, r := range results {
		m.storeBy[i] = m.store.WithLabelValues(string(r))
	}
	series := make(map[seriesID]*planSeries, len(o.plans))
	for _, p := range o.plans {
		if series[seriesKey(p, "")] == nil {
			series[seriesKey(p, "")] = m.newPlanSeries(p, "")
		}
	}
	m.plans.Store(&series)

	if err := o.reg.Register(m); err != nil {
		return nil, fmt.Errorf("prommetrics: registering the metrics: %w", err)
	}
	return m, nil
}

// newMetrics declares the collectors of a Metrics, none registered.
func newMetrics(bound bool) *Metrics {
	return &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "costguard_decisions_total",
			Help: "Rate-limit decisions, by plan, adapter (kind), what became of the request (outcome) and priority lane (empty without lanes).",
		}, []string{labelPlan, labelKind, labelOutcome, labelLane}),
		fallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "costguard_fallback_decisions_total",
			Help: "Decisions made by the fail-open local bucket because the store failed.",
		}, []string{labelPlan}),
		cost: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "costguard_operation_cost_points",
			Help:    "Price of each request that was priced above 0, in points.",
			Buckets: costBuckets(),
		}, []string{labelPlan, labelKind}),
		actual: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "costguard_operation_actual_cost_points",
			Help:    "Cost of each executed GraphQL operation recomputed from its response, in points.",
			Buckets: costBuckets(),
		}, []string{labelPlan}),
		store: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "costguard_store_duration_seconds",
			Help:    "Time spent in the store calls of one decision, by how the last call ended.",
			Buckets: storeBuckets(),
		}, []string{labelResult}),
		charged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "costguard_charged_points_total",
			Help: "Points debited from budgets.",
		}, []string{labelPlan, labelKind}),
		refunded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "costguard_refunded_points_total",
			Help: "Points given back to budgets once an operation's actual cost was known.",
		}, []string{labelPlan}),
		excess: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "costguard_excess_points_total",
			Help: "Points debited after execution beyond the price, for responses that held more than it (a list returned more items than the size it was priced at).",
		}, []string{labelPlan}),
		net: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "costguard_net_points_total",
			Help: "Points that stayed debited from budgets once each request was settled: charged minus refunded plus excess.",
		}, []string{labelPlan}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "costguard_near_limit_decisions_total",
			Help: "Admitted decisions that left the principal's bucket under 20% of its limit.",
		}, []string{labelPlan}),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "costguard_plan_limit_points",
			Help: "The bucket limit (burst) of the plan, in points, as of its last decision that knew it.",
		}, []string{labelPlan}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "costguard_store_breaker_open",
			Help: "1 while the rate-limit store's circuit breaker keeps requests off it (open or half-open), else 0.",
		}, nil),
		bound: bound,
	}
}

// seriesID names the series of a plan and a lane in Metrics.plans.
type seriesID struct{ plan, lane string }

func seriesKey(plan, lane string) seriesID { return seriesID{plan, lane} }

func (m *Metrics) newPlanSeries(plan, lane string) *planSeries {
	s := &planSeries{
		name:      plan,
		lane:      lane,
		fallback:  m.fallback.WithLabelValues(plan),
		actual:    m.actual.WithLabelValues(plan),
		refunded:  m.refunded.WithLabelValues(plan),
		excess:    m.excess.WithLabelValues(plan),
		net:       m.net.WithLabelValues(plan),
		nearLimit: m.nearLimit.WithLabelValues(plan),
		limitVec:  m.limit,
	}
	for k, kind := range kinds {
		for o, outcome := range outcomes {
			s.decisions[k][o] = m.decisions.WithLabelValues(plan, string(kind), string(outcome), lane)
		}
		s.cost[k] = m.cost.WithLabelValues(plan, string(kind))
		s.charged[k] = m.charged.WithLabelValues(plan, string(kind))
	}
	return s
}

// limitGauge returns the plan's limit gauge, made the first time.
func (s *planSeries) limitGauge() prometheus.Gauge {
	if g := s.limit.Load(); g != nil {
		return *g
	}
	g := s.limitVec.WithLabelValues(s.name)
	s.limit.Store(&g)
	return g
}

// series returns the series of plan and lane, creating them the first
// time. Lanes come from the configuration, so they are bounded as plans
// are.
func (m *Metrics) series(plan, lane string) *planSeries {
	plan, lane = kept.Cut(plan, kept.MaxName), kept.Cut(lane, kept.MaxName)
	key := seriesKey(plan, lane)
	if s := (*m.plans.Load())[key]; s != nil {
		return s
	}
	if m.bound {
		if _, known := (*m.plans.Load())[seriesKey(plan, "")]; !known {
			plan = Other
		}
		key = seriesKey(plan, lane)
		if s := (*m.plans.Load())[key]; s != nil {
			return s
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := *m.plans.Load()
	if s := cur[key]; s != nil {
		return s // another writer was first
	}
	next := maps.Clone(cur)
	// The key and the label values are copies: the series outlive the
	// Event.
	plan, lane = strings.Clone(plan), strings.Clone(lane)
	key = seriesKey(plan, lane)
	s := m.newPlanSeries(plan, lane)
	next[key] = s
	m.plans.Store(&next)
	return s
}

// ObserveDecision records e. It implements middleware.Observer. A nil e is
// ignored.
func (m *Metrics) ObserveDecision(e *middleware.Event) {
	if e == nil {
		return
	}
	s := m.series(e.Plan, e.Lane)
	k := indexOf(kinds[:], e.Kind)
	o := indexOf(outcomes[:], e.Outcome)

	if k >= 0 && o >= 0 {
		s.decisions[k][o].Inc()
	} else {
		m.decisions.WithLabelValues(s.name, label(kinds[:], k), label(outcomes[:], o), s.lane).Inc()
	}
	if e.Fallback {
		s.fallback.Inc()
	}
	if e.RequestedCost > 0 {
		m.costSeries(s, k).Observe(float64(e.RequestedCost))
	}
	if e.Charged > 0 {
		m.chargedSeries(s, k).Add(float64(e.Charged))
	}
	if e.HasActualCost && e.ActualCost >= 0 {
		s.actual.Observe(float64(e.ActualCost))
	}
	if e.Refunded > 0 {
		s.refunded.Add(float64(e.Refunded))
	}
	if e.Excess > 0 {
		s.excess.Add(float64(e.Excess))
	}
	if net := e.Net(); net > 0 {
		s.net.Add(float64(net))
	}
	if e.Known && e.Limit > 0 {
		s.limitGauge().Set(float64(e.Limit))
		if e.Outcome == budget.ClassAdmitted && e.Remaining*5 < e.Limit {
			s.nearLimit.Inc()
		}
	}
	switch e.Breaker {
	case "":
	case guard.BreakerClosed:
		m.breaker.WithLabelValues().Set(0)
	default:
		m.breaker.WithLabelValues().Set(1)
	}
	if e.StoreResult != "" {
		d := max(e.StoreDuration.Seconds(), 0)
		if r := indexOf(results[:], e.StoreResult); r >= 0 {
			m.storeBy[r].Observe(d)
		} else if e.StoreResult == guard.ResultSkipped {
			m.store.WithLabelValues(string(e.StoreResult)).Observe(d) // only while a breaker is open
		} else {
			m.store.WithLabelValues(Other).Observe(d)
		}
	}
}

// costSeries is s's cost histogram for kind index k (-1: Other, which is
// looked up every time: no Event of the Limiter has such a kind).
func (m *Metrics) costSeries(s *planSeries, k int) prometheus.Observer {
	if k >= 0 {
		return s.cost[k]
	}
	return m.cost.WithLabelValues(s.name, Other)
}

// chargedSeries is s's charged counter for kind index k, like costSeries.
func (m *Metrics) chargedSeries(s *planSeries, k int) prometheus.Counter {
	if k >= 0 {
		return s.charged[k]
	}
	return m.charged.WithLabelValues(s.name, Other)
}

// indexOf returns the index of v in values, or -1.
func indexOf[T ~string](values []T, v T) int {
	for i, x := range values {
		if x == v {
			return i
		}
	}
	return -1
}

// label is the label value of index i of values: Other for -1.
func label[T ~string](values []T, i int) string {
	if i < 0 {
		return Other
	}
	return string(values[i])
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

func (m *Metrics) collectors() [12]prometheus.Collector {
	return [...]prometheus.Collector{m.decisions, m.fallback, m.cost, m.actual, m.store, m.charged, m.refunded, m.excess, m.net, m.nearLimit, m.limit, m.breaker}
}
