// Package spenders finds who spends a budget: per plan, the principals with
// the most net points (charged − refunded + excess) over sliding windows of
// time, in memory bounded whatever the number of principals.
//
// Each window is a ring of slots (the 1-minute window: six of 10 seconds;
// the 15-minute window: fifteen of a minute), and each slot a Space-Saving
// summary of at most Capacity principals. A query merges the slots of its
// window. For a window whose slots saw N points in all, every principal
// reported has
//
//	Points − Error ≤ its true net points ≤ Points,  Error ≤ Bound ≤ N / Capacity
//
// and every principal that spent more than Bound is reported when Limit
// lets the list be long enough. A window covers the slot in progress and
// the ones before it: between Length − Slot and Length of history.
//
// The Tracker is a pure core: time is passed in, nothing runs in the
// background. Feed it one Add per settled request (the net points of its
// decision, once any refund is known).
package spenders

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/internal/spacesaving"
)

// Window is a sliding window kept as a ring of Length / Slot slots.
type Window struct {
	Length time.Duration
	Slot   time.Duration
}

// Name is the window's name in queries: its Length as Go writes it, less
// any zero minutes or seconds ("1m", "15m", "1h").
func (w Window) Name() string {
	s := w.Length.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// DefaultWindows are the windows a zero Config keeps: 1 minute in slots of
// 10 seconds, 15 minutes in slots of 1 minute.
var DefaultWindows = []Window{{time.Minute, 10 * time.Second}, {15 * time.Minute, time.Minute}}

// Defaults of a zero Config.
const (
	DefaultCapacity = 256
	DefaultMaxPlans = 64
	// maxSlots bounds Length / Slot of one window.
	maxSlots = 1024
	// maxCapacity bounds the counters of one slot.
	maxCapacity = 1 << 16
)

// Other is the plan under which a Tracker counts the principals of plans
// past its MaxPlans.
const Other = "other"

// ErrInvalidConfig wraps New's errors; ErrUnknownWindow, Top's.
var (
	ErrInvalidConfig = errors.New("spenders: invalid config")
	ErrUnknownWindow = errors.New("spenders: unknown window")
)

// Config sizes a Tracker. Memory is bounded by MaxPlans × Σ slots ×
// Capacity counters (about 150 bytes each plus the principal's key, at
// most 512 bytes): MaxBytes states it in bytes.
type Config struct {
	// Capacity is the principals one slot of one plan keeps. Default 256.
	Capacity int
	// Windows are the windows kept. Default DefaultWindows.
	Windows []Window
	// MaxPlans bounds the plans kept apart; later ones count as Other.
	// Default 64.
	MaxPlans int
}

// Tracker keeps the top spenders. It is safe for concurrent use.
type Tracker struct {
	cfg   Config
	mu    sync.RWMutex
	plans map[string]*planState
}

type planState struct {
	mu    sync.Mutex
	rings []ring // one per cfg.Windows
}

type ring struct {
	slot  int64 // the slot's length in nanoseconds
	slots []slot
}

type slot struct {
	index int64 // ⌊t / slot length⌋ of what it holds; -1 when empty
	sum   *spacesaving.Summary[struct{}]
}

// withDefaults is cfg with each zero field its default.
func (cfg Config) withDefaults() Config {
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.MaxPlans == 0 {
		cfg.MaxPlans = DefaultMaxPlans
	}
	if cfg.Windows == nil {
		cfg.Windows = DefaultWindows
	}
	return cfg
}

// New returns a Tracker for cfg.
func New(cfg Config) (*Tracker, error) {
	cfg = cfg.withDefaults()
	if cfg.Capacity < 1 || cfg.Capacity > maxCapacity {
		return nil, fmt.Errorf("%w: capacity %d is not between 1 and %d", ErrInvalidConfig, cfg.Capacity, maxCapacity)
	}
	if cfg.MaxPlans < 1 {
		return nil, fmt.Errorf("%w: max plans %d is below 1", ErrInvalidConfig, cfg.MaxPlans)
	}
	if len(cfg.Windows) == 0 {
		return nil, fmt.Errorf("%w: no windows", ErrInvalidConfig)
	}
	seen := map[string]bool{}
	for _, w := range cfg.Windows {
		if w.Slot <= 0 || w.Length < w.Slot || w.Length%w.Slot != 0 || w.Length/w.Slot > maxSlots {
			return nil, fmt.Errorf("%w: window %v in slots of %v: the slot must be positive and divide the length into at most %d",
				ErrInvalidConfig, w.Length, w.Slot, maxSlots)
		}
		if seen[w.Name()] {
			return nil, fmt.Errorf("%w: window %s twice", ErrInvalidConfig, w.Name())
		}
		seen[w.Name()] = true
	}
	cfg.Windows = slices.Clone(cfg.Windows)
	return &Tracker{cfg: cfg, plans: map[string]*planState{}}, nil
}

// Windows names the windows Top answers for.
func (t *Tracker) Windows() []string {
	names := make([]string, len(t.cfg.Windows))
	for i, w := range t.cfg.Windows {
		names[i] = w.Name()
	}
	return names
}

// Add counts points (> 0; others are ignored) spent by principal on plan
// at now. What it keeps of plan and principal is a copy, bounded in
// bytes: a plan's name is cut to 256 bytes, and a principal's key past
// 512 becomes its prefix and its hash, still its own.
func (t *Tracker) Add(now time.Time, plan, principal string, points int64) {
	if points <= 0 {
		return
	}
	p := t.plan(plan)
	principal = kept.Bound(principal, kept.MaxKey) // the summaries keep a copy
	at := now.UnixNano()
	p.mu.Lock()
	for i := range p.rings {
		p.rings[i].current(at, t.cfg.Capacity).Add(principal, points, nil)
	}
	p.mu.Unlock()
}

// MaxBytes bounds the memory of a Tracker of cfg (its zero fields taken as
// their defaults) in bytes, whatever it is given: per plan kept, its
// name and state; per slot of every window, Capacity counters, each with
// its heap and index slots and a principal's key of the longest.
func MaxBytes(cfg Config) int64 {
	cfg = cfg.withDefaults()
	var slots int64
	for _, w := range cfg.Windows {
		slots += int64(w.Length / w.Slot)
	}
	counter := int64(unsafe.Sizeof(spacesaving.Counter[struct{}]{})) + 16 /* its size class's slack */ + 8 /* heap slot */ + 64 /* index slot */ + kept.MaxKey
	slot := int64(unsafe.Sizeof(slot{})+unsafe.Sizeof(spacesaving.Summary[struct{}]{})) + int64(cfg.Capacity)*counter
	plan := int64(unsafe.Sizeof(planState{})) + int64(len(cfg.Windows))*int64(unsafe.Sizeof(ring{})) + 64 + kept.MaxName
	return int64(cfg.MaxPlans+1) * (plan + slots*slot) // and Other
}

// plan returns plan's state, made on first use (Other's past MaxPlans).
func (t *Tracker) plan(name string) *planState {
	name = kept.Cut(name, kept.MaxName)
	t.mu.RLock()
	p := t.plans[name]
	t.mu.RUnlock()
	if p != nil {
		return p
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p = t.plans[name]; p != nil {
		return p
	}
	if len(t.plans) >= t.cfg.MaxPlans && name != Other {
		if p = t.plans[Other]; p != nil {
			return p
		}
		name = Other
	}
	name = strings.Clone(name)
	p = &planState{rings: make([]ring, len(t.cfg.Windows))}
	for i, w := range t.cfg.Windows {
		r := ring{slot: int64(w.Slot), slots: make([]slot, w.Length/w.Slot)}
		for j := range r.slots {
			r.slots[j].index = -1
		}
		p.rings[i] = r
	}
	t.plans[name] = p
	return p
}

// current returns the summary of the slot holding at, emptied first when
// it held an older slot.
func (r *ring) current(at int64, capacity int) *spacesaving.Summary[struct{}] {
	idx := floorDiv(at, r.slot)
	s := &r.slots[mod(idx, int64(len(r.slots)))]
	if s.sum == nil {
		s.sum = spacesaving.New[struct{}](capacity)
	}
	if s.index != idx {
		s.sum.Reset()
		s.index = idx
	}
	return s.sum
}

// Spender is one principal of a Report.
type Spender struct {
	Principal string `json:"principal"`
	// Points is an upper bound of the principal's net points in the window;
	// Points − Error a lower bound.
	Points int64 `json:"points"`
	Error  int64 `json:"error"`
}

// Report is the top of one plan over one window.
type Report struct {
	Plan   string `json:"plan"`
	Window string `json:"window"`
	// Total is the net points every principal of the plan spent in the
	// window, exactly.
	Total int64 `json:"total_points"`
	// Bound is the most any Points of the report, or any principal left
	// out of it, can be above the truth: a principal that spent more than
	// Bound is in the report unless Limit cut it short.
	Bound int64 `json:"error_bound"`
	// Cut is the most a principal left out of Spenders may have spent in
	// the window: Bound, or the last listed Points when Limit cut the list
	// short. Merge adds it for the reports a principal is missing from.
	Cut      int64     `json:"cut"`
	Spenders []Spender `json:"spenders"`
}

// Plans lists the plans that have spent, sorted.
func (t *Tracker) Plans() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	names := make([]string, 0, len(t.plans))
	for n := range t.plans {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Top returns plan's limit (≥ 1) biggest spenders over the named window at
// now, by Points, then by name.
func (t *Tracker) Top(now time.Time, plan, window string, limit int) (Report, error) {
	wi := slices.Index(t.Windows(), window)
	if wi < 0 {
		return Report{}, fmt.Errorf("%w: %q (known: %s)", ErrUnknownWindow, window, strings.Join(t.Windows(), ", "))
	}
	rep := Report{Plan: plan, Window: window, Spenders: []Spender{}}
	t.mu.RLock()
	p := t.plans[kept.Cut(plan, kept.MaxName)]
	t.mu.RUnlock()
	if p == nil || limit < 1 {
		return rep, nil
	}
	// Each live slot is a report of its own, its floor the most a
	// principal it holds no counter for can have spent in it: merging
	// them is Merge's job.
	at := now.UnixNano()
	p.mu.Lock()
	r := &p.rings[wi]
	cur := floorDiv(at, r.slot)
	var slots []Report
	for i := range r.slots {
		s := &r.slots[i]
		if s.sum == nil || s.index <= cur-int64(len(r.slots)) || s.index > cur {
			continue
		}
		counters := s.sum.Counters()
		sr := Report{Total: s.sum.Total(), Cut: s.sum.Floor(), Spenders: make([]Spender, len(counters))}
		for j, c := range counters {
			sr.Spenders[j] = Spender{Principal: c.Key, Points: c.Estimate, Error: c.Err}
		}
		slots = append(slots, sr)
	}
	p.mu.Unlock()
	merged := Merge(limit, slots...)
	merged.Plan, merged.Window = plan, window
	return merged, nil
}

// Merge combines the reports of one plan and window from several
// processes into one of at most limit (≥ 1) spenders. A principal's
// Points add up its Points where it is listed and the Cut of each report
// it is missing from, its Error likewise, so the truth stays within
// [Points − Error, Points]; Totals add up; Bound and Cut are the sum of
// the reports' Cuts, the most a principal listed nowhere may have spent.
func Merge(limit int, reports ...Report) Report {
	out := Report{Spenders: []Spender{}}
	if len(reports) == 0 {
		return out
	}
	out.Plan, out.Window = reports[0].Plan, reports[0].Window
	type acc struct{ points, err, cuts int64 }
	merged := map[string]*acc{}
	var cuts int64
	for _, r := range reports {
		out.Total = spacesaving.SaturatingAdd(out.Total, r.Total)
		cuts = spacesaving.SaturatingAdd(cuts, r.Cut)
		for _, sp := range r.Spenders {
			a := merged[sp.Principal]
			if a == nil {
				a = &acc{}
				merged[sp.Principal] = a
			}
			a.points = spacesaving.SaturatingAdd(a.points, sp.Points)
			a.err = spacesaving.SaturatingAdd(a.err, sp.Error)
			a.cuts = spacesaving.SaturatingAdd(a.cuts, r.Cut)
		}
	}
	out.Bound, out.Cut = cuts, cuts
	for p, a := range merged {
		absent := cuts - a.cuts // the Cuts of the reports p is missing from
		out.Spenders = append(out.Spenders, Spender{Principal: p, Points: spacesaving.SaturatingAdd(a.points, absent), Error: spacesaving.SaturatingAdd(a.err, absent)})
	}
	sortSpenders(out.Spenders)
	if limit = max(limit, 1); len(out.Spenders) > limit {
		out.Cut = max(out.Cut, out.Spenders[limit].Points)
		out.Spenders = out.Spenders[:limit]
	}
	return out
}

func sortSpenders(s []Spender) {
	slices.SortFunc(s, func(a, b Spender) int {
		if a.Points != b.Points {
			if a.Points > b.Points {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Principal, b.Principal)
	})
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
