package prommetrics_test

import (
	"bufio"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/prommetrics"
	"github.com/costguard/costguard/overload"
)

// Wiring: the metrics go to a registry of the server's own, the Limiter
// reports to them, and /metrics serves the registry. This example listens
// on a port, so it is compiled but not run.
func Example() {
	reg := prometheus.NewRegistry()
	m, err := prommetrics.New(
		prommetrics.WithRegisterer(reg),
		prommetrics.WithPlans("anon", "pro"), // series exist at zero from the start
	)
	if err != nil {
		log.Fatal(err)
	}
	lim, err := middleware.New(middleware.Dependencies{
		Observer: m,
		Overload: &overload.Config{MaxInFlight: 256},
	}, middleware.Policy{
		Plans: map[string]budget.Plan{
			"anon": {Burst: 100, Rate: 1000, Per: time.Hour},
			"pro":  {Burst: 2000, Rate: 50000, Per: time.Hour},
		},
		AnonymousPlan: "anon",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	// The load shedder's requests in flight, in all and per lane.
	reg.MustRegister(prommetrics.Load(lim.Load))

	api := http.NewServeMux()
	api.HandleFunc("GET /api/hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })

	mux := http.NewServeMux()
	mux.Handle("/api/", lim.REST(api))
	// Serve it apart from the public listener in production.
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// One decision as the Limiter reports it, and what a scrape then shows of
// costguard_decisions_total (the other series of plan "pro" are at 0).
func ExampleMetrics_ObserveDecision() {
	reg := prometheus.NewRegistry()
	m, err := prommetrics.New(prommetrics.WithRegisterer(reg))
	if err != nil {
		log.Fatal(err)
	}
	m.ObserveDecision(&middleware.Event{
		Plan:          "pro",
		Kind:          middleware.KindGraphQL,
		Outcome:       budget.ClassAdmitted,
		RequestedCost: 120,
		Charged:       120,
		ActualCost:    45,
		HasActualCost: true,
		Refunded:      75,
		StoreDuration: 300 * time.Microsecond,
		StoreResult:   guard.ResultOK,
	})

	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for sc := bufio.NewScanner(w.Body); sc.Scan(); {
		line := sc.Text()
		if strings.HasPrefix(line, "costguard_") && !strings.HasSuffix(line, " 0") && !strings.Contains(line, "_bucket") {
			fmt.Println(line)
		}
	}
	// Output:
	// costguard_charged_points_total{kind="graphql",plan="pro"} 120
	// costguard_decisions_total{kind="graphql",lane="",outcome="admitted",plan="pro"} 1
	// costguard_net_points_total{plan="pro"} 45
	// costguard_operation_actual_cost_points_sum{plan="pro"} 45
	// costguard_operation_actual_cost_points_count{plan="pro"} 1
	// costguard_operation_cost_points_sum{kind="graphql",plan="pro"} 120
	// costguard_operation_cost_points_count{kind="graphql",plan="pro"} 1
	// costguard_refunded_points_total{plan="pro"} 75
	// costguard_store_duration_seconds_sum{result="ok"} 0.0003
	// costguard_store_duration_seconds_count{result="ok"} 1
}
