// Package opcosts keeps what each GraphQL operation costs: per operation
// name, how many ran, their requested and actual points with histograms,
// and how many were refused. Operation names are the client's to choose,
// so the names kept are bounded: the Capacity operations with the most
// requested points (a Space-Saving summary, internal/spacesaving, as in
// package spenders), and the rest under Other. An operation's figures are
// exact from the moment it was last given a place; what it did before, and
// what every operation that lost its place did, is counted under Other. Like spenders it is a
// pure core: time is passed in, nothing runs in the background.
package opcosts

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/internal/spacesaving"
)

// Other names the operations without a place of their own, and anonymous
// operations (no name) are counted as Anonymous.
const (
	Other     = "(other)"
	Anonymous = "(anonymous)"
)

// DefaultCapacity is the operations a zero Config keeps by name.
const DefaultCapacity = 100

// maxCapacity bounds Config.Capacity.
const maxCapacity = 10_000

// Buckets are the histograms' upper bounds in points (the last one is
// +Inf): 1, 2, 5 in each decade up to 100,000, as the cost histograms of
// package prommetrics.
var Buckets = []int64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}

// ErrInvalidConfig wraps New's errors.
var ErrInvalidConfig = errors.New("opcosts: invalid config")

// Config sizes a Tracker.
type Config struct {
	// Capacity is the operations kept by name. Default 100.
	Capacity int
}

// Tracker keeps the costs. It is safe for concurrent use.
type Tracker struct {
	mu    sync.Mutex
	ops   *spacesaving.Summary[Operation] // ranked by requested points
	other Operation
}

// Operation is what one operation name cost since Since.
type Operation struct {
	Name  string    `json:"operation"`
	Since time.Time `json:"since"`
	// Runs counts the priced requests of the operation that ran; Refused
	// those refused (by the budget or a cap).
	Runs    int64 `json:"runs"`
	Refused int64 `json:"refused"`
	// RequestedPoints and ActualPoints add up the runs' requested and
	// actual costs (actual for the runs whose response was priced).
	RequestedPoints int64 `json:"requested_points"`
	ActualPoints    int64 `json:"actual_points"`
	// RequestedHistogram and ActualHistogram count the runs per bucket of
	// Buckets, the last element past the last bound.
	RequestedHistogram []int64 `json:"requested_histogram"`
	ActualHistogram    []int64 `json:"actual_histogram"`
}

// New returns a Tracker.
func New(cfg Config) (*Tracker, error) {
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.Capacity < 1 || cfg.Capacity > maxCapacity {
		return nil, fmt.Errorf("%w: capacity %d is not between 1 and %d", ErrInvalidConfig, cfg.Capacity, maxCapacity)
	}
	return &Tracker{ops: spacesaving.New[Operation](cfg.Capacity), other: newOperation(Other, time.Time{})}, nil
}

func newOperation(name string, since time.Time) Operation {
	return Operation{Name: name, Since: since,
		RequestedHistogram: make([]int64, len(Buckets)+1), ActualHistogram: make([]int64, len(Buckets)+1)}
}

// Decision is one operation's decision, as a Tracker counts it.
type Decision struct {
	Operation string
	Requested int64
	// Actual is the cost from the response, when HasActual.
	Actual    int64
	HasActual bool
	// Refused: the operation did not run.
	Refused bool
}

// MaxNameBytes is the longest operation name a Tracker keeps: a longer
// one is cut to its first MaxNameBytes bytes, as the name a
// middleware.Event carries is.
const MaxNameBytes = kept.MaxOperation

// MaxBytes bounds the memory of a Tracker of cfg (its zero Capacity taken
// as the default) in bytes, whatever names it is given: per operation
// kept and Other, its counter, its index slot, its two histograms and a
// name of MaxNameBytes.
func MaxBytes(cfg Config) int64 {
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultCapacity
	}
	histogram := int64(8*(len(Buckets)+1) + 16) // the backing array and its size class's slack
	op := int64(unsafe.Sizeof(spacesaving.Counter[Operation]{})) + 8 /* heap slot */ + 64 /* index slot */ + 2*histogram + MaxNameBytes +
		64 // the counter's size class's slack
	return int64(cfg.Capacity+1) * op // and Other
}

// Add counts d at now. Decisions with no requested cost (never priced)
// are not counted. The name kept is a copy, cut to MaxNameBytes.
func (t *Tracker) Add(now time.Time, d Decision) {
	if d.Requested <= 0 {
		return
	}
	name := kept.Cut(d.Operation, MaxNameBytes) // the summary keeps a copy
	if name == "" {
		name = Anonymous
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// A name without a place takes the place of the operation with the
	// fewest requested points, whose figures go to Other.
	c, isNew := t.ops.Add(name, d.Requested, t.evict)
	if isNew {
		c.Value = newOperation(c.Key, now)
	}
	op := &c.Value
	op.count(d)
}

// evict counts what an operation losing its place did under Other.
func (t *Tracker) evict(c *spacesaving.Counter[Operation]) { t.other.merge(&c.Value) }

func (o *Operation) count(d Decision) {
	if d.Refused {
		o.Refused++
		return
	}
	o.Runs++
	o.RequestedPoints += d.Requested
	o.RequestedHistogram[bucket(d.Requested)]++
	if d.HasActual {
		o.ActualPoints += d.Actual
		o.ActualHistogram[bucket(d.Actual)]++
	}
}

func (o *Operation) merge(from *Operation) {
	o.Runs += from.Runs
	o.Refused += from.Refused
	o.RequestedPoints += from.RequestedPoints
	o.ActualPoints += from.ActualPoints
	for i := range o.RequestedHistogram {
		o.RequestedHistogram[i] += from.RequestedHistogram[i]
		o.ActualHistogram[i] += from.ActualHistogram[i]
	}
}

func bucket(v int64) int {
	i, _ := slices.BinarySearch(Buckets, v)
	return i
}

// Report is the operations kept by name, most requested points first,
// then Other.
type Report struct {
	Operations []Operation `json:"operations"`
	Other      Operation   `json:"other"`
}

// Report returns copies of what the Tracker holds, at most limit
// operations (≥ 1) by name.
func (t *Tracker) Report(limit int) Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	ops := make([]Operation, 0, len(t.ops.Counters()))
	for _, c := range t.ops.Counters() {
		ops = append(ops, c.Value.clone())
	}
	slices.SortFunc(ops, func(a, b Operation) int {
		if c := cmp.Compare(b.RequestedPoints, a.RequestedPoints); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	if len(ops) > max(limit, 1) {
		ops = ops[:max(limit, 1)]
	}
	return Report{Operations: ops, Other: t.other.clone()}
}

func (o *Operation) clone() Operation {
	c := *o
	c.RequestedHistogram = slices.Clone(o.RequestedHistogram)
	c.ActualHistogram = slices.Clone(o.ActualHistogram)
	return c
}
