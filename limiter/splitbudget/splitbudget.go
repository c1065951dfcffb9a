// Package splitbudget is a limiter.Store decorator that serves most
// decisions from a local lease. The first request for a key takes a lease,
// a slice of the key's tokens (LeaseFraction of Burst), from the shared
// store in one Take; the following requests are admitted from the lease in
// memory, with no round trip, until it runs out and the next request tops
// it up. Every SettleInterval the unspent part of every lease is given back
// with Refund. It is meant for UX-grade limits shared by many gateway
// processes, where a few percent of burst is an acceptable price for
// skipping the network: billing-grade limits use the store directly.
//
//	store, err := splitbudget.New(redisStore, splitbudget.Config{})
//	defer store.Close() // stops the settle loop and gives the leases back
//
// # What it costs in exactness
//
// Leases come out of the exact shared bucket, so no token is ever admitted
// that the bucket did not hand out. From a fresh key the total admitted by
// all processes over any run of length E stays within Burst + Rate × E,
// exactly as without leases. The difference is when tokens may be spent:
// while a lease sits unspent the bucket can refill behind it, so within a
// window [a, b] the processes may admit up to
//
//	Burst + Rate × (b − a) + (tokens held in leases at a)
//	    ≤ Burst + Rate × (b − a) + N × lease size        (N processes)
//
// which is at most N × LeaseFraction × Burst above what an exact bucket
// allows in that window (docs/scaling.md gives the argument and the
// measurements). In the other direction a process may reject while another
// holds unspent tokens, until the next settle.
//
// # Decisions
//
// Only TokenBucket and LeakyBucketPolicing keys are leased; other
// algorithms, peeks, invalid input and costs above the lease size go to the
// store as they are. A decision served locally reports:
//
//   - Remaining: the shared bucket's Remaining as the store last reported
//     it to this process, plus the tokens still in this process's lease,
//     capped at Burst. An estimate: refill since then makes the truth
//     higher, other processes' spending lower.
//   - ResetAfter: the store's last ResetAfter less the time since.
//   - RetryAfter, on a rejection: when the shared bucket will hold the
//     tokens this process lacks (cost minus its lease), computed from the
//     store's last answer and never earlier than that answer implies. Other
//     processes may spend meanwhile; the next request asks again.
//
// A rejection is decided only after the store has refused to top up the
// lease, and is remembered like limiter/overlimit does, so a burst of
// rejected requests costs one round trip, not one each.
package splitbudget

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/internal/levelbound"
	"github.com/costguard/costguard/limiter/internal/periodic"
	"github.com/costguard/costguard/limiter/internal/shardmap"
)

// Defaults for the zero fields of Config.
const (
	DefaultLeaseFraction  = 0.05
	DefaultSettleInterval = 100 * time.Millisecond
	DefaultSettleTimeout  = time.Second
	DefaultMaxKeys        = 10_000
	defaultShards         = 32
	// MaxSettleRefunds bounds the Refunds a settle has in flight at once.
	// Refunds in flight together reach the store together, so a coalescing
	// store (redisstore) sends them many to a round trip.
	MaxSettleRefunds = 64
	// maxFetches bounds the Takes one request makes to top up a lease when
	// other processes keep taking what the store reported left.
	maxFetches = 3
)

var (
	// ErrClosed is returned by calls on a closed Store.
	ErrClosed = errors.New("splitbudget: store closed")
	// ErrInvalidConfig wraps every Config validation error.
	ErrInvalidConfig = errors.New("splitbudget: invalid config")
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// LeaseFraction is the share of a key's Burst one lease takes, in
	// (0, 1]; a lease holds at least one token. Smaller leases mean less
	// overshoot and more round trips. Default DefaultLeaseFraction (5 %).
	LeaseFraction float64
	// SettleInterval is how often every lease is given back. It bounds how
	// long unspent tokens stay away from other processes. Default
	// DefaultSettleInterval (100 ms).
	SettleInterval time.Duration
	// SettleTimeout bounds each Refund that gives a lease back. Default
	// DefaultSettleTimeout (1 s).
	SettleTimeout time.Duration
	// MaxKeys bounds the leases held at once. When a shard is full, new
	// keys go to the store directly until the next settle frees room.
	// Default DefaultMaxKeys (10,000).
	MaxKeys int
	// Clock ages the store's last ResetAfter and remembered rejections. It
	// must be monotonic, as time.Now is. Default limiter.SystemClock{}.
	Clock limiter.Clock
	// OnSettleError, when set, is called for every Refund that failed to
	// give lease tokens back; those tokens are lost to the bucket until it
	// refills, which can only admit less. It must not block for long.
	OnSettleError func(key string, err error)
}

// Stats counts what a Store did since New.
type Stats struct {
	// Leases is the number of lease Takes the store admitted; Leased the
	// tokens they took.
	Leases, Leased int64
	// Returned is the tokens given back by Refund; Lost the tokens a
	// failed Refund could not give back.
	Returned, Lost int64
	// Local is the Takes and Refunds answered without calling the store;
	// Direct those passed to the store as they were.
	Local, Direct int64
	// Dropped is the lease tokens Drop discarded without giving them back.
	Dropped int64
}

// Store serves decisions from leases on the limiter.Store it wraps. It is
// safe for concurrent use. Close it to stop the settle loop and give the
// leases back.
type Store struct {
	next   limiter.Store
	cfg    Config
	shards shardmap.Map[shard, *shard]

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	settler   *periodic.Loop

	leases, leased, returned, lost, local, direct, dropped atomic.Int64
}

var _ limiter.Store = (*Store)(nil)

// shard is one partition of the leases; its mutex guards its table. A
// full shard takes no new lease.
type shard struct {
	sync.Mutex
	shardmap.Table[*lease]
}

// lease is one key's local slice of tokens. Lock order: the shard's lock,
// then lease.mu; no lock is held across a call to the store.
type lease struct {
	limit  limiter.Limit // immutable
	bucket levelbound.Bucket
	size   int64

	mu   sync.Mutex
	have int64 // unspent tokens, 0 ≤ have ≤ size
	// seen is the store's last decision for the key, at seenAt; its
	// Remaining excludes every lease.
	seen   limiter.Decision
	seenAt time.Time
	// fetching is non-nil while one caller tops the lease up; it is closed
	// when that caller is done. Others wait on it rather than pile up
	// round trips.
	fetching chan struct{}
	// denied is the store's last refusal to supply the tokens a request
	// lacked, remembered as limiter/overlimit remembers a rejection, while
	// it may still hold.
	denied *levelbound.Rejection
	dead   bool // given back and out of the table: look the key up again
	// dropped: discarded by Drop, the store's data lost; a top-up in
	// flight gives nothing back.
	dropped bool
}

// New wraps next and starts the settle loop. It fails with an error
// wrapping ErrInvalidConfig when next is nil or a field is out of range.
func New(next limiter.Store, cfg Config) (*Store, error) {
	return newStore(next, cfg, nil)
}

// Validate reports what New would refuse in cfg's tuning, so that a
// configuration that builds no leases yet is checked too.
func (cfg Config) Validate() error {
	switch {
	case math.IsNaN(cfg.LeaseFraction) || cfg.LeaseFraction < 0 || cfg.LeaseFraction > 1:
		return fmt.Errorf("%w: LeaseFraction %v is not in (0, 1]", ErrInvalidConfig, cfg.LeaseFraction)
	case cfg.SettleInterval < 0:
		return fmt.Errorf("%w: SettleInterval must not be negative (got %v)", ErrInvalidConfig, cfg.SettleInterval)
	case cfg.SettleTimeout < 0:
		return fmt.Errorf("%w: SettleTimeout must not be negative (got %v)", ErrInvalidConfig, cfg.SettleTimeout)
	}
	return nil
}

// newStore is New with an optional settle tick channel, which tests
// provide to drive the loop without waiting.
func newStore(next limiter.Store, cfg Config, tick <-chan time.Time) (*Store, error) {
	if next == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	size, err := shardmap.Size{MaxKeys: cfg.MaxKeys}.
		Resolve(ErrInvalidConfig, shardmap.Size{MaxKeys: DefaultMaxKeys, Shards: defaultShards})
	if err != nil {
		return nil, err
	}
	cfg.MaxKeys = size.MaxKeys
	if cfg.LeaseFraction == 0 {
		cfg.LeaseFraction = DefaultLeaseFraction
	}
	if cfg.SettleInterval == 0 {
		cfg.SettleInterval = DefaultSettleInterval
	}
	if cfg.SettleTimeout == 0 {
		cfg.SettleTimeout = DefaultSettleTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	s := &Store{
		next:    next,
		cfg:     cfg,
		shards:  shardmap.New[shard](size),
		settler: periodic.New(cfg.SettleInterval, tick),
	}
	go s.settleLoop()
	return s, nil
}

// LeaseSize is the lease a key under limit takes: LeaseFraction of Burst,
// rounded down, at least 1 and at most Burst. It is 0 for a limit that is
// not leased (invalid, or an algorithm other than TokenBucket and
// LeakyBucketPolicing).
func (s *Store) LeaseSize(limit limiter.Limit) int64 {
	if !leased(limit.Algorithm) || limit.Validate() != nil {
		return 0
	}
	return leaseSize(limit.Burst, s.cfg.LeaseFraction)
}

func leaseSize(burst int64, fraction float64) int64 {
	return max(1, min(burst, int64(float64(burst)*fraction)))
}

// leased reports whether keys under a are leased: the algorithms whose
// tokens can be given back and whose admissions carry no reservation, the
// ones a refusal can be remembered for.
func leased(a limiter.Algorithm) bool { return levelbound.Applies(a) }

// Take admits cost from key's lease when it holds enough, tops the lease up
// from the store when it does not, and passes everything that is not
// leased to the store; see the package documentation.
func (s *Store) Take(ctx context.Context, key string, limit limiter.Limit, cost int64) (limiter.Decision, error) {
	if s.closed.Load() {
		return limiter.Decision{}, ErrClosed
	}
	if cost <= 0 || !leased(limit.Algorithm) {
		return s.passTake(ctx, key, limit, cost)
	}
	for {
		l, err := s.acquire(key, limit, cost)
		if err != nil {
			return limiter.Decision{}, err
		}
		if l == nil {
			return s.passTake(ctx, key, limit, cost)
		}
		d, again, err := s.takeFrom(ctx, key, l, cost)
		if !again {
			return d, err
		}
	}
}

// takeFrom serves cost from l, topping it up if needed. again reports that
// l was given back meanwhile and the key must be looked up afresh.
func (s *Store) takeFrom(ctx context.Context, key string, l *lease, cost int64) (d limiter.Decision, again bool, err error) {
	// Read the clock outside the lock to keep the critical section short;
	// a reading a little old only makes ResetAfter a little longer.
	now := s.cfg.Clock.Now()
	l.mu.Lock()
	for {
		switch {
		case s.closed.Load():
			l.mu.Unlock()
			return limiter.Decision{}, false, ErrClosed
		case l.dead:
			l.mu.Unlock()
			return limiter.Decision{}, true, nil
		case l.have >= cost:
			l.have -= cost
			d = l.decision(now)
			l.mu.Unlock()
			s.local.Add(1)
			return d, false, nil
		case l.fetching != nil:
			wait := l.fetching
			l.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return limiter.Decision{}, false, fmt.Errorf("splitbudget: %w", ctx.Err())
			}
			now = s.cfg.Clock.Now()
			l.mu.Lock()
			continue
		}
		if d, ok := l.stillDenied(now, cost); ok {
			l.mu.Unlock()
			s.local.Add(1)
			return d, false, nil
		}
		break
	}
	// This caller tops the lease up; the tokens it holds travel with it so
	// the answer is decided on one count.
	done := make(chan struct{})
	l.fetching = done
	held := l.have
	l.have = 0
	l.mu.Unlock()

	got, last, lastCost, ferr := s.fetch(ctx, key, l, held, cost)
	now = s.cfg.Clock.Now()

	l.mu.Lock()
	l.fetching = nil
	close(done)
	total := held + got
	if ferr == nil {
		l.seen, l.seenAt = last, now
	}
	switch {
	case ferr != nil:
		err = fmt.Errorf("splitbudget: topping up the lease of %q: %w", key, ferr)
	case total >= cost:
		total -= cost
		l.denied = nil
		l.have = total // have was 0 while fetching: nothing else adds to a lease then
		d = l.decision(now)
	default:
		d = l.deny(now, last, lastCost, cost-total, total)
	}
	if err != nil || !d.Allowed {
		l.have = total
	}
	if l.dropped {
		// Dropped while the store was asked: its tokens may come from the
		// data set that was lost, so they are discarded, not given back.
		s.dropped.Add(l.have)
		l.have = 0
	}
	giveBack := !l.dropped && (l.dead || s.closed.Load())
	if giveBack {
		// Settled or closed while the store was asked: nobody will return
		// these tokens but this caller.
		l.have = 0
	}
	l.mu.Unlock()
	if giveBack {
		s.giveBack(key, l.limit, total)
	}
	return d, false, err
}

// fetch tops a lease holding held tokens up to its size for a request of
// cost. When the store has fewer tokens than that, it takes what the store
// said is left, if that covers the request; other processes may take them
// first, so it tries at most maxFetches times. It returns the tokens taken
// and the store's last decision with the cost that decision was for.
func (s *Store) fetch(ctx context.Context, key string, l *lease, held, cost int64) (got int64, last limiter.Decision, lastCost int64, err error) {
	short := cost - held // ≥ 1
	want := l.size - held
	for range maxFetches {
		last, err = s.next.Take(ctx, key, l.limit, want)
		lastCost = want
		if err != nil {
			return 0, last, lastCost, err
		}
		if last.Allowed {
			s.leases.Add(1)
			s.leased.Add(want)
			return want, last, lastCost, nil
		}
		left := last.Remaining
		if left < short || left >= want {
			break
		}
		want = left
	}
	return 0, last, lastCost, nil
}

// decision is what a local admission or refund reports. l.mu is held.
func (l *lease) decision(now time.Time) limiter.Decision {
	return limiter.Decision{
		Allowed:    true,
		Limit:      l.limit.Burst,
		Remaining:  min(l.limit.Burst, l.seen.Remaining+l.have),
		ResetAfter: max(0, l.seen.ResetAfter-elapsed(l.seenAt, now)),
	}
}

// deny records the store's refusal (last, an answer to a Take of
// lastCost) to supply short more tokens and returns the rejection, the
// lease then holding have tokens. l.mu is held.
func (l *lease) deny(now time.Time, last limiter.Decision, lastCost, short, have int64) limiter.Decision {
	b := l.bucket
	level := b.MaxLevel(last, lastCost)
	retry := b.RetryAfter(level, short)
	if retry <= 0 {
		// The store said short tokens were left but others took them
		// first, maxFetches times: promise no earlier than the cost it
		// refused last.
		retry = b.RetryAfter(level, lastCost)
	}
	if retry > 0 {
		l.denied = &levelbound.Rejection{Bucket: b, Cost: short, At: now, Retry: retry.Microseconds(), Level: level}
	}
	return limiter.Decision{
		Limit:      b.Burst,
		Remaining:  min(b.Burst, last.Remaining+have),
		RetryAfter: retry,
		ResetAfter: last.ResetAfter,
	}
}

// stillDenied answers a request of cost from the remembered refusal while
// it holds for the tokens the request lacks. l.mu is held.
func (l *lease) stillDenied(now time.Time, cost int64) (limiter.Decision, bool) {
	short := cost - l.have
	if l.denied == nil || short < l.denied.Cost {
		return limiter.Decision{}, false
	}
	d, ok := l.denied.Answer(now, short)
	if !ok {
		l.denied = nil
		return limiter.Decision{}, false
	}
	d.Remaining = min(d.Limit, d.Remaining+l.have)
	return d, true
}

// Refund credits amount to key's lease, up to its size, and passes the
// rest (or everything, for a key without a lease) to the store. Credited
// tokens go back to the store at the next settle.
func (s *Store) Refund(ctx context.Context, key string, limit limiter.Limit, amount int64) (limiter.Decision, error) {
	if s.closed.Load() {
		return limiter.Decision{}, ErrClosed
	}
	if amount <= 0 || !leased(limit.Algorithm) {
		return s.passRefund(ctx, key, limit, amount)
	}
	sh := s.shards.Shard(key)
	sh.Lock()
	l, _ := sh.Get(key)
	sh.Unlock()
	if l == nil || l.limit != limit {
		return s.passRefund(ctx, key, limit, amount)
	}
	l.mu.Lock()
	if l.dead || l.fetching != nil {
		l.mu.Unlock()
		return s.passRefund(ctx, key, limit, amount)
	}
	credit := min(amount, l.size-l.have)
	l.have += credit
	l.denied = nil // tokens came back: the refusal may no longer hold
	d := l.decision(s.cfg.Clock.Now())
	l.mu.Unlock()
	if credit == amount {
		s.local.Add(1)
		return d, nil
	}
	return s.passRefund(ctx, key, limit, amount-credit)
}

// passTake and passRefund call the store as they are and add the tokens
// this process holds for the key to Remaining: they are part of the budget
// even though the store has already counted them as spent.
func (s *Store) passTake(ctx context.Context, key string, limit limiter.Limit, cost int64) (limiter.Decision, error) {
	s.direct.Add(1)
	d, err := s.next.Take(ctx, key, limit, cost)
	return s.withHeld(key, limit, d, err)
}

func (s *Store) passRefund(ctx context.Context, key string, limit limiter.Limit, amount int64) (limiter.Decision, error) {
	s.direct.Add(1)
	d, err := s.next.Refund(ctx, key, limit, amount)
	return s.withHeld(key, limit, d, err)
}

func (s *Store) withHeld(key string, limit limiter.Limit, d limiter.Decision, err error) (limiter.Decision, error) {
	if err != nil && !errors.Is(err, limiter.ErrCostExceedsCapacity) || !leased(limit.Algorithm) {
		return d, err
	}
	sh := s.shards.Shard(key)
	sh.Lock()
	l, _ := sh.Get(key)
	sh.Unlock()
	if l != nil && l.limit == limit {
		now := s.cfg.Clock.Now()
		l.mu.Lock()
		if !l.dead && l.fetching == nil {
			// The store's latest word on the key, for the next local answer.
			l.seen, l.seenAt = d, now
		}
		d.Remaining = min(limit.Burst, d.Remaining+l.have)
		l.mu.Unlock()
	}
	return d, err
}

// acquire returns key's lease under limit for a request of cost,
// creating it if the table has room. It returns nil when the request is
// not to be served from a lease: the cost exceeds the lease size, or the
// table is full. A lease under another limit is given back first.
func (s *Store) acquire(key string, limit limiter.Limit, cost int64) (*lease, error) {
	sh := s.shards.Shard(key)
	sh.Lock()
	l, _ := sh.Get(key)
	if l != nil && l.limit == limit {
		sh.Unlock()
		if cost > l.size {
			return nil, nil
		}
		return l, nil
	}
	var (
		old      *lease
		oldToken int64
	)
	if l != nil {
		// The key's limit changed (a plan change): the old lease's tokens
		// are in the old limit's units, so give them back under it.
		l.mu.Lock()
		old, oldToken = l, l.have
		l.have, l.dead = 0, true
		l.mu.Unlock()
		sh.Delete(key)
	}
	l = nil
	b, err := levelbound.New(limit)
	if size := leaseSize(limit.Burst, s.cfg.LeaseFraction); err == nil && cost <= size {
		l = &lease{limit: limit, bucket: b, size: size}
		if !sh.Insert(key, l, nil) {
			l = nil // the shard is full: the store answers until a settle frees room
		}
	}
	sh.Unlock()
	if old != nil {
		s.giveBack(key, old.limit, oldToken)
	}
	return l, err
}

// giveBack refunds n lease tokens outside any caller's ctx, so a caller
// going away does not lose them.
func (s *Store) giveBack(key string, limit limiter.Limit, n int64) {
	if n <= 0 {
		return
	}
	if err := s.refund(context.Background(), key, limit, n); err != nil && s.cfg.OnSettleError != nil {
		s.cfg.OnSettleError(key, err)
	}
}

func (s *Store) refund(ctx context.Context, key string, limit limiter.Limit, n int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SettleTimeout)
	defer cancel()
	if _, err := s.next.Refund(ctx, key, limit, n); err != nil {
		s.lost.Add(n)
		return fmt.Errorf("splitbudget: giving back %d tokens of %q: %w", n, key, err)
	}
	s.returned.Add(n)
	return nil
}

// Settle gives every lease back now: the unspent tokens go to the store
// with Refund, at most MaxSettleRefunds at once, and the next request for
// each key takes a new lease. A lease being topped up is left for the next
// settle. The settle loop calls it every SettleInterval; call it directly
// to settle at a moment of your choosing. It returns the Refund errors,
// joined; OnSettleError sees them too, from Settle's goroutine once every
// Refund has returned.
func (s *Store) Settle(ctx context.Context) error {
	type back struct {
		key   string
		limit limiter.Limit
		n     int64
	}
	var backs []back
	s.shards.Each(func(sh *shard) {
		sh.DeleteFunc(func(key string, l *lease) bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.fetching != nil {
				return false
			}
			if l.have > 0 {
				backs = append(backs, back{key, l.limit, l.have})
			}
			l.have, l.dead = 0, true
			return true
		})
	})
	// Up to MaxSettleRefunds at once: one after another, 10,000 leases
	// would take 10,000 round trips, and a hanging store SettleTimeout each.
	errs := make([]error, len(backs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(MaxSettleRefunds, len(backs)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(backs); i = int(next.Add(1) - 1) {
				b := backs[i]
				errs[i] = s.refund(ctx, b.key, b.limit, b.n)
			}
		})
	}
	wg.Wait()
	if s.cfg.OnSettleError != nil {
		for i, err := range errs {
			if err != nil {
				s.cfg.OnSettleError(backs[i].key, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Drop discards every lease without giving its tokens back, with what
// each remembered of the store (its last answer, its last refusal): the
// next request for each key takes a new lease. Call it when the store's
// data is lost (a Redis restart without persistence, a failover, a
// flush): the leases were cut from budgets that are gone, and giving them
// back to the new data set would add tokens nobody spent. Dropping can
// only admit less. A lease being topped up is dropped too: its tokens are
// discarded when the store answers. package stack calls Drop when a
// redisstore reports data loss (OnDataLoss).
func (s *Store) Drop() {
	var n int64
	s.shards.Each(func(sh *shard) { // each shard locked in turn
		sh.DeleteFunc(func(_ string, l *lease) bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			n += l.have
			l.have, l.dead, l.dropped, l.denied = 0, true, true, nil
			return true
		})
	})
	s.dropped.Add(n)
}

// Len reports the leases held.
func (s *Store) Len() int { return s.shards.Len() }

// Stats returns the counters since New.
func (s *Store) Stats() Stats {
	return Stats{
		Leases:   s.leases.Load(),
		Leased:   s.leased.Load(),
		Returned: s.returned.Load(),
		Lost:     s.lost.Load(),
		Local:    s.local.Load(),
		Direct:   s.direct.Load(),
		Dropped:  s.dropped.Load(),
	}
}

// Close stops the settle loop, waits for it to exit and gives every lease
// back. Later calls return ErrClosed; a top-up still in flight gives its
// tokens back itself when it returns. Close is idempotent and returns the
// Refund errors of the final settle.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.settler.Stop()
		s.closeErr = s.Settle(context.Background())
	})
	return s.closeErr
}

// settleLoop is the settle goroutine, started by New and stopped by Close.
func (s *Store) settleLoop() {
	s.settler.Run(func() {
		_ = s.Settle(context.Background()) // errors reach OnSettleError
	})
}

// elapsed is the time from then to now in whole microseconds, rounded
// down, and never negative: both can only make an answer stricter.
func elapsed(then, now time.Time) time.Duration {
	return max(now.Sub(then), 0).Truncate(time.Microsecond)
}
