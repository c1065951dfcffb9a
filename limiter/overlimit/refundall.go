package overlimit

import (
	"context"
	"fmt"

	"github.com/costguard/costguard/limiter"
)

var _ limiter.MultiRefunder = (*Store)(nil)

// RefundAll forgets every request's remembered rejection and passes the
// refunds to the wrapped store (which must be a limiter.MultiRefunder,
// else an error wrapping limiter.ErrTakeAllUnsupported): points given
// back may make a remembered rejection wrong. As Refund, it forgets before
// and again after the store has applied them.
func (s *Store) RefundAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	next, ok := s.next.(limiter.MultiRefunder)
	if !ok {
		clear(ds)
		return fmt.Errorf("overlimit: %T: %w", s.next, limiter.ErrTakeAllUnsupported)
	}
	if err := limiter.CheckTakeAll(reqs, ds); err != nil {
		return err
	}
	s.invalidateAll(reqs)
	err := next.RefundAll(ctx, reqs, ds)
	s.invalidateAll(reqs)
	return err
}

// invalidateAll is invalidate for each request's budget, named or not.
func (s *Store) invalidateAll(reqs []limiter.Request) {
	for i := range reqs {
		r := &reqs[i]
		sh := s.shards.Shard(r.Key)
		if r.Name == "" {
			s.invalidate(sh, r.Key)
			continue
		}
		sh.Lock()
		sh.gen.Add(1)
		sh.named.Delete(budget{r.Key, r.Name})
		sh.Unlock()
	}
}
