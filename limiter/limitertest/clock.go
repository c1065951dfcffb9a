// Package limitertest is the behaviour suite every limiter.Store must pass,
// and the tools it is built from.
//
// A store's test calls Run with a constructor that builds the store on the
// clock the suite hands it:
//
//	func TestSuite(t *testing.T) {
//		limitertest.Run(t, func(t *testing.T, clock limiter.Clock) limiter.Store {
//			s, err := memorystore.New(memorystore.Config{Clock: clock})
//			...
//			return s
//		})
//	}
//
// The suite talks to the store only through limiter.Store and takes time
// only from that clock (a FakeClock it moves), so a store that passes the
// clock's reading to Redis is held to the same expectations as the memory
// store: same inputs, same decisions. Each case uses its own key, unique
// per process, so the suite may share one Redis with other tests.
//
// Hammer and MaxAdmitted check exactness under concurrency: admitted cost
// never exceeds what the limit allows over the elapsed time.
package limitertest

import (
	"sync"
	"time"

	"github.com/costguard/costguard/limiter"
)

// FakeClock is a limiter.Clock that moves only when told to. It is safe for
// concurrent use. Its readings carry no monotonic component, so a store
// subtracting them sees exactly the differences the test made.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

var _ limiter.Clock = (*FakeClock)(nil)

// NewFakeClock returns a clock reading start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start.Round(0)}
}

// Now returns the current fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t, forwards or backwards.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t.Round(0)
}

// Advance moves the clock by d (which may be negative) and returns the new
// reading.
func (c *FakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}
