// Package redisstore is the limiter.Store for Redis: standalone, Sentinel
// or Cluster, through any go-redis v9 client. Many gateway processes sharing
// one Redis share one exact budget per key.
//
// Each decision is one round trip: one Lua script per algorithm family
// (bucket.lua, fixed_window.lua, sliding_counter.lua, sliding_log.lua, each
// with its KEYS and ARGV documented at the top) runs atomically in Redis and
// reproduces the integer arithmetic of package limiter exactly, so the same
// inputs give the same decisions as the memory store. Scripts go through
// redis.Script: EVALSHA, falling back to EVAL when a server has not cached
// the script yet.
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
// so all of an identity's keys share a Cluster slot and no script can meet
// CROSSSLOT. In the identity, '%', '{' and '}' are percent-encoded (%25,
// %7B, %7D); the empty identity is written "%"; an identity longer than
// MaxRawIdentity bytes is replaced by "%#" and its SHA-256 in hex. No input
// can end the tag early or share a key with another input.
//
// The bucket algorithms keep a HASH {l: level, t: last update µs}, the
// window algorithms a HASH {w: window index, c: count[, p: previous
// count]}, SlidingLog a ZSET with one member per admission instant and one
// holding the total. Like the memory store, every decision writes back the
// state it computed, with PEXPIRE set to the time until the budget is whole
// again plus Config.ExpiryMargin, and a budget that is whole deletes its
// key: an absent key decides exactly like a whole budget.
//
// docs/redis.md has the details: expiry, time, Cluster behaviour, failures.
package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/limiter"
)

// DefaultPrefix starts every key unless Config.Prefix is set.
const DefaultPrefix = "costguard"

// DefaultExpiryMargin is how long a key outlives the moment its budget is
// whole again, unless Config.ExpiryMargin is set.
const DefaultExpiryMargin = time.Second

// ErrInvalidConfig reports a Config that New refuses.
var ErrInvalidConfig = errors.New("redisstore: invalid config")

// Config configures a Store. The zero value is ready for production.
type Config struct {
	// Prefix starts every key (default DefaultPrefix). It must not contain
	// '{' or '}', which would move the Cluster hash tag.
	Prefix string
	// Clock, when set, supplies the time instead of Redis TIME. It exists
	// for tests that pin or step time; production leaves it nil so that one
	// clock, Redis's, serves every gateway.
	Clock limiter.Clock
	// ExpiryMargin is added to each key's expiry, the time until its budget
	// is whole again (default DefaultExpiryMargin; it must not be negative).
	// Tests that drive a Clock far from Redis's own may need a long margin
	// so keys do not expire in real time while their fake time stands still.
	ExpiryMargin time.Duration
}

// Store is a limiter.Store on Redis. It is safe for concurrent use and
// holds no resources of its own: closing the client is the caller's job.
type Store struct {
	client   redis.Scripter
	prefix   string
	clock    limiter.Clock
	marginMS int64
}

var _ limiter.Store = (*Store)(nil)

// New returns a Store that runs its scripts through client: a
// *redis.Client, *redis.ClusterClient, *redis.Ring, a failover client or
// anything else that implements redis.Scripter.
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
	return &Store{
		client: client,
		prefix: cfg.Prefix,
		clock:  cfg.Clock,
		// Whole milliseconds, rounded up: PEXPIRE's unit.
		marginMS: int64((cfg.ExpiryMargin + time.Millisecond - 1) / time.Millisecond),
	}, nil
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

const (
	opTake   = "take"
	opRefund = "refund"
)

// maxArg caps costs sent to the scripts at 2^53, the last integer a Lua
// number holds exactly. A larger cost exceeds every capacity, and a larger
// refund empties every budget, so nothing is lost.
const maxArg = 1 << 53

// replyLen is the length of every script's reply:
// {status, allowed, remaining, retry_us, reset_us, delay_us}.
const replyLen = 6

// statusExceeds is the script status of a cost that can never fit.
const statusExceeds = 1

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

	now := ""
	if s.clock != nil {
		now = strconv.FormatInt(s.clock.Now().UnixMicro(), 10)
	}
	arg := min(n, maxArg)
	period := int64(l.Period / time.Microsecond)

	var (
		script   *redis.Script
		args     []any
		capacity int64 // Decision.Limit
	)
	switch l.Algorithm {
	case limiter.TokenBucket, limiter.LeakyBucketPolicing, limiter.LeakyBucketShaping:
		g := gcd(l.Rate, period)
		shaping := "0"
		if l.Algorithm == limiter.LeakyBucketShaping {
			shaping = "1"
		}
		script, capacity = bucketScript, l.Burst
		args = []any{now, op, arg, l.Burst, period / g, l.Rate / g, shaping, s.marginMS}
	case limiter.FixedWindow:
		script, capacity = fixedWindowScript, l.Rate
		args = []any{now, op, arg, l.Rate, period, s.marginMS}
	case limiter.SlidingCounter:
		script, capacity = slidingCounterScript, l.Rate
		args = []any{now, op, arg, l.Rate, period, s.marginMS}
	case limiter.SlidingLog:
		script, capacity = slidingLogScript, l.Rate
		args = []any{now, op, arg, l.Rate, period, s.marginMS}
	default: // Validate rejects unknown algorithms; kept so a new one cannot slip through.
		return limiter.Decision{}, fmt.Errorf("%w: unknown algorithm %d", limiter.ErrInvalidLimit, l.Algorithm)
	}

	reply, err := script.Run(ctx, s.client, []string{s.Key(key, l.Algorithm)}, args...).Int64Slice()
	if err != nil {
		return limiter.Decision{}, fmt.Errorf("redisstore: %s %s: %w", l.Algorithm, op, err)
	}
	if len(reply) != replyLen {
		return limiter.Decision{}, fmt.Errorf("redisstore: %s %s: malformed script reply %v", l.Algorithm, op, reply)
	}
	d := limiter.Decision{
		Allowed:    reply[1] == 1,
		Limit:      capacity,
		Remaining:  reply[2],
		RetryAfter: micros(reply[3]),
		ResetAfter: micros(reply[4]),
		Delay:      micros(reply[5]),
	}
	if reply[0] == statusExceeds {
		return d, fmt.Errorf("%w: cost %d, capacity %d", limiter.ErrCostExceedsCapacity, n, capacity)
	}
	return d, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// micros converts the scripts' µs (always below 2^53) to a Duration.
func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

var (
	//go:embed common.lua
	commonLua string
	//go:embed bucket.lua
	bucketLua string
	//go:embed fixed_window.lua
	fixedWindowLua string
	//go:embed sliding_counter.lua
	slidingCounterLua string
	//go:embed sliding_log.lua
	slidingLogLua string
)

// The scripts, each prefixed with the shared helpers of common.lua. They
// are immutable after package initialisation.
var (
	bucketScript         = redis.NewScript(commonLua + bucketLua)
	fixedWindowScript    = redis.NewScript(commonLua + fixedWindowLua)
	slidingCounterScript = redis.NewScript(commonLua + slidingCounterLua)
	slidingLogScript     = redis.NewScript(commonLua + slidingLogLua)
)
