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
