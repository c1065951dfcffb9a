package prommetrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/prommetrics"
	"github.com/costguard/costguard/overload"
)

func TestLoadCollector(t *testing.T) {
	ld := middleware.Load{InFlight: 3, Peak: 9, Capacity: 64, Lanes: []middleware.LaneLoad{
		{Lane: "checkout", Priority: overload.Critical, InFlight: 1, ShedAt: 64},
		{Lane: "anonymous", Priority: overload.Sheddable, InFlight: 2, ShedAt: 32},
	}}
	c := prommetrics.Load(func() (middleware.Load, bool) { return ld, true })
	want := `
# HELP costguard_lane_requests_in_flight Requests of a lane admitted by the load shedder and not yet answered.
# TYPE costguard_lane_requests_in_flight gauge
costguard_lane_requests_in_flight{lane="anonymous"} 2
costguard_lane_requests_in_flight{lane="checkout"} 1
# HELP costguard_lane_shed_threshold Requests in flight in the process at or above which a lane's new requests are shed.
# TYPE costguard_lane_shed_threshold gauge
costguard_lane_shed_threshold{lane="anonymous"} 32
costguard_lane_shed_threshold{lane="checkout"} 64
# HELP costguard_requests_in_flight Requests admitted by the load shedder (overload) and not yet answered.
# TYPE costguard_requests_in_flight gauge
costguard_requests_in_flight 3
# HELP costguard_requests_in_flight_capacity The load shedder's capacity: overload.max_in_flight, or the adaptive limit now.
# TYPE costguard_requests_in_flight_capacity gauge
costguard_requests_in_flight_capacity 64
# HELP costguard_requests_in_flight_peak The most requests admitted by the load shedder at once since the limiter was made.
# TYPE costguard_requests_in_flight_peak gauge
costguard_requests_in_flight_peak 9
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	none := prommetrics.Load(func() (middleware.Load, bool) { return middleware.Load{}, false })
	if n := testutil.CollectAndCount(none); n != 0 {
		t.Errorf("%d series without a load shedder, want none", n)
	}
}
