// Package stack puts together the stores a rate limiter decides with: the
// budget store (a shared one such as redisstore, or an in-memory default it
// owns), the over-limit cache in front of it (limiter/overlimit), split-
// budget leases for the budgets that want them (limiter/splitbudget), and,
// between the cache and the store, the guard of what happens when the
// store fails (limiter/guard: the call timeout, the circuit breaker, the
// fail-open fallback of limiter/lastknown and the flush of its debts, the
// overflow buckets of identities a full memory store cannot hold). It is
// the one place that knows which decorator goes where; package middleware
// builds its stores with it, and so can a program that decides budgets
// without HTTP.
//
// A Stack is a guard.Guard: its Take, TakeAll, Refund, RefundAll and
// TakeSpent are the one surface a caller decides with, each call saying
// its failure mode (guard.Call) and each reporting what it did in a
// guard.Trace. The over-limit cache answers a refusal it remembers before
// the guard (so a remembered refusal neither waits for the breaker nor
// counts as the store's answer); it remembers only the store's own
// refusals, never the fallback's.
//
// When the store reports that it lost its data (DataLossNotifier, which
// redisstore.Store implements), the Stack drops what it derived from it:
// the over-limit caches forget their rejections, the split-budget leases
// are discarded and the fail-open fallback's debts are dropped (never
// repaid into a fresh budget), so the caller needs nothing of its own. A
// store that can also be asked at once (DataLossChecker) is asked before
// each flush of those debts.
//
// The store must give points back (limiter.Store with Refund); to decide
// several budgets of one request at once (TakeAll, for quotas and field
// limits) it must also be a limiter.MultiTaker and a
// limiter.MultiRefunder. CanTakeAll says whether it can: split-budget
// leases never decide several budgets at once, so a configuration that
// combines them with multi-limits is refused when it is loaded.
//
//	st, err := stack.New(stack.Config{Store: redisStore})
//	defer st.Close()
//	var tr guard.Trace
//	d, err := st.Take(ctx, guard.Call{Plan: "free", FailOpen: true}, "user:42", limit, cost, &tr)
//	...
//	_, err = st.Refund(ctx, tr.Receipt, limit, unused)
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/limiter/lastknown"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/overlimit"
	"github.com/costguard/costguard/limiter/splitbudget"
)

// TakeAller decides one budget or several of one request at once, and
// gives them back.
type TakeAller interface {
	limiter.Store
	guard.MultiStore
}

// DataLossNotifier is a Store that tells when it has lost its data (a
// Redis restart without persistence, a failover to a replica that lagged,
// a flush), as redisstore.Store does. New subscribes to it (unless the
// store is an in-memory one): on each loss the Stack forgets every
// remembered rejection (overlimit.Store.Forget), drops every split-budget
// lease (splitbudget.Store.Drop) and the fail-open fallback's debts
// (lastknown.Store.DropDebts), so no request is refused, or admitted, from
// local state the store no longer backs, and nothing is repaid into a
// fresh budget. Close unsubscribes.
type DataLossNotifier interface {
	OnDataLoss(f func()) (stop func())
}

// DataLossChecker is a DataLossNotifier that can be asked at once, as
// redisstore.Store can: CheckDataLoss probes the store now and reports a
// loss to the listeners before it returns, or fails when it cannot tell.
// The guard asks it before each flush of the fallback's debts
// (guard.Config.CheckDataLoss), so a restart or a flush during an outage
// drops the debts before the flush could repay them.
type DataLossChecker interface {
	DataLossNotifier
	CheckDataLoss(ctx context.Context) error
}

// OverLimitCache chooses whether rejections are remembered in this process.
type OverLimitCache string

const (
	// OverLimitCacheAuto (or ""): on for a shared Store (one that does not
	// declare itself local, limiter.Local), where it saves a network round
	// trip; off for an in-memory store, which answers in a lock anyway.
	OverLimitCacheAuto OverLimitCache = "auto"
	// OverLimitCacheOn always remembers rejections.
	OverLimitCacheOn OverLimitCache = "on"
	// OverLimitCacheOff sends every decision to the store.
	OverLimitCacheOff OverLimitCache = "off"
)

// DefaultStoreTimeout bounds each call to a shared store when
// Config.StoreTimeout is zero.
const DefaultStoreTimeout = 100 * time.Millisecond

// ErrInvalidConfig wraps every configuration error New returns.
var ErrInvalidConfig = errors.New("stack: invalid config")

// Validate refuses a value that is none of the OverLimitCache constants
// ("" is OverLimitCacheAuto).
func (c OverLimitCache) Validate() error {
	switch c {
	case "", OverLimitCacheAuto, OverLimitCacheOn, OverLimitCacheOff:
		return nil
	}
	return fmt.Errorf("%w: OverLimitCache %q is none of %q, %q, %q", ErrInvalidConfig, c, OverLimitCacheAuto, OverLimitCacheOn, OverLimitCacheOff)
}

// Config says what to put together. Zero fields take the defaults of the
// packages they configure.
type Config struct {
	// Store holds the budgets. Nil: an in-memory store the Stack owns
	// (released by Close), sized by MemoryMaxKeys.
	Store limiter.Store
	// MemoryMaxKeys bounds the in-memory stores the Stack creates: the
	// default Store and the fail-open fallback (the budgets it knows).
	// Default memorystore.DefaultMaxKeys.
	MemoryMaxKeys int
	// OverflowKeys is how many overflow buckets the Stack holds (one per
	// plan, say). Default 1.
	OverflowKeys int
	// OverLimitCache puts the over-limit cache in front of the store.
	OverLimitCache OverLimitCache
	// SplitBudget builds split-budget leases on the store, for the calls
	// with guard.Call.Leased.
	SplitBudget bool
	// LeaseFraction and SettleInterval tune the leases (splitbudget.Config).
	LeaseFraction  float64
	SettleInterval time.Duration
	// OnSettleError is told of unspent lease tokens that could not be given
	// back (they return by refill).
	OnSettleError func(key string, err error)
	// StoreTimeout bounds every call to a shared store (the in-memory one
	// never waits). Default DefaultStoreTimeout.
	StoreTimeout time.Duration
	// Breaker tunes the circuit breaker in front of a shared store (the
	// in-memory one has none); zero fields take limiter/breaker's
	// defaults. NoBreaker leaves it out.
	Breaker   breaker.Config
	NoBreaker bool
	// Logger is told when the breaker moves. Default slog.Default().
	Logger *slog.Logger
	// FlushInterval is how often the fail-open fallback's debts are
	// debited from a shared store while any is held (guard.Config).
	// Default guard.DefaultFlushInterval.
	FlushInterval time.Duration
	// Clock is the time source of the in-memory stores and the decorators.
	// Default limiter.SystemClock.
	Clock limiter.Clock
}

// Stack is a put-together set of stores, decided with through its
// guard.Guard. Close stops the guard's flush and releases what it
// owns: the in-memory stores it created, the split budget's leases (given
// back to the store) and its subscription to the store's data-loss
// reports; it never closes Config.Store.
type Stack struct {
	*guard.Guard
	exact    limiter.Store // the store, behind the over-limit cache when on
	multi    bool          // the store decides several budgets at once, and so does exact
	local    bool          // the store is an in-memory store: it never waits
	leased   limiter.Store // split-budget leases, behind the cache when on; nil without SplitBudget
	owned    *memorystore.Store
	fallback *lastknown.Store
	overflow *memorystore.Store
	split    *splitbudget.Store
	caches   []*overlimit.Store // the over-limit caches New built
	// overflowKeys is the room of the overflow store.
	overflowKeys int
	stopLoss     func() // unsubscribes from the store's data-loss reports
}

// New validates cfg and puts the stores together.
func New(cfg Config) (*Stack, error) {
	if cfg.MemoryMaxKeys < 0 || cfg.OverflowKeys < 0 {
		return nil, fmt.Errorf("%w: MemoryMaxKeys (%d) and OverflowKeys (%d) must not be negative", ErrInvalidConfig, cfg.MemoryMaxKeys, cfg.OverflowKeys)
	}
	if cfg.StoreTimeout < 0 || cfg.FlushInterval < 0 {
		return nil, fmt.Errorf("%w: StoreTimeout (%v) and FlushInterval (%v) must not be negative", ErrInvalidConfig, cfg.StoreTimeout, cfg.FlushInterval)
	}
	// The lease tuning is checked even without leases: a bad value is a
	// mistake now, not when a plan first asks for SplitBudget.
	if err := (splitbudget.Config{LeaseFraction: cfg.LeaseFraction, SettleInterval: cfg.SettleInterval}).Validate(); err != nil {
		return nil, fmt.Errorf("%w: SplitBudget: %w", ErrInvalidConfig, err)
	}
	// Where the store keeps its budgets is the store's to say
	// (limiter.Local), not a guess from its type.
	local := cfg.Store == nil || limiter.IsLocal(cfg.Store)
	if err := cfg.OverLimitCache.Validate(); err != nil {
		return nil, err
	}
	cache := cfg.OverLimitCache == OverLimitCacheOn || !local && cfg.OverLimitCache != OverLimitCacheOff
	var brk *breaker.Breaker
	if !cfg.NoBreaker {
		var err error
		if brk, err = breaker.New(cfg.Breaker); err != nil {
			return nil, fmt.Errorf("%w: Breaker: %w", ErrInvalidConfig, err)
		}
	}

	s := &Stack{overflowKeys: max(cfg.OverflowKeys, 1)}
	memCfg := memorystore.Config{Clock: cfg.Clock, MaxKeys: cfg.MemoryMaxKeys}
	var err error
	if s.fallback, err = lastknown.New(lastknown.Config{Clock: cfg.Clock, MaxBudgets: cfg.MemoryMaxKeys}); err != nil {
		return nil, fmt.Errorf("%w: fallback store: %w", ErrInvalidConfig, err)
	}
	// One shard, a key per overflow bucket: it is never full itself.
	if s.overflow, err = memorystore.New(memorystore.Config{Clock: cfg.Clock, MaxKeys: max(cfg.OverflowKeys, 1), Shards: 1}); err != nil {
		s.Close()
		return nil, fmt.Errorf("%w: overflow store: %w", ErrInvalidConfig, err)
	}
	full := cfg.Store
	if full == nil {
		if s.owned, err = memorystore.New(memCfg); err != nil {
			s.Close()
			return nil, fmt.Errorf("%w: default store: %w", ErrInvalidConfig, err)
		}
		full = s.owned
	}
	s.exact = full
	s.local = local
	// Several budgets at once need TakeAll and RefundAll both.
	multi, _ := full.(guard.MultiStore)
	s.multi = multi != nil
	wrap := func(st limiter.Store) (*overlimit.Store, error) {
		c, err := overlimit.New(st, overlimit.Config{Clock: cfg.Clock})
		if err != nil {
			return nil, fmt.Errorf("%w: over-limit cache: %w", ErrInvalidConfig, err)
		}
		s.caches = append(s.caches, c)
		return c, nil
	}
	var exactCache *overlimit.Store
	if cache {
		if exactCache, err = wrap(full); err != nil {
			s.Close()
			return nil, err
		}
		s.exact = exactCache
		if multi != nil {
			multi = exactCache
		}
	}
	if cfg.SplitBudget {
		s.split, err = splitbudget.New(full, splitbudget.Config{
			LeaseFraction:  cfg.LeaseFraction,
			SettleInterval: cfg.SettleInterval,
			Clock:          cfg.Clock,
			OnSettleError:  cfg.OnSettleError,
		})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("%w: SplitBudget: %w", ErrInvalidConfig, err)
		}
		s.leased = s.split
		if cache {
			c, err := wrap(s.split)
			if err != nil {
				s.Close()
				return nil, err
			}
			// The cache has a TakeAll, which leases cannot serve: hide it.
			s.leased = oneAtATime{c}
		}
	}
	gcfg := guard.Config{
		Store:    s.exact,
		Multi:    multi,
		Leased:   s.leased,
		Fallback: s.fallback,
		Overflow: s.overflow,
		Local:    s.local,
		Timeout:  cfg.StoreTimeout,
		Breaker:  brk,
		Clock:    cfg.Clock,
		Logger:   cfg.Logger,

		FlushInterval: cfg.FlushInterval,
	}
	if c, ok := cfg.Store.(DataLossChecker); ok && !s.local {
		gcfg.CheckDataLoss = c.CheckDataLoss
	}
	if gcfg.Timeout == 0 {
		gcfg.Timeout = DefaultStoreTimeout
	}
	if exactCache != nil {
		gcfg.Cache = exactCache
	}
	if s.Guard, err = guard.New(gcfg); err != nil {
		s.Close()
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if n, ok := cfg.Store.(DataLossNotifier); ok && !s.local {
		s.stopLoss = n.OnDataLoss(s.dropDerived)
	}
	if gcfg.CheckDataLoss != nil {
		// A loss is found against an earlier probe: take that baseline
		// now, before the first decision learns anything from the store,
		// not in the probe loop's first round, which a busy process may
		// run after an early outage has begun (its debts would then be
		// repaid into the budget of a Redis that restarted empty). A store
		// that does not answer now is compared from its first answer.
		ctx, cancel := context.WithTimeout(context.Background(), gcfg.Timeout)
		_ = gcfg.CheckDataLoss(ctx)
		cancel()
	}
	return s, nil
}

// dropDerived drops the local state derived from the store's answers: the
// remembered rejections, the split-budget leases and the fail-open
// fallback's debts to the store. What the fallback knows of each budget
// and the overflow buckets stay: they only err on the strict side, and
// the store's next answers replace them.
func (s *Stack) dropDerived() {
	for _, c := range s.caches {
		c.Forget()
	}
	if s.split != nil {
		s.split.Drop()
	}
	s.fallback.DropDebts()
}

// oneAtATime is the over-limit cache in front of split-budget leases,
// with Take and Refund only: Store(true) of a Stack with SplitBudget is
// never a limiter.MultiTaker.
type oneAtATime struct{ limiter.Store }

// Store returns the store of a budget, below the guard: exact (the store,
// behind the over-limit cache when it is on), or split-budget leases on it
// when leased is true and the Stack was built with SplitBudget. Leases are
// one budget's each, so Store(true) of such a Stack never implements
// limiter.MultiTaker. A caller decides through the Stack's guard (Take);
// Store is for tests and tools that read a budget behind its back.
func (s *Stack) Store(leased bool) limiter.Store {
	if leased && s.leased != nil {
		return s.leased
	}
	return s.exact
}

// StoreAll returns the store that decides several budgets of one request
// at once, below the guard, as Store(leased) would decide each alone, or
// the error CanTakeAll reports.
func (s *Stack) StoreAll(leased bool) (TakeAller, error) {
	if err := s.CanTakeAll(leased); err != nil {
		return nil, err
	}
	return s.exact.(TakeAller), nil
}

// CanTakeAll reports whether TakeAll can decide several budgets at once
// for the calls with guard.Call.Leased = leased: it fails with an error
// wrapping limiter.ErrTakeAllUnsupported when leased is true and the Stack
// was built with SplitBudget (leases split one budget between processes;
// several cannot be debited atomically), or when Config.Store is not a
// limiter.MultiTaker and a limiter.MultiRefunder. A caller checks it when
// it loads its configuration, so a plan combining split budgets with
// several limits per request is refused at start.
func (s *Stack) CanTakeAll(leased bool) error {
	if leased && s.leased != nil {
		return fmt.Errorf("stack: split-budget leases: %w", limiter.ErrTakeAllUnsupported)
	}
	if !s.multi {
		return fmt.Errorf("stack: store %T is not a limiter.MultiTaker and a limiter.MultiRefunder: %w", s.exact, limiter.ErrTakeAllUnsupported)
	}
	return nil
}

// Leases reports whether the Stack was built with split-budget leases
// (Config.SplitBudget), which calls with guard.Call.Leased take from.
func (s *Stack) Leases() bool { return s.leased != nil }

// OverflowKeys is how many overflow buckets the Stack has room for.
func (s *Stack) OverflowKeys() int { return s.overflowKeys }

// Local reports whether the store is an in-memory one (the Stack's own,
// or one that declares itself local, limiter.Local), which answers under
// a lock and never waits.
func (s *Stack) Local() bool { return s.local }

// Fallback is this process's local buckets, which the guard decides with
// for a fail-open call while the store is away. It decides several budgets
// at once as the store does (TakeAll). It starts each budget from what it
// was told of it (the guard hands it the store's decisions), or empty:
// never from a fresh, full bucket.
func (s *Stack) Fallback() *lastknown.Store { return s.fallback }

// Overflow holds the buckets shared by the identities a full memory store
// cannot hold: a flood of new identities spends these, never another
// identity's budget. It has TakeAll too.
func (s *Stack) Overflow() TakeAller { return s.overflow }

// IsFull reports whether err says a memory store could not take a new
// identity without resetting another's budget (memorystore.ErrFull).
func IsFull(err error) bool { return errors.Is(err, memorystore.ErrFull) }

// Close stops the guard's flush, gives the split budget's leases back
// and releases the in-memory stores the Stack created. Config.Store is the
// caller's to close.
func (s *Stack) Close() error {
	if s.Guard != nil {
		s.Guard.Close()
	}
	if s.stopLoss != nil {
		s.stopLoss()
	}
	var err error
	if s.split != nil {
		err = s.split.Close()
	}
	if s.fallback != nil {
		err = errors.Join(err, s.fallback.Close())
	}
	for _, m := range []*memorystore.Store{s.overflow, s.owned} {
		if m != nil {
			err = errors.Join(err, m.Close())
		}
	}
	return err
}
