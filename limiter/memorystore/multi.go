package memorystore

import (
	"context"
	"fmt"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/internal/shardmap"
)

var _ limiter.MultiTaker = (*Store)(nil)

// multiInline is how many requests a TakeAll decides without allocating
// its scratch space: a request meets a handful of budgets.
const multiInline = 8

// pending is one request of a TakeAll between deciding and committing.
type pending struct {
	sh   *shard
	held *entry // the entry the shard holds for the budget, nil for none
	st   entry  // the budget's state after the take (not for SlidingLog)
	bp   *limitParams
}

// TakeAll debits every request's cost when each fits, or none; see
// limiter.MultiTaker. It locks the shards of the requests' Keys (a Key's
// named budgets live in its shard) in ascending order, decides every
// request on a copy of its state, and commits only when all fit, so no
// other call sees a partial debit. A commit that would have to store a new
// budget in a full shard (ErrFull) stores none and debits nothing: the new
// budgets are stored first, and taken out again if one finds no room.
//
// Named budgets (Request.Name ≠ "") are held apart from the plain keys of
// Take and Refund, under the pair (Key, Name), so no key can meet another
// budget's; Name "" is the plain key itself. MaxKeys bounds the named
// budgets of a shard as it bounds its plain keys, separately.
func (s *Store) TakeAll(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	if err := s.checkTakeAll(reqs, ds); err != nil {
		return err
	}
	if len(reqs) == 0 {
		return nil
	}
	if s.closed.Load() {
		clear(ds)
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		clear(ds)
		return fmt.Errorf("memorystore: %w", err)
	}
	var (
		idxBuf   [multiInline]int
		shardBuf [multiInline]int
		pendBuf  [multiInline]pending
	)
	idx := idxBuf[:0]
	shardOf := shardBuf[:0] // each request's shard, hashed once
	pend := pendBuf[:0]
	if len(reqs) > multiInline {
		idx = make([]int, 0, len(reqs))
		shardOf = make([]int, 0, len(reqs))
		pend = make([]pending, 0, len(reqs))
	}
	for i := range reqs {
		shardOf = append(shardOf, s.shards.Index(reqs[i].Key))
		idx = insertSorted(idx, shardOf[i])
	}
	now := s.now() // read before locking, as apply does
	for _, i := range idx {
		s.shards.At(i).Lock()
	}
	defer func() {
		for _, i := range idx {
			s.shards.At(i).Unlock()
		}
	}()

	all := true
	var firstErr error
	for i := range reqs {
		r := &reqs[i]
		pend = append(pend, pending{sh: s.shards.At(shardOf[i])})
		p := &pend[i]
		p.held = p.sh.get(r)
		fits, err := s.decide(p, r, now, &ds[i])
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("memorystore: TakeAll request %d: %w", i, err)
		}
		all = all && fits
	}
	if !all || firstErr != nil {
		// Nothing is debited: the requests that would fit report their
		// budgets as they stand.
		for i := range reqs {
			if ds[i].Allowed && reqs[i].Cost > 0 {
				peek := reqs[i]
				peek.Cost = 0
				s.decide(&pend[i], &peek, now, &ds[i]) // a peek cannot fail
			}
		}
		return firstErr
	}

	// All fit: store the new budgets first, the one step that can fail.
	for i := range reqs {
		p := &pend[i]
		if p.held != nil || ds[i].ResetAfter <= 0 {
			continue
		}
		r := &reqs[i]
		if r.Limit.Algorithm == limiter.SlidingLog {
			p.st = newEntry(limiter.SlidingLog)
			transition(&p.st, r.Limit, now, r.Cost, false) // a fresh log: fits, as decided
		}
		p.st.setWholeAt(p.st.since(r.Limit, now) + ds[i].ResetAfter.Microseconds())
		if !p.sh.insertBudget(r, &p.st, now) {
			for j := range i { // take back the budgets stored so far
				if q := &pend[j]; q.held == nil && ds[j].ResetAfter > 0 {
					q.sh.del(&reqs[j])
				}
			}
			clear(ds)
			return s.errFull
		}
	}
	for i := range reqs {
		p := &pend[i]
		if p.held == nil {
			continue
		}
		r := &reqs[i]
		if r.Limit.Algorithm == limiter.SlidingLog {
			p.st = *p.held
			if p.st.algorithm() != limiter.SlidingLog {
				p.st = newEntry(limiter.SlidingLog)
			}
			transition(&p.st, r.Limit, now, r.Cost, false) // fits, as decided
		}
		if ds[i].ResetAfter <= 0 {
			p.sh.del(r) // whole: a fresh key says the same
			continue
		}
		p.st.setWholeAt(p.st.since(r.Limit, now) + ds[i].ResetAfter.Microseconds())
		if p.st.wholeAt() < p.held.wholeAt() {
			p.sh.sooner(r, p.st.wholeAt())
		}
		*p.held = p.st
	}
	return nil
}

// checkTakeAll is limiter.CheckTakeAll, with the same errors, without
// validating again a Limit the store has validated before: the common
// call, requests of known limits, non-negative costs and distinct budgets,
// is checked here, anything else by limiter.CheckTakeAll.
func (s *Store) checkTakeAll(reqs []limiter.Request, ds []limiter.Decision) error {
	if len(ds) != len(reqs) || len(reqs) > limiter.MaxTakeAll {
		return limiter.CheckTakeAll(reqs, ds)
	}
	for i := range reqs {
		r := &reqs[i]
		if r.Cost < 0 || s.params.valid(r.Limit) == nil {
			return limiter.CheckTakeAll(reqs, ds)
		}
		for j := range i {
			if r.Key == reqs[j].Key && r.Name == reqs[j].Name {
				return limiter.CheckTakeAll(reqs, ds)
			}
		}
	}
	return nil
}

// decide writes to d what a Take of r alone would answer at now, without
// changing anything the shard holds, and reports whether r fits. Its new
// state is left in p.st, except for SlidingLog, whose log the commit
// writes in place (a copy would cost as much as the log).
func (s *Store) decide(p *pending, r *limiter.Request, now int64, d *limiter.Decision) (bool, error) {
	var st entry
	if p.held != nil && p.held.algorithm() == r.Limit.Algorithm {
		st = *p.held
	}
	st.setAlgorithm(r.Limit.Algorithm)
	if st.algorithm() == limiter.SlidingLog {
		var log []limiter.LogEntry
		if st.ext != nil {
			log = st.ext.log
		}
		// A peek, and a refusal, only read the log (TakeSlidingLog
		// reslices it); an admission would write it.
		_, peek, _ := limiter.TakeSlidingLog(r.Limit, log, now, 0)
		if r.Cost > r.Limit.Rate || !limiter.Admits(peek, r.Cost) {
			var err error
			_, *d, err = limiter.TakeSlidingLog(r.Limit, log, now, r.Cost)
			return false, err
		}
		// Admitted, the log gains Cost units at now (its newest entry).
		*d = peek
		if r.Cost > 0 {
			d.Remaining -= r.Cost
			d.ResetAfter = r.Limit.Period
		}
		return true, nil
	}
	var err error
	if bp := s.params.get(r.Limit); bp != nil && r.Cost <= r.Limit.Burst {
		*d = limiter.Decision{}
		bp.step(d, &st, now, r.Cost, false)
	} else {
		*d, err = s.transit(&st, r.Limit, now, r.Cost, false)
	}
	p.st = st
	return err == nil && d.Allowed, err
}

// insertSorted adds i to the ascending idx unless it is there already.
func insertSorted(idx []int, i int) []int {
	at := len(idx)
	for at > 0 && idx[at-1] >= i {
		if idx[at-1] == i {
			return idx
		}
		at--
	}
	idx = append(idx, 0)
	copy(idx[at+1:], idx[at:])
	idx[at] = i
	return idx
}

// get returns the entry r's budget holds in sh, or nil.
func (sh *shard) get(r *limiter.Request) *entry {
	var e *entry
	if r.Name == "" {
		e, _ = sh.Get(r.Key)
	} else {
		e, _ = sh.named.Get(budget{r.Key, r.Name})
	}
	return e
}

// insertBudget stores a copy of st as r's budget, which sh does not hold, and
// reports whether there was room.
func (sh *shard) insertBudget(r *limiter.Request, st *entry, now int64) bool {
	if r.Name == "" {
		return insertIn(&sh.Table, r.Key, st, now)
	}
	return insertIn(&sh.named, budget{r.Key, r.Name}, st, now)
}

func insertIn[K comparable](t *shardmap.KeyedTable[K, *entry], key K, st *entry, now int64) bool {
	if !t.Room(now, entryWholeAt) {
		return false
	}
	e := new(entry)
	*e = *st
	return t.InsertDue(key, e, now, entryWholeAt)
}

// del drops r's budget from sh.
func (sh *shard) del(r *limiter.Request) {
	if r.Name == "" {
		sh.Delete(r.Key)
	} else {
		sh.named.Delete(budget{r.Key, r.Name})
	}
}

// sooner records that r's budget is whole earlier than its entry said.
func (sh *shard) sooner(r *limiter.Request, at int64) {
	if r.Name == "" {
		sh.Sooner(r.Key, at, entryWholeAt)
	} else {
		sh.named.Sooner(budget{r.Key, r.Name}, at, entryWholeAt)
	}
}
