package concurrency

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/internal/shardmap"
)

// Defaults for the zero fields of MemoryConfig.
const (
	DefaultMaxKeys = 100_000
	DefaultShards  = 64
)

var (
	// ErrFull is wrapped by the error of an Acquire that would have to
	// store a key Memory does not hold while the key's shard holds its
	// share of MaxKeys and every one of them still has an unexpired lease.
	// Nothing is granted or stored; a caller must treat it as a refusal.
	ErrFull = errors.New("concurrency: memory full")
	// ErrInvalidConfig wraps every MemoryConfig validation error.
	ErrInvalidConfig = errors.New("concurrency: invalid config")
)

// MemoryConfig configures a Memory. The zero value is ready to use.
type MemoryConfig struct {
	// Clock tells the time. It must be monotonic, as time.Now is.
	// Default: limiter.SystemClock{}.
	Clock limiter.Clock
	// MaxKeys bounds the keys held at once (each shard holds at most
	// MaxKeys / Shards). A key is held while it has a lease; a new key
	// finding its shard full takes the place of a key whose leases have
	// all expired, or is refused with ErrFull. Default: DefaultMaxKeys.
	MaxKeys int
	// Shards is the number of independently locked partitions, at most
	// MaxKeys. Default: DefaultShards, or MaxKeys when smaller.
	Shards int
}

// Memory is the in-process Slots: exact within one process, sharded by
// key, bounded in keys, on an injected monotonic clock. It starts no
// goroutine and needs no Close: expired leases are forgotten when their
// key is next acquired, and a key whose leases have all expired is
// dropped when its shard needs the room.
type Memory struct {
	clock  limiter.Clock
	system bool      // clock is the SystemClock: read only its monotonic part
	origin time.Time // first reading; times are ns since it
	shards shardmap.Map[memShard, *memShard]
	// Lease ids are the store's random nonce and a counter: unique within
	// the store, and across stores (one rebuilt on reload, say) but for a
	// 2^-64 chance, which is all an in-process lease needs.
	nonce   uint64
	counter atomic.Uint64
	errFull error // ErrFull with the sizes, made once
}

var _ Slots = (*Memory)(nil)

type memShard struct {
	sync.Mutex
	shardmap.Table[*holders]
}

// holders is one key's leases, unordered. until is the latest expiry
// among them: from then on the key holds nothing (the shard table's due
// time).
type holders struct {
	leases []memLease
	until  int64
	// first backs leases while the key holds one lease, so a key costs
	// one allocation, not two.
	first [1]memLease
}

type memLease struct {
	id  LeaseID
	exp int64 // ns since the store's origin
}

func holdersUntil(h *holders) int64 { return h.until }

// NewMemory validates cfg and returns an empty Memory.
func NewMemory(cfg MemoryConfig) (*Memory, error) {
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	size, err := shardmap.Size{MaxKeys: cfg.MaxKeys, Shards: cfg.Shards}.
		Resolve(ErrInvalidConfig, shardmap.Size{MaxKeys: DefaultMaxKeys, Shards: DefaultShards})
	if err != nil {
		return nil, err
	}
	var seed [8]byte
	_, _ = rand.Read(seed[:]) // never fails (crypto/rand crashes the program instead)
	_, system := cfg.Clock.(limiter.SystemClock)
	return &Memory{
		clock:  cfg.Clock,
		system: system,
		origin: cfg.Clock.Now(),
		shards: shardmap.New[memShard](size),
		nonce:  binary.LittleEndian.Uint64(seed[:]),
		errFull: fmt.Errorf("%w: MaxKeys reached (%d keys, %d per shard) and every key of the shard holds a lease",
			ErrFull, size.MaxKeys, size.PerShard()),
	}, nil
}

// Local reports true: the leases are in this process (limiter.Local).
func (*Memory) Local() bool { return true }

// now is the time in ns since the origin.
func (m *Memory) now() int64 {
	if m.system {
		return int64(time.Since(m.origin))
	}
	return int64(m.clock.Now().Sub(m.origin))
}

func (m *Memory) newID() LeaseID {
	var id LeaseID
	binary.LittleEndian.PutUint64(id[:8], m.nonce)
	binary.BigEndian.PutUint64(id[8:], m.counter.Add(1))
	return id
}

// Acquire takes one of limit slots of key; see Slots.
func (m *Memory) Acquire(ctx context.Context, key string, limit int64, ttl time.Duration) (Decision, error) {
	if err := Validate(limit, ttl); err != nil {
		return Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, fmt.Errorf("concurrency: %w", err)
	}
	now := m.now()
	sh := m.shards.Shard(key)
	sh.Lock()
	defer sh.Unlock()

	h, ok := sh.Get(key)
	if !ok {
		if !sh.Room(now, holdersUntil) {
			return Decision{}, m.errFull
		}
		id := m.newID()
		h = &holders{until: now + int64(ttl), first: [1]memLease{{id, now + int64(ttl)}}}
		h.leases = h.first[:]
		if !sh.InsertDue(key, h, now, holdersUntil) { // a key past shardmap.MaxKeyBytes
			return Decision{}, m.errFull
		}
		return Decision{Allowed: true, Lease: Lease{key, id}, Limit: limit, Held: 1}, nil
	}
	// Forget the expired leases, moving only what follows one.
	leases, n := h.leases, 0
	for i := range leases {
		if leases[i].exp > now {
			if n != i {
				leases[n] = leases[i]
			}
			n++
		}
	}
	if n < len(leases) {
		clear(leases[n:])
		h.leases = leases[:n]
	}
	if held := int64(n); held >= limit {
		earliest := h.leases[0].exp // held ≥ limit ≥ 1
		for _, l := range h.leases[1:] {
			earliest = min(earliest, l.exp)
		}
		return Decision{Limit: limit, Held: held, RetryAfter: RetryAfter(time.Duration(earliest - now))}, nil
	}
	id := m.newID()
	exp := now + int64(ttl)
	h.leases = append(h.leases, memLease{id, exp})
	// The expired leases were all before now, so until, their latest or a
	// live one's, only moves later: the heap needs no word.
	h.until = max(h.until, exp)
	return Decision{Allowed: true, Lease: Lease{key, id}, Limit: limit, Held: int64(len(h.leases))}, nil
}

// Release gives lease's slot back; see Slots.
func (m *Memory) Release(ctx context.Context, lease Lease) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("concurrency: %w", err)
	}
	if lease.IsZero() {
		return false, nil
	}
	now := m.now()
	sh := m.shards.Shard(lease.Key)
	sh.Lock()
	defer sh.Unlock()
	h, i := sh.find(lease)
	if h == nil {
		return false, nil
	}
	held := h.leases[i].exp > now
	sh.remove(lease.Key, h, i)
	return held, nil
}

// Refresh moves a held lease's expiry to now + ttl; see Slots.
func (m *Memory) Refresh(ctx context.Context, lease Lease, ttl time.Duration) (bool, error) {
	if err := ValidateTTL(ttl); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("concurrency: %w", err)
	}
	if lease.IsZero() {
		return false, nil
	}
	now := m.now()
	sh := m.shards.Shard(lease.Key)
	sh.Lock()
	defer sh.Unlock()
	h, i := sh.find(lease)
	if h == nil {
		return false, nil
	}
	if h.leases[i].exp <= now {
		// Expired: its slot may have been counted free already. Forget it.
		sh.remove(lease.Key, h, i)
		return false, nil
	}
	exp := now + int64(ttl)
	old := h.leases[i].exp
	h.leases[i].exp = exp
	switch {
	case exp > h.until:
		h.until = exp
	case old == h.until && exp < old:
		h.setUntil(sh, lease.Key)
	}
	return true, nil
}

// Len reports how many keys Memory holds: those with a lease, expired or
// not, that no call has forgotten yet.
func (m *Memory) Len() int { return m.shards.Len() }

// find returns lease's key's holders and the lease's index in them, or nil
// when the shard, which must be locked, does not hold it.
func (sh *memShard) find(lease Lease) (*holders, int) {
	h, ok := sh.Get(lease.Key)
	if !ok {
		return nil, 0
	}
	for i := range h.leases {
		if h.leases[i].id == lease.ID {
			return h, i
		}
	}
	return nil, 0
}

// remove drops lease i of key's holders h, and the key with its last lease.
func (sh *memShard) remove(key string, h *holders, i int) {
	exp := h.leases[i].exp
	last := len(h.leases) - 1
	h.leases[i] = h.leases[last]
	h.leases[last] = memLease{}
	h.leases = h.leases[:last]
	switch {
	case last == 0:
		sh.Delete(key)
	case exp == h.until:
		h.setUntil(sh, key)
	}
}

// setUntil recomputes until from the leases after the latest may have
// moved earlier, and tells the shard's heap when it did.
func (h *holders) setUntil(sh *memShard, key string) {
	until := h.leases[0].exp // h holds a lease
	for _, l := range h.leases[1:] {
		until = max(until, l.exp)
	}
	if until < h.until {
		sh.Sooner(key, until, holdersUntil)
	}
	h.until = until
}
