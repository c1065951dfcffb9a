// Package timeline keeps each principal's recent decisions, so that an
// operator looking at one client sees what it asked for and what became of
// it: time, kind, operation, requested and actual cost, outcome.
//
// Memory is bounded per principal (PerPrincipal entries, the newest kept)
// and in total (MaxEntries entries across MaxPrincipals principals): past
// either, the principal whose latest decision is the oldest is dropped
// whole. What it keeps of the strings it is given is copied and bounded in
// bytes (the principal's key at 512, the operation at 64, the other names
// at 256), so an entry never keeps a request's memory alive, and MaxBytes
// bounds it all. Entries older than Window are never answered and are dropped as
// the principal's ring turns. Like package spenders it is a pure core:
// time is passed in, nothing runs in the background.
package timeline

import (
	"container/list"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/costguard/costguard/internal/kept"
)

// Entry is one decision of a principal. Its points are as it was
// admitted (Charged, the price debited before the operation ran) and as
// they stand once it was settled (Net): a GraphQL operation priced at
// 4,101 points whose response cost 14 is charged 4,101, refunded 4,087,
// and nets 14.
type Entry struct {
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"`
	Operation string    `json:"operation,omitempty"`
	Plan      string    `json:"plan"`
	// PrincipalPlan is, when an override's budget was in force (Plan
	// naming the override's), the plan the principal is on by its
	// identity (middleware.Event.PrincipalPlan); "" when Plan is it.
	PrincipalPlan string `json:"principal_plan,omitempty"`
	Requested     int64  `json:"requested"`
	// Actual is the cost recomputed from the response, when HasActual.
	Actual    int64 `json:"actual"`
	HasActual bool  `json:"has_actual"`
	// Charged is what was debited when the decision was made
	// (middleware.Event.Charged); Refunded what went back to the budget
	// after the response, Excess what was debited after it beyond the
	// price (a response larger than priced).
	Charged  int64 `json:"charged"`
	Refunded int64 `json:"refunded"`
	Excess   int64 `json:"excess"`
	// Net is what stays debited, Charged − Refunded + Excess: give it
	// middleware.Event.Net().
	Net     int64  `json:"net"`
	Outcome string `json:"outcome"`
	Code    string `json:"code,omitempty"`
}

// Defaults of a zero Config.
const (
	DefaultWindow        = 15 * time.Minute
	DefaultPerPrincipal  = 200
	DefaultMaxEntries    = 100_000
	DefaultMaxPrincipals = 10_000
)

// ErrInvalidConfig wraps New's errors.
var ErrInvalidConfig = errors.New("timeline: invalid config")

// Config bounds a Timeline.
type Config struct {
	Window        time.Duration
	PerPrincipal  int
	MaxEntries    int
	MaxPrincipals int
}

// MaxBytes bounds the memory of a Timeline of cfg (its zero fields
// taken as their defaults) in bytes, whatever it is given: every entry
// slot a ring may hold (a ring is never more than four times its entries
// and one), with an operation name of the longest; every principal with
// its key of the longest, its history, list element and map slot; and the
// names shared by the entries (kept.MaxNames of kept.MaxName bytes).
func MaxBytes(cfg Config) int64 {
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.MaxPrincipals == 0 {
		cfg.MaxPrincipals = DefaultMaxPrincipals
	}
	const (
		slot      = int64(unsafe.Sizeof(Entry{}))
		principal = int64(unsafe.Sizeof(history{})+unsafe.Sizeof(list.Element{})) + mapSlotBytes + kept.MaxKey
		name      = kept.MaxName + mapSlotBytes
	)
	slots := 4 * int64(cfg.MaxEntries+cfg.MaxPrincipals)
	return slots*slot + int64(cfg.MaxEntries)*kept.MaxOperation + int64(cfg.MaxPrincipals)*principal + kept.MaxNames*name
}

// mapSlotBytes is what one entry of a map keyed by string costs besides
// the string's bytes: the key and value words, the control byte, and the
// load factor's slack.
const mapSlotBytes = 64

// Timeline holds the recent decisions. It is safe for concurrent use.
type Timeline struct {
	cfg     Config
	mu      sync.Mutex
	byKey   map[string]*list.Element // of *history
	lru     *list.List               // least recently active at the back
	entries int
	names   kept.Names // the entries' kinds, plans, outcomes and codes
}

type history struct {
	principal string
	ring      []Entry // at most PerPrincipal, in order from start
	start     int
	n         int
}

// New returns a Timeline bounded by cfg.
func New(cfg Config) (*Timeline, error) {
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.PerPrincipal == 0 {
		cfg.PerPrincipal = DefaultPerPrincipal
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.MaxPrincipals == 0 {
		cfg.MaxPrincipals = DefaultMaxPrincipals
	}
	if cfg.Window < 0 || cfg.PerPrincipal < 1 || cfg.MaxEntries < cfg.PerPrincipal || cfg.MaxPrincipals < 1 {
		return nil, fmt.Errorf("%w: window %v, %d a principal, %d in all, %d principals: each must be positive, and the total at least one principal's",
			ErrInvalidConfig, cfg.Window, cfg.PerPrincipal, cfg.MaxEntries, cfg.MaxPrincipals)
	}
	return &Timeline{cfg: cfg, byKey: map[string]*list.Element{}, lru: list.New()}, nil
}

// Add records e for principal. What it keeps of principal and of e's
// strings is a copy, cut to its bound: never the caller's memory.
func (t *Timeline) Add(principal string, e Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.Operation = kept.String(e.Operation, kept.MaxOperation)
	e.Kind, e.Plan, e.Outcome, e.Code = t.names.Own(e.Kind), t.names.Own(e.Plan), t.names.Own(e.Outcome), t.names.Own(e.Code)
	principal = kept.Bound(principal, kept.MaxKey)
	el := t.byKey[principal]
	if el == nil {
		principal = kept.Key(principal, kept.MaxKey)
		el = t.lru.PushFront(&history{principal: principal})
		t.byKey[principal] = el
	} else {
		t.lru.MoveToFront(el)
	}
	h := el.Value.(*history)
	h.prune(e.Time.Add(-t.cfg.Window), &t.entries)
	h.shrink()
	if h.n == t.cfg.PerPrincipal {
		h.start = (h.start + 1) % len(h.ring)
		h.n--
		t.entries--
	}
	if len(h.ring) < t.cfg.PerPrincipal && h.n == len(h.ring) {
		h.grow(t.cfg.PerPrincipal)
	}
	h.ring[(h.start+h.n)%len(h.ring)] = e
	h.n++
	t.entries++
	for (t.entries > t.cfg.MaxEntries || len(t.byKey) > t.cfg.MaxPrincipals) && t.lru.Len() > 1 {
		old := t.lru.Back().Value.(*history)
		t.entries -= old.n
		delete(t.byKey, old.principal)
		t.lru.Remove(t.lru.Back())
	}
}

// Recent returns principal's decisions of the last Window before now,
// oldest first.
func (t *Timeline) Recent(now time.Time, principal string) []Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := []Entry{}
	el := t.byKey[kept.Bound(principal, kept.MaxKey)]
	if el == nil {
		return out
	}
	h := el.Value.(*history)
	since := now.Add(-t.cfg.Window)
	for i := range h.n {
		if e := h.ring[(h.start+i)%len(h.ring)]; e.Time.After(since) {
			out = append(out, e)
		}
	}
	return out
}

// Len reports the entries and principals held.
func (t *Timeline) Len() (entries, principals int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.entries, len(t.byKey)
}

// prune drops the entries at or before since from the front.
func (h *history) prune(since time.Time, total *int) {
	for h.n > 0 && !h.ring[h.start].Time.After(since) {
		h.ring[h.start] = Entry{}
		h.start = (h.start + 1) % len(h.ring)
		h.n--
		*total--
	}
}

// grow doubles the ring, up to max, keeping its entries in order.
func (h *history) grow(max int) { h.resize(min(max, 2*len(h.ring)+4)) }

// shrink halves a ring more than four times its entries and one, so that
// the slots of a principal whose entries aged out do not stay held: a
// ring is at most 4 × (n + 1) slots after each Add.
func (h *history) shrink() {
	if len(h.ring) > 4*(h.n+1) {
		h.resize(2*h.n + 4)
	}
}

// resize moves the ring's entries, in order, to a ring of size slots.
func (h *history) resize(size int) {
	ring := make([]Entry, size)
	for i := range h.n {
		ring[i] = h.ring[(h.start+i)%len(h.ring)]
	}
	h.ring, h.start = ring, 0
}
