package admin

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

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
// bounded (MaxRefusalKeys, HistoryBytes). The counters only grow: a
// reader computes rates from two readings.
//
// It also keeps the last 15 minutes of those counters, one sample per
// HistoryInterval of the decisions' times (HistorySamples of them, a
// fixed ring), for GET /admin/stats/history: a page opened after an
// incident draws it. A sample is written by the decision that falls in
// it; nothing runs in the background, and a decision without a Time is
// counted only in the totals.
type Stats struct {
	mu       sync.Mutex
	since    time.Time
	outcomes map[budget.Class]int64
	refusals map[refusalKey]int64
	totals   tally
	breaker  string
	load     func() (middleware.Load, bool)
	ring     [HistorySamples]sample
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
	s.addSample(e)
	s.totals.add(e)
	if e.Breaker != "" {
		s.breaker = string(e.Breaker)
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
		RequestedPoints: s.totals.requested, ActualPoints: s.totals.actual, ActualRuns: s.totals.actuals, Fallbacks: s.totals.fallbacks,
		Breaker: s.breaker, BreakerChanges: s.totals.changes,
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

// The history's shape: HistorySamples samples of HistoryInterval each,
// aligned on multiples of HistoryInterval since the Unix epoch, so the
// last 15 minutes.
const (
	HistoryInterval = 10 * time.Second
	HistorySamples  = 90
	// MaxHistoryOutcomes and MaxHistoryCodes bound the outcomes and the
	// refusal codes one sample counts by name; past them a sample counts
	// "(other)". The library has six outcomes and a few dozen codes, of
	// which a 10-second interval sees a handful.
	MaxHistoryOutcomes = 8
	MaxHistoryCodes    = 16
)

// HistoryBytes bounds the memory of a Stats' history in bytes, 609,120 on
// a 64-bit machine: the fixed ring of samples (HistorySamples × 624 bytes,
// 56,160 bytes, allocated with the Stats) and the names its samples count
// by, each sample holding its own copies of at most kept.MaxName bytes
// (a few dozen bytes each in practice).
const HistoryBytes = HistorySamples * (int64(unsafe.Sizeof(sample{})) + (MaxHistoryOutcomes+MaxHistoryCodes)*kept.MaxName)

// sample is the counters of the decisions of one interval.
type sample struct {
	interval int64 // the interval's number, its start ÷ HistoryInterval; 0: never written
	outcomes [MaxHistoryOutcomes]named
	codes    [MaxHistoryCodes]named
	tally
}

// tally is the points and counts of decisions that the totals and each
// sample keep alike.
type tally struct {
	requested int64
	actual    int64
	actuals   int64 // decisions with an actual cost
	fallbacks int64
	changes   int64 // breaker changes
}

func (t *tally) add(e *middleware.Event) {
	t.requested += e.RequestedCost
	if e.HasActualCost {
		t.actual += e.ActualCost
		t.actuals++
	}
	if e.Fallback {
		t.fallbacks++
	}
	if e.BreakerChanged {
		t.changes++
	}
}

// named is one name's count in a sample; an unused one has no name.
type named struct {
	name string
	n    int64
}

// count adds one to name's count among c, whose last element counts
// "(other)": the names that found no room before it. A name is kept as a
// copy cut to kept.MaxName bytes, never the caller's memory.
func count(c []named, name string) {
	name = kept.Cut(name, kept.MaxName)
	for i := range c[:len(c)-1] {
		switch c[i].name {
		case name:
			c[i].n++
			return
		case "":
			c[i] = named{strings.Clone(name), 1}
			return
		}
	}
	c[len(c)-1].name = "(other)"
	c[len(c)-1].n++
}

// intervalOf is t's interval number.
func intervalOf(t time.Time) int64 {
	n := t.UnixNano()
	i := n / int64(HistoryInterval)
	if n < 0 && n%int64(HistoryInterval) != 0 {
		i-- // floor
	}
	return i
}

// addSample counts e in its interval's sample, which it starts when the
// ring's slot holds an older interval. A decision older than the slot's
// interval (reported more than 15 minutes after a later one) is left out.
// s.mu is held.
func (s *Stats) addSample(e *middleware.Event) {
	if e.Time.IsZero() {
		return
	}
	i := intervalOf(e.Time)
	sm := &s.ring[((i%HistorySamples)+HistorySamples)%HistorySamples]
	switch {
	case sm.interval > i:
		return
	case sm.interval < i:
		*sm = sample{interval: i}
	}
	count(sm.outcomes[:], string(e.Outcome))
	if e.Outcome != budget.ClassAdmitted {
		code := e.Code
		if code == "" {
			code = string(e.Outcome)
		}
		count(sm.codes[:], code)
	}
	sm.tally.add(e)
}

// HistoryReport is the answer of GET /admin/stats/history.
type HistoryReport struct {
	Since time.Time `json:"since"`
	Now   time.Time `json:"now"`
	// IntervalSeconds is HistoryInterval in seconds.
	IntervalSeconds int64 `json:"interval_seconds"`
	// Samples are the intervals of the last 15 minutes since Since,
	// oldest first, every one of them (an interval without a decision has
	// zero counts), the last one still running.
	Samples []Sample `json:"samples"`
}

// Sample is the decisions of one interval: what StatsReport counts, for
// the decisions made from Start to End (the interval cut to Since and
// Now).
type Sample struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Decisions counts the decisions by outcome, Refusals every decision
	// but an admission by its code (or, without one, its outcome); each
	// names at most MaxHistoryOutcomes or MaxHistoryCodes, the rest
	// counted as "(other)". An outcome or code with no decision is left
	// out.
	Decisions       map[string]int64 `json:"decisions"`
	Refusals        map[string]int64 `json:"refusals"`
	RequestedPoints int64            `json:"requested_points"`
	ActualPoints    int64            `json:"actual_points"`
	ActualRuns      int64            `json:"actual_runs"`
	Fallbacks       int64            `json:"fallbacks"`
	BreakerChanges  int64            `json:"breaker_changes"`
}

// History reads the last 15 minutes of counters at now: a sample for each
// interval from the later of Since and now − 15 minutes to now.
func (s *Stats) History(now time.Time) HistoryReport {
	r := HistoryReport{Since: s.since, Now: now, IntervalSeconds: int64(HistoryInterval / time.Second), Samples: []Sample{}}
	if now.Before(s.since) {
		return r
	}
	last := intervalOf(now)
	first := max(intervalOf(s.since), last-HistorySamples+1)
	r.Samples = make([]Sample, 0, last-first+1)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := first; i <= last; i++ {
		start := time.Unix(0, i*int64(HistoryInterval)).UTC()
		smp := Sample{Start: start, End: start.Add(HistoryInterval), Decisions: map[string]int64{}, Refusals: map[string]int64{}}
		if smp.Start.Before(s.since) {
			smp.Start = s.since
		}
		if smp.End.After(now) {
			smp.End = now
		}
		if sm := &s.ring[((i%HistorySamples)+HistorySamples)%HistorySamples]; sm.interval == i {
			for _, c := range sm.outcomes {
				if c.name != "" {
					smp.Decisions[c.name] = c.n
				}
			}
			for _, c := range sm.codes {
				if c.name != "" {
					smp.Refusals[c.name] = c.n
				}
			}
			smp.RequestedPoints, smp.ActualPoints, smp.ActualRuns = sm.requested, sm.actual, sm.actuals
			smp.Fallbacks, smp.BreakerChanges = sm.fallbacks, sm.changes
		}
		r.Samples = append(r.Samples, smp)
	}
	return r
}
