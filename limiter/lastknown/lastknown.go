// Package lastknown is the honest fail-open fallback: a process's own
// budgets for the time its shared store is away, started from what the
// process last learnt of each budget from that store, never from a fresh,
// full one.
//
// While the store answers, the caller hands every decision to Observe (or
// ObserveAll): the budget's state is reconstructed from the decision, the
// strict way (limiter.Bucket.MaxLevel: the fullest the bucket can have
// been), and kept with the time it was seen. When the store fails, Take
// and TakeAll decide from that state, refilled at the budget's own rate
// since, and debit it. A budget the process knows nothing about starts
// EMPTY: a token bucket with no tokens (refilling from the first call), a
// fixed window exhausted until its end. So during an outage one process
// admits on a token bucket it last saw with R tokens at t₀, by time t, at
// most R + rate × (t − t₀) points, and never holds more than the burst;
// for a budget it did not know, at most rate × (t − t₁), t₁ the first
// call. A fixed window last seen with count c in its window admits at
// most Rate − c more in that window, and Rate in each later one (the
// store would start those empty too). Across P processes, P times that.
//
// What the fallback admits is owed to the store, which never saw it. When
// the store answers again, the next Observe takes its word, less what is
// owed (so a second outage before the store is told cannot hand the same
// points out again), and the debt becomes due: Due hands it to the caller,
// which debits it from the store (saturating at empty: those points were
// spent) and observes the answer. A budget the store is not asked about
// again would keep its debt, so the caller also takes every debt at once
// when the store answers after an outage (TakeOwed), whatever budget it
// answered for, and debits each. So over any series of outages one
// process admits on a budget last seen with R left at t₀, by t, at most
// R + rate × (t − t₀) (R + rate × the outage time when outages follow
// each other), not R again each outage, and the store learns it as soon
// as those debits are through.
//
// The table is bounded (Config.MaxBudgets): a new budget in a full shard
// evicts an arbitrary one, which is then unknown again, so empty: the
// bound errs on the strict side. Bucket algorithms and FixedWindow are
// supported; other algorithms are never observed and refused by Take
// (ErrUnsupported), so a caller falls back to refusing.
package lastknown

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/costguard/costguard/limiter"
)

// DefaultMaxBudgets is the default bound of the table.
const DefaultMaxBudgets = 100_000

const shards = 64

var (
	// ErrInvalidConfig wraps every Config validation error.
	ErrInvalidConfig = errors.New("lastknown: invalid config")
	// ErrUnsupported: the algorithm has no fallback here (sliding
	// windows); the call decides nothing.
	ErrUnsupported = errors.New("lastknown: algorithm not supported by the fallback")
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Clock tells the time. Default limiter.SystemClock.
	Clock limiter.Clock
	// MaxBudgets bounds the budgets held, named ones included. Default
	// DefaultMaxBudgets.
	MaxBudgets int
}

// Store is the fallback. It is safe for concurrent use, owns no
// goroutine, and implements limiter.Store, limiter.MultiTaker and
// limiter.MultiRefunder.
type Store struct {
	clock    limiter.Clock
	perShard int
	seed     maphash.Seed
	shards   [shards]shard
	// dues counts the budgets with a debt due and owing those with a
	// debt (put keeps both), so that Due and TakeOwed take no lock while
	// there is none, which is whenever no outage just ended.
	dues, owing atomic.Int64
}

var (
	_ limiter.Store         = (*Store)(nil)
	_ limiter.MultiTaker    = (*Store)(nil)
	_ limiter.MultiRefunder = (*Store)(nil)
)

type budget struct{ key, name string }

// state is one budget as last known: the limit it was kept under (a
// different limit makes it unknown) and the algorithm's state.
type state struct {
	limit  limiter.Limit
	bucket limiter.BucketState
	window limiter.WindowState
	// owed is what the fallback admitted that the store has not been
	// told; due once the store answered again.
	owed int64
	due  bool
}

// Debt is what the fallback admitted on a budget while the store was
// away, due now that the store answers: Cost points of Key's budget
// (Name: a named budget of it) under Limit.
type Debt = limiter.Request

type shard struct {
	sync.Mutex
	m map[budget]state
	// owing holds the budgets of m with a debt, for TakeOwed.
	owing map[budget]struct{}
}

// New validates cfg and returns an empty Store.
func New(cfg Config) (*Store, error) {
	if cfg.MaxBudgets < 0 {
		return nil, fmt.Errorf("%w: MaxBudgets %d is negative", ErrInvalidConfig, cfg.MaxBudgets)
	}
	if cfg.MaxBudgets == 0 {
		cfg.MaxBudgets = DefaultMaxBudgets
	}
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	s := &Store{clock: cfg.Clock, perShard: max(1, (cfg.MaxBudgets+shards-1)/shards), seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = make(map[budget]state)
		s.shards[i].owing = make(map[budget]struct{})
	}
	return s, nil
}

// Close drops every budget. The Store stays usable (empty).
func (s *Store) Close() error {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.Lock()
		for b, st := range sh.m {
			s.count(sh, b, st, state{})
		}
		clear(sh.m)
		sh.Unlock()
	}
	return nil
}

// Len is how many budgets are known.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.Lock()
		n += len(sh.m)
		sh.Unlock()
	}
	return n
}

// shardOf is a key's shard: a principal's named budgets share it.
func (s *Store) shardOf(key string) int { return int(maphash.String(s.seed, key) % shards) }

func (s *Store) now() int64 { return s.clock.Now().UnixMicro() }

// supported reports whether l has a fallback here.
func supported(l limiter.Limit) bool {
	return l.Algorithm.IsBucket() || l.Algorithm == limiter.FixedWindow
}

// Observe records d, the store's answer to a Take (or a Refund, cost 0) of
// cost on key's budget under limit, as what the process knows of it now.
// Decisions that describe nothing (Limit 0) and unsupported algorithms
// are ignored.
func (s *Store) Observe(key string, limit limiter.Limit, cost int64, d limiter.Decision) {
	s.observe(budget{key: key}, limit, cost, d, s.now())
}

// ObserveAll is Observe for a TakeAll's requests and decisions (a refusal
// debits nothing, so each decision is read as a peek then).
func (s *Store) ObserveAll(reqs []limiter.Request, ds []limiter.Decision) {
	if len(reqs) != len(ds) {
		return
	}
	now := s.now()
	all := limiter.AllAllowed(ds)
	for i, r := range reqs {
		cost := r.Cost
		if !all && ds[i].Allowed {
			cost = 0 // admitted alone, not debited: a peek
		}
		s.observe(budget{r.Key, r.Name}, r.Limit, cost, ds[i], now)
	}
}

func (s *Store) observe(b budget, limit limiter.Limit, cost int64, d limiter.Decision, now int64) {
	if d.Limit == 0 || !supported(limit) {
		return
	}
	st, ok := fromDecision(limit, cost, d, now)
	if !ok {
		return
	}
	sh := &s.shards[s.shardOf(b.key)]
	sh.Lock()
	if old, ok := sh.m[b]; ok && old.limit == limit && old.owed > 0 {
		// The store does not know what was admitted here: hold its word
		// less that, until the debt is paid.
		st = debit(st, old.owed)
		st.owed, st.due = old.owed, true
	}
	s.put(sh, b, st)
	sh.Unlock()
}

// debit takes n points from st, saturating at empty.
func debit(st state, n int64) state {
	l := st.limit
	if l.Algorithm.IsBucket() {
		if b, err := l.Bucket(); err == nil {
			st.bucket.Level = min(b.Capacity, st.bucket.Level+min(n, b.Burst)*b.Unit)
		}
		return st
	}
	st.window.Count = min(l.Rate, st.window.Count+min(n, l.Rate))
	return st
}

// Due returns the debt of key's budget (name: a named one of it) once
// its store answered again, and forgets it: the caller debits it from the
// store, observes the answer, and hands back with Owe what it could not
// debit. ok is false when nothing is due.
func (s *Store) Due(key, name string) (d Debt, ok bool) {
	if s.dues.Load() <= 0 {
		return Debt{}, false
	}
	b := budget{key, name}
	sh := &s.shards[s.shardOf(key)]
	sh.Lock()
	defer sh.Unlock()
	st, known := sh.m[b]
	if !known || !st.due || st.owed <= 0 {
		return Debt{}, false
	}
	d = Debt{Key: key, Name: name, Limit: st.limit, Cost: st.owed}
	st.owed, st.due = 0, false
	s.put(sh, b, st)
	return d, true
}

// Owing is how many budgets hold a debt, due or not.
func (s *Store) Owing() int { return int(s.owing.Load()) }

// TakeOwed returns up to n debts, due or not, and forgets them, as Due
// does one: the caller debits each from the store once it answers again,
// observes the answer, and hands back with Owe what it could not debit.
// Calls until it returns none take every debt; there are at most
// Config.MaxBudgets.
func (s *Store) TakeOwed(n int) []Debt {
	if n <= 0 || s.owing.Load() <= 0 {
		return nil
	}
	var debts []Debt
	for i := range s.shards {
		sh := &s.shards[i]
		sh.Lock()
		for b := range sh.owing {
			if len(debts) == n {
				break
			}
			st := sh.m[b]
			debts = append(debts, Debt{Key: b.key, Name: b.name, Limit: st.limit, Cost: st.owed})
			st.owed, st.due = 0, false
			s.put(sh, b, st) // deletes b from sh.owing: allowed while ranging
		}
		sh.Unlock()
		if len(debts) == n {
			break
		}
	}
	return debts
}

// Owe records n points owed on d's budget again (a debit the store could
// not take), due at the store's next answer.
func (s *Store) Owe(d Debt) {
	if d.Cost <= 0 {
		return
	}
	b := budget{d.Key, d.Name}
	sh := &s.shards[s.shardOf(d.Key)]
	sh.Lock()
	defer sh.Unlock()
	if st, ok := sh.m[b]; ok && st.limit == d.Limit {
		st.owed = min(st.owed+d.Cost, 1<<62)
		s.put(sh, b, st)
	}
}

// fromDecision is the strictest state d can describe at now.
func fromDecision(limit limiter.Limit, cost int64, d limiter.Decision, now int64) (state, bool) {
	st := state{limit: limit}
	if limit.Algorithm.IsBucket() {
		b, err := limit.Bucket()
		if err != nil {
			return st, false
		}
		st.bucket = limiter.BucketState{Level: b.MaxLevel(d, cost), Last: now}
		return st, true
	}
	p := limit.Period.Microseconds()
	if err := limit.Validate(); err != nil || p <= 0 {
		return st, false
	}
	count := min(max(limit.Rate-d.Remaining, 0), limit.Rate)
	w := now / p
	if r := d.ResetAfter.Microseconds(); r > 0 {
		// The window ends ResetAfter from now, by the store's clock: the
		// window is the one that ends then, whatever this clock says.
		w = (now + r - 1) / p
	}
	st.window = limiter.WindowState{Window: w, Count: count}
	return st, true
}

// empty is what an unknown budget is at now: no tokens, or its window
// spent.
func empty(limit limiter.Limit, now int64) state {
	st := state{limit: limit}
	if limit.Algorithm.IsBucket() {
		b, err := limit.Bucket()
		if err == nil {
			st.bucket = limiter.BucketState{Level: b.Capacity, Last: now}
		}
		return st
	}
	if p := limit.Period.Microseconds(); p > 0 {
		st.window = limiter.WindowState{Window: now / p, Count: limit.Rate}
	}
	return st
}

// put stores st for b, evicting an arbitrary budget when the shard is
// full; sh is locked. Every state is written here, so that the debts are
// counted right.
func (s *Store) put(sh *shard, b budget, st state) {
	old, ok := sh.m[b]
	if !ok && len(sh.m) >= s.perShard {
		for k, v := range sh.m {
			s.count(sh, k, v, state{})
			delete(sh.m, k)
			break
		}
	}
	if !ok {
		b = budget{strings.Clone(b.key), strings.Clone(b.name)} // a new budget keeps copies, never a request's memory
	}
	s.count(sh, b, old, st)
	sh.m[b] = st
}

// count moves b's debt from old to st in the counts and in sh.owing; sh
// is locked. The zero state stands for no budget.
func (s *Store) count(sh *shard, b budget, old, st state) {
	if was, is := old.owed > 0, st.owed > 0; was != is {
		if is {
			sh.owing[b] = struct{}{}
			s.owing.Add(1)
		} else {
			delete(sh.owing, b)
			s.owing.Add(-1)
		}
	}
	if was, is := old.due && old.owed > 0, st.due && st.owed > 0; was != is {
		if is {
			s.dues.Add(1)
		} else {
			s.dues.Add(-1)
		}
	}
}

// get is b's state under limit at now, known or empty; sh is locked.
func get(sh *shard, b budget, limit limiter.Limit, now int64) state {
	if st, ok := sh.m[b]; ok && st.limit == limit {
		return st
	}
	return empty(limit, now)
}

// step is the pure transition of st (a Take of n, or a Refund).
func step(st state, now, n int64, refund bool) (state, limiter.Decision, error) {
	var d limiter.Decision
	var err error
	l := st.limit
	switch {
	case l.Algorithm.IsBucket() && refund:
		st.bucket, d, err = limiter.RefundBucket(l, st.bucket, now, n)
	case l.Algorithm.IsBucket():
		st.bucket, d, err = limiter.TakeBucket(l, st.bucket, now, n)
	case l.Algorithm == limiter.FixedWindow && refund:
		st.window, d, err = limiter.RefundFixedWindow(l, st.window, now, n)
	case l.Algorithm == limiter.FixedWindow:
		st.window, d, err = limiter.TakeFixedWindow(l, st.window, now, n)
	default:
		err = fmt.Errorf("%w: %v", ErrUnsupported, l.Algorithm)
	}
	return st, d, err
}

// Take debits cost from key's budget as last known (or empty).
func (s *Store) Take(ctx context.Context, key string, limit limiter.Limit, cost int64) (limiter.Decision, error) {
	return s.apply(key, limit, cost, false)
}

// Refund gives amount back to key's budget when it is known; an unknown
// budget stays empty (the points return by refill).
func (s *Store) Refund(ctx context.Context, key string, limit limiter.Limit, amount int64) (limiter.Decision, error) {
	return s.apply(key, limit, amount, true)
}

func (s *Store) apply(key string, limit limiter.Limit, n int64, refund bool) (limiter.Decision, error) {
	if err := limit.Validate(); err != nil {
		return limiter.Decision{}, err
	}
	if !supported(limit) {
		return limiter.Decision{}, fmt.Errorf("%w: %v", ErrUnsupported, limit.Algorithm)
	}
	now := s.now()
	b := budget{key: key}
	sh := &s.shards[s.shardOf(key)]
	sh.Lock()
	defer sh.Unlock()
	known, ok := sh.m[b]
	if refund && (!ok || known.limit != limit) {
		_, d, err := step(empty(limit, now), now, 0, false) // a peek at empty
		return d, err
	}
	st, d, err := step(get(sh, b, limit, now), now, n, refund)
	if err == nil || errors.Is(err, limiter.ErrCostExceedsCapacity) {
		st.owed = owe(st.owed, d, n, refund)
		s.put(sh, b, st)
	}
	return d, err
}

// owe is what is owed to the store after a Take (or Refund) of n that
// decided d, owed before: an admission adds n, a refund takes it back.
func owe(owed int64, d limiter.Decision, n int64, refund bool) int64 {
	switch {
	case refund:
		return max(owed-n, 0)
	case d.Allowed:
		return min(owed+n, 1<<62)
	}
	return owed
}

// TakeAll decides every request from its budget as last known (or empty),
// all or nothing, as limiter.MultiTaker says.
func (s *Store) TakeAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	return s.applyAll(reqs, ds, false)
}

// RefundAll gives each request's Cost back to its budget when known.
func (s *Store) RefundAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	return s.applyAll(reqs, ds, true)
}

func (s *Store) applyAll(reqs []limiter.Request, ds []limiter.Decision, refund bool) error {
	if err := limiter.CheckTakeAll(reqs, ds); err != nil {
		return err
	}
	for _, r := range reqs {
		if !supported(r.Limit) {
			return fmt.Errorf("%w: %v", ErrUnsupported, r.Limit.Algorithm)
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	now := s.now()
	var idx [limiter.MaxTakeAll]int
	locked := idx[:0]
	for _, r := range reqs {
		if i := s.shardOf(r.Key); !slices.Contains(locked, i) {
			locked = append(locked, i)
		}
	}
	slices.Sort(locked)
	for _, i := range locked {
		s.shards[i].Lock()
	}
	defer func() {
		for _, i := range locked {
			s.shards[i].Unlock()
		}
	}()
	var buf [limiter.MaxTakeAll]state
	next := buf[:len(reqs)]
	var firstErr error
	allowed := true
	for i, r := range reqs {
		sh := &s.shards[s.shardOf(r.Key)]
		b := budget{r.Key, r.Name}
		known, ok := sh.m[b]
		if refund {
			if !ok || known.limit != r.Limit {
				_, ds[i], _ = step(empty(r.Limit, now), now, 0, false)
				next[i].limit = limiter.Limit{} // nothing to write
				continue
			}
			var err error
			next[i], ds[i], err = step(known, now, r.Cost, true)
			next[i].owed = owe(known.owed, ds[i], r.Cost, true)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			continue
		}
		st, d, err := step(get(sh, b, r.Limit, now), now, r.Cost, false)
		next[i], ds[i] = st, d
		if err != nil {
			if firstErr == nil || errors.Is(err, limiter.ErrCostExceedsCapacity) {
				firstErr = err
			}
			allowed = false
			continue
		}
		allowed = allowed && d.Allowed
	}
	if refund {
		for i, r := range reqs {
			if next[i].limit == r.Limit {
				s.put(&s.shards[s.shardOf(r.Key)], budget{r.Key, r.Name}, next[i])
			}
		}
		return firstErr
	}
	if allowed {
		for i, r := range reqs {
			next[i].owed = owe(next[i].owed, ds[i], r.Cost, false)
			s.put(&s.shards[s.shardOf(r.Key)], budget{r.Key, r.Name}, next[i])
		}
		return nil
	}
	// Nothing is debited: the decisions describe each budget as it stands,
	// an admissible one as a peek; the budgets never seen are recorded as
	// seen now (empty), so that they refill from the first call.
	for i, r := range reqs {
		sh := &s.shards[s.shardOf(r.Key)]
		b := budget{r.Key, r.Name}
		st := get(sh, b, r.Limit, now)
		if ds[i].Allowed {
			_, ds[i], _ = step(st, now, 0, false)
		}
		if _, ok := sh.m[b]; !ok || sh.m[b].limit != r.Limit {
			s.put(sh, b, st)
		}
	}
	return firstErr
}
