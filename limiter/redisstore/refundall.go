package redisstore

import (
	"context"
	"fmt"

	"github.com/costguard/costguard/limiter"
)

var _ limiter.MultiRefunder = (*Store)(nil)

// RefundAll gives each request's Cost back to its budget (the key TakeAll
// uses for its Key and Name), never beyond a whole budget; see
// limiter.MultiRefunder. Each refund is Refund's script on its own key,
// one after another (through the coalescing queue when it is on): refunds
// only give back, so they need no common step, and a Cluster may hold
// them in different slots.
func (s *Store) RefundAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	if err := limiter.CheckTakeAll(reqs, ds); err != nil {
		return err
	}
	var firstErr error
	for i := range reqs {
		r := &reqs[i]
		var err error
		if r.Name == "" {
			ds[i], err = s.Refund(ctx, r.Key, r.Limit, r.Cost)
		} else {
			ds[i], err = s.refundNamed(ctx, r)
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("redisstore: RefundAll request %d: %w", i, err)
		}
	}
	return firstErr
}

// refundNamed is Refund for a named budget.
func (s *Store) refundNamed(ctx context.Context, r *limiter.Request) (limiter.Decision, error) {
	if r.Limit.Algorithm == limiter.LeakyBucketShaping {
		return limiter.Decision{}, fmt.Errorf("%w: %s", limiter.ErrRefundUnsupported, r.Limit.Algorithm)
	}
	if s.closed.Load() {
		return limiter.Decision{}, ErrClosed
	}
	t := tag(r.Key)
	c := &call{key: s.budgetKey(t, r.Limit.Algorithm, r.Name), tag: t, limit: r.Limit, op: opRefund, n: r.Cost}
	if s.batch != nil {
		if err := s.batch.submit(ctx, c); err != nil {
			return limiter.Decision{}, err
		}
		return c.d, c.err
	}
	s.roundTrip(ctx, c.single())
	return c.d, c.err
}
