package breaker_test

import (
	"fmt"
	"time"

	"github.com/costguard/costguard/limiter/breaker"
)

// A breaker in front of a store: three failures in a row open it, it keeps
// calls off the store for its cool-down, then lets one probe through, and
// a good probe closes it. The times are the caller's; nothing sleeps.
func Example() {
	b, err := breaker.New(breaker.Config{Failures: 3, CoolDown: time.Second})
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

	for i := 1; i <= 3; i++ { // the store fails three times in a row
		t := b.Allow(t0)
		c := b.Done(t0, t, breaker.Failure)
		fmt.Printf("failure %d: allowed %v, now %v, changed %v\n", i, t.Allowed, b.State(), c.Changed())
	}

	t := b.Allow(t0.Add(999 * time.Millisecond))
	fmt.Printf("during the cool-down: allowed %v\n", t.Allowed)

	probe := b.Allow(t0.Add(time.Second))
	fmt.Printf("after the cool-down: allowed %v (%v to %v)\n", probe.Allowed, probe.Change.From, probe.Change.To)
	other := b.Allow(t0.Add(time.Second))
	fmt.Printf("while the probe is in flight: allowed %v\n", other.Allowed)

	c := b.Done(t0.Add(time.Second+time.Millisecond), probe, breaker.Success)
	fmt.Printf("good probe: %v to %v\n", c.From, c.To)
	t = b.Allow(t0.Add(2 * time.Second))
	b.Done(t0.Add(2*time.Second), t, breaker.Success) // every allowed Ticket goes back to Done
	fmt.Printf("then: allowed %v\n", t.Allowed)

	// Output:
	// failure 1: allowed true, now closed, changed false
	// failure 2: allowed true, now closed, changed false
	// failure 3: allowed true, now open, changed true
	// during the cool-down: allowed false
	// after the cool-down: allowed true (open to half_open)
	// while the probe is in flight: allowed false
	// good probe: half_open to closed
	// then: allowed true
}
