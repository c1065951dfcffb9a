package overlimit

import (
	"context"
	"fmt"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/internal/levelbound"
	"github.com/costguard/costguard/limiter/internal/shardmap"
)

var _ limiter.MultiTaker = (*Store)(nil)

// budget is a named budget's key in its shard: owner and name, never ""
// (Name "" is the owner's plain key). A pair can meet no plain key.
type budget struct{ key, name string }

// ownBudget is the named table's shardmap.Own: copies of the key and the
// name, each at most shardmap.MaxKeyBytes.
func ownBudget(b budget) (budget, bool) {
	key, okKey := shardmap.OwnString(b.key)
	name, okName := shardmap.OwnString(b.name)
	return budget{key, name}, okKey && okName
}

// Len is how many rejections the shard remembers, plain and named.
func (sh *shard) Len() int { return sh.Table.Len() + sh.named.Len() }

// TakeAll is limiter.MultiTaker's TakeAll in front of a store that is one
// (otherwise it returns an error wrapping limiter.ErrTakeAllUnsupported).
//
// When a request is remembered as rejected (same Limit, a cost at least
// the remembered one, less than its RetryAfter ago, TokenBucket or
// LeakyBucketPolicing, as for Take), the store would refuse the whole
// call: TakeAll answers without asking it and nothing is debited
// anywhere. Then the remembered requests carry their rejection (as Take
// would answer them from here) and the others a zero Decision: not
// asked, which a caller tells by Limit 0. That is the one way this
// TakeAll departs from the contract's "each budget as it stands", and
// the price of saving the round trip.
//
// Otherwise the store decides. When it refuses, each refused request is
// remembered exactly as Take remembers a rejection, under the request's
// (Key, Name); when it admits, the admitted budgets' entries are dropped.
// The cache never admits anything, so it admits nothing the store would
// not.
func (s *Store) TakeAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	next, ok := s.next.(limiter.MultiTaker)
	if !ok {
		clear(ds)
		return fmt.Errorf("overlimit: %T: %w", s.next, limiter.ErrTakeAllUnsupported)
	}
	if err := limiter.CheckTakeAll(reqs, ds); err != nil {
		return err
	}
	if answered, err := s.RememberedAll(reqs, ds); answered {
		if ctxErr := ctx.Err(); ctxErr != nil {
			clear(ds)
			return fmt.Errorf("overlimit: %w", ctxErr)
		}
		return err
	}
	var genBuf [8]uint64
	gens := genBuf[:0]
	for i := range reqs {
		gens = append(gens, s.shards.Shard(reqs[i].Key).gen.Load())
	}
	err := next.TakeAll(ctx, reqs, ds)
	if err != nil {
		return err // an error teaches nothing about the budgets
	}
	all := limiter.AllAllowed(ds)
	for i := range reqs {
		r, d := &reqs[i], ds[i]
		sh := s.shards.Shard(r.Key)
		switch {
		case !d.Allowed && r.Cost > 0 && d.RetryAfter > 0 && levelbound.Applies(r.Limit.Algorithm):
			if e := s.rejection(r.Limit, r.Cost, d); e != nil {
				sh.Lock()
				if sh.gen.Load() == gens[i] {
					sh.insertFor(r, e)
				}
				sh.Unlock()
			}
		case all:
			// Debited (or peeked): as Take, drop what may now be wrong.
			s.forgetFor(sh, r)
		}
	}
	return nil
}

// RememberedAll is TakeAll's local answer: when a request is remembered as
// rejected it writes the remembered rejections into ds (zero, "not
// asked", for the others), reports true and returns TakeAll's error for a
// cost above a capacity; otherwise it reports false and leaves ds alone.
// It never asks the wrapped store, so a caller that must tell local
// answers from the store's (a circuit breaker) asks it first. Requests
// TakeAll would refuse before deciding are left to TakeAll (false).
func (s *Store) RememberedAll(reqs []limiter.Request, ds []limiter.Decision) (bool, error) {
	if limiter.CheckTakeAll(reqs, ds) != nil || !s.answer(reqs, ds) {
		return false, nil
	}
	for i := range reqs { // as the store would say
		if r := &reqs[i]; r.Cost > r.Limit.Capacity() {
			return true, fmt.Errorf("overlimit: TakeAll request %d: %w", i, limiter.ExceedsCapacity(r.Cost, r.Limit.Capacity()))
		}
	}
	return true, nil
}

// answer writes the remembered rejections of reqs into ds, zero for the
// others, and reports whether there was any; with none, ds is untouched.
func (s *Store) answer(reqs []limiter.Request, ds []limiter.Decision) bool {
	found := false
	for i := range reqs {
		r := &reqs[i]
		if r.Cost <= 0 || !levelbound.Applies(r.Limit.Algorithm) {
			continue
		}
		sh := s.shards.Shard(r.Key)
		sh.RLock()
		e := sh.lookup(r)
		sh.RUnlock()
		if e == nil || e.limit != r.Limit || r.Cost < e.Cost {
			continue
		}
		d, ok := e.Answer(s.clock.Now(), r.Cost)
		if !ok {
			continue
		}
		if !found {
			clear(ds)
			found = true
		}
		ds[i] = d
	}
	return found
}

// forgetFor drops r's entry unless the call was a peek under its limit.
func (s *Store) forgetFor(sh *shard, r *limiter.Request) {
	if r.Name == "" {
		s.forget(sh, r.Key, r.Limit, r.Cost == 0)
		return
	}
	sh.RLock()
	e := sh.lookup(r)
	sh.RUnlock()
	if e == nil || r.Cost == 0 && e.limit == r.Limit {
		return
	}
	sh.Lock()
	sh.named.Delete(budget{r.Key, r.Name})
	sh.Unlock()
}

// lookup returns r's remembered rejection, or nil.
func (sh *shard) lookup(r *limiter.Request) *entry {
	var e *entry
	if r.Name == "" {
		e, _ = sh.Get(r.Key)
	} else {
		e, _ = sh.named.Get(budget{r.Key, r.Name})
	}
	return e
}

// insertFor remembers e for r's budget.
func (sh *shard) insertFor(r *limiter.Request, e *entry) {
	if r.Name == "" {
		sh.Insert(r.Key, e, e.rank)
	} else {
		sh.named.Insert(budget{r.Key, r.Name}, e, e.rank)
	}
}
