package prommetrics_test

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/prommetrics"
)

// newMetrics returns Metrics registered on a registry of their own.
func newMetrics(t testing.TB, opts ...prommetrics.Option) (*prommetrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := prommetrics.New(append([]prommetrics.Option{prommetrics.WithRegisterer(reg)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// script is a run of decisions touching every metric, label value and
// bucket edge: each event's comment says where it must land.
var script = []middleware.Event{
	// decisions{pro,graphql,admitted}; cost{pro,graphql} 30 (le=50);
	// charged{pro,graphql} 30; actual{pro} 12 (le=20); refunded{pro} 18;
	// store{ok} 200µs (le=0.00025); net{pro} 12; limit{pro} 1000 (300
	// left: not near the limit).
	{Plan: "pro", Kind: middleware.KindGraphQL, Outcome: budget.ClassAdmitted,
		RequestedCost: 30, Charged: 30, ActualCost: 12, HasActualCost: true, Refunded: 18,
		StoreDuration: 200 * time.Microsecond, StoreResult: guard.ResultOK,
		Known: true, Remaining: 300, Limit: 1000},
	// decisions{pro,graphql,rate_limited}; cost{pro,graphql} 700 (le=1000);
	// store{ok} 150µs (le=0.00025).
	{Plan: "pro", Kind: middleware.KindGraphQL, Outcome: budget.ClassRateLimited,
		RequestedCost: 700, StoreDuration: 150 * time.Microsecond, StoreResult: guard.ResultOK},
	// An unparsable document: decisions{pro,graphql,cost_exceeded}; no
	// cost (not priced); charged{pro,graphql} 1; store{ok} 80µs (le=0.0001).
	{Plan: "pro", Kind: middleware.KindGraphQL, Outcome: budget.ClassCostExceeded,
		Charged: 1, StoreDuration: 80 * time.Microsecond, StoreResult: guard.ResultOK},
	// decisions{pro,rest,admitted}; fallback{pro}; cost{pro,rest} 5 (le=5);
	// charged{pro,rest} 5; store{error} 3ms (le=0.005).
	{Plan: "pro", Kind: middleware.KindREST, Outcome: budget.ClassAdmitted, Fallback: true,
		RequestedCost: 5, Charged: 5, StoreDuration: 3 * time.Millisecond, StoreResult: guard.ResultError},
	// decisions{free,rest,unavailable}; cost{free,rest} 1 (le=1);
	// store{timeout} 100ms (le=0.1).
	{Plan: "free", Kind: middleware.KindREST, Outcome: budget.ClassUnavailable,
		RequestedCost: 1, StoreDuration: 100 * time.Millisecond, StoreResult: guard.ResultTimeout},
	// decisions{free,graphql,shadow_rejected}; cost{free,graphql} 100000
	// (le=100000); store{ok} 1ms (le=0.001).
	{Plan: "free", Kind: middleware.KindGraphQL, Outcome: budget.ClassShadowRejected,
		Refused: budget.ClassRateLimited, RequestedCost: 100000,
		StoreDuration: time.Millisecond, StoreResult: guard.ResultOK},
	// A free route answered without a store call: decisions{free,rest,admitted};
	// limit{free} 100, and 10 left: near_limit{free}.
	{Plan: "free", Kind: middleware.KindREST, Outcome: budget.ClassAdmitted,
		Known: true, Remaining: 10, Limit: 100},
	// decisions{free,graphql,admitted}; cost{free,graphql} 2 (le=2);
	// charged{free,graphql} 2; actual{free} 0 (le=1); refunded{free} 2;
	// store{ok} 300ms (+Inf).
	{Plan: "free", Kind: middleware.KindGraphQL, Outcome: budget.ClassAdmitted,
		RequestedCost: 2, Charged: 2, HasActualCost: true, Refunded: 2,
		StoreDuration: 300 * time.Millisecond, StoreResult: guard.ResultOK},
	// A response that held more than its price: decisions{pro,graphql,admitted};
	// cost{pro,graphql} 250000 (+Inf); charged{pro,graphql} 250000;
	// actual{pro} 250007 (+Inf); excess{pro} 7.
	{Plan: "pro", Kind: middleware.KindGraphQL, Outcome: budget.ClassAdmitted,
		RequestedCost: 250000, Charged: 250000, ActualCost: 250007, HasActualCost: true, Excess: 7},
}

// The expected exposition of script, one metric at a time.
var want = map[string]string{
	"costguard_net_points_total": `
# HELP costguard_net_points_total Points that stayed debited from budgets once each request was settled: charged minus refunded plus excess.
# TYPE costguard_net_points_total counter
costguard_net_points_total{plan="free"} 0
costguard_net_points_total{plan="pro"} 250025
`,
	"costguard_near_limit_decisions_total": `
# HELP costguard_near_limit_decisions_total Admitted decisions that left the principal's bucket under 20% of its limit.
# TYPE costguard_near_limit_decisions_total counter
costguard_near_limit_decisions_total{plan="free"} 1
costguard_near_limit_decisions_total{plan="pro"} 0
`,
	"costguard_plan_limit_points": `
# HELP costguard_plan_limit_points The bucket limit (burst) of the plan, in points, as of its last decision that knew it.
# TYPE costguard_plan_limit_points gauge
costguard_plan_limit_points{plan="free"} 100
costguard_plan_limit_points{plan="pro"} 1000
`,
	"costguard_decisions_total": `
# HELP costguard_decisions_total Rate-limit decisions, by plan, adapter (kind), what became of the request (outcome) and priority lane (empty without lanes).
# TYPE costguard_decisions_total counter
costguard_decisions_total{kind="graphql",lane="",outcome="admitted",plan="free"} 1
costguard_decisions_total{kind="graphql",lane="",outcome="admitted",plan="pro"} 2
costguard_decisions_total{kind="graphql",lane="",outcome="cost_exceeded",plan="free"} 0
costguard_decisions_total{kind="graphql",lane="",outcome="cost_exceeded",plan="pro"} 1
costguard_decisions_total{kind="graphql",lane="",outcome="rate_limited",plan="free"} 0
costguard_decisions_total{kind="graphql",lane="",outcome="rate_limited",plan="pro"} 1
costguard_decisions_total{kind="graphql",lane="",outcome="shadow_rejected",plan="free"} 1
costguard_decisions_total{kind="graphql",lane="",outcome="shed",plan="free"} 0
costguard_decisions_total{kind="graphql",lane="",outcome="shadow_rejected",plan="pro"} 0
costguard_decisions_total{kind="graphql",lane="",outcome="shed",plan="pro"} 0
costguard_decisions_total{kind="graphql",lane="",outcome="unavailable",plan="free"} 0
costguard_decisions_total{kind="graphql",lane="",outcome="unavailable",plan="pro"} 0
costguard_decisions_total{kind="rest",lane="",outcome="admitted",plan="free"} 1
costguard_decisions_total{kind="rest",lane="",outcome="admitted",plan="pro"} 1
costguard_decisions_total{kind="rest",lane="",outcome="cost_exceeded",plan="free"} 0
costguard_decisions_total{kind="rest",lane="",outcome="cost_exceeded",plan="pro"} 0
costguard_decisions_total{kind="rest",lane="",outcome="rate_limited",plan="free"} 0
costguard_decisions_total{kind="rest",lane="",outcome="rate_limited",plan="pro"} 0
costguard_decisions_total{kind="rest",lane="",outcome="shadow_rejected",plan="free"} 0
costguard_decisions_total{kind="rest",lane="",outcome="shed",plan="free"} 0
costguard_decisions_total{kind="rest",lane="",outcome="shadow_rejected",plan="pro"} 0
costguard_decisions_total{kind="rest",lane="",outcome="shed",plan="pro"} 0
costguard_decisions_total{kind="rest",lane="",outcome="unavailable",plan="free"} 1
costguard_decisions_total{kind="rest",lane="",outcome="unavailable",plan="pro"} 0
costguard_decisions_total{kind="subscription_event",lane="",outcome="admitted",plan="free"} 0
costguard_decisions_total{kind="subscription_event",lane="",outcome="admitted",plan="pro"} 0
costguard_decisions_total{kind="subscription_event",lane="",outcome="cost_exceeded",plan="free"} 0
costguard_decisions_total{kind="subscription_event",lane="",outcome="cost_exceeded",plan="pro"} 0
costguard_decisions_total{kind="subscription_event",lane="",outcome="rate_limited",plan="free"} 0
costguard_decisions_total{kind="subscription_event",lane="",outcome="rate_limited",plan="pro"} 0
costguard_decisions_total{kind="subscription_event",lane="",outcome="shadow_rejected",plan="free"} 0
costguard_decisions_total{kind="subscription_event",lane="",outcome="shadow_rejected",plan="pro"} 0
costguard_decisions_total{kind="subscription_event",lane="",outcome="shed",plan="free"} 0
costguard_decisions_total{kind="subscription_event",lane="",outcome="shed",plan="pro"} 0
costguard_decisions_total{kind="subscription_event",lane="",outcome="unavailable",plan="free"} 0
costguard_decisions_total{kind="subscription_event",lane="",outcome="unavailable",plan="pro"} 0
`,
	"costguard_fallback_decisions_total": `
# HELP costguard_fallback_decisions_total Decisions made by the fail-open local bucket because the store failed.
# TYPE costguard_fallback_decisions_total counter
costguard_fallback_decisions_total{plan="free"} 0
costguard_fallback_decisions_total{plan="pro"} 1
`,
	"costguard_operation_cost_points": `
# HELP costguard_operation_cost_points Price of each request that was priced above 0, in points.
# TYPE costguard_operation_cost_points histogram
` + histogram("costguard_operation_cost_points", `kind="graphql",plan="free"`, costLE, []int{0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2}, 2, 100002) +
		histogram("costguard_operation_cost_points", `kind="graphql",plan="pro"`, costLE, []int{0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2}, 3, 250730) +
		histogram("costguard_operation_cost_points", `kind="rest",plan="free"`, costLE, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, 1) +
		histogram("costguard_operation_cost_points", `kind="rest",plan="pro"`, costLE, []int{0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, 5) +
		histogram("costguard_operation_cost_points", `kind="subscription_event",plan="free"`, costLE, make([]int, 16), 0, 0) +
		histogram("costguard_operation_cost_points", `kind="subscription_event",plan="pro"`, costLE, make([]int, 16), 0, 0),
	"costguard_operation_actual_cost_points": `
# HELP costguard_operation_actual_cost_points Cost of each executed GraphQL operation recomputed from its response, in points.
# TYPE costguard_operation_actual_cost_points histogram
` + histogram("costguard_operation_actual_cost_points", `plan="free"`, costLE, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, 0) +
		histogram("costguard_operation_actual_cost_points", `plan="pro"`, costLE, []int{0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 2, 250019),
	"costguard_store_duration_seconds": `
# HELP costguard_store_duration_seconds Time spent in the store calls of one decision, by how the last call ended.
# TYPE costguard_store_duration_seconds histogram
` + histogram("costguard_store_duration_seconds", `result="error"`, storeLE, []int{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}, 1, 0.003) +
		histogram("costguard_store_duration_seconds", `result="ok"`, storeLE, []int{0, 1, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4}, 5, 0.30143) +
		histogram("costguard_store_duration_seconds", `result="timeout"`, storeLE, []int{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, 1, 0.1),
	"costguard_charged_points_total": `
# HELP costguard_charged_points_total Points debited from budgets.
# TYPE costguard_charged_points_total counter
costguard_charged_points_total{kind="graphql",plan="free"} 2
costguard_charged_points_total{kind="graphql",plan="pro"} 250031
costguard_charged_points_total{kind="rest",plan="free"} 0
costguard_charged_points_total{kind="rest",plan="pro"} 5
costguard_charged_points_total{kind="subscription_event",plan="free"} 0
costguard_charged_points_total{kind="subscription_event",plan="pro"} 0
`,
	"costguard_refunded_points_total": `
# HELP costguard_refunded_points_total Points given back to budgets once an operation's actual cost was known.
# TYPE costguard_refunded_points_total counter
costguard_refunded_points_total{plan="free"} 2
costguard_refunded_points_total{plan="pro"} 18
`,
	"costguard_excess_points_total": `
# HELP costguard_excess_points_total Points debited after execution beyond the price, for responses that held more than it (a list returned more items than the size it was priced at).
# TYPE costguard_excess_points_total counter
costguard_excess_points_total{plan="free"} 0
costguard_excess_points_total{plan="pro"} 7
`,
}

// The bucket bounds as the exposition writes them: the package doc's.
var (
	costLE  = []string{"1", "2", "5", "10", "20", "50", "100", "200", "500", "1000", "2000", "5000", "10000", "20000", "50000", "100000"}
	storeLE = []string{"5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25"}
)

// histogram writes one histogram series in the text exposition: the
// cumulative counts of the buckets les, then +Inf (count), sum and count.
func histogram(name, labels string, les []string, cumulative []int, count int, sum float64) string {
	if len(cumulative) != len(les) {
		panic(fmt.Sprintf("%s{%s}: %d counts for %d buckets", name, labels, len(cumulative), len(les)))
	}
	var b strings.Builder
	for i, le := range les {
		fmt.Fprintf(&b, "%s_bucket{%s,le=%q} %d\n", name, labels, le, cumulative[i])
	}
	fmt.Fprintf(&b, "%s_bucket{%s,le=\"+Inf\"} %d\n", name, labels, count)
	fmt.Fprintf(&b, "%s_sum{%s} %v\n", name, labels, sum)
	fmt.Fprintf(&b, "%s_count{%s} %d\n", name, labels, count)
	return b.String()
}

func observe(m *prommetrics.Metrics, events []middleware.Event) {
	for i := range events {
		m.ObserveDecision(&events[i])
	}
}

func TestScript(t *testing.T) {
	for name, opts := range map[string][]prommetrics.Option{
		"plans as seen": nil,
		"WithPlans":     {prommetrics.WithPlans("free", "pro")},
	} {
		t.Run(name, func(t *testing.T) {
			m, reg := newMetrics(t, opts...)
			observe(m, script)
			for name, text := range want {
				if err := testutil.GatherAndCompare(reg, strings.NewReader(text), name); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
			n, err := testutil.GatherAndCount(reg)
			if err != nil {
				t.Fatal(err)
			}
			// Per plan: 18 decisions (3 kinds, 6 outcomes), 3 cost, 3
			// charged, fallback, actual, refunded, excess, net, near
			// limit, limit; and the 3 store results.
			if want := 2*31 + 3; n != want {
				t.Errorf("%d series, want %d", n, want)
			}
		})
	}
}

// The metric names and help texts pass promlint, the Prometheus naming
// conventions.
func TestLint(t *testing.T) {
	m, reg := newMetrics(t)
	observe(m, script)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// WithPlans creates every series of its plans at zero before any event.
func TestWithPlansStartsAtZero(t *testing.T) {
	_, reg := newMetrics(t, prommetrics.WithPlans("free", "pro", "free"))
	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP costguard_fallback_decisions_total Decisions made by the fail-open local bucket because the store failed.
# TYPE costguard_fallback_decisions_total counter
costguard_fallback_decisions_total{plan="free"} 0
costguard_fallback_decisions_total{plan="pro"} 0
`), "costguard_fallback_decisions_total")
	if err != nil {
		t.Error(err)
	}
	for name, series := range map[string]int{
		"costguard_decisions_total":              2 * 3 * 6,
		"costguard_operation_cost_points":        2 * 3,
		"costguard_operation_actual_cost_points": 2,
		"costguard_store_duration_seconds":       3,
		"costguard_charged_points_total":         2 * 3,
		"costguard_refunded_points_total":        2,
	} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != series {
			t.Errorf("%s: %d series (%v), want %d", name, n, err, series)
		}
	}
}

// Without WithPlans a plan's series all appear with its first event.
func TestPlanSeriesAppearWithFirstEvent(t *testing.T) {
	m, reg := newMetrics(t)
	if n, _ := testutil.GatherAndCount(reg, "costguard_decisions_total"); n != 0 {
		t.Fatalf("%d decision series before any event", n)
	}
	m.ObserveDecision(&middleware.Event{Plan: "team", Kind: middleware.KindREST, Outcome: budget.ClassAdmitted})
	if n, _ := testutil.GatherAndCount(reg, "costguard_decisions_total"); n != 18 {
		t.Errorf("%d decision series, want 18", n)
	}
	if v := value(t, reg, "costguard_decisions_total", "plan", "team", "kind", "rest", "outcome", "admitted"); v != 1 {
		t.Errorf("decisions{team,rest,admitted} = %v, want 1", v)
	}
}

// Label values outside the expected sets are counted as "other", never
// passed through; so is a plan WithPlans does not name.
func TestUnexpectedLabelValues(t *testing.T) {
	m, reg := newMetrics(t, prommetrics.WithPlans("free"))
	observe(m, []middleware.Event{
		{Plan: "free", Kind: "grpc", Outcome: budget.ClassAdmitted, RequestedCost: 3, Charged: 3},
		{Plan: "free", Kind: middleware.KindREST, Outcome: "queued"},
		{Plan: "free", Kind: "", Outcome: "", StoreResult: "canceled", StoreDuration: time.Millisecond},
		{Plan: "enterprise", Kind: middleware.KindREST, Outcome: budget.ClassAdmitted, Fallback: true},
		{Plan: "", Kind: middleware.KindREST, Outcome: budget.ClassAdmitted},
		{Plan: "other", Kind: middleware.KindREST, Outcome: budget.ClassAdmitted},
	})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"costguard_decisions_total", []string{"plan", "free", "kind", "other", "outcome", "admitted"}, 1},
		{"costguard_decisions_total", []string{"plan", "free", "kind", "rest", "outcome", "other"}, 1},
		{"costguard_decisions_total", []string{"plan", "free", "kind", "other", "outcome", "other"}, 1},
		{"costguard_decisions_total", []string{"plan", "other", "kind", "rest", "outcome", "admitted"}, 3},
		{"costguard_fallback_decisions_total", []string{"plan", "other"}, 1},
		{"costguard_operation_cost_points", []string{"plan", "free", "kind", "other"}, 1}, // a count
		{"costguard_charged_points_total", []string{"plan", "free", "kind", "other"}, 3},
		{"costguard_store_duration_seconds", []string{"result", "other"}, 1}, // a count
	} {
		if v := value(t, reg, c.name, c.labels...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	// free's 18 expected series, free's three with "other", and the 18
	// expected series of plan "other".
	if n, _ := testutil.GatherAndCount(reg, "costguard_decisions_total"); n != 39 {
		t.Errorf("%d decision series, want 39", n)
	}
}

// However many plans clients are given, WithPlans keeps the series to the
// plans it names plus "other".
func TestWithPlansBoundsCardinality(t *testing.T) {
	m, reg := newMetrics(t, prommetrics.WithPlans("free"))
	for i := range 1000 {
		m.ObserveDecision(&middleware.Event{Plan: fmt.Sprint("plan", i), Kind: middleware.KindGraphQL,
			Outcome: budget.ClassAdmitted, RequestedCost: 1})
	}
	if n, _ := testutil.GatherAndCount(reg, "costguard_decisions_total"); n != 36 {
		t.Errorf("%d decision series, want 36", n)
	}
	if v := value(t, reg, "costguard_decisions_total", "plan", "other", "kind", "graphql", "outcome", "admitted"); v != 1000 {
		t.Errorf("decisions{other,graphql,admitted} = %v, want 1000", v)
	}
}

// Values no Event of the Limiter carries change nothing they must not:
// counters never go down, a negative duration is observed as 0.
func TestNegativeValues(t *testing.T) {
	m, reg := newMetrics(t, prommetrics.WithPlans("free"))
	m.ObserveDecision(nil)
	m.ObserveDecision(&middleware.Event{Plan: "free", Kind: middleware.KindGraphQL, Outcome: budget.ClassAdmitted,
		RequestedCost: -5, Charged: -5, Refunded: -5, Excess: -5, ActualCost: -5, HasActualCost: true,
		StoreDuration: -time.Second, StoreResult: guard.ResultOK})
	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP costguard_refunded_points_total Points given back to budgets once an operation's actual cost was known.
# TYPE costguard_refunded_points_total counter
costguard_refunded_points_total{plan="free"} 0
# HELP costguard_excess_points_total Points debited after execution beyond the price, for responses that held more than it (a list returned more items than the size it was priced at).
# TYPE costguard_excess_points_total counter
costguard_excess_points_total{plan="free"} 0
# HELP costguard_store_duration_seconds Time spent in the store calls of one decision, by how the last call ended.
# TYPE costguard_store_duration_seconds histogram
`+histogram("costguard_store_duration_seconds", `result="error"`, storeLE, make([]int, 12), 0, 0)+
		histogram("costguard_store_duration_seconds", `result="ok"`, storeLE, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, 0)+
		histogram("costguard_store_duration_seconds", `result="timeout"`, storeLE, make([]int, 12), 0, 0),
	), "costguard_refunded_points_total", "costguard_excess_points_total", "costguard_store_duration_seconds")
	if err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"costguard_operation_cost_points", []string{"plan", "free", "kind", "graphql"}},
		{"costguard_operation_actual_cost_points", []string{"plan", "free"}},
		{"costguard_charged_points_total", []string{"plan", "free", "kind", "graphql"}},
	} {
		if v := value(t, reg, c.name, c.labels...); v != 0 {
			t.Errorf("%s%v = %v, want 0", c.name, c.labels, v)
		}
	}
}

// The documented default: New registers on prometheus.DefaultRegisterer,
// and a second Metrics there is refused with AlreadyRegisteredError.
func TestDefaultRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	old := prometheus.DefaultRegisterer
	prometheus.DefaultRegisterer = reg
	t.Cleanup(func() { prometheus.DefaultRegisterer = old })

	m, err := prommetrics.New()
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveDecision(&middleware.Event{Plan: "free", Kind: middleware.KindREST, Outcome: budget.ClassAdmitted})
	if v := value(t, reg, "costguard_decisions_total", "plan", "free", "kind", "rest", "outcome", "admitted"); v != 1 {
		t.Errorf("decisions on the default registerer = %v, want 1", v)
	}

	_, err = prommetrics.New()
	var dup prometheus.AlreadyRegisteredError
	if !errors.As(err, &dup) {
		t.Errorf("second New on one registerer: %v, want an AlreadyRegisteredError", err)
	}
}

// Two Limiters of one process share a registry through registerers
// wrapped with a label of their own.
func TestWrappedRegisterers(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, name := range []string{"public", "internal"} {
		m, err := prommetrics.New(prommetrics.WithRegisterer(
			prometheus.WrapRegistererWith(prometheus.Labels{"limiter": name}, reg)))
		if err != nil {
			t.Fatal(err)
		}
		m.ObserveDecision(&middleware.Event{Plan: "free", Kind: middleware.KindREST, Outcome: budget.ClassAdmitted})
	}
	if v := value(t, reg, "costguard_decisions_total", "limiter", "internal", "plan", "free", "kind", "rest", "outcome", "admitted"); v != 1 {
		t.Errorf("decisions{limiter=internal} = %v, want 1", v)
	}
}

func TestInvalidOptions(t *testing.T) {
	for name, opt := range map[string]prommetrics.Option{
		"nil registerer":   prommetrics.WithRegisterer(nil),
		"no plans":         prommetrics.WithPlans(),
		"empty plan":       prommetrics.WithPlans("free", ""),
		"plan named other": prommetrics.WithPlans("other"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := prommetrics.New(prommetrics.WithRegisterer(prometheus.NewRegistry()), opt)
			if !errors.Is(err, prommetrics.ErrInvalidOption) {
				t.Errorf("New: %v, want ErrInvalidOption", err)
			}
		})
	}
}

// Concurrent events, some of plans not yet seen, add up exactly (and
// -race watches the map of plans being replaced under the readers).
func TestConcurrent(t *testing.T) {
	m, reg := newMetrics(t)
	const goroutines, events, plans = 8, 500, 20
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range events {
				m.ObserveDecision(&middleware.Event{Plan: fmt.Sprint("p", (g+i)%plans), Kind: middleware.KindGraphQL,
					Outcome: budget.ClassAdmitted, RequestedCost: 2, Charged: 2,
					StoreResult: guard.ResultOK, StoreDuration: time.Millisecond})
			}
		})
	}
	wg.Wait()
	if n, _ := testutil.GatherAndCount(reg, "costguard_decisions_total"); n != plans*18 {
		t.Errorf("%d decision series, want %d", n, plans*18)
	}
	var total float64
	for p := range plans {
		total += value(t, reg, "costguard_charged_points_total", "plan", fmt.Sprint("p", p), "kind", "graphql")
	}
	if want := float64(goroutines * events * 2); total != want {
		t.Errorf("charged in all = %v, want %v", total, want)
	}
	if v := value(t, reg, "costguard_store_duration_seconds", "result", "ok"); v != goroutines*events {
		t.Errorf("store observations = %v, want %d", v, goroutines*events)
	}
}

// Once a plan has been seen, ObserveDecision allocates nothing.
func TestObserveDecisionAllocs(t *testing.T) {
	m, _ := newMetrics(t)
	e := &script[0]
	m.ObserveDecision(e)
	if n := testing.AllocsPerRun(1000, func() { m.ObserveDecision(e) }); n != 0 {
		t.Errorf("ObserveDecision: %v allocations, want 0", n)
	}
}

// value reads one series of name from g: a counter's value, a histogram's
// count. labels are name, value pairs that must all match.
func value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				if l.GetValue() != "" { // an empty value is no label, as in PromQL
					have[l.GetName()] = l.GetValue()
				}
			}
			for i := 0; i < len(labels); i += 2 {
				if v, ok := have[labels[i]]; !ok || v != labels[i+1] {
					continue series
				}
			}
			if len(have) != len(labels)/2 {
				continue
			}
			if h := s.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return s.GetCounter().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// The package doc's claim: no package of the library's core depends on
// client_golang, only this one.
func TestCoreDoesNotImportPrometheus(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps",
		"github.com/costguard/costguard/complexity/...",
		"github.com/costguard/costguard/limiter/...",
		"github.com/costguard/costguard/middleware",
		"github.com/costguard/costguard/identity").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.Contains(pkg, "prometheus") {
			t.Errorf("the core depends on %s", pkg)
		}
	}
}

// find reads the series of name whose labels include the pairs given: a
// gauge's value or a histogram's count; ok is false when there is none.
func find(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (v float64, ok bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			if h := s.GetHistogram(); h != nil {
				return float64(h.GetSampleCount()), true
			}
			return s.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// costguard_store_breaker_open follows Event.Breaker: absent until an
// Event carries a breaker state, 1 while open or half-open, 0 once
// closed, unchanged by an Event without one. A decision the open breaker
// kept off the store (StoreSkipped) is timed under result="skipped",
// which exists only once such a decision was made.
func TestBreakerGaugeAndSkipped(t *testing.T) {
	m, reg := newMetrics(t, prommetrics.WithPlans("free"))
	const absent = -1
	steps := []struct {
		name    string
		breaker guard.BreakerState
		result  guard.Result
		gauge   float64 // absent: no series
		skipped float64 // absent: no series
	}{
		{"no breaker", "", guard.ResultOK, absent, absent},
		{"closed", guard.BreakerClosed, guard.ResultOK, 0, absent},
		{"failure opens", guard.BreakerOpen, guard.ResultError, 1, absent},
		{"open: skipped", guard.BreakerOpen, guard.ResultSkipped, 1, 1},
		{"no store call", "", "", 1, 1},
		{"failed probe", guard.BreakerOpen, guard.ResultTimeout, 1, 1},
		{"half-open: skipped behind the probe", guard.BreakerHalfOpen, guard.ResultSkipped, 1, 2},
		{"good probe closes", guard.BreakerClosed, guard.ResultOK, 0, 2},
		{"closed again", guard.BreakerClosed, guard.ResultOK, 0, 2},
	}
	for _, s := range steps {
		m.ObserveDecision(&middleware.Event{Plan: "free", Kind: middleware.KindREST, Outcome: budget.ClassAdmitted,
			StoreResult: s.result, StoreDuration: time.Microsecond, Breaker: s.breaker})
		g, ok := find(t, reg, "costguard_store_breaker_open")
		if !ok {
			g = absent
		}
		if g != s.gauge {
			t.Errorf("%s: costguard_store_breaker_open %v, want %v (-1: absent)", s.name, g, s.gauge)
		}
		n, ok := find(t, reg, "costguard_store_duration_seconds", "result", string(guard.ResultSkipped))
		if !ok {
			n = absent
		}
		if n != s.skipped {
			t.Errorf(`%s: costguard_store_duration_seconds{result="skipped"} count %v, want %v (-1: absent)`, s.name, n, s.skipped)
		}
	}
}
