// Package concurrency bounds how many requests of one principal are in
// flight at once: at most limit slots per key, each held by a lease that
// the caller releases when its request completes, or that expires on its
// own after a TTL when the process holding it crashes or forgets.
//
// It is the other half of rate limiting: package limiter meters what a
// principal spends over time, this package what it holds at one instant.
// It knows nothing about HTTP or GraphQL.
//
// This package holds the contract (Slots, Lease, Decision, the bounds and
// sentinel errors) and Memory, the in-process implementation. The Redis
// implementation is limiter/redisstore's Store, whose Acquire, Release and
// Refresh make it a Slots shared exactly by every process on one Redis.
// concurrencytest holds the behaviour suite both pass.
//
// # Semantics
//
// A key holds a set of leases, each with an expiry. Acquire first forgets
// the key's leases that have expired (expiry ≤ now), then grants a new one,
// expiring at now + ttl, if fewer than limit remain; otherwise it refuses.
// Release removes a lease; Refresh moves a held lease's expiry to now + ttl.
// Each call is atomic for its key, so at no instant do more than limit
// unexpired leases of one key exist, however many goroutines or processes
// call at once.
//
// A lease is a promise with a deadline, not a lock: a request that outlives
// its lease's TTL loses its slot, and another request may take it while the
// first is still running (then limit + 1 run at once until the first ends).
// So choose a TTL longer than the longest request (DefaultTTL, 60 s, is
// longer than a typical server's write timeout) and release on completion,
// or Refresh the lease, well before it expires, for requests that may run
// longer (streams, subscriptions). The TTL is only the bound on how long a
// crashed holder keeps its slots.
//
// A refusal's RetryAfter is a hint, not a promise: slots free up when
// requests finish, which no store can foresee. It is RetryHint (1 s), or
// less when the earliest lease of the key expires sooner than that (its
// slot is then free for certain, unless someone else takes it first). An
// HTTP Retry-After is RetryAfter rounded up to whole seconds, at least 1.
package concurrency

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Defaults and bounds of the arguments of Acquire and Refresh.
const (
	// DefaultTTL is the lease TTL a caller should use unless it knows its
	// longest request: longer than any request should run, short enough
	// that a crashed process's slots come back within a minute.
	DefaultTTL = 60 * time.Second
	// MaxTTL is the longest TTL Acquire and Refresh accept.
	MaxTTL = 24 * time.Hour
	// MaxLimit is the largest limit Acquire accepts. Every lease of a key
	// is stored, and Memory's calls cost O(leases held by the key), so the
	// bound keeps one key's memory and time small.
	MaxLimit = 1 << 16
	// RetryHint is the longest RetryAfter a refusal reports.
	RetryHint = time.Second
)

var (
	// ErrInvalidLimit: limit is outside [1, MaxLimit].
	ErrInvalidLimit = errors.New("concurrency: invalid limit")
	// ErrInvalidTTL: ttl is outside (0, MaxTTL].
	ErrInvalidTTL = errors.New("concurrency: invalid ttl")
)

// Slots hands out at most limit concurrent leases per key. Implementations
// are safe for concurrent use; each call is atomic for its key.
type Slots interface {
	// Acquire takes one of limit slots of key for a lease that expires at
	// now + ttl unless released or refreshed before. When all are held it
	// refuses: Decision.Allowed is false and nothing changes. Errors never
	// come with Allowed true.
	Acquire(ctx context.Context, key string, limit int64, ttl time.Duration) (Decision, error)
	// Release gives lease's slot back. It reports whether the lease was
	// still held: false for a lease released before, expired, or never
	// granted (the zero Lease), none of which is an error.
	Release(ctx context.Context, lease Lease) (held bool, err error)
	// Refresh moves a held lease's expiry to now + ttl and reports true;
	// for a lease no longer held (released, or expired: its slot may be
	// someone else's now) it changes nothing and reports false.
	Refresh(ctx context.Context, lease Lease, ttl time.Duration) (held bool, err error)
}

// LeaseID names one lease: 128 bits, unique across processes.
type LeaseID [16]byte

// String returns the id in lower-case hex, as the Redis store stores it.
func (id LeaseID) String() string { return hex.EncodeToString(id[:]) }

// Lease is one held slot: the key it counts against and its id. The zero
// Lease is no lease; releasing it does nothing.
type Lease struct {
	Key string
	ID  LeaseID
}

// IsZero reports whether l is the zero Lease.
func (l Lease) IsZero() bool { return l == Lease{} }

// Decision is the outcome of one Acquire.
type Decision struct {
	// Allowed: a slot was taken, and Lease holds it.
	Allowed bool
	// Lease is the slot taken; the zero Lease when refused.
	Lease Lease
	// Limit is the limit the decision was made against.
	Limit int64
	// Held is how many unexpired leases the key has after the call, the
	// new one included. It may exceed Limit when the limit was lowered
	// while leases were held.
	Held int64
	// RetryAfter is, for a refusal, RetryHint or the time until the key's
	// earliest lease expires, whichever is sooner: always positive. Zero
	// when allowed.
	RetryAfter time.Duration
}

// Remaining is how many more leases the key could take now.
func (d Decision) Remaining() int64 { return max(0, d.Limit-d.Held) }

// Validate reports whether limit and ttl are acceptable to Acquire, so a
// configuration can be checked when it is loaded. Its errors wrap
// ErrInvalidLimit or ErrInvalidTTL.
func Validate(limit int64, ttl time.Duration) error {
	if limit < 1 || limit > MaxLimit {
		return fmt.Errorf("%w: %d outside [1, %d]", ErrInvalidLimit, limit, MaxLimit)
	}
	return ValidateTTL(ttl)
}

// ValidateTTL reports whether ttl is acceptable to Acquire and Refresh;
// its error wraps ErrInvalidTTL.
func ValidateTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > MaxTTL {
		return fmt.Errorf("%w: %v outside (0, %v]", ErrInvalidTTL, ttl, MaxTTL)
	}
	return nil
}

// RetryAfter is a refusal's RetryAfter when the key's earliest lease
// expires in untilEarliest (positive): the sooner of that and RetryHint.
// Every implementation computes it here.
func RetryAfter(untilEarliest time.Duration) time.Duration {
	return max(min(untilEarliest, RetryHint), 1)
}
