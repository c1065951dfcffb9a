// Package keycache puts a bounded cache in front of any identity.KeyLookup,
// so that a key store in a database is asked about a known key about once
// a TTL, and about unseen keys (a flood of random ones included) at most a
// fixed number of times a second.
//
//	db, err := pgkeys.New(pool) // or any other identity.KeyLookup
//	…
//	keys, err := keycache.New(db) // the defaults below
//	…
//	lim, err := middleware.New(middleware.Dependencies{KeyLookup: keys, …}, policy)
//
// What it keeps and for how long:
//
//   - A known key (the lookup granted it) is answered from memory for the
//     TTL (DefaultTTL), and then looked up again; that refresh never waits
//     for the budget below, so a flood cannot lock out a key the cache has
//     seen. A revoked key keeps working for at most the TTL.
//   - An unknown key (the lookup answered identity.ErrUnknownAPIKey) is
//     answered ErrUnknownAPIKey from memory for the unknown-key TTL
//     (DefaultUnknownTTL).
//   - A key the cache holds no entry for (unseen) is looked up only when a
//     token bucket of DefaultLookupsPerSecond lookups a second (burst
//     DefaultLookupBurst) has a token; a lookup that finds the key gives its
//     token back. With the bucket empty, an unseen key is answered
//     ErrNotLookedUp, which is an ErrUnknownAPIKey (401), without a query.
//     So a flood of random keys costs the lookup at most burst + rate × t
//     queries in t seconds, whatever its size. The price: while a flood
//     keeps the bucket empty, a real key the cache has never seen gets in
//     only when its request finds a token, about rate ÷ flood of its
//     attempts; keys already held are not affected.
//   - Other errors of the lookup are returned (the middleware answers them
//     503) and not cached; the token they took is not given back.
//   - Entries are capped (DefaultMaxKeys known, DefaultMaxUnknownKeys
//     unknown, in separate lists so unknown keys never push out known ones)
//     and the least recently used is evicted first: memory is bounded
//     whatever the number of distinct keys.
//   - Concurrent lookups of one key make one query; the others wait for
//     its answer (or their own context).
//
// Keys are kept only as their SHA-256, never as presented. Time comes from
// a Clock (WithClock); the cache starts no goroutine and needs no Close.
// docs/keys.md measures the bounds.
package keycache

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/limiter"
)

// Defaults of New.
const (
	// DefaultTTL is how long a known key is answered from memory.
	DefaultTTL = time.Minute
	// DefaultUnknownTTL is how long an unknown key is answered from memory.
	DefaultUnknownTTL = 30 * time.Second
	// DefaultMaxKeys caps the known keys held.
	DefaultMaxKeys = 100_000
	// DefaultMaxUnknownKeys caps the unknown keys held.
	DefaultMaxUnknownKeys = 10_000
	// DefaultLookupsPerSecond is the rate of lookups of unseen keys.
	DefaultLookupsPerSecond = 100
	// DefaultLookupBurst is how many lookups of unseen keys may run back to
	// back before the rate applies.
	DefaultLookupBurst = 100
	// DefaultLookupTimeout bounds each call to the backing lookup, within
	// the caller's own deadline.
	DefaultLookupTimeout = time.Second
)

// Bounds of the options, so that the token arithmetic cannot overflow.
const (
	maxRate  = 1_000_000
	maxBurst = 1_000_000
)

// Errors.
var (
	// ErrNotLookedUp answers an unseen key while the lookups of unseen keys
	// are spent. It is an identity.ErrUnknownAPIKey (errors.Is), answered
	// 401 like one.
	ErrNotLookedUp = fmt.Errorf("%w (keycache: not looked up: the lookups of unseen keys are spent)", identity.ErrUnknownAPIKey)
	// ErrInvalidConfig wraps every option error New returns.
	ErrInvalidConfig = errors.New("keycache: invalid config")
)

// Clock tells the time. limiter.SystemClock is one.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Option configures New.
type Option func(*config) error

type config struct {
	ttl, unknownTTL time.Duration
	maxKeys         int
	maxUnknown      int
	rate, burst     int
	timeout         time.Duration
	clock           Clock
}

// WithTTL sets how long a known key is answered from memory before it is
// looked up again (DefaultTTL): the longest a revoked or changed key keeps
// its old grant.
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: TTL %v: it must be positive", ErrInvalidConfig, d)
		}
		c.ttl = d
		return nil
	}
}

// WithUnknownTTL sets how long an unknown key is answered from memory
// (DefaultUnknownTTL): the longest a key issued after a client first tried
// it stays refused.
func WithUnknownTTL(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: unknown-key TTL %v: it must be positive", ErrInvalidConfig, d)
		}
		c.unknownTTL = d
		return nil
	}
}

// WithMaxKeys caps the known and the unknown keys held (DefaultMaxKeys,
// DefaultMaxUnknownKeys). Past a cap the least recently used entry of that
// kind is dropped.
func WithMaxKeys(known, unknown int) Option {
	return func(c *config) error {
		if known < 1 || unknown < 1 {
			return fmt.Errorf("%w: max keys %d known, %d unknown: both must be at least 1", ErrInvalidConfig, known, unknown)
		}
		c.maxKeys, c.maxUnknown = known, unknown
		return nil
	}
}

// WithLookupBudget sets the token bucket of lookups of unseen keys:
// perSecond tokens a second, at most burst at once (DefaultLookupsPerSecond,
// DefaultLookupBurst), each from 1 to 1,000,000.
func WithLookupBudget(perSecond, burst int) Option {
	return func(c *config) error {
		if perSecond < 1 || perSecond > maxRate || burst < 1 || burst > maxBurst {
			return fmt.Errorf("%w: lookup budget %d a second, burst %d: each must be between 1 and %d",
				ErrInvalidConfig, perSecond, burst, maxRate)
		}
		c.rate, c.burst = perSecond, burst
		return nil
	}
}

// WithLookupTimeout bounds each call to the backing lookup
// (DefaultLookupTimeout), within the caller's own deadline.
func WithLookupTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: lookup timeout %v: it must be positive", ErrInvalidConfig, d)
		}
		c.timeout = d
		return nil
	}
}

// WithClock sets the time source (default: the system clock).
func WithClock(clock Clock) Option {
	return func(c *config) error {
		if clock == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidConfig)
		}
		c.clock = clock
		return nil
	}
}

// Cache is an identity.KeyLookup answering from memory what another one
// said. Its methods are safe for concurrent use.
type Cache struct {
	next       identity.KeyLookup
	clock      Clock
	epoch      time.Time // times are kept as nanoseconds since epoch
	ttl        int64
	unknownTTL int64
	maxKeys    int
	maxUnknown int
	timeout    time.Duration

	mu      sync.Mutex
	entries map[[sha256.Size]byte]*entry
	known   lru // most recently used first
	unknown lru // most recently added first
	flights map[[sha256.Size]byte]*flight
	budget  bucket
	stats   Stats
}

var _ identity.KeyLookup = (*Cache)(nil)

// entry is what the cache knows of one key.
type entry struct {
	hash       [sha256.Size]byte
	principal  string
	plan       string
	expires    int64 // nanoseconds since the cache's epoch
	unknown    bool  // in the unknown list, else in the known one
	prev, next *entry
}

// flight is one lookup in progress; the callers that want the same key
// wait for done.
type flight struct {
	done      chan struct{}
	principal string
	plan      string
	err       error
	// abandoned: the caller that ran the lookup gave up (its context
	// ended), so its error is not the key's answer; the waiters try again.
	abandoned bool
}

// Stats counts what the cache did since New.
type Stats struct {
	Hits        uint64 // answered from a known entry
	UnknownHits uint64 // answered ErrUnknownAPIKey from an unknown entry
	Lookups     uint64 // calls to the backing lookup
	Joined      uint64 // callers that waited for another caller's lookup of the same key
	NotLookedUp uint64 // unseen keys answered ErrNotLookedUp
	Errors      uint64 // lookups that failed with another error than ErrUnknownAPIKey
	Known       int    // known entries held now
	Unknown     int    // unknown entries held now
}

// New returns a cache in front of next.
func New(next identity.KeyLookup, opts ...Option) (*Cache, error) {
	if next == nil {
		return nil, fmt.Errorf("%w: nil KeyLookup", ErrInvalidConfig)
	}
	cfg := config{
		ttl: DefaultTTL, unknownTTL: DefaultUnknownTTL,
		maxKeys: DefaultMaxKeys, maxUnknown: DefaultMaxUnknownKeys,
		rate: DefaultLookupsPerSecond, burst: DefaultLookupBurst,
		timeout: DefaultLookupTimeout, clock: systemClock{},
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	c := &Cache{
		next:       next,
		clock:      cfg.clock,
		epoch:      cfg.clock.Now(),
		ttl:        int64(cfg.ttl),
		unknownTTL: int64(cfg.unknownTTL),
		maxKeys:    cfg.maxKeys,
		maxUnknown: cfg.maxUnknown,
		timeout:    cfg.timeout,
		entries:    make(map[[sha256.Size]byte]*entry),
		flights:    make(map[[sha256.Size]byte]*flight),
		budget:     newBucket(int64(cfg.rate), int64(cfg.burst)),
	}
	c.known.init()
	c.unknown.init()
	return c, nil
}

// now is the clock's time in nanoseconds since the cache's epoch.
func (c *Cache) now() int64 { return int64(c.clock.Now().Sub(c.epoch)) }

// micros is now (from c.now) in µs since the Unix epoch, as the bucket
// keeps time.
func (c *Cache) micros(now int64) int64 { return c.epoch.UnixMicro() + now/int64(time.Microsecond) }

// LookupAPIKey implements identity.KeyLookup.
func (c *Cache) LookupAPIKey(ctx context.Context, apiKey string) (principal, plan string, err error) {
	h := sha256.Sum256([]byte(apiKey))
	for {
		now := c.now()
		c.mu.Lock()
		e := c.entries[h]
		if e != nil && now < e.expires {
			if e.unknown {
				c.stats.UnknownHits++
				c.mu.Unlock()
				return "", "", identity.ErrUnknownAPIKey
			}
			c.known.moveToFront(e)
			c.stats.Hits++
			principal, plan = e.principal, e.plan
			c.mu.Unlock()
			return principal, plan, nil
		}
		if f := c.flights[h]; f != nil {
			c.stats.Joined++
			c.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return "", "", fmt.Errorf("keycache: waiting for the lookup of this key: %w", ctx.Err())
			}
			if f.abandoned {
				continue
			}
			return f.principal, f.plan, f.err
		}
		// A known entry past its TTL is refreshed without a token: the
		// budget only bounds keys the cache has never seen granted.
		seen := e != nil && !e.unknown
		if !seen && !c.budget.take(c.micros(now)) {
			c.stats.NotLookedUp++
			c.mu.Unlock()
			return "", "", ErrNotLookedUp
		}
		f := &flight{done: make(chan struct{})}
		c.flights[h] = f
		c.stats.Lookups++
		c.mu.Unlock()
		return c.lookup(ctx, apiKey, h, f, seen)
	}
}

// Forget makes the cache ask the backing lookup about apiKey on its next
// request, instead of answering from memory until the TTL: a key revoked,
// or one issued after the cache found it unknown, takes effect at once. A
// known key stays counted as seen, so that its next lookup needs no token
// of the budget of unseen keys. A lookup of the key already in flight
// still records what it finds. A key the cache does not hold is ignored.
func (c *Cache) Forget(apiKey string) {
	h := sha256.Sum256([]byte(apiKey))
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e := c.entries[h]; {
	case e == nil:
	case e.unknown:
		c.unknown.remove(e)
		delete(c.entries, h)
	default:
		e.expires = 0 // expired: looked up again, as seen
	}
}

// lookup asks the backing lookup about the key whose hash is h, records
// the answer and hands it to the flight's waiters.
func (c *Cache) lookup(ctx context.Context, apiKey string, h [sha256.Size]byte, f *flight, seen bool) (string, string, error) {
	answered := false
	defer func() {
		if !answered { // the lookup panicked: release the waiters, who try again
			c.mu.Lock()
			delete(c.flights, h)
			c.mu.Unlock()
			f.abandoned = true
			close(f.done)
		}
	}()
	lctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	principal, plan, err := c.next.LookupAPIKey(lctx, apiKey)
	answered = true
	now := c.now()

	c.mu.Lock()
	defer func() {
		delete(c.flights, h)
		c.mu.Unlock()
		close(f.done)
	}()
	switch {
	case err == nil:
		if !seen {
			c.budget.refund(c.micros(now))
		}
		c.putKnown(h, principal, plan, now+c.ttl)
		f.principal, f.plan = principal, plan
		return principal, plan, nil
	case errors.Is(err, identity.ErrUnknownAPIKey):
		c.putUnknown(h, now+c.unknownTTL)
		f.err = identity.ErrUnknownAPIKey
		return "", "", identity.ErrUnknownAPIKey
	default:
		c.stats.Errors++
		f.err = fmt.Errorf("keycache: %w", err)
		f.abandoned = ctx.Err() != nil
		return "", "", f.err
	}
}

// putKnown records that h grants principal and plan until expires.
func (c *Cache) putKnown(h [sha256.Size]byte, principal, plan string, expires int64) {
	e := c.entries[h]
	switch {
	case e == nil:
		e = &entry{hash: h}
		c.entries[h] = e
	case e.unknown:
		c.unknown.remove(e)
	default:
		c.known.remove(e)
	}
	if c.known.n >= c.maxKeys {
		c.evict(&c.known)
	}
	// Copies, bounded: the lookup's strings may be cut from a larger
	// answer, and the entry outlives it. A name past 512 bytes
	// becomes its prefix and its hash, still its own.
	e.principal, e.plan = kept.Key(principal, kept.MaxKey), kept.Key(plan, kept.MaxKey)
	e.expires, e.unknown = expires, false
	c.known.pushFront(e)
}

// putUnknown records that nobody issued h, until expires.
func (c *Cache) putUnknown(h [sha256.Size]byte, expires int64) {
	e := c.entries[h]
	switch {
	case e == nil:
		e = &entry{hash: h}
		c.entries[h] = e
	case e.unknown:
		c.unknown.remove(e)
	default:
		c.known.remove(e)
	}
	if c.unknown.n >= c.maxUnknown {
		c.evict(&c.unknown)
	}
	e.principal, e.plan, e.expires, e.unknown = "", "", expires, true
	c.unknown.pushFront(e)
}

// evict drops the last entry of l.
func (c *Cache) evict(l *lru) {
	last := l.root.prev
	l.remove(last)
	delete(c.entries, last.hash)
}

// Stats returns what the cache did since New and what it holds.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Known, s.Unknown = c.known.n, c.unknown.n
	return s
}

// lru is a doubly linked list of entries around a sentinel, most recent
// first.
type lru struct {
	root entry
	n    int
}

func (l *lru) init() { l.root.prev, l.root.next = &l.root, &l.root }

func (l *lru) pushFront(e *entry) {
	e.prev, e.next = &l.root, l.root.next
	l.root.next.prev = e
	l.root.next = e
	l.n++
}

func (l *lru) remove(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	l.n--
}

func (l *lru) moveToFront(e *entry) {
	if l.root.next == e {
		return
	}
	l.remove(e)
	l.pushFront(e)
}

// bucket is the token bucket of lookups of unseen keys, kept with the
// limiter's own arithmetic (limiter.TakeBucket, RefundBucket) under the
// cache's lock. Times are µs since the Unix epoch; the zero state is full.
type bucket struct {
	limit limiter.Limit
	state limiter.BucketState
}

// newBucket returns a full bucket of burst tokens refilled at rate a
// second (both checked by WithLookupBudget).
func newBucket(rate, burst int64) bucket {
	return bucket{limit: limiter.Limit{Algorithm: limiter.TokenBucket, Burst: burst, Rate: rate, Period: time.Second}}
}

// take takes a token at now, if there is one.
func (b *bucket) take(now int64) bool {
	s, d, err := limiter.TakeBucket(b.limit, b.state, now, 1)
	if err != nil || !d.Allowed {
		return false
	}
	b.state = s
	return true
}

// refund gives a token back at now.
func (b *bucket) refund(now int64) {
	if s, _, err := limiter.RefundBucket(b.limit, b.state, now, 1); err == nil {
		b.state = s
	}
}
