// Package shardmap is the sharded, bounded key table behind the limiter's
// in-process stores: memorystore's budgets, overlimit's remembered
// rejections and splitbudget's leases.
//
// A Map spreads string keys over a fixed number of shards by a seeded
// hash. Each shard is the caller's own struct, which embeds a lock of its
// choosing (sync.Mutex for the stores that always write, sync.RWMutex for
// the read-mostly overlimit cache) and a Table, plus whatever else the
// caller keeps per shard. The caller locks the shard itself on its hot
// path, so the lock call is a direct one; the Map takes the locks only for
// the whole-map walks (Len, Each).
//
// A Table is one shard's keys, bounded to MaxKeys / Shards entries. When
// a full Table must take a new key, Insert either refuses it (splitbudget
// sends such keys to its store) or evicts one entry picked from a small
// random sample by the caller's Rank: the first entry that holds nothing
// worth keeping, else the lowest ranked. So memory stays bounded and an
// insertion costs a few map reads, whatever the traffic.
//
// Size carries the MaxKeys and Shards settings the three stores share,
// with their defaults and validation.
package shardmap

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"
)

// Sample is how many entries a full Table looks at to pick a victim.
const Sample = 8

// Size bounds a Map: MaxKeys keys in all, over Shards shards of
// MaxKeys / Shards keys each.
type Size struct {
	MaxKeys int
	Shards  int
}

// Resolve fills the zero fields of s from def and validates the result:
// no negative field, and at least one key per shard. A zero Shards becomes
// def.Shards or MaxKeys, whichever is smaller. Every error wraps invalid,
// the caller's ErrInvalidConfig, so it reads as the caller's own.
func (s Size) Resolve(invalid error, def Size) (Size, error) {
	switch {
	case s.MaxKeys < 0:
		return Size{}, fmt.Errorf("%w: MaxKeys must not be negative (got %d)", invalid, s.MaxKeys)
	case s.Shards < 0:
		return Size{}, fmt.Errorf("%w: Shards must not be negative (got %d)", invalid, s.Shards)
	}
	if s.MaxKeys == 0 {
		s.MaxKeys = def.MaxKeys
	}
	if s.Shards == 0 {
		s.Shards = min(def.Shards, s.MaxKeys)
	}
	switch {
	case s.MaxKeys <= 0 || s.Shards <= 0:
		// Only a bad def gets here: the callers' defaults are constants.
		return Size{}, fmt.Errorf("%w: no room for keys (MaxKeys %d, Shards %d)", invalid, s.MaxKeys, s.Shards)
	case s.Shards > s.MaxKeys:
		return Size{}, fmt.Errorf("%w: Shards (%d) exceeds MaxKeys (%d)", invalid, s.Shards, s.MaxKeys)
	}
	return s, nil
}

// PerShard is the number of keys one shard holds at most.
func (s Size) PerShard() int { return s.MaxKeys / s.Shards }

// Shard is what a pointer to a Map's shard type must be: a lock, and a
// Table's methods. Only an embedded Table provides the unexported one, so
// a shard type is a struct embedding a sync.Mutex or sync.RWMutex and a
// Table.
type Shard interface {
	sync.Locker
	Len() int
	reset(max int)
}

// Map spreads keys over shards of type S. Build it with New; the zero Map
// is not usable. Its methods are safe for concurrent use; the methods of
// a shard need that shard's lock.
type Map[S any, P interface {
	*S
	Shard
}] struct {
	seed   maphash.Seed
	shards []padded[S]
	size   Size
}

// padded keeps neighbouring shards' locks off one cache line.
type padded[S any] struct {
	s S
	_ [64]byte
}

// New returns a Map of size.Shards empty shards of size.PerShard keys each.
// size must come from Size.Resolve; New panics on a size Resolve rejects.
func New[S any, P interface {
	*S
	Shard
}](size Size) Map[S, P] {
	if size.Shards <= 0 || size.Shards > size.MaxKeys {
		panic(fmt.Sprintf("shardmap: unresolved size %+v", size))
	}
	m := Map[S, P]{seed: maphash.MakeSeed(), shards: make([]padded[S], size.Shards), size: size}
	for i := range m.shards {
		P(&m.shards[i].s).reset(size.PerShard())
	}
	return m
}

// Shard returns key's shard, unlocked.
func (m *Map[S, P]) Shard(key string) P {
	// Map the hash onto the shards by multiplication, not division.
	i, _ := bits.Mul64(maphash.String(m.seed, key), uint64(len(m.shards)))
	return &m.shards[i].s
}

// Size returns the size the Map was built with.
func (m *Map[S, P]) Size() Size { return m.size }

// Len reports how many keys the Map holds, locking one shard at a time.
func (m *Map[S, P]) Len() int {
	n := 0
	m.Each(func(sh P) { n += sh.Len() })
	return n
}

// Each calls f on every shard in turn, with that shard locked.
func (m *Map[S, P]) Each(f func(P)) {
	for i := range m.shards {
		sh := P(&m.shards[i].s)
		sh.Lock()
		f(sh)
		sh.Unlock()
	}
}

// Table is one shard's keys, at most a fixed number of them. It is not
// safe for concurrent use: the shard's lock guards it. The zero Table is
// unusable; New makes the Tables of a Map.
type Table[V any] struct {
	keys map[string]V
	max  int
}

// Rank orders a full Table's entries for eviction. free reports that v
// holds nothing worth keeping (an expired or whole entry): it is evicted
// at once. Otherwise the sampled entry of lowest rank is.
type Rank[V any] func(v V) (rank int64, free bool)

func (t *Table[V]) reset(max int) {
	t.keys = make(map[string]V)
	t.max = max
}

// Len reports how many keys t holds.
func (t *Table[V]) Len() int { return len(t.keys) }

// Get returns key's value and whether t holds key.
func (t *Table[V]) Get(key string) (V, bool) {
	v, ok := t.keys[key]
	return v, ok
}

// Insert stores v under key and reports whether it did. A key already held
// is replaced. A new key in a full Table first evicts the entry rank picks
// from a sample of Sample entries, or, when rank is nil, is refused.
func (t *Table[V]) Insert(key string, v V, rank Rank[V]) bool {
	if len(t.keys) >= t.max {
		if _, ok := t.keys[key]; !ok {
			if rank == nil {
				return false
			}
			t.evict(rank)
		}
	}
	t.keys[key] = v
	return true
}

// evict drops one entry: the first free one of a random sample (Go map
// iteration starts at a random position), else the sample's lowest ranked.
func (t *Table[V]) evict(rank Rank[V]) {
	var (
		victim string
		lowest int64
		seen   int
	)
	for k, v := range t.keys {
		r, free := rank(v)
		if free {
			victim = k
			break
		}
		if seen == 0 || r < lowest {
			victim, lowest = k, r
		}
		if seen++; seen == Sample {
			break
		}
	}
	delete(t.keys, victim)
}

// Delete drops key, if held.
func (t *Table[V]) Delete(key string) { delete(t.keys, key) }

// DeleteFunc drops every entry for which del returns true.
func (t *Table[V]) DeleteFunc(del func(key string, v V) bool) {
	for k, v := range t.keys {
		if del(k, v) {
			delete(t.keys, k)
		}
	}
}

// Clear drops every entry.
func (t *Table[V]) Clear() { clear(t.keys) }
