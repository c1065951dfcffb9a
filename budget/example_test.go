package budget_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/stack"
)

// An engine decides with no transport: a key, a plan, a cost in; an
// Outcome out, whose Answer is what an HTTP or gRPC adapter would say.
func ExampleEngine() {
	pol, err := budget.Compile(budget.Config{
		Plans: map[string]budget.Plan{"free": {Burst: 10, Rate: 10, Per: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	// An in-memory store the stack owns, with room for an overflow bucket
	// per budget of a plan (Policy.OverflowBudgets).
	st, err := stack.New(stack.Config{Clock: clock, OverflowKeys: pol.OverflowBudgets()})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	eng, err := budget.NewEngine(st, pol, budget.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	free, _ := eng.Policy().Plan("free")
	for _, cost := range []int64{6, 6} {
		o := eng.Charge(context.Background(), budget.Request{Key: "user:42", Rule: free, Cost: cost})
		a := o.Verdict.Answer()
		fmt.Printf("cost %d: charged %d, %d left, code %q, status %d, retry after %ds\n",
			cost, o.Charged, o.Decision.Remaining, a.Code, a.Status, o.RetryAfter)
	}
	// Output:
	// cost 6: charged 6, 4 left, code "", status 0, retry after 0s
	// cost 6: charged 0, 4 left, code "RATE_LIMITED", status 429, retry after 12s
}

// A route limit is a budget of the route's own beside the plan's bucket,
// decided with it, all or nothing: here a sliding log of 3 logins in any
// 15 minutes per client address. The fourth attempt is refused by the
// route, and its bucket keeps the points.
func ExampleConfig_routeLimits() {
	pol, err := budget.Compile(budget.Config{
		Plans: map[string]budget.Plan{"anon": {Burst: 100, Rate: 100, Per: time.Hour}},
		RouteLimits: map[string]budget.FieldLimit{
			"POST /login": {Limit: 3, Per: 15 * time.Minute, Algorithm: budget.SlidingLog, By: budget.ByIP},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	st, err := stack.New(stack.Config{Clock: clock, OverflowKeys: pol.OverflowBudgets()})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	eng, err := budget.NewEngine(st, pol, budget.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	anon, _ := eng.Policy().Plan("anon")
	login := eng.Policy().Route("POST /login")
	for range 4 {
		o := eng.Charge(context.Background(), budget.Request{Key: "ip:192.0.2.1", Addr: "ip:192.0.2.1", Rule: anon, Cost: 1, Route: login})
		a := o.Verdict.Answer()
		fmt.Printf("%d points left, %q, retry after %ds\n", o.Decision.Remaining, a.RESTCode, o.RetryAfter)
	}
	// Output:
	// 99 points left, "", retry after 0s
	// 98 points left, "", retry after 0s
	// 97 points left, "", retry after 0s
	// 97 points left, "route_rate_limited", retry after 900s
}
