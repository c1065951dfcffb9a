// Package memorystore is the embedded limiter.Store: budgets live in this
// process, behind sharded locks, bounded in number, on a monotonic clock.
// It is the default store; use limiter/redisstore when several processes
// must share one budget.
//
// Keys are spread over Shards partitions by a seeded hash, each with its
// own mutex, so cores rarely contend. Each key holds only its algorithm's
// state (three integers, or a log of timestamps for SlidingLog); a key whose
// budget is whole again holds nothing that a fresh key would not, so it is
// deleted on the spot or by the sweeper.
//
// # When the store is full
//
// A full shard never forgets a budget that is not whole: that would hand
// its principal a fuller bucket, and a flood of fresh identities could
// reset anyone's budget. The time each budget becomes whole is known when
// it is written (the bucket full again, the window empty), so every shard
// keeps its keys in a min-heap by that time. A new key in a full shard
// takes the place of a key whose budget has become whole, the earliest
// first, found in at most 8 heap steps (shardmap.Sample); when no budget in
// the shard is whole, the call that would have stored the key fails with
// ErrFull, a zero Decision, and nothing is stored. Keys already held are
// never refused. The store keeps its own copy of each key, so a key cut
// from a request never keeps the request alive, and refuses a new key
// longer than 1 KiB as it refuses one in a full shard: a key the limiter
// builds is a principal's, at most 512 bytes, after a configured prefix. The sweeper drops whole keys through the same heap.
// Refusing costs at most those 8 steps and no allocation, so a flood of
// new keys costs the store little more than it costs to answer them.
//
// # Several budgets at once
//
// TakeAll (limiter.MultiTaker) locks the shards of its requests' keys in
// ascending order, decides each request on a copy of its state and commits
// only when all fit: no other call sees part of it. A budget it would
// have to store in a full shard fails the call with ErrFull and nothing
// stored or debited. Named budgets (Request.Name ≠ "") live in their
// owner's shard, in a table of their own keyed by (Key, Name), bounded
// like the plain keys; Name "" is Take's key itself.
//
// The bucket algorithms, the default, run on a fast path (bucket.go): the
// store validates each Limit value once and caches its scaled form, then
// does limiter's exact integer arithmetic itself, with multiplications by
// precomputed reciprocals in place of divisions. Every other call goes
// through limiter's pure functions. Decisions are the same either way.
//
// Time: the store reads its Clock once at construction and from then on
// uses only differences from that reading (monotonic for time.Now), added
// to the reading's microseconds since the Unix epoch. So buckets never jump
// when the wall clock is stepped, and fixed and sliding windows still align
// on Period multiples since the epoch (midnight UTC for daily windows), as
// of the wall clock at construction: a later wall-clock step does not move
// the window boundaries, which may then drift from the wall clock by the
// size of the step until the store is rebuilt.
package memorystore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/internal/periodic"
	"github.com/costguard/costguard/limiter/internal/shardmap"
)

// Defaults for the zero fields of Config.
const (
	DefaultMaxKeys       = 100_000
	DefaultShards        = 64
	DefaultSweepInterval = time.Minute
)

var (
	// ErrClosed is returned by calls on a closed Store.
	ErrClosed = errors.New("memorystore: store closed")
	// ErrFull is wrapped by the error of a Take or Refund that would have
	// to store a key the store does not hold while the key's shard holds
	// its share of MaxKeys and none of their budgets is whole. The call
	// returns a zero Decision and changes nothing; keys already held keep
	// working, and room appears as budgets become whole. A TakeAll that
	// meets it stores and debits nothing.
	ErrFull = errors.New("memorystore: store full")
	// ErrInvalidConfig wraps every Config validation error.
	ErrInvalidConfig = errors.New("memorystore: invalid config")
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Clock tells the time. It must be monotonic, as time.Now is.
	// Default: limiter.SystemClock{}.
	Clock limiter.Clock
	// MaxKeys bounds the number of keys held; each shard holds at most
	// MaxKeys / Shards. A new key finding its shard full of budgets that
	// are not whole is refused with ErrFull. TakeAll's named budgets are
	// bounded by the same numbers, separately. Default: DefaultMaxKeys
	// (100,000).
	MaxKeys int
	// Shards is the number of independently locked partitions, at most
	// MaxKeys. Default: DefaultShards (64), or MaxKeys when smaller.
	Shards int
	// SweepInterval is how often a background goroutine deletes keys whose
	// budget is whole again. Default: DefaultSweepInterval (one minute).
	SweepInterval time.Duration
}

// Store is the in-memory limiter.Store. It is safe for concurrent use.
// Close it to stop its sweeper.
type Store struct {
	cfg      Config // with the defaults filled in
	clock    limiter.Clock
	system   bool      // clock is the SystemClock: read only its monotonic part
	origin   time.Time // first Clock reading; later readings are subtracted from it
	originUS int64     // origin in whole µs since the Unix epoch
	originNS int64     // origin's nanoseconds beyond originUS
	shards   shardmap.Map[shard, *shard]
	params   paramCache
	errFull  error // ErrFull with the sizes, made once so refusing allocates nothing

	closed    atomic.Bool
	closeOnce sync.Once
	sweeper   *periodic.Loop
}

var (
	_ limiter.Store = (*Store)(nil)
	_ limiter.Local = (*Store)(nil)
)

// shard is one partition of the keys; its mutex guards its tables: the
// plain keys of Take and Refund, and the named budgets of TakeAll, which
// live in the shard of their owner's key.
type shard struct {
	sync.Mutex
	shardmap.Table[*entry]
	named shardmap.KeyedTable[budget, *entry]
}

// budget is a named budget's key in its shard: its owner's key and its
// name, never "" (the budget named "" is the owner's plain key). Being a
// pair, not an encoded string, it can meet no plain key.
type budget struct{ key, name string }

// ownBudget is the named table's shardmap.Own: copies of the key and the
// name, each at most shardmap.MaxKeyBytes.
func ownBudget(b budget) (budget, bool) {
	key, okKey := shardmap.OwnString(b.key)
	name, okName := shardmap.OwnString(b.name)
	return budget{key, name}, okKey && okName
}

// Len is how many keys the shard holds, plain and named.
func (sh *shard) Len() int { return sh.Table.Len() + sh.named.Len() }

// Clear drops every key, plain and named.
func (sh *shard) Clear() {
	sh.Table.Clear()
	sh.named.Clear()
}

// entry is one key's state, 32 bytes (a size class of its own) for the
// bucket algorithms and FixedWindow. a and b hold the BucketState (Level,
// Last) or the WindowState's Window and Count; ext holds what only the
// other two algorithms need: SlidingCounter's Prev and SlidingLog's log.
type entry struct {
	a, b int64
	// due packs when the budget is whole again (µs, in the high bits) and
	// the algorithm (in the low algBits): from wholeAt on the entry equals
	// a fresh key and may be dropped at no cost. wholeAt is the shard's
	// heap order (shardmap.Table.InsertDue).
	due int64
	ext *extra
}

// extra is the state beyond two integers. An entry's extra is replaced,
// never written, when Prev changes (TakeAll decides on a copy of an entry,
// which must not touch the entry it copied); a log is written in place,
// as TakeAll expects.
type extra struct {
	prev int64              // SlidingCounter's WindowState.Prev
	log  []limiter.LogEntry // SlidingLog's log
}

// algBits is the width of due's algorithm field. wholeAt is below 2^55
// (a time up to limiter.MaxNow plus a ResetAfter below 2^53 µs), so the
// packed value stays positive.
const algBits = 3

// The algorithm field holds every Algorithm.
const _ = uint(1<<algBits - 1 - limiter.SlidingCounter)

func newEntry(alg limiter.Algorithm) entry { return entry{due: int64(alg)} }

func (e *entry) algorithm() limiter.Algorithm { return limiter.Algorithm(e.due & (1<<algBits - 1)) }

func (e *entry) setAlgorithm(alg limiter.Algorithm) {
	e.due = e.due&^(1<<algBits-1) | int64(alg)
}

func (e *entry) wholeAt() int64 { return e.due >> algBits }

func (e *entry) setWholeAt(at int64) { e.due = at<<algBits | e.due&(1<<algBits-1) }

// prev is SlidingCounter's Prev.
func (e *entry) prev() int64 {
	if e.ext == nil {
		return 0
	}
	return e.ext.prev
}

// setPrev sets SlidingCounter's Prev, replacing ext when it changes.
func (e *entry) setPrev(v int64) {
	if v != e.prev() {
		e.ext = &extra{prev: v}
	}
}

// entryWholeAt is the shard tables' due time.
func entryWholeAt(e *entry) int64 { return e.wholeAt() }

// New validates cfg, fills in its defaults and starts the sweeper.
func New(cfg Config) (*Store, error) {
	return newStore(cfg, nil)
}

// newStore is New with an optional sweep tick channel, which tests provide
// to drive the sweeper without waiting.
func newStore(cfg Config, tick <-chan time.Time) (*Store, error) {
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	size, err := shardmap.Size{MaxKeys: cfg.MaxKeys, Shards: cfg.Shards}.
		Resolve(ErrInvalidConfig, shardmap.Size{MaxKeys: DefaultMaxKeys, Shards: DefaultShards})
	if err != nil {
		return nil, err
	}
	cfg.MaxKeys, cfg.Shards = size.MaxKeys, size.Shards
	if cfg.SweepInterval < 0 {
		return nil, fmt.Errorf("%w: SweepInterval must not be negative (got %v)", ErrInvalidConfig, cfg.SweepInterval)
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	origin := cfg.Clock.Now()
	if us := origin.UnixMicro(); us < 0 || us > limiter.MaxNow {
		return nil, fmt.Errorf("%w: the clock reads %v, outside the supported years 1970 to 2112", ErrInvalidConfig, origin)
	}
	_, system := cfg.Clock.(limiter.SystemClock)
	s := &Store{
		cfg:      cfg,
		clock:    cfg.Clock,
		system:   system,
		origin:   origin,
		originUS: origin.UnixMicro(),
		originNS: int64(origin.Nanosecond() % 1000),
		shards:   shardmap.New[shard](size),
		errFull: fmt.Errorf("%w: MaxKeys reached (%d keys, %d per shard) and no budget in the key's shard is whole; the key was not stored",
			ErrFull, size.MaxKeys, size.PerShard()),
		sweeper: periodic.New(cfg.SweepInterval, tick),
	}
	s.shards.Each(func(sh *shard) { sh.named.Init(size.PerShard(), ownBudget) })
	go s.sweepLoop()
	return s, nil
}

// Take debits cost from key's budget under limit; see limiter.Store.
func (s *Store) Take(ctx context.Context, key string, limit limiter.Limit, cost int64) (limiter.Decision, error) {
	var d limiter.Decision
	err := s.apply(ctx, &d, key, &limit, cost, false)
	return d, err
}

// Refund gives amount back to key's budget under limit; see limiter.Store.
func (s *Store) Refund(ctx context.Context, key string, limit limiter.Limit, amount int64) (limiter.Decision, error) {
	var d limiter.Decision
	err := s.apply(ctx, &d, key, &limit, amount, true)
	return d, err
}

// Local reports true: the budgets are in this process (limiter.Local).
func (*Store) Local() bool { return true }

// Len reports how many keys the store holds.
func (s *Store) Len() int { return s.shards.Len() }

// Close stops the sweeper, waits for it to exit and drops every key. Later
// calls return ErrClosed. Close is idempotent and always returns nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.sweeper.Stop()
		s.shards.Each((*shard).Clear)
	})
	return nil
}

// now is the current time in µs since the Unix epoch: the origin's epoch
// reading plus the (monotonic) time elapsed since it. Flooring the sum with
// the origin's sub-µs part gives exactly Clock.Now().UnixMicro() for a clock
// without monotonic readings, so a FakeClock means the same instant here as
// in a store that sends UnixMicro to Redis.
func (s *Store) now() int64 {
	if s.system {
		// time.Since(origin) is time.Now().Sub(origin) without the
		// wall-clock read that Sub ignores: a third of a decision's time.
		// It is never negative, so the division needs no correction.
		if ns := int64(time.Since(s.origin)); ns >= 0 && ns < 1<<62 {
			return s.originUS + (ns+s.originNS)/1000
		}
	}
	ns := int64(s.clock.Now().Sub(s.origin)) // saturates at ±292 years
	ns = max(-(1 << 62), min(ns, 1<<62))
	ns += s.originNS
	us := ns / 1000
	if ns%1000 < 0 {
		us--
	}
	return s.originUS + us
}

// apply is Take (or Refund when isRefund): it writes the decision to d,
// which must be zero. The pointers keep the arguments in registers; neither
// is retained.
func (s *Store) apply(ctx context.Context, d *limiter.Decision, key string, limit *limiter.Limit, n int64, isRefund bool) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memorystore: %w", err)
	}
	// The bucket fast path covers every call that cannot fail; the rest
	// (and invalid limits) go through limiter's own functions.
	var bp *limitParams
	if n >= 0 && (isRefund && limit.Algorithm != limiter.LeakyBucketShaping || !isRefund && n <= limit.Burst) {
		bp = s.params.get(*limit)
	}
	// Read the clock before locking to keep the critical section short. A
	// caller that read earlier but locks later sees time stand still (the
	// arithmetic treats a clock going back as no time passing), which can
	// only admit less, never more.
	now := s.now()
	sh := s.shards.Shard(key)
	sh.Lock()
	if bp != nil {
		stored := sh.applyBucket(d, key, bp, now, n, isRefund) // cannot panic
		sh.Unlock()
		if !stored {
			return s.errFull
		}
		return nil
	}
	defer sh.Unlock()

	e, _ := sh.Get(key)
	var st entry
	if e != nil && e.algorithm() == limit.Algorithm {
		st = *e
	}
	st.setAlgorithm(limit.Algorithm)
	var err error
	*d, err = s.transit(&st, *limit, now, n, isRefund)
	if err != nil && !errors.Is(err, limiter.ErrCostExceedsCapacity) {
		return err
	}
	if d.ResetAfter <= 0 {
		// The budget is whole: a fresh key says the same, so hold nothing.
		if e != nil {
			sh.Delete(key)
		}
		return err
	}
	st.setWholeAt(st.since(*limit, now) + d.ResetAfter.Microseconds())
	if e != nil {
		if st.wholeAt() < e.wholeAt() {
			sh.Sooner(key, st.wholeAt(), entryWholeAt)
		}
		*e = st
		return err
	}
	if !sh.insert(key, &st, now) {
		*d = limiter.Decision{}
		return s.errFull
	}
	return err
}

// applyBucket is apply's fast path for the bucket algorithms, run with sh
// locked: it updates a key of the same algorithm in place and writes the
// decision to d. It returns false, with d zeroed and nothing changed, when
// a new key had to be stored and the shard has no room (ErrFull).
//
// A bucket is whole ResetAfter after its Last, which step has set to the
// later of the stored Last and now: a caller that read the clock before
// another but locked after it finds Last ahead of now.
func (sh *shard) applyBucket(d *limiter.Decision, key string, bp *limitParams, now, n int64, isRefund bool) bool {
	e, _ := sh.Get(key)
	if e != nil && e.algorithm() == bp.limit.Algorithm {
		bp.step(d, e, now, n, isRefund)
		if d.ResetAfter <= 0 {
			// The budget is whole: a fresh key says the same, so hold nothing.
			sh.Delete(key)
			return true
		}
		// A Take only moves wholeAt later; a refund moves it earlier.
		if w := e.b + d.ResetAfter.Microseconds(); w >= e.wholeAt() {
			e.setWholeAt(w)
		} else {
			e.setWholeAt(w)
			sh.Sooner(key, w, entryWholeAt)
		}
		return true
	}
	// A new key, or one that held another algorithm's state.
	fresh := newEntry(bp.limit.Algorithm)
	bp.step(d, &fresh, now, n, isRefund)
	switch {
	case d.ResetAfter <= 0:
		if e != nil {
			sh.Delete(key)
		}
	case e != nil:
		fresh.setWholeAt(fresh.b + d.ResetAfter.Microseconds())
		if fresh.wholeAt() < e.wholeAt() {
			sh.Sooner(key, fresh.wholeAt(), entryWholeAt)
		}
		*e = fresh
	default:
		fresh.setWholeAt(fresh.b + d.ResetAfter.Microseconds())
		if !sh.insert(key, &fresh, now) {
			*d = limiter.Decision{}
			return false
		}
	}
	return true
}

// insert adds a copy of st under key, which the shard does not hold, and
// reports whether it did. A full shard first drops a key whose budget is
// whole at now; when it has none, insert stores nothing and reports false.
func (sh *shard) insert(key string, st *entry, now int64) bool {
	if !sh.Room(now, entryWholeAt) {
		return false
	}
	e := new(entry) // allocated here only, so the caller's state stays on the stack
	*e = *st
	return sh.InsertDue(key, e, now, entryWholeAt) // there is room: cannot fail
}

// since is the time st, just written at now under limit, counts from: now,
// or the state's own time when that is later (a caller that read the
// clock before another but locked after it finds the state ahead of now).
// Its ResetAfter, added to it, is exactly when the budget is whole.
func (st *entry) since(limit limiter.Limit, now int64) int64 {
	switch a := limit.Algorithm; {
	case a.IsBucket():
		return max(now, st.b) // Last
	case a == limiter.FixedWindow, a == limiter.SlidingCounter:
		return max(now, st.a*int64(limit.Period/time.Microsecond)) // the window's start
	case a == limiter.SlidingLog:
		if st.ext != nil && len(st.ext.log) > 0 {
			return max(now, st.ext.log[len(st.ext.log)-1].At) // the newest entry
		}
	}
	return now
}

// transit is transition through the fixed window's fast path where it
// covers the call (see limitParams.stepWindow).
func (s *Store) transit(st *entry, limit limiter.Limit, now, n int64, isRefund bool) (limiter.Decision, error) {
	if p := s.params.window(limit); p != nil && n >= 0 && (isRefund || n <= limit.Rate) {
		var d limiter.Decision
		p.stepWindow(&d, st, now, n, isRefund)
		return d, nil
	}
	return transition(st, limit, now, n, isRefund)
}

// transition runs the pure limiter function for st.algorithm() on st in place.
func transition(st *entry, limit limiter.Limit, now, n int64, isRefund bool) (limiter.Decision, error) {
	var (
		d   limiter.Decision
		err error
	)
	switch a := limit.Algorithm; {
	case a.IsBucket():
		b := limiter.BucketState{Level: st.a, Last: st.b}
		if isRefund {
			b, d, err = limiter.RefundBucket(limit, b, now, n)
		} else {
			b, d, err = limiter.TakeBucket(limit, b, now, n)
		}
		st.a, st.b = b.Level, b.Last
	case a == limiter.FixedWindow, a == limiter.SlidingCounter:
		w := limiter.WindowState{Window: st.a, Count: st.b, Prev: st.prev()}
		switch {
		case limit.Algorithm == limiter.FixedWindow && isRefund:
			w, d, err = limiter.RefundFixedWindow(limit, w, now, n)
		case limit.Algorithm == limiter.FixedWindow:
			w, d, err = limiter.TakeFixedWindow(limit, w, now, n)
		case isRefund:
			w, d, err = limiter.RefundSlidingCounter(limit, w, now, n)
		default:
			w, d, err = limiter.TakeSlidingCounter(limit, w, now, n)
		}
		st.a, st.b = w.Window, w.Count
		st.setPrev(w.Prev)
	case a == limiter.SlidingLog:
		var log []limiter.LogEntry
		if st.ext != nil {
			log = st.ext.log
		}
		if isRefund {
			log, d, err = limiter.RefundSlidingLog(limit, log, now, n)
		} else {
			log, d, err = limiter.TakeSlidingLog(limit, log, now, n)
		}
		switch {
		case st.ext != nil:
			st.ext.log = log
		case len(log) > 0:
			st.ext = &extra{log: log}
		}
	default:
		return limiter.Decision{}, limit.Validate() // reports the unknown algorithm
	}
	return d, err
}

// sweepLoop is the sweeper's goroutine, started by New and stopped by Close.
func (s *Store) sweepLoop() { s.sweeper.Run(s.sweep) }

// sweep deletes every key whose budget is whole again, one shard at a time,
// through the shard's heap: the steps are those the keys' writes paid for.
func (s *Store) sweep() {
	s.shards.Each(func(sh *shard) {
		now := s.now()
		sh.DeleteDue(now, entryWholeAt)
		sh.named.DeleteDue(now, entryWholeAt)
	})
}
