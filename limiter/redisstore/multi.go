package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/costguard/costguard/limiter"
)

// ErrCrossSlot is returned, wrapped, by a TakeAll on a Cluster (or Ring)
// whose budgets do not all share one hash slot (one hash tag on a Ring):
// one script call can touch only one slot. Nothing is sent to Redis. All
// the budgets of one Key share its slot, so callers group budgets by
// owner: one TakeAll per principal.
var ErrCrossSlot = errors.New("redisstore: TakeAll budgets span hash slots")

var _ limiter.MultiTaker = (*Store)(nil)

// TakeAll debits every request's cost when each fits, or none; see
// limiter.MultiTaker. It is one run of one script (multi.lua, which holds
// every algorithm's decide), so it is atomic in Redis: the script decides
// every budget without writing, and takes them all only when all fit.
//
// Keys: a request's budget with Name "" is exactly Take's key,
// prefix:{tag}:algorithm; a named one is prefix:{tag}:algorithm:name,
// under the same hash tag. On a standalone or Sentinel server any Keys
// mix; on a Cluster every request must hash to one slot (in practice: one
// Key per TakeAll) and on a Ring share one Key's tag, else TakeAll returns
// an error wrapping ErrCrossSlot without calling Redis.
//
// With coalescing on, a TakeAll goes through the same queue and round
// trips as Take and Refund, and shares their round trip (pipelined), but
// always as a script call of its own: an all-or-nothing group inside
// batch.lua's one-by-one decisions would need a second entry point for
// little gain, since a round trip, not a script call, is what coalescing
// saves. It counts as one call towards MaxBatchSize.
//
// Errors are Take's, wrapped with the request's index: a cost above
// capacity (limiter.ErrCostExceedsCapacity), a key of the wrong type (a
// redis.Error); nothing is debited with either. Network errors and
// timeouts behave as Take's: the script ran at most once.
func (s *Store) TakeAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	if err := limiter.CheckTakeAll(reqs, ds); err != nil {
		return err
	}
	if len(reqs) == 0 {
		return nil
	}
	if s.closed.Load() {
		clear(ds)
		return ErrClosed
	}
	parts := make([]call, len(reqs))
	c := &call{op: opTake, parts: make([]*call, len(reqs))}
	for i := range reqs {
		r := &reqs[i]
		t := tag(r.Key)
		parts[i] = call{key: s.budgetKey(t, r.Limit.Algorithm, r.Name), tag: t, limit: r.Limit, op: opTake, n: r.Cost}
		c.parts[i] = &parts[i]
	}
	c.tag = parts[0].tag
	if err := s.oneSlot(parts); err != nil {
		clear(ds)
		return err
	}
	if s.batch != nil {
		if err := s.batch.submit(ctx, c); err != nil {
			clear(ds) // parts may still belong to a sender: not read
			return err
		}
	} else {
		s.roundTrip(ctx, c.single())
	}
	for i := range parts {
		ds[i] = parts[i].d
	}
	return c.err
}

// budgetKey is the key of identity tag t's budget name under algorithm a:
// Key's layout for name "", prefix:{t}:algorithm:name for any other.
// Algorithm names hold no ':', so no two (algorithm, name) pairs meet, and
// none meets the concurrency key.
func (s *Store) budgetKey(t string, a limiter.Algorithm, name string) string {
	if name == "" {
		return s.keyFor(t, a)
	}
	return s.keyName(t, a.String()+":"+name)
}

// oneSlot checks that parts may share one script call on this client.
func (s *Store) oneSlot(parts []call) error {
	first := parts[0].tag
	for i := 1; i < len(parts); i++ {
		t := parts[i].tag
		switch {
		case t == first:
		case s.route == routeOne:
		case s.route == routeSlot && slot(t) == slot(first):
		default:
			return fmt.Errorf("%w: requests 0 and %d", ErrCrossSlot, i)
		}
	}
	return nil
}
