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
// What the fallback admits is owed to the store, which never saw it, until
// the store acknowledges a debit of it. Every answer of the store is read
// less what is owed (so a second outage before the store is told cannot
// hand the same points out again). The caller takes the debts (Debits),
// debits each from the store (saturating at empty: those points were
// spent) and hands back the store's answer (Paid), or says the debit
// failed (Unpaid): a debt is forgotten only when the store's answer to
// its debit arrives, and while a debit is in flight its points are still
// read off every answer.
//
// Answers are ordered. The caller takes a sequence number (Start) before
// each store call and observes its answer with it (ObserveFrom, Paid): an
// answer to a call that started before the budget's last answer was
// learnt may lower what is known of the budget, never raise it (the store
// may have run that call before the one whose answer is known, so its
// answer may predate a debit). An answer to a call started after it ran
// after every call whose answer is known, and is taken as it stands.
//
// So over any series of outages one process admits on a budget last seen
// with R left at t₀, by t, at most R + rate × (t − t₀) (R + rate × the
// outage time when outages follow each other), not R again each outage,
// whatever the number of its calls in flight: a call whose answer is lost
// is decided by the fallback and owed, so a store that ran it anyway
// counts it twice, never hands it out twice.
//
// A store that lost its data (a restart without persistence, a flush, a
// failover to a replica that lagged) holds fresh budgets: DropDebts
// forgets every debt, and the answer to a debit handed out before it is
// ignored, so no debt is repaid into a fresh budget.
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
	// owing counts the budgets with a debt (put keeps it), so that the
	// caller takes no lock while there is none, which is whenever no
	// outage just ended.
	owing atomic.Int64
	// seq numbers the store calls (Start).
	seq atomic.Uint64
	// epoch counts DropDebts: a Debit handed out before the latest is
	// void.
	epoch atomic.Uint64
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
	// owed is what the fallback admitted that the store has not
	// acknowledged, read off each of its answers.
	owed int64
	// sending is the part of owed a debit in flight carries (one at a
	// time per budget); 0 when none is.
	sending int64
	// heard is the sequence number (Start) when the store's last answer
	// was learnt: an answer to a call numbered no later may lower the
	// state, never raise it. 0: none was.
	heard Seq
}

// Debt is what the fallback admitted on a budget while the store was
// away: Cost points of Key's budget (Name: a named budget of it) under
// Limit.
type Debt = limiter.Request

// Debit is a debt on its way to the store: Debits hands it out, and the
// caller hands it back with the store's answer (Paid) or without one
// (Unpaid).
type Debit struct {
	Debt
	// epoch is the Store's epoch when it was handed out.
	epoch uint64
}

// Seq numbers a store call, in the order the calls started (Start).
type Seq uint64

type shard struct {
	sync.Mutex
	m map[budget]state
	// owing holds the budgets of m with a debt, for Debits.
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

// Start numbers a store call about to be made: the caller takes it before
// sending the call and observes the answer with it (ObserveFrom,
// ObserveAllFrom, Paid).
func (s *Store) Start() Seq { return Seq(s.seq.Add(1)) }

// Observe records d, the store's answer to a Take (or a Refund, cost 0) of
// cost on key's budget under limit, as the answer to a call that started
// now, after every other: ObserveFrom(Start(), …). A caller with calls in
// flight uses ObserveFrom. Decisions that describe nothing (Limit 0) and
// unsupported algorithms are ignored.
func (s *Store) Observe(key string, limit limiter.Limit, cost int64, d limiter.Decision) {
	s.ObserveFrom(s.Start(), key, limit, cost, d)
}

// ObserveFrom records d, the store's answer to a call numbered seq (Start)
// that took cost from key's budget under limit (a Refund: cost 0), less
// what the fallback owes on it. When the budget's last answer was learnt
// after seq was taken, d may only lower what is known of it.
func (s *Store) ObserveFrom(seq Seq, key string, limit limiter.Limit, cost int64, d limiter.Decision) {
	s.observe(seq, budget{key: key}, limit, cost, d, s.now())
}

// ObserveAll is ObserveAllFrom(Start(), reqs, ds), as Observe is for one
// budget.
func (s *Store) ObserveAll(reqs []limiter.Request, ds []limiter.Decision) {
	s.ObserveAllFrom(s.Start(), reqs, ds)
}

// ObserveAllFrom is ObserveFrom for a TakeAll's requests and decisions (a
// refusal debits nothing, so each decision is read as a peek then).
func (s *Store) ObserveAllFrom(seq Seq, reqs []limiter.Request, ds []limiter.Decision) {
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
		s.observe(seq, budget{r.Key, r.Name}, r.Limit, cost, ds[i], now)
	}
}

func (s *Store) observe(seq Seq, b budget, limit limiter.Limit, cost int64, d limiter.Decision, now int64) {
	if d.Limit == 0 || !supported(limit) {
		return
	}
	st, ok := fromDecision(limit, cost, d, now)
	if !ok {
		return
	}
	sh := &s.shards[s.shardOf(b.key)]
	sh.Lock()
	s.learn(sh, b, st, seq, now)
	sh.Unlock()
}

// learn records heard, the state a store's answer to call seq describes,
// for b; sh is locked. The store does not know what is owed: heard is
// read less that. An answer to a call that started before the last answer
// was learnt may have been run before that one, so it only lowers the
// state.
func (s *Store) learn(sh *shard, b budget, heard state, seq Seq, now int64) {
	if old, ok := sh.m[b]; ok && old.limit == heard.limit {
		heard = debit(heard, old.owed)
		heard.owed, heard.sending = old.owed, old.sending
		if seq <= old.heard {
			heard = stricter(old, heard, now)
		}
	}
	heard.heard = Seq(s.seq.Load())
	s.put(sh, b, heard)
}

// stricter is whichever of a (brought forward to now) and b, two states
// of one budget under one limit, holds less; a's debts are kept.
func stricter(a, b state, now int64) state {
	l := a.limit
	if l.Algorithm.IsBucket() {
		bk, err := l.Bucket()
		if err != nil {
			return b
		}
		level := a.bucket.Level
		if now > a.bucket.Last {
			level = bk.Drain(level, now-a.bucket.Last)
		}
		b.bucket = limiter.BucketState{Level: max(level, b.bucket.Level), Last: now}
		return b
	}
	switch {
	case a.window.Window > b.window.Window:
		b.window = a.window
	case a.window.Window == b.window.Window:
		b.window.Count = max(a.window.Count, b.window.Count)
	}
	return b
}

// debit takes n points from st, saturating at empty.
func debit(st state, n int64) state {
	if n <= 0 {
		return st
	}
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

// Owing is how many budgets hold a debt the store has not acknowledged,
// a debit of it in flight or not.
func (s *Store) Owing() int { return int(s.owing.Load()) }

// Debits hands out up to n debts to debit from the store: each budget's
// debt that no debit in flight carries, at most one debit per budget at a
// time. Each stays owed (read off every answer of the store) until the
// caller hands it back: Paid with the store's answer to its debit,
// Unpaid when the debit failed. Calls until it returns none hand out every
// debt; there are at most Config.MaxBudgets.
func (s *Store) Debits(n int) []Debit {
	if n <= 0 || s.owing.Load() <= 0 {
		return nil
	}
	epoch := s.epoch.Load()
	var debits []Debit
	for i := range s.shards {
		sh := &s.shards[i]
		sh.Lock()
		for b := range sh.owing {
			if len(debits) == n {
				break
			}
			st := sh.m[b]
			if st.sending > 0 {
				continue
			}
			st.sending = st.owed
			sh.m[b] = st // the debt is unchanged: nothing to count
			debits = append(debits, Debit{Debt: Debt{Key: b.key, Name: b.name, Limit: st.limit, Cost: st.owed}, epoch: epoch})
		}
		sh.Unlock()
		if len(debits) == n {
			break
		}
	}
	return debits
}

// Paid records the store's answer to dbt's debit, a call numbered seq
// (Start) that took took points (less than dbt.Cost when the budget held
// less: the rest was spent all the same): dbt's points are no longer owed,
// and d is learnt as ObserveFrom learns an answer. A Debit handed out
// before DropDebts is ignored.
func (s *Store) Paid(seq Seq, dbt Debit, took int64, d limiter.Decision) {
	now := s.now()
	b := budget{dbt.Key, dbt.Name}
	sh := &s.shards[s.shardOf(dbt.Key)]
	sh.Lock()
	defer sh.Unlock()
	st, ok := sh.m[b]
	if !ok || st.limit != dbt.Limit || dbt.epoch != s.epoch.Load() {
		return
	}
	st.owed, st.sending = max(st.owed-dbt.Cost, 0), 0
	s.put(sh, b, st)
	if d.Limit == 0 || !supported(dbt.Limit) {
		return
	}
	if heard, ok := fromDecision(dbt.Limit, took, d, now); ok {
		s.learn(sh, b, heard, seq, now)
	}
}

// Unpaid hands back a debit the store did not take (it failed, timed out
// or was not tried): its points stay owed, for the next Debits.
func (s *Store) Unpaid(dbt Debit) {
	b := budget{dbt.Key, dbt.Name}
	sh := &s.shards[s.shardOf(dbt.Key)]
	sh.Lock()
	defer sh.Unlock()
	if st, ok := sh.m[b]; ok && st.limit == dbt.Limit && dbt.epoch == s.epoch.Load() {
		st.sending = 0
		sh.m[b] = st
	}
}

// Owe records d.Cost points owed on d's budget (points spent that the
// store could not be debited for), to be debited with the fallback's own.
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

// DropDebts forgets every debt, and voids every Debit handed out: the
// store lost its data, and its budgets are fresh. It returns how many
// budgets held a debt.
func (s *Store) DropDebts() int {
	s.epoch.Add(1)
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.Lock()
		for b := range sh.owing {
			st := sh.m[b]
			st.owed, st.sending = 0, 0
			s.put(sh, b, st) // deletes b from sh.owing: allowed while ranging
			n++
		}
		sh.Unlock()
	}
	return n
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

// count moves b's debt from old to st in the count and in sh.owing; sh
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
