package middleware_test

import (
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/overload"
)

// BenchmarkRESTOverload is BenchmarkREST under a load shedder with lanes:
// what admission, the lane's count of requests in flight and the release
// add to a request.
func BenchmarkRESTOverload(b *testing.B) {
	lim, err := middleware.New(middleware.Dependencies{
		Overload: &overload.Config{MaxInFlight: 64},
		Logger:   discardLogger(),
	}, middleware.Policy{
		Plans:         map[string]budget.Plan{"big": {Burst: 1e9, Rate: 1e9, Per: time.Second}},
		AnonymousPlan: "big",
		REST:          middleware.RESTOptions{Routes: map[string]int64{"GET /api/users/{login}": 1}},
		Lanes: []middleware.Lane{
			{Name: "checkout", Priority: overload.Critical, Match: middleware.LaneMatch{REST: []string{"POST /api/orders"}}},
			{Name: "anonymous", Priority: overload.Sheddable, Match: middleware.LaneMatch{Anonymous: true}},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	benchREST(b, lim, "")
	if ld, _ := lim.Load(); ld.InFlight != 0 || ld.Lanes[1].InFlight != 0 {
		b.Fatalf("slots left held: %+v", ld)
	}
}
