package redisstore

import (
	"context"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/concurrency"
)

// Test hooks into the batcher, for the external tests. Set them right after
// New, before the first call.

// SetBatchHook makes the store call f with the size of each batch before
// it is sent, in the sending goroutine: the caller's for an inline call
// (inline true), a sender's otherwise (the calls were handed off). f may
// block to hold the batch.
func SetBatchHook(s *Store, f func(n int, inline bool)) { s.batch.onBatch = f }

// SetBatchTimer replaces the MaxBatchWait timer.
func SetBatchTimer(s *Store, t limiter.Timer) { s.batch.timer = t }

// Queued is how many calls wait in the store's queue.
func Queued(s *Store) int {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return s.batch.queued
}

// InFlight is how many round trips are in flight, senders' and inline:
// the round-trip tokens taken.
func InFlight(s *Store) int { return len(s.batch.slots) }

// BatchCall is one call of RoundTrip.
type BatchCall struct {
	Identity string
	Limit    limiter.Limit
	Refund   bool
	N        int64
}

// RoundTrip decides calls in one round trip, as a sender does with a batch,
// without the validation of Take and Refund.
func RoundTrip(ctx context.Context, s *Store, in []BatchCall) ([]limiter.Decision, []error) {
	calls := make([]*call, len(in))
	for i, b := range in {
		op := opTake
		if b.Refund {
			op = opRefund
		}
		calls[i] = s.newCall(b.Identity, b.Limit, op, b.N)
	}
	s.roundTrip(ctx, calls)
	ds := make([]limiter.Decision, len(calls))
	errs := make([]error, len(calls))
	for i, c := range calls {
		ds[i], errs[i] = c.d, c.err
	}
	return ds, errs
}

// Slot is the Cluster hash slot of identity's keys.
func Slot(identity string) int64 { return int64(slot(tag(identity))) }

// MaxInFlight is the coalescer's bound on round trips in flight, 0 when
// coalescing is off.
func MaxInFlight(s *Store) int {
	if s.batch == nil {
		return 0
	}
	return s.batch.maxInFlight
}

// AcquireWithID is Acquire with the lease id given, as a client's retry
// would send it again.
func AcquireWithID(ctx context.Context, s *Store, key string, id concurrency.LeaseID, limit int64, ttl time.Duration) (concurrency.Decision, error) {
	return s.acquire(ctx, key, id, limit, ttl)
}

// SetDataLossHooks drives the data-loss probe with tick instead of a
// ticker and calls onRound with each round's findings. Set them before the
// first OnDataLoss.
func SetDataLossHooks(s *Store, tick <-chan time.Time, onRound func(lost []string)) {
	s.loss.tick, s.loss.onRound = tick, onRound
}
