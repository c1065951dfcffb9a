// Package overlimit is a limiter.Store decorator that remembers rejections.
// Once the store behind it has rejected a cost c for a key with RetryAfter
// R, the bucket cannot hold c tokens again before R has passed, so every
// further request for that key, under the same Limit, costing c or more,
// is rejected here, without a call to the store, until R has passed. This
// is the scrape-bot path: one identity sending thousands of requests a
// second that are almost all rejections the gateway can already answer.
//
//	store, err := overlimit.New(redisStore, overlimit.Config{})
//
// # When it is exact
//
// Only TokenBucket and LeakyBucketPolicing are remembered: their level
// only falls with time, so "no c tokens before R" stays true whatever else
// is spent. Every other algorithm, every admission, peek, error and cost
// below c goes to the store. A Refund goes to the store and forgets the
// key. Against one store used by this process alone, a remembered answer
// is the store's own answer:
//
//   - for cost c: rejected, RetryAfter = what is left of R, ResetAfter
//     exact, Remaining exact whenever Rate divides Period in microseconds
//     (otherwise possibly one token low, never high);
//   - for c' > c: rejected, RetryAfter ≤ what is left of R plus
//     ⌈(c' − c) × Period / Rate⌉, and never earlier than the store's;
//   - for c' > Burst: limiter.ErrCostExceedsCapacity, as the store says.
//
// The store is asked again from the instant R has passed: a retry at R
// reaches it, one a microsecond earlier does not.
//
// Other processes sharing the store can only spend tokens (making the true
// wait longer, which the store will report once asked) or refund them
// (making tokens appear sooner than remembered). The cache never admits
// anything, so the budget stays exact; a refund elsewhere can only make it
// reject a little longer than necessary, at most until R.
//
// # Several budgets at once
//
// When the wrapped store is a limiter.MultiTaker, so is the cache: a
// TakeAll with a request remembered as rejected is answered here, nothing
// debited, the other requests left zero (not asked); otherwise the store
// decides and its refused requests are remembered, each under its (Key,
// Name). See TakeAll. Over another store, TakeAll returns
// limiter.ErrTakeAllUnsupported.
//
// # Cost
//
// A remembered key costs one small entry. MaxKeys bounds them; a full
// shard replaces an expired entry or, failing that, the one that expires
// soonest, among a few sampled. Keys are spread over shards with their own
// read-write locks, so a rejection answered here takes a read lock, a map
// lookup and one clock reading. Nothing runs in the background, so there is
// nothing to close.
package overlimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/internal/levelbound"
	"github.com/costguard/costguard/limiter/internal/shardmap"
)

// Defaults for the zero fields of Config.
const (
	DefaultMaxKeys = 10_000
	DefaultShards  = 32
)

// ErrInvalidConfig wraps every Config validation error.
var ErrInvalidConfig = errors.New("overlimit: invalid config")

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// MaxKeys bounds the rejections remembered at once; each shard holds
	// at most MaxKeys / Shards. Default DefaultMaxKeys (10,000).
	MaxKeys int
	// Shards is the number of independently locked partitions, at most
	// MaxKeys. Default DefaultShards (32), or MaxKeys when smaller.
	Shards int
	// Clock times the remembered rejections. It must be monotonic, as
	// time.Now is, and need not agree with the store's clock: only the
	// time elapsed since the store answered is used. Default
	// limiter.SystemClock{}.
	Clock limiter.Clock
}

// Store remembers the rejections of the limiter.Store it wraps. It is safe
// for concurrent use and owns no goroutine or connection.
type Store struct {
	next   limiter.Store
	clock  limiter.Clock
	shards shardmap.Map[shard, *shard]
}

var _ limiter.Store = (*Store)(nil)

// shard is one partition of the remembered rejections. Its lock is a
// read-write one because most calls only look a key up.
type shard struct {
	sync.RWMutex
	shardmap.Table[*entry]
	// named holds the rejections of TakeAll's named budgets, by owner and
	// name, in the shard of the owner's key (see TakeAll).
	named shardmap.KeyedTable[budget, *entry]
	// gen counts the refunds that passed through this shard. A Take reads
	// it before calling the store and records its rejection only if it has
	// not moved, so a rejection decided before a refund is never
	// remembered after it.
	gen atomic.Uint64
}

// entry is one remembered rejection of a cost c under limit, answered
// while less than R has passed. It is never modified once published: a
// newer rejection replaces it.
type entry struct {
	limit limiter.Limit
	levelbound.Rejection
}

// New wraps next. It fails with an error wrapping ErrInvalidConfig when next
// is nil or cfg has a negative field or more shards than keys.
func New(next limiter.Store, cfg Config) (*Store, error) {
	if next == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	size, err := shardmap.Size{MaxKeys: cfg.MaxKeys, Shards: cfg.Shards}.
		Resolve(ErrInvalidConfig, shardmap.Size{MaxKeys: DefaultMaxKeys, Shards: DefaultShards})
	if err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	s := &Store{next: next, clock: cfg.Clock, shards: shardmap.New[shard](size)}
	s.shards.Each(func(sh *shard) { sh.named.Init(size.PerShard(), ownBudget) })
	return s, nil
}

// Take answers a remembered rejection locally when one applies (see the
// package documentation) and otherwise asks the wrapped store, remembering
// its answer if it is a rejection.
func (s *Store) Take(ctx context.Context, key string, limit limiter.Limit, cost int64) (limiter.Decision, error) {
	sh := s.shards.Shard(key)
	if d, ok := s.Remembered(key, limit, cost); ok {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return limiter.Decision{}, fmt.Errorf("overlimit: %w", ctxErr)
		}
		if cost > limit.Burst {
			return d, fmt.Errorf("overlimit: %w", limiter.ExceedsCapacity(cost, limit.Burst))
		}
		return d, nil
	}
	gen := sh.gen.Load()
	d, err := s.next.Take(ctx, key, limit, cost)
	if err != nil {
		return d, err // an error teaches nothing about the bucket
	}
	if !d.Allowed && cost > 0 && d.RetryAfter > 0 && levelbound.Applies(limit.Algorithm) {
		s.remember(sh, gen, key, limit, cost, d)
		return d, nil
	}
	// Anything else may have changed the bucket (an admission spends; a
	// store may reset a key used under another algorithm), except a peek
	// under the remembered limit.
	s.forget(sh, key, limit, cost == 0)
	return d, nil
}

// Refund forgets key and passes the refund to the wrapped store: tokens
// given back may make a remembered rejection wrong.
func (s *Store) Refund(ctx context.Context, key string, limit limiter.Limit, amount int64) (limiter.Decision, error) {
	sh := s.shards.Shard(key)
	s.invalidate(sh, key)
	d, err := s.next.Refund(ctx, key, limit, amount)
	// Again after the store has applied it: a Take that was in flight
	// meanwhile may have answered from the state before the refund.
	s.invalidate(sh, key)
	return d, err
}

// Forget drops every remembered rejection, plain and named, and moves
// every shard's generation on, so a rejection the store decided before
// Forget is not recorded after it. Call it when the store's data may be
// lost (a Redis restart without persistence, a failover, a flush): the
// remembered rejections no longer describe its budgets. package stack
// calls it when a redisstore reports data loss (OnDataLoss).
func (s *Store) Forget() {
	s.shards.Each(func(sh *shard) { // each shard locked in turn
		sh.gen.Add(1)
		sh.Clear()
		sh.named.Clear()
	})
}

// Remembered is the rejection Take would answer locally for cost under
// limit at key, without asking the wrapped store, and whether there is
// one. A caller that must tell local answers from the store's (a circuit
// breaker counting the store's successes) asks it first.
func (s *Store) Remembered(key string, limit limiter.Limit, cost int64) (limiter.Decision, bool) {
	if cost <= 0 || !levelbound.Applies(limit.Algorithm) {
		return limiter.Decision{}, false
	}
	sh := s.shards.Shard(key)
	sh.RLock()
	e, _ := sh.Get(key)
	sh.RUnlock()
	if e == nil || e.limit != limit || cost < e.Cost {
		return limiter.Decision{}, false
	}
	return e.Answer(s.clock.Now(), cost)
}

// Len reports how many rejections are remembered, expired ones included
// until they are replaced or evicted.
func (s *Store) Len() int { return s.shards.Len() }

// remember records the store's rejection of cost, unless a refund passed
// through the shard since gen was read.
func (s *Store) remember(sh *shard, gen uint64, key string, limit limiter.Limit, cost int64, d limiter.Decision) {
	e := s.rejection(limit, cost, d)
	if e == nil {
		return
	}
	sh.Lock()
	defer sh.Unlock()
	if sh.gen.Load() != gen {
		return
	}
	sh.Insert(key, e, e.rank)
}

// rejection is the entry remembering the store's rejection d of cost, or
// nil when there is nothing sound to remember.
func (s *Store) rejection(limit limiter.Limit, cost int64, d limiter.Decision) *entry {
	b, err := levelbound.New(limit)
	if err != nil || cost > b.Burst {
		return nil // the store should have refused it; nothing sound to keep
	}
	e := &entry{limit: limit, Rejection: levelbound.Rejection{
		Bucket: b,
		Cost:   cost,
		// Read after the answer: the store decided no later than this,
		// so R counted from here never ends before the true R.
		At:    s.clock.Now(),
		Retry: d.RetryAfter.Microseconds(),
		Level: b.MaxLevel(d, cost),
	}}
	if e.Retry <= 0 {
		return nil
	}
	return e
}

// rank is the eviction order of a full shard taking e: an expired entry
// of a sample goes first, else the sampled entry that expires soonest.
func (e *entry) rank(old *entry) (int64, bool) {
	left := old.Expires().Sub(e.At)
	return int64(left), left <= 0
}

// forget drops key's entry, if any, unless the call was a peek under the
// entry's own limit. The read lock keeps the common case, an admission for
// a key with nothing remembered, off the write lock.
func (s *Store) forget(sh *shard, key string, limit limiter.Limit, peek bool) {
	sh.RLock()
	e, _ := sh.Get(key)
	sh.RUnlock()
	if e == nil || peek && e.limit == limit {
		return
	}
	sh.Lock()
	sh.Delete(key)
	sh.Unlock()
}

// invalidate drops key's entry and moves the shard's generation on, so
// rejections decided before now are not recorded afterwards.
func (s *Store) invalidate(sh *shard, key string) {
	sh.Lock()
	sh.gen.Add(1)
	sh.Delete(key)
	sh.Unlock()
}
