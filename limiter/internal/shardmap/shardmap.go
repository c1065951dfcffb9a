// Package shardmap is the sharded, bounded key table behind the limiter's
// in-process stores: memorystore's budgets, overlimit's remembered
// rejections, splitbudget's leases and concurrency.Memory's slots.
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
// A Table can instead make room only by dropping an entry that holds
// nothing worth keeping, never anything else (memorystore's budgets, where
// dropping a live entry would hand its owner a fuller bucket, and
// concurrency.Memory's slots, where it would free a held slot): InsertDue.
// Such a Table also keeps its keys in a min-heap by the time each entry
// becomes free, its due time, so the entries that have come due are found
// exactly and first, at a few heap steps per insertion, whatever the
// traffic; when none has come due, the new key is refused.
//
// Size carries the MaxKeys and Shards settings the four stores share,
// with their defaults and validation.
package shardmap

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"strings"
	"sync"
)

// Sample is how many entries a full Table looks at to pick a victim.
const Sample = 8

// MaxKeyBytes is the longest key a Table of string keys stores: a longer
// one is refused as a full Table refuses a new key. The keys the limiter
// builds are a principal's (at most 512 bytes, the middleware bounds
// them) after a prefix of the configuration ("lane:<name>:").
const MaxKeyBytes = 1 << 10

// OwnString is the Own of a Table of string keys: a copy of key, false
// past MaxKeyBytes.
func OwnString(key string) (string, bool) {
	if len(key) > MaxKeyBytes {
		return "", false
	}
	return strings.Clone(key), true
}

// Own makes the key a Table stores of the key a caller passed: a copy
// that shares no memory with it (a key cut from a request must not keep
// the request alive), or false to refuse a key too large to keep.
type Own[K comparable] func(key K) (K, bool)

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
	return &m.shards[m.Index(key)].s
}

// Index is the position of key's shard among the Map's shards, in
// [0, Size().Shards): a caller locking several shards at once locks them
// in ascending Index order, so two such callers never deadlock.
func (m *Map[S, P]) Index(key string) int {
	// Map the hash onto the shards by multiplication, not division.
	i, _ := bits.Mul64(maphash.String(m.seed, key), uint64(len(m.shards)))
	return int(i)
}

// At returns the shard at index i (see Index), unlocked.
func (m *Map[S, P]) At(i int) P { return &m.shards[i].s }

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

// Table is one shard's keys, at most a fixed number of them: a
// KeyedTable with string keys, the kind a Map's shards embed.
type Table[V any] = KeyedTable[string, V]

// KeyedTable is one shard's keys of type K, at most a fixed number of
// them. It is not safe for concurrent use: the shard's lock guards it. The
// zero KeyedTable is unusable; New makes the Tables of a Map, and Init a
// shard's further tables (memorystore keeps named budgets, keyed by
// owner and name, next to its plain keys).
type KeyedTable[K comparable, V any] struct {
	keys map[K]held[K, V]
	max  int
	own  Own[K] // every new key goes through it
	// order is a min-heap of keys by due time, kept only by InsertDue and
	// Sooner. An item may be stale: its key gone (Delete drops no item),
	// or due later than the item says. It is never due earlier: every
	// live key has an item at or before its due time. Stale items are
	// dropped or moved when they reach the top, and the heap is rebuilt
	// from the keys before it grows past twice the Table's bound.
	order []dueItem[K]
}

// held is a Table's entry: its value, and the key as the Table stores it
// (its own copy), for the due heap's items to share.
type held[K comparable, V any] struct {
	key K
	v   V
}

type dueItem[K comparable] struct {
	at  int64
	key K
}

// Rank orders a full Table's entries for eviction. free reports that v
// holds nothing worth keeping (an expired or whole entry): it is evicted
// at once. Otherwise the sampled entry of lowest rank is.
type Rank[V any] func(v V) (rank int64, free bool)

// reset makes t an empty Table of string keys (New's), owned by
// OwnString.
func (t *KeyedTable[K, V]) reset(max int) {
	own, ok := any(Own[string](OwnString)).(Own[K])
	if !ok {
		panic("shardmap: a Map's Table has string keys")
	}
	t.Init(max, own)
}

// Init makes t an empty table of at most max keys, each new one stored as
// own makes it, for a table a shard keeps besides the one New made.
func (t *KeyedTable[K, V]) Init(max int, own Own[K]) {
	t.keys = make(map[K]held[K, V])
	t.max = max
	t.own = own
}

// Len reports how many keys t holds.
func (t *KeyedTable[K, V]) Len() int { return len(t.keys) }

// Get returns key's value and whether t holds key.
func (t *KeyedTable[K, V]) Get(key K) (V, bool) {
	h, ok := t.keys[key]
	return h.v, ok
}

// Insert stores v under key and reports whether it did. A key already held
// is replaced. A new key is stored as the Table's Own makes it, or
// refused when Own refuses it; in a full Table it first evicts the entry
// rank picks from a sample of Sample entries, or, when rank is nil, is
// refused.
func (t *KeyedTable[K, V]) Insert(key K, v V, rank Rank[V]) bool {
	if h, ok := t.keys[key]; ok {
		t.keys[key] = held[K, V]{h.key, v}
		return true
	}
	full := len(t.keys) >= t.max
	if full && rank == nil {
		return false
	}
	key, ok := t.own(key)
	if !ok {
		return false
	}
	if full {
		t.evict(rank)
	}
	t.keys[key] = held[K, V]{key, v}
	return true
}

// evict drops one entry: the first free one of a random sample (Go map
// iteration starts at a random position), else the sample's lowest ranked.
func (t *KeyedTable[K, V]) evict(rank Rank[V]) {
	var (
		victim K
		lowest int64
		seen   int
	)
	for k, h := range t.keys {
		r, free := rank(h.v)
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

// Due is when v becomes free, holding nothing worth keeping, in the
// caller's unit of time. A Table filled with InsertDue must hear through
// Sooner of every held entry whose due time moves earlier; a move later
// needs no word (the entry is put back in its place when its old time
// comes).
type Due[V any] func(v V) int64

// InsertDue stores v under key and reports whether it did. A key already
// held is replaced. A new key is stored as the Table's Own makes it, or
// refused when Own refuses it; in a full Table it takes the place of an entry
// due at or before now, the earliest due first, found in at most Sample
// heap steps; when there is none, the key is refused and nothing changes.
// An entry that is not yet due is never dropped.
//
// Every entry of the Table must have been stored by InsertDue.
func (t *KeyedTable[K, V]) InsertDue(key K, v V, now int64, due Due[V]) bool {
	old, isHeld := t.keys[key]
	switch {
	case !isHeld:
		if len(t.keys) >= t.max && !t.reclaim(now, due) {
			return false
		}
		var ok bool
		if key, ok = t.own(key); !ok {
			return false // having dropped a due entry, which held nothing
		}
		t.push(due(v), key, due)
	default:
		key = old.key // the Table's copy, for the heap and the map alike
		if due(v) < due(old.v) {
			t.push(due(v), key, due)
		}
	}
	t.keys[key] = held[K, V]{key, v}
	return true
}

// Room reports whether InsertDue would store a new key now, dropping the
// entry it would drop to make room. A caller that builds the value only
// once it knows it will be kept calls Room first.
func (t *KeyedTable[K, V]) Room(now int64, due Due[V]) bool {
	return len(t.keys) < t.max || t.reclaim(now, due)
}

// Sooner records that key's entry, held and stored by InsertDue, is now
// due at at, earlier than before.
func (t *KeyedTable[K, V]) Sooner(key K, at int64, due Due[V]) {
	if h, ok := t.keys[key]; ok {
		t.push(at, h.key, due) // the Table's copy of key, not the caller's
	}
}

// DeleteDue drops every entry due at or before now, and returns how many it
// dropped. It walks the heap, not the keys: a few steps per entry dropped
// or come due since the last call.
func (t *KeyedTable[K, V]) DeleteDue(now int64, due Due[V]) int {
	n := 0
	for len(t.order) > 0 && t.order[0].at <= now {
		if t.step(now, due) {
			n++
		}
	}
	return n
}

// reclaim drops the earliest due entry if it is due at or before now, in
// at most Sample steps, and reports whether it dropped one.
func (t *KeyedTable[K, V]) reclaim(now int64, due Due[V]) bool {
	for range Sample {
		if len(t.order) == 0 || t.order[0].at > now {
			return false // every live key is due later
		}
		if t.step(now, due) {
			return true
		}
	}
	return false
}

// step settles the heap's top item, which is due at or before now: it
// drops the item of a key no longer held, drops the key and its item when
// the key is due, and otherwise moves the item to the key's due time. It
// reports whether it dropped a key. Each step is paid for by an earlier
// push or by the write that moved the key's due time on, so reclaiming is
// amortised O(log n) per write.
func (t *KeyedTable[K, V]) step(now int64, due Due[V]) bool {
	top := t.order[0]
	h, isHeld := t.keys[top.key]
	if isHeld {
		if at := due(h.v); at > now {
			t.order[0].at = at
			t.down(0)
			return false
		}
		delete(t.keys, top.key)
	}
	t.pop()
	return isHeld
}

// push adds an item, first rebuilding the heap from the keys when it holds
// twice as many items as the Table holds keys at most: the rebuild costs
// O(max) and comes at most once per max pushes.
func (t *KeyedTable[K, V]) push(at int64, key K, due Due[V]) {
	if len(t.order) >= 2*t.max+Sample {
		t.rebuild(due)
	}
	t.order = append(t.order, dueItem[K]{at, key})
	t.up(len(t.order) - 1)
}

// rebuild replaces the heap by one exact item per held key.
func (t *KeyedTable[K, V]) rebuild(due Due[V]) {
	clear(t.order) // let go of the dropped keys
	t.order = t.order[:0]
	for k, h := range t.keys {
		t.order = append(t.order, dueItem[K]{due(h.v), k})
	}
	for i := len(t.order)/2 - 1; i >= 0; i-- {
		t.down(i)
	}
}

func (t *KeyedTable[K, V]) pop() {
	last := len(t.order) - 1
	t.order[0] = t.order[last]
	t.order[last] = dueItem[K]{}
	t.order = t.order[:last]
	t.down(0)
}

func (t *KeyedTable[K, V]) up(i int) {
	h := t.order
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= h[i].at {
			return
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
}

func (t *KeyedTable[K, V]) down(i int) {
	h := t.order
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].at < h[c].at {
			c++
		}
		if h[i].at <= h[c].at {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// Delete drops key, if held.
func (t *KeyedTable[K, V]) Delete(key K) { delete(t.keys, key) }

// DeleteFunc drops every entry for which del returns true.
func (t *KeyedTable[K, V]) DeleteFunc(del func(key K, v V) bool) {
	for k, h := range t.keys {
		if del(k, h.v) {
			delete(t.keys, k)
		}
	}
}

// Clear drops every entry.
func (t *KeyedTable[K, V]) Clear() {
	clear(t.keys)
	clear(t.order)
	t.order = t.order[:0]
}
