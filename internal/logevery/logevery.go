// Package logevery lets one warning of a kind through a minute, counting
// the ones it holds back.
package logevery

import (
	"sync/atomic"
	"time"
)

// Every is how often a Gate lets a caller through.
const Every = time.Minute

// Gate lets one caller a minute through, counting the others. The zero
// Gate is ready; it is safe for concurrent use.
type Gate struct {
	last       atomic.Int64 // nanoseconds since the owner started, +1 so 0 means never
	suppressed atomic.Int64
}

// Due reports whether the caller at elapsed (since the Gate's owner
// started) should log, and how many callers were held back since the last
// one that did.
func (g *Gate) Due(elapsed time.Duration) (suppressed int64, ok bool) {
	now := int64(elapsed) + 1
	last := g.last.Load()
	if (last != 0 && now-last < int64(Every)) || !g.last.CompareAndSwap(last, now) {
		g.suppressed.Add(1) // not due, or another caller logs it
		return 0, false
	}
	return g.suppressed.Swap(0), true
}
