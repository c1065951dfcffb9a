// Package stack puts together the stores a rate limiter decides with: the
// budget store (a shared one such as redisstore, or an in-memory default it
// owns), the over-limit cache in front of it (limiter/overlimit), split-
// budget leases for the budgets that want them (limiter/splitbudget), the
// local buckets a fail-open policy falls back to (limiter/lastknown: each
// starts from the store's last word on it, or empty), and the overflow
// buckets of identities a full memory store cannot hold. It is the one place that
// knows which decorator goes where; package middleware builds its stores
// with it, and so can a program that decides budgets without HTTP.
//
// When the store reports that it lost its data (DataLossNotifier, which
// redisstore.Store implements), the Stack drops what it derived from it:
// the over-limit caches forget their rejections and the split-budget
// leases are discarded, so the middleware needs nothing of its own.
//
// StoreAll hands out the store as a limiter.MultiTaker for the several
// budgets of one request (TakeAll), or says why it cannot: split-budget
// leases never decide several budgets at once, so a configuration that
// combines them with multi-limits is refused when it is loaded. Overflow
// is a memory store, Fallback a lastknown store, both with TakeAll.
//
//	st, err := stack.New(stack.Config{Store: redisStore})
//	defer st.Close()
//	d, err := st.Store(false).Take(ctx, "user:42", limit, cost)
//	if stack.IsFull(err) {
//		d, err = st.Overflow().Take(ctx, "overflow:free", limit, cost)
//	}
package stack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/lastknown"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/overlimit"
	"github.com/costguard/costguard/limiter/splitbudget"
)

// Taker is the least a budget store does: limiter.Store without Refund.
// The over-limit cache and split budgets need Refund too.
type Taker interface {
	Take(ctx context.Context, key string, limit limiter.Limit, cost int64) (limiter.Decision, error)
}

var _ Taker = limiter.Store(nil)

// TakeAller is a Taker that also decides several budgets of one request
// in one atomic step (limiter.MultiTaker).
type TakeAller interface {
	Taker
	limiter.MultiTaker
}

// DataLossNotifier is a Store that tells when it has lost its data (a
// Redis restart without persistence, a failover to a replica that lagged,
// a flush), as redisstore.Store does. New subscribes to it: on each loss
// the Stack forgets every remembered rejection (overlimit.Store.Forget)
// and drops every split-budget lease (splitbudget.Store.Drop), so no
// request is refused, or admitted, from local state the store no longer
// backs. Close unsubscribes.
type DataLossNotifier interface {
	OnDataLoss(f func()) (stop func())
}

// OverLimitCache chooses whether rejections are remembered in this process.
type OverLimitCache string

const (
	// OverLimitCacheAuto (or ""): on for a shared Store (any limiter.Store
	// other than a *memorystore.Store), where it saves a network round
	// trip; off for the in-memory store, which answers in a lock anyway.
	OverLimitCacheAuto OverLimitCache = "auto"
	// OverLimitCacheOn always remembers rejections; it needs a Store with
	// Refund.
	OverLimitCacheOn OverLimitCache = "on"
	// OverLimitCacheOff sends every decision to the store.
	OverLimitCacheOff OverLimitCache = "off"
)

// Configuration errors New returns: ErrInvalidConfig wraps them all; the
// other two say which decorator needs Refund of a Take-only Store (the
// over-limit cache, split budgets).
var (
	ErrInvalidConfig          = errors.New("stack: invalid config")
	ErrOverLimitNeedsRefund   = errors.New("needs a Store with Refund (a limiter.Store)")
	ErrSplitBudgetNeedsRefund = errors.New("SplitBudget needs a Store with Refund (a limiter.Store)")
)

// Config says what to put together. Zero fields take the defaults of the
// packages they configure.
type Config struct {
	// Store holds the budgets. Nil: an in-memory store the Stack owns
	// (released by Close), sized by MemoryMaxKeys.
	Store Taker
	// MemoryMaxKeys bounds the in-memory stores the Stack creates: the
	// default Store and the fail-open fallback (the budgets it knows).
	// Default memorystore.DefaultMaxKeys.
	MemoryMaxKeys int
	// OverflowKeys is how many overflow buckets the Stack holds (one per
	// plan, say). Default 1.
	OverflowKeys int
	// OverLimitCache puts the over-limit cache in front of the store.
	OverLimitCache OverLimitCache
	// SplitBudget builds split-budget leases on the store for Store(true);
	// it needs a Store with Refund.
	SplitBudget bool
	// LeaseFraction and SettleInterval tune the leases (splitbudget.Config).
	LeaseFraction  float64
	SettleInterval time.Duration
	// OnSettleError is told of unspent lease tokens that could not be given
	// back (they return by refill).
	OnSettleError func(key string, err error)
	// Clock is the time source of the in-memory stores and the decorators.
	// Default limiter.SystemClock.
	Clock limiter.Clock
}

// Stack is a put-together set of stores. Close releases what it owns: the
// in-memory stores it created, the split budget's leases (given back to
// the store) and its subscription to the store's data-loss reports; it
// never closes Config.Store.
type Stack struct {
	exact    Taker // the store, behind the over-limit cache when on
	multi    bool  // the store is a limiter.MultiTaker, and so is exact
	local    bool  // the store is an in-memory store: it never waits
	leased   Taker // split-budget leases, behind the cache when on; nil without SplitBudget
	owned    *memorystore.Store
	fallback *lastknown.Store
	overflow *memorystore.Store
	split    *splitbudget.Store
	caches   []*overlimit.Store // the over-limit caches New built
	stopLoss func()             // unsubscribes from the store's data-loss reports
}

// New validates cfg and puts the stores together.
func New(cfg Config) (*Stack, error) {
	if cfg.MemoryMaxKeys < 0 || cfg.OverflowKeys < 0 {
		return nil, fmt.Errorf("%w: MemoryMaxKeys (%d) and OverflowKeys (%d) must not be negative", ErrInvalidConfig, cfg.MemoryMaxKeys, cfg.OverflowKeys)
	}
	full, hasRefund := cfg.Store.(limiter.Store)
	cache := false
	switch cfg.OverLimitCache {
	case "", OverLimitCacheAuto:
		_, inMemory := cfg.Store.(*memorystore.Store)
		cache = cfg.Store != nil && hasRefund && !inMemory
	case OverLimitCacheOn:
		if cfg.Store != nil && !hasRefund {
			return nil, fmt.Errorf("%w: OverLimitCache %q %w", ErrInvalidConfig, cfg.OverLimitCache, ErrOverLimitNeedsRefund)
		}
		cache = true
	case OverLimitCacheOff:
	default:
		return nil, fmt.Errorf("%w: OverLimitCache %q is none of %q, %q, %q", ErrInvalidConfig, cfg.OverLimitCache, OverLimitCacheAuto, OverLimitCacheOn, OverLimitCacheOff)
	}
	if cfg.SplitBudget && cfg.Store != nil && !hasRefund {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, ErrSplitBudgetNeedsRefund)
	}

	s := &Stack{}
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
	s.exact = cfg.Store
	if cfg.Store == nil {
		if s.owned, err = memorystore.New(memCfg); err != nil {
			s.Close()
			return nil, fmt.Errorf("%w: default store: %w", ErrInvalidConfig, err)
		}
		s.exact, full = s.owned, s.owned
	}
	_, inMemory := cfg.Store.(*memorystore.Store)
	s.local = cfg.Store == nil || inMemory
	_, s.multi = full.(limiter.MultiTaker)
	if cfg.Store != nil && !hasRefund {
		_, s.multi = cfg.Store.(limiter.MultiTaker)
	}
	wrap := func(st limiter.Store) (Taker, error) {
		if !cache {
			return st, nil
		}
		c, err := overlimit.New(st, overlimit.Config{Clock: cfg.Clock})
		if err != nil {
			return nil, fmt.Errorf("%w: over-limit cache: %w", ErrInvalidConfig, err)
		}
		s.caches = append(s.caches, c)
		return c, nil
	}
	if cache {
		if s.exact, err = wrap(full); err != nil {
			s.Close()
			return nil, err
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
		if s.leased, err = wrap(s.split); err != nil {
			s.Close()
			return nil, err
		}
		if cache {
			// The cache has a TakeAll, which leases cannot serve: hide it.
			s.leased = oneAtATime{s.leased.(limiter.Store)}
		}
	}
	if n, ok := cfg.Store.(DataLossNotifier); ok && (len(s.caches) > 0 || s.split != nil) {
		s.stopLoss = n.OnDataLoss(s.dropDerived)
	}
	return s, nil
}

// dropDerived drops the local state derived from the store's answers: the
// remembered rejections and the split-budget leases. The fail-open
// fallback and the overflow buckets are this process's own and stay.
func (s *Stack) dropDerived() {
	for _, c := range s.caches {
		c.Forget()
	}
	if s.split != nil {
		s.split.Drop()
	}
}

// oneAtATime is the over-limit cache in front of split-budget leases,
// with Take and Refund only: Store(true) of a Stack with SplitBudget is
// never a limiter.MultiTaker.
type oneAtATime struct{ limiter.Store }

// Store returns the store of a budget: exact (the store, behind the
// over-limit cache when it is on), or split-budget leases on it when
// leased is true and the Stack was built with SplitBudget. Leases are
// one budget's each, so Store(true) of such a Stack never implements
// limiter.MultiTaker. Store(false) may implement it and still refuse
// (the over-limit cache in front of a Config.Store without TakeAll
// answers ErrTakeAllUnsupported): StoreAll is the one to ask.
func (s *Stack) Store(leased bool) Taker {
	if leased && s.leased != nil {
		return s.leased
	}
	return s.exact
}

// StoreAll returns the store that decides several budgets of one request
// at once (limiter.MultiTaker), as Store(leased) would decide each alone:
// the store, behind the over-limit cache when it is on. It fails with an
// error wrapping limiter.ErrTakeAllUnsupported when leased is true and
// the Stack was built with SplitBudget (leases split one budget between
// processes; several cannot be debited atomically), or when Config.Store
// is not a limiter.MultiTaker. A caller checks it when it loads its
// configuration, so a plan combining split budgets with several limits
// per request is refused at start.
func (s *Stack) StoreAll(leased bool) (TakeAller, error) {
	if leased && s.leased != nil {
		return nil, fmt.Errorf("stack: split-budget leases: %w", limiter.ErrTakeAllUnsupported)
	}
	if !s.multi {
		return nil, fmt.Errorf("stack: store %T: %w", s.exact, limiter.ErrTakeAllUnsupported)
	}
	return s.exact.(TakeAller), nil
}

// Local reports whether the store is an in-memory one (the Stack's own,
// or a *memorystore.Store), which answers under a lock and never waits:
// a caller may skip the deadline it would give a network round trip.
func (s *Stack) Local() bool { return s.local }

// Fallback is this process's local buckets, for a fail-open policy to
// decide with while the store is away. It decides several budgets at once
// as the store does (TakeAll). It starts each budget from what it was told
// of it (lastknown.Store.Observe: hand it the store's decisions), or empty:
// never from a fresh, full bucket.
func (s *Stack) Fallback() *lastknown.Store { return s.fallback }

// Overflow holds the buckets shared by the identities a full memory store
// cannot hold (IsFull): a flood of new identities spends these, never
// another identity's budget. It has TakeAll too.
func (s *Stack) Overflow() TakeAller { return s.overflow }

// IsFull reports whether err says a memory store could not take a new
// identity without resetting another's budget (memorystore.ErrFull).
func IsFull(err error) bool { return errors.Is(err, memorystore.ErrFull) }

// Close gives the split budget's leases back and releases the in-memory
// stores the Stack created. Config.Store is the caller's to close.
func (s *Stack) Close() error {
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
