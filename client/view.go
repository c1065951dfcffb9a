package client

import (
	"maps"
	"slices"
	"time"
)

// View is what a Transport knows of the server's budget, for logs and
// dashboards.
type View struct {
	// Policies are the budgets the server reported, the plan's bucket
	// (the one the Transport paces on) first.
	Policies []Policy
	// Prices are the last price, in points, the server gave each
	// operation: keyed by operation name (an anonymous operation by its
	// document's SHA-256, "sha256:…"; a REST request by method and path).
	Prices map[string]int64
	// Rate is the points per second the Transport paces at while the
	// bucket is low (below half its limit, or twice a request's price).
	Rate float64
	// Hold is when the last refusal's Retry-After runs out, if it applies
	// to every request (not only to the refused one's price).
	Hold time.Time
}

// Policy is one budget as the server last reported it.
type Policy struct {
	// Name is the policy's name in RateLimit-Policy ("" when the server
	// sent none).
	Name string
	// Limit is the most the budget holds, in points (RateLimit-Policy's
	// q, X-RateLimit-Limit, throttleStatus.maximumAvailable).
	Limit int64
	// Window is how long an empty budget takes to fill
	// (RateLimit-Policy's w); 0 when not reported.
	Window time.Duration
	// Remaining is the points left after the last answered request; -1
	// when not reported.
	Remaining int64
	// Reset is when the budget is full again (X-RateLimit-Reset, or
	// RateLimit's t); zero when not reported.
	Reset time.Time
	// Updated is when the answer reporting it was received.
	Updated time.Time
}

// View returns a copy of what t knows of the budget.
func (t *Transport) View() View {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := View{Prices: make(map[string]int64, len(t.prices)), Hold: t.pace.hold}
	if t.pace.known {
		v.Policies = append(v.Policies, t.pace.plan)
		v.Rate = t.pace.share
	}
	for _, name := range slices.Sorted(maps.Keys(t.pace.others)) {
		v.Policies = append(v.Policies, t.pace.others[name])
	}
	for _, e := range t.prices {
		v.Prices[e.name] = e.price
	}
	return v
}
