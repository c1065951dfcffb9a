package admin

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/middleware"
)

// MaxRefusalKeys bounds the (code, plan) pairs Stats counts by name; a
// pair past it is counted as code and plan "(other)". Codes and plans are
// bounded sets of the configuration, so the bound only guards against a
// mistake. Each is kept as a copy cut to 256 bytes: at most 256 pairs of
// 2 × 256 bytes and their map slot, under 200 KB.
const MaxRefusalKeys = 256

// Stats counts the Limiter's decisions since it was made, for GET
// /admin/stats and the dashboard at /admin/: decisions by outcome,
// refusals by code and plan, requested and actual points, and the store's
// breaker as the latest decision left it. Feed it from the Limiter's
// observer (Stats.Add); it is safe for concurrent use and its memory is
// bounded (MaxRefusalKeys). The counters only grow: a reader computes
// rates from two readings.
type Stats struct {
	mu        sync.Mutex
	since     time.Time
	outcomes  map[budget.Class]int64
	refusals  map[refusalKey]int64
	requested int64
	actual    int64
	actuals   int64 // decisions with an actual cost
	fallbacks int64
	breaker   string
	changes   int64
	load      func() (middleware.Load, bool)
}

type refusalKey struct{ code, plan string }

// NewStats returns empty counters starting at since. load, when not nil,
// reads the load shedder (middleware.Limiter's Load): the requests in
// flight in all and per lane.
func NewStats(since time.Time, load func() (middleware.Load, bool)) *Stats {
	return &Stats{since: since, outcomes: map[budget.Class]int64{}, refusals: map[refusalKey]int64{}, load: load}
}

// Add counts one decision.
func (s *Stats) Add(e *middleware.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outcomes[e.Outcome]++
	if e.Outcome != budget.ClassAdmitted {
		k := refusalKey{e.Code, e.Plan}
		if k.code == "" {
			k.code = string(e.Outcome)
		}
		k.code, k.plan = kept.Cut(k.code, kept.MaxName), kept.Cut(k.plan, kept.MaxName)
		if _, ok := s.refusals[k]; !ok {
			if len(s.refusals) >= MaxRefusalKeys {
				k = refusalKey{"(other)", "(other)"}
			} else {
				k = refusalKey{strings.Clone(k.code), strings.Clone(k.plan)} // a new key keeps copies
			}
		}
		s.refusals[k]++
	}
	s.requested += e.RequestedCost
	if e.HasActualCost {
		s.actual += e.ActualCost
		s.actuals++
	}
	if e.Fallback {
		s.fallbacks++
	}
	if e.Breaker != "" {
		s.breaker = string(e.Breaker)
	}
	if e.BreakerChanged {
		s.changes++
	}
}

// Refusal is one (code, plan) pair's count in a StatsReport.
type Refusal struct {
	Code  string `json:"code"`
	Plan  string `json:"plan"`
	Count int64  `json:"count"`
}

// StatsReport is the answer of GET /admin/stats.
type StatsReport struct {
	Since time.Time `json:"since"`
	Now   time.Time `json:"now"`
	// Decisions counts the decisions by outcome ("admitted",
	// "rate_limited", "cost_exceeded", "unavailable", "shed",
	// "shadow_rejected").
	Decisions map[string]int64 `json:"decisions"`
	// Refusals counts every decision but an admission by its code and plan.
	Refusals []Refusal `json:"refusals"`
	// RequestedPoints sums the prices of every decision; ActualPoints the
	// actual costs of the ActualRuns decisions that have one.
	RequestedPoints int64 `json:"requested_points"`
	ActualPoints    int64 `json:"actual_points"`
	ActualRuns      int64 `json:"actual_runs"`
	// Fallbacks counts decisions made by the fail-open local bucket.
	Fallbacks int64 `json:"fallbacks"`
	// Breaker is the store's circuit breaker after the latest decision
	// ("closed", "open", "half_open"; "" without a breaker or before the
	// first decision), BreakerChanges how often a decision moved it.
	Breaker        string `json:"breaker"`
	BreakerChanges int64  `json:"breaker_changes"`
	// InFlight is the requests admitted by the load shedder and not yet
	// answered, in all and per lane; null without a load shedder.
	InFlight *InFlight `json:"in_flight"`
}

// InFlight is the load shedder's count of a StatsReport.
type InFlight struct {
	Now  int `json:"now"`
	Peak int `json:"peak"`
	// Capacity is overload.max_in_flight, or the adaptive limit now.
	Capacity int `json:"capacity"`
	// Lanes are the lanes in the configuration's order (one named ""
	// without lanes).
	Lanes []LaneInFlight `json:"lanes"`
}

// LaneInFlight is one lane's requests in flight, and the process's count
// of requests in flight at which the lane's new requests are shed.
type LaneInFlight struct {
	Lane     string `json:"lane"`
	Priority string `json:"priority"`
	Now      int    `json:"now"`
	ShedAt   int    `json:"shed_at"`
}

// Report reads the counters at now, the refusals sorted by code then plan.
func (s *Stats) Report(now time.Time) StatsReport {
	s.mu.Lock()
	r := StatsReport{
		Since: s.since, Now: now, Decisions: make(map[string]int64, len(s.outcomes)), Refusals: make([]Refusal, 0, len(s.refusals)),
		RequestedPoints: s.requested, ActualPoints: s.actual, ActualRuns: s.actuals, Fallbacks: s.fallbacks,
		Breaker: s.breaker, BreakerChanges: s.changes,
	}
	for c, n := range s.outcomes {
		r.Decisions[string(c)] = n
	}
	for k, n := range s.refusals {
		r.Refusals = append(r.Refusals, Refusal{Code: k.code, Plan: k.plan, Count: n})
	}
	s.mu.Unlock()
	slices.SortFunc(r.Refusals, func(a, b Refusal) int {
		return cmp.Or(cmp.Compare(a.Code, b.Code), cmp.Compare(a.Plan, b.Plan))
	})
	if s.load != nil {
		if ld, ok := s.load(); ok {
			r.InFlight = &InFlight{Now: ld.InFlight, Peak: ld.Peak, Capacity: ld.Capacity, Lanes: make([]LaneInFlight, len(ld.Lanes))}
			for i, ln := range ld.Lanes {
				r.InFlight.Lanes[i] = LaneInFlight{Lane: ln.Lane, Priority: ln.Priority.String(), Now: ln.InFlight, ShedAt: ln.ShedAt}
			}
		}
	}
	return r
}
