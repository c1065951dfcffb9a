package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/limiter/concurrency"
)

//go:embed concurrency.lua
var concurrencyLua string

// concurrencyScript runs every Acquire, Release and Refresh: common.lua
// (for the time and the integer helpers) and concurrency.lua.
var concurrencyScript = redis.NewScript(commonLua + concurrencyLua)

// concurrencyName ends the key of an identity's concurrency leases, where
// an algorithm's name ends its budget keys.
const concurrencyName = "concurrency"

// The ops of concurrency.lua.
const (
	opAcquire = "acquire"
	opRelease = "release"
	opRefresh = "refresh"
)

var _ concurrency.Slots = (*Store)(nil)

// ConcurrencyKey returns the Redis key holding identity's concurrency
// leases (see Acquire):
//
//	prefix:{tag}:concurrency
//
// with the tag of Key, so it shares the Cluster slot of identity's
// budgets.
func (s *Store) ConcurrencyKey(identity string) string {
	return s.keyName(tag(identity), concurrencyName)
}

// Acquire takes one of limit concurrency slots of key (an identity, as for
// Take) for a lease that expires ttl after Redis's TIME unless released or
// refreshed; see concurrency.Slots. It is one script call (concurrency.lua)
// in one round trip from the caller's goroutine, never coalesced, and
// exact across every process on the same Redis: the leases are one ZSET
// per identity (see ConcurrencyKey), scored by their expiry in µs, ttl
// rounded up to a whole µs. The lease id is 128 random bits.
//
// The script is idempotent per lease id, so, unlike Take, it goes through
// the client's own retries (MaxRetries): a retry of an Acquire that ran
// finds its lease and grants it again, without a second slot. Redis and
// network errors are returned wrapped, with a Decision that is not
// Allowed.
func (s *Store) Acquire(ctx context.Context, key string, limit int64, ttl time.Duration) (concurrency.Decision, error) {
	if err := concurrency.Validate(limit, ttl); err != nil {
		return concurrency.Decision{}, err
	}
	var id concurrency.LeaseID
	_, _ = rand.Read(id[:]) // never fails (crypto/rand crashes the program instead)
	return s.acquire(ctx, key, id, limit, ttl)
}

// acquire is Acquire with the lease id chosen.
func (s *Store) acquire(ctx context.Context, key string, id concurrency.LeaseID, limit int64, ttl time.Duration) (concurrency.Decision, error) {
	reply, err := s.runSlots(ctx, opAcquire, key, id, ttl, limit)
	if err != nil {
		return concurrency.Decision{}, err
	}
	if len(reply) != 3 || reply[0] < 0 || reply[0] > 1 || reply[1] < 0 || reply[2] < 0 {
		return concurrency.Decision{}, fmt.Errorf("redisstore: concurrency %s: malformed script reply %v", opAcquire, reply)
	}
	d := concurrency.Decision{Limit: limit, Held: reply[1]}
	if reply[0] == 1 {
		d.Allowed, d.Lease = true, concurrency.Lease{Key: key, ID: id}
	} else {
		d.RetryAfter = concurrency.RetryAfter(time.Duration(reply[2]) * time.Microsecond)
	}
	return d, nil
}

// Release gives lease's slot back (ZREM) and reports whether it was still
// held; see concurrency.Slots. After a client's retry of a Release that
// ran, it reports false: the first run removed the lease.
func (s *Store) Release(ctx context.Context, lease concurrency.Lease) (bool, error) {
	return s.slotHeld(ctx, opRelease, lease, 0)
}

// Refresh moves a held lease's expiry to ttl after Redis's TIME and
// reports true, or reports false for a lease no longer held; see
// concurrency.Slots.
func (s *Store) Refresh(ctx context.Context, lease concurrency.Lease, ttl time.Duration) (bool, error) {
	if err := concurrency.ValidateTTL(ttl); err != nil {
		return false, err
	}
	return s.slotHeld(ctx, opRefresh, lease, ttl)
}

// slotHeld runs a Release or Refresh of lease and reads its reply.
func (s *Store) slotHeld(ctx context.Context, op string, lease concurrency.Lease, ttl time.Duration) (bool, error) {
	if lease.IsZero() {
		if err := s.usable(ctx, op); err != nil {
			return false, err
		}
		return false, nil
	}
	reply, err := s.runSlots(ctx, op, lease.Key, lease.ID, ttl, 0)
	if err != nil {
		return false, err
	}
	if len(reply) != 1 || reply[0] < 0 || reply[0] > 1 {
		return false, fmt.Errorf("redisstore: concurrency %s: malformed script reply %v", op, reply)
	}
	return reply[0] == 1, nil
}

// usable reports why the store cannot run a call now: closed, or ctx done.
func (s *Store) usable(ctx context.Context, op string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: concurrency %s: %w", op, err)
	}
	return nil
}

// runSlots runs concurrency.lua for op on identity's leases: EVALSHA, and
// EVAL when the server has not cached the script. ttl and limit are sent
// for the ops that read them.
func (s *Store) runSlots(ctx context.Context, op, identity string, id concurrency.LeaseID, ttl time.Duration, limit int64) ([]int64, error) {
	if err := s.usable(ctx, op); err != nil {
		return nil, err
	}
	now := ""
	if s.clock != nil {
		now = strconv.FormatInt(s.clock.Now().UnixMicro(), 10)
	}
	ttlArg, limitArg := "", ""
	if op != opRelease {
		ttlArg = strconv.FormatInt(int64((ttl+time.Microsecond-1)/time.Microsecond), 10)
	}
	if op == opAcquire {
		limitArg = strconv.FormatInt(limit, 10)
	}
	keys := []string{s.ConcurrencyKey(identity)}
	reply, err := concurrencyScript.Run(ctx, s.client, keys, op, now, s.margin, id.String(), ttlArg, limitArg).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: concurrency %s: %w", op, err)
	}
	return reply, nil
}
