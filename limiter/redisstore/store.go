// Package redisstore is the limiter.Store for Redis: standalone, Sentinel
// or Cluster, through any go-redis v9 client. Many gateway processes sharing
// one Redis share one exact budget per key.
//
// Decisions run in one Lua script (common.lua, persist.lua, bucket.lua,
// fixed_window.lua, sliding_counter.lua, sliding_log.lua and the entry point
// batch.lua, concatenated), which reproduces the integer arithmetic of package limiter
// exactly, so the same inputs give the same decisions as the memory store.
// One script call decides for one key or for many, each atomically. Scripts
// go through EVALSHA, falling back to EVAL when a server has not cached the
// script yet.
//
// # Coalescing
//
// By default concurrent decisions share round trips: while one round trip
// is in flight, new calls queue, and the next round trip carries them all.
// Keys that may share a script call do (any keys on a standalone or
// Sentinel server, one hash slot's on a Cluster), up to MaxScriptKeys per
// call; several script calls go out as one pipeline (per node, on a
// Cluster). A call that finds the store idle is sent at once, from its
// own goroutine when its ctx allows (see below), else by a sender.
// The knobs, all in Config:
//
//	DisableCoalescing  one round trip per call, in the caller's goroutine
//	MaxBatchSize       most decisions per round trip (default 64)
//	MaxBatchWait       how long a batch may wait to fill (default 0)
//	MaxInFlight        round trips in flight at once (default 1; 4 on a
//	                   Cluster or Ring)
//
// Every caller's ctx is honoured. A caller whose call was handed to a
// sender returns at once when its ctx ends; its call is dropped if it was
// still queued, and if it was already sent its decision is discarded (the
// debit may have happened, as with any timeout).
//
// The idle fast path: a call finding nothing queued and a round trip free
// skips the hand-off to a sender goroutine and runs its round trip inline,
// provided its ctx never ends (no Done channel) or has a deadline that
// the client sets on its socket (a go-redis *Client, *ClusterClient or
// *Ring with ContextTimeoutEnabled). There its deadline is honoured, and
// a cancellation is seen until the command is sent, as with any go-redis
// call. A ctx that can be cancelled but has no deadline always takes the
// hand-off, so its caller can leave at once.
//
// New starts the store's MaxInFlight sender goroutines; Close stops them,
// after the round trips in flight. Close a store you are done with.
//
// The store's script commands are never resent by go-redis's retries
// (MaxRetries), which would run a script twice: a call that times out
// returns an error, and its debit, if Redis ran it, happened once.
//
// Time comes from Redis TIME inside the script, so the clocks of the
// gateways never matter. Config.Clock overrides it for tests only.
//
// # Keys
//
// Every (identity, algorithm) pair is one key:
//
//	<prefix>:{<identity>}:<algorithm>      e.g. costguard:{user42}:token_bucket
//
// <algorithm> is limiter.Algorithm.String(). The identity is the hash tag,
// so all of an identity's keys share a Cluster slot; as a script call
// carries keys of one slot only, none can meet CROSSSLOT. In the
// identity, '%', '{' and '}' are percent-encoded (%25, %7B, %7D); the empty
// identity is written "%"; an identity longer than MaxRawIdentity bytes is
// replaced by "%#" and its SHA-256 in hex. No input can end the tag early
// or share a key with another input.
//
// The bucket algorithms keep a HASH {l: level, t: last update µs}, the
// window algorithms a HASH {w: window index, c: count[, p: previous
// count]}, SlidingLog a ZSET with one member per admission instant and one
// holding the total. Like the memory store, every decision writes back the
// state it computed, with PEXPIRE set to the time until the budget is whole
// again plus Config.ExpiryMargin, and a budget that is whole deletes its
// key: an absent key decides exactly like a whole budget.
//
// # Several budgets at once
//
// TakeAll (limiter.MultiTaker) debits several budgets all or none in one
// run of one script, multi.lua, which holds every algorithm family's
// decide: it decides all of them without writing, then takes them all
// only if each fits. A budget with Request.Name "" is Take's key; a named
// one is
//
//	<prefix>:{<identity>}:<algorithm>:<name>    e.g. costguard:{user42}:fixed_window:quota
//
// under the same hash tag. On a Cluster every budget of one call must hash
// to one slot (on a Ring, share one tag): one TakeAll per owner. Otherwise
// TakeAll fails with ErrCrossSlot and sends nothing. With coalescing on, a
// TakeAll shares round trips with Take and Refund, as a script call of its
// own. See multi.go.
//
// # Concurrency slots
//
// A Store is also a concurrency.Slots (Acquire, Release, Refresh): at most
// N leases per identity in flight across every process on the Redis, in
// one ZSET per identity, <prefix>:{<identity>}:concurrency, whose members
// are lease ids scored by their expiry in µs of Redis TIME. Each call is
// one run of concurrency.lua (after common.lua), one key, sent from the
// caller's goroutine and never coalesced. See concurrency.go.
//
// # Data loss
//
// OnDataLoss reports that Redis lost the data a process learnt from (a
// restart, a failover, a flush), so local state derived from it can be
// dropped; package stack subscribes. Once someone listens, one probe per
// node per Config.DataLossInterval checks the node's run_id and an epoch
// key; decisions carry nothing extra. See dataloss.go.
//
// docs/redis.md has the details: coalescing, expiry, time, Cluster
// behaviour, failures and retries.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/limiter"
)

// DefaultPrefix starts every key unless Config.Prefix is set.
const DefaultPrefix = "costguard"

// DefaultExpiryMargin is how long a key outlives the moment its budget is
// whole again, unless Config.ExpiryMargin is set.
const DefaultExpiryMargin = time.Second

// Coalescing defaults and bounds.
const (
	// DefaultMaxBatchSize is Config.MaxBatchSize's default.
	DefaultMaxBatchSize = 64
	// MaxScriptKeys is the most decisions one script call makes. Redis runs
	// one script at a time and nothing else meanwhile, so this bounds how
	// long a batch holds the server: under 1 ms for token buckets even on
	// the loaded 2-core benchmark VM (SlidingLog rejections can take longer,
	// see docs/redis.md). Larger batches become several script calls,
	// pipelined.
	MaxScriptKeys = 64
	// MaxMaxBatchSize bounds Config.MaxBatchSize.
	MaxMaxBatchSize = 1024
	// MaxMaxBatchWait bounds Config.MaxBatchWait: waiting adds latency to
	// every batch under load, so only a short wait makes sense.
	MaxMaxBatchWait = 10 * time.Millisecond
	// DefaultMaxInFlight is Config.MaxInFlight's default for a client of
	// one server (*redis.Client, Sentinel included).
	DefaultMaxInFlight = 1
	// DefaultMultiNodeMaxInFlight is Config.MaxInFlight's default for a
	// *redis.ClusterClient or *redis.Ring. A batch there is a pipeline per
	// node, as slow as its slowest node, and with one in flight the other
	// nodes idle meanwhile: at 8 callers on a 3-master Cluster that made
	// coalescing slower than none (see BENCHMARKS.md).
	DefaultMultiNodeMaxInFlight = 4
	// MaxMaxInFlight bounds Config.MaxInFlight.
	MaxMaxInFlight = 64
)

var (
	// ErrInvalidConfig reports a Config that New refuses.
	ErrInvalidConfig = errors.New("redisstore: invalid config")
	// ErrClosed is returned by calls made after Close, and by calls still
	// queued (never sent) when Close ran.
	ErrClosed = errors.New("redisstore: store closed")
)

// Config configures a Store. The zero value is ready for production.
type Config struct {
	// Prefix starts every key (default DefaultPrefix). It must not contain
	// '{' or '}', which would move the Cluster hash tag.
	Prefix string
	// Clock, when set, supplies the time instead of Redis TIME. It exists
	// for tests that pin or step time; production leaves it nil so that one
	// clock, Redis's, serves every gateway. Like TIME, it is read when a
	// script call is sent.
	Clock limiter.Clock
	// ExpiryMargin is added to each key's expiry, the time until its budget
	// is whole again (default DefaultExpiryMargin; it must not be negative).
	// Tests that drive a Clock far from Redis's own may need a long margin
	// so keys do not expire in real time while their fake time stands still.
	ExpiryMargin time.Duration

	// DisableCoalescing sends every call in its own round trip from the
	// caller's goroutine, as one script call. Coalescing is on by default:
	// it costs an idle store nothing (a lone call is sent at once, inline
	// when its ctx allows) and multiplies throughput under concurrency.
	DisableCoalescing bool
	// MaxBatchSize is the most decisions one round trip carries (default
	// DefaultMaxBatchSize, at most MaxMaxBatchSize). Each script call
	// carries at most MaxScriptKeys of them.
	MaxBatchSize int
	// MaxBatchWait is how long a batch that is not full may wait for more
	// calls before it is sent, once a previous round trip has returned
	// (default 0: send what has queued; at most MaxMaxBatchWait). A call
	// arriving at an idle store never waits. The main batching needs no
	// wait: calls that arrive while a round trip is in flight go together.
	MaxBatchWait time.Duration
	// MaxInFlight is how many round trips may be in flight at once (default
	// DefaultMaxInFlight, or DefaultMultiNodeMaxInFlight for a Cluster or
	// Ring client; at most MaxMaxInFlight), and how many sender goroutines
	// New starts. More overlaps network time with Redis's work but makes
	// batches smaller.
	MaxInFlight int

	// DataLossInterval is how often each node is probed for lost data once
	// someone listens (see OnDataLoss): default DefaultDataLossInterval, at
	// least MinDataLossInterval; negative turns probing off.
	DataLossInterval time.Duration
}

// Store is a limiter.Store on Redis. It is safe for concurrent use. It
// owns no connection (closing the client is the caller's job); with
// coalescing on it owns the goroutines that send batches, which New starts
// and Close stops.
type Store struct {
	client redis.Scripter
	route  route
	prefix string
	clock  limiter.Clock
	// margin is the expiry margin in whole ms, as a script argument:
	// boxed once, not per call.
	margin any

	batch  *batcher // nil when coalescing is off
	loss   lossDetector
	closed atomic.Bool
}

var _ limiter.Store = (*Store)(nil)

// New returns a Store that runs its scripts through client: a
// *redis.Client (standalone or Sentinel), *redis.ClusterClient,
// *redis.Ring or anything else that implements redis.Scripter. How a
// batch is split follows the client's type: a *redis.Client takes any
// keys in one script call, a *redis.ClusterClient the keys of one hash
// slot, anything else the keys of one identity.
func New(client redis.Scripter, cfg Config) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("%w: prefix %q contains '{' or '}'", ErrInvalidConfig, cfg.Prefix)
	}
	switch {
	case cfg.ExpiryMargin < 0:
		return nil, fmt.Errorf("%w: negative expiry margin %v", ErrInvalidConfig, cfg.ExpiryMargin)
	case cfg.ExpiryMargin == 0:
		cfg.ExpiryMargin = DefaultExpiryMargin
	}
	if err := cfg.coalescing(client); err != nil {
		return nil, err
	}
	switch {
	case cfg.DataLossInterval == 0:
		cfg.DataLossInterval = DefaultDataLossInterval
	case cfg.DataLossInterval > 0 && cfg.DataLossInterval < MinDataLossInterval:
		return nil, fmt.Errorf("%w: data loss interval %v below %v", ErrInvalidConfig, cfg.DataLossInterval, MinDataLossInterval)
	}
	s := &Store{
		client: client,
		route:  routeFor(client),
		prefix: cfg.Prefix,
		clock:  cfg.Clock,
		// Whole milliseconds, rounded up: PEXPIRE's unit.
		margin: int64((cfg.ExpiryMargin + time.Millisecond - 1) / time.Millisecond),
		loss:   lossDetector{interval: cfg.DataLossInterval, probe: proberFor(client, cfg.Prefix)},
	}
	if !cfg.DisableCoalescing {
		s.batch = newBatcher(s, cfg.MaxBatchSize, cfg.MaxBatchWait, cfg.MaxInFlight, clientDeadlines(client))
	}
	return s, nil
}

// coalescing validates the coalescing fields and fills in their defaults,
// which depend on the client.
func (cfg *Config) coalescing(client redis.Scripter) error {
	switch {
	case cfg.MaxBatchSize < 0 || cfg.MaxBatchSize > MaxMaxBatchSize:
		return fmt.Errorf("%w: max batch size %d outside [0, %d]", ErrInvalidConfig, cfg.MaxBatchSize, MaxMaxBatchSize)
	case cfg.MaxBatchWait < 0 || cfg.MaxBatchWait > MaxMaxBatchWait:
		return fmt.Errorf("%w: max batch wait %v outside [0, %v]", ErrInvalidConfig, cfg.MaxBatchWait, MaxMaxBatchWait)
	case cfg.MaxInFlight < 0 || cfg.MaxInFlight > MaxMaxInFlight:
		return fmt.Errorf("%w: max in flight %d outside [0, %d]", ErrInvalidConfig, cfg.MaxInFlight, MaxMaxInFlight)
	}
	if cfg.MaxBatchSize == 0 {
		cfg.MaxBatchSize = DefaultMaxBatchSize
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = defaultMaxInFlight(client)
	}
	return nil
}

// Take debits cost from key's budget under limit when it fits; see
// limiter.Store. Cost 0 peeks. Redis and network errors are returned
// wrapped; they never admit.
func (s *Store) Take(ctx context.Context, key string, limit limiter.Limit, cost int64) (limiter.Decision, error) {
	return s.run(ctx, key, limit, opTake, cost)
}

// Refund gives amount back to key's budget, never beyond a whole budget;
// see limiter.Store. LeakyBucketShaping returns limiter.ErrRefundUnsupported.
func (s *Store) Refund(ctx context.Context, key string, limit limiter.Limit, amount int64) (limiter.Decision, error) {
	return s.run(ctx, key, limit, opRefund, amount)
}

// Close stops coalescing and data-loss probing: calls still queued fail
// with ErrClosed, round trips in flight complete (bounded by the client's
// timeouts) and the store's goroutines exit before Close returns. Later calls fail with
// ErrClosed. Close does not close the client. It is safe to call more than
// once and always returns nil.
func (s *Store) Close() error {
	s.closed.Store(true)
	if s.batch != nil {
		s.batch.close()
	}
	s.loss.close()
	return nil
}

const (
	opTake   = "take"
	opRefund = "refund"
)

func (s *Store) run(ctx context.Context, key string, l limiter.Limit, op string, n int64) (limiter.Decision, error) {
	// The checks and their order mirror the pure functions of package
	// limiter, so both stores fail the same calls with the same errors.
	if err := l.Validate(); err != nil {
		return limiter.Decision{}, err
	}
	if n < 0 {
		what := "cost"
		if op == opRefund {
			what = "refund"
		}
		return limiter.Decision{}, fmt.Errorf("%w: negative %s %d", limiter.ErrInvalidCost, what, n)
	}
	if op == opRefund && l.Algorithm == limiter.LeakyBucketShaping {
		return limiter.Decision{}, fmt.Errorf("%w: %s", limiter.ErrRefundUnsupported, l.Algorithm)
	}
	if s.closed.Load() {
		return limiter.Decision{}, ErrClosed
	}
	c := s.newCall(key, l, op, n)
	if s.batch != nil {
		if err := s.batch.submit(ctx, c); err != nil {
			return limiter.Decision{}, err
		}
		return c.d, c.err
	}
	s.roundTrip(ctx, c.single())
	return c.d, c.err
}

// defaultMaxInFlight is Config.MaxInFlight's default for client.
func defaultMaxInFlight(client redis.Scripter) int {
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return DefaultMultiNodeMaxInFlight
	}
	return DefaultMaxInFlight
}
