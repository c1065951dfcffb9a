package overload_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/overload"
)

// A process with room for 10 requests: sheddable requests are refused from
// 5 in flight, normal from 8, high from 9; critical ones may use all 10.
func Example() {
	shed, err := overload.New(overload.Config{MaxInFlight: 10})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, p := range overload.Priorities() {
		fmt.Printf("%s refused from %d in flight\n", p, shed.Threshold(p))
	}

	var running []overload.Permit
	for range 6 { // six normal requests arrive and keep running
		permit, _ := shed.Admit(ctx, overload.Normal, 0)
		running = append(running, permit)
	}
	_, err = shed.Admit(ctx, overload.Sheddable, 0)
	fmt.Println("sheddable at 6:", err, errors.Is(err, overload.ErrOverloaded))
	permit, err := shed.Admit(ctx, overload.High, 0)
	fmt.Println("high at 6:", err, shed.InFlight())

	permit.Done(40 * time.Millisecond) // exactly once, with the latency
	permit.Done(40 * time.Millisecond) // a second release does nothing
	for _, p := range running {
		p.Done(40 * time.Millisecond)
	}
	fmt.Println("in flight at the end:", shed.InFlight())
	// Output:
	// sheddable refused from 5 in flight
	// normal refused from 8 in flight
	// high refused from 9 in flight
	// critical refused from 10 in flight
	// sheddable at 6: overload: overloaded true
	// high at 6: <nil> 7
	// in flight at the end: 0
}

// Resolvers ask the request's context whether a feature is switched off.
func ExampleDegraded() {
	clock := limitertest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	shed, err := overload.New(overload.Config{
		MaxInFlight: 10,
		Degradation: []overload.Feature{{Name: "recommendations", At: 0.7}, {Name: "search", At: 0.85}},
		Clock:       clock, // production leaves it unset
	})
	if err != nil {
		panic(err)
	}
	recommend := func(ctx context.Context) string {
		if overload.Degraded(ctx, "recommendations") {
			return "no recommendations"
		}
		return "recommendations"
	}

	var running []overload.Permit
	for range 7 { // load 0.7
		p, _ := shed.Admit(context.Background(), overload.Critical, 0)
		running = append(running, p)
	}
	ctx := overload.WithDegradation(context.Background(), shed)
	fmt.Println(recommend(ctx), shed.DegradedFeatures())

	for _, p := range running[2:] { // load 0.2: below 0.7 − 0.1, but held
		p.Ignore()
	}
	fmt.Println(recommend(ctx))

	clock.Advance(overload.DefaultHold)
	running[1].Ignore() // the next release or admission looks again
	fmt.Println(recommend(ctx))
	running[0].Ignore()
	// Output:
	// no recommendations [recommendations]
	// no recommendations
	// recommendations
}
