package memorystore

import (
	"context"
	"fmt"

	"github.com/costguard/costguard/limiter"
)

var _ limiter.MultiRefunder = (*Store)(nil)

// RefundAll gives each request's Cost back to its budget, never beyond a
// whole budget; see limiter.MultiRefunder. Each refund takes its shard's
// lock alone. A budget the store does not hold is whole already: its
// refund stores nothing.
func (s *Store) RefundAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	if err := s.checkTakeAll(reqs, ds); err != nil {
		return err
	}
	if s.closed.Load() {
		clear(ds)
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		clear(ds)
		return fmt.Errorf("memorystore: %w", err)
	}
	var firstErr error
	for i := range reqs {
		r := &reqs[i]
		var err error
		if r.Name == "" {
			ds[i], err = s.Refund(ctx, r.Key, r.Limit, r.Cost)
		} else {
			ds[i], err = s.refundNamed(r)
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("memorystore: RefundAll request %d: %w", i, err)
		}
	}
	return firstErr
}

// refundNamed is Refund for a named budget.
func (s *Store) refundNamed(r *limiter.Request) (limiter.Decision, error) {
	now := s.now()
	sh := s.shards.Shard(r.Key)
	sh.Lock()
	defer sh.Unlock()
	e := sh.get(r)
	var st entry
	if e != nil && e.algorithm() == r.Limit.Algorithm {
		st = *e
	}
	st.setAlgorithm(r.Limit.Algorithm)
	d, err := s.transit(&st, r.Limit, now, r.Cost, true)
	if err != nil || e == nil {
		return d, err
	}
	if d.ResetAfter <= 0 {
		sh.del(r) // whole: a fresh budget says the same
		return d, nil
	}
	st.setWholeAt(st.since(r.Limit, now) + d.ResetAfter.Microseconds())
	if st.wholeAt() < e.wholeAt() {
		sh.sooner(r, st.wholeAt())
	}
	*e = st
	return d, nil
}
