package prommetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/costguard/costguard/middleware"
)

// Load exports the load shedder's reading (middleware.Limiter's Load) at
// each scrape; nothing without Dependencies.Overload:
//
//	costguard_requests_in_flight                   gauge
//	    requests admitted by the load shedder and not yet answered
//	costguard_requests_in_flight_peak              gauge
//	    the most at once since the Limiter was made (a scrape would miss
//	    a burst between two samples of the gauge above)
//	costguard_requests_in_flight_capacity          gauge
//	    overload.max_in_flight, or the adaptive limit now
//	costguard_lane_requests_in_flight{lane}        gauge
//	    each lane's requests in flight (lane "" without lanes)
//	costguard_lane_shed_threshold{lane}            gauge
//	    the process's requests in flight at which a lane's new requests
//	    are shed (the capacity for a critical lane)
//
// The lane label takes the configuration's lane names, a bounded set.
// Register it next to the Metrics: reg.MustRegister(prommetrics.Load(lim.Load)).
func Load(read func() (middleware.Load, bool)) prometheus.Collector {
	return loadCollector{read: read}
}

type loadCollector struct {
	read func() (middleware.Load, bool)
}

var (
	loadInFlight = prometheus.NewDesc("costguard_requests_in_flight",
		"Requests admitted by the load shedder (overload) and not yet answered.", nil, nil)
	loadPeak = prometheus.NewDesc("costguard_requests_in_flight_peak",
		"The most requests admitted by the load shedder at once since the limiter was made.", nil, nil)
	loadCapacity = prometheus.NewDesc("costguard_requests_in_flight_capacity",
		"The load shedder's capacity: overload.max_in_flight, or the adaptive limit now.", nil, nil)
	laneInFlight = prometheus.NewDesc("costguard_lane_requests_in_flight",
		"Requests of a lane admitted by the load shedder and not yet answered.", []string{labelLane}, nil)
	laneShedAt = prometheus.NewDesc("costguard_lane_shed_threshold",
		"Requests in flight in the process at or above which a lane's new requests are shed.", []string{labelLane}, nil)
)

func (loadCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range [...]*prometheus.Desc{loadInFlight, loadPeak, loadCapacity, laneInFlight, laneShedAt} {
		ch <- d
	}
}

func (c loadCollector) Collect(ch chan<- prometheus.Metric) {
	ld, ok := c.read()
	if !ok {
		return
	}
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	gauge(loadInFlight, ld.InFlight)
	gauge(loadPeak, ld.Peak)
	gauge(loadCapacity, ld.Capacity)
	for _, ln := range ld.Lanes {
		gauge(laneInFlight, ln.InFlight, ln.Lane)
		gauge(laneShedAt, ln.ShedAt, ln.Lane)
	}
}
