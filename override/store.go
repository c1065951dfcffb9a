package override

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Version is where a store's overrides stand. Two versions are the same
// only when both fields are (==); a Watcher reads the overrides again on
// any difference, whichever way the count went.
type Version struct {
	// N counts the changes since the store was empty. A store that loses
	// data (a Redis flushed, restarted without persistence, or failed over
	// to a replica that had not received the last changes) counts again
	// from where its data stands, so N alone can come back to a value a
	// process has already seen, with other overrides behind it.
	N int64
	// ID is drawn at random by every change and kept with the overrides
	// (the same Redis key), so a store that lost data never shows again a
	// version a process has seen. "" before the first change, and in a
	// store that cannot lose data without the process (Memory).
	ID string
}

// String is the version as logs show it: "7" or "7/<id>".
func (v Version) String() string {
	if v.ID == "" {
		return strconv.FormatInt(v.N, 10)
	}
	return strconv.FormatInt(v.N, 10) + "/" + v.ID
}

// Store keeps the overrides of every principal, by principal key, with a
// Version that every change replaces by one never seen before. Every
// change returns the version it left, so that the process that made it
// can apply it at once. Memory keeps them for one process;
// override/redisoverride for every process sharing a Redis.
type Store interface {
	// Put sets key's override, first removing those expired at now, and
	// returns the version it left. It returns ErrFull when the store holds
	// its most overrides and key has none.
	Put(ctx context.Context, key string, o Override, now time.Time) (Version, error)
	// Delete removes key's override and reports whether there was one,
	// with the version the store is at after it.
	Delete(ctx context.Context, key string) (bool, Version, error)
	// Version is the store's version: any change, and any loss of data,
	// replaces it.
	Version(ctx context.Context) (Version, error)
	// Load returns every override with the version they are at, in one
	// atomic read.
	Load(ctx context.Context) (map[string]Override, Version, error)
	// Purge removes the overrides expired at now and returns the version
	// the store is at after it.
	Purge(ctx context.Context, now time.Time) (Version, error)
}

// Memory is the in-process Store: the overrides of one process. It is safe
// for concurrent use and holds at most its MaxOverrides.
type Memory struct {
	mu      sync.Mutex
	max     int
	entries map[string]Override
	version int64
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory holding at most maxOverrides overrides
// (0: DefaultMaxOverrides).
func NewMemory(maxOverrides int) (*Memory, error) {
	if maxOverrides < 0 {
		return nil, fmt.Errorf("%w: MaxOverrides %d is negative", ErrInvalid, maxOverrides)
	}
	if maxOverrides == 0 {
		maxOverrides = DefaultMaxOverrides
	}
	return &Memory{max: maxOverrides, entries: map[string]Override{}}, nil
}

// Put implements Store.
func (m *Memory) Put(_ context.Context, key string, o Override, now time.Time) (Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.purgeLocked(now)
	if _, ok := m.entries[key]; !ok && len(m.entries) >= m.max {
		return Version{N: m.version}, fmt.Errorf("%w: %d principals have one (the most this store holds)", ErrFull, m.max)
	}
	if _, ok := m.entries[key]; !ok {
		key = strings.Clone(key) // the map keeps it: never a caller's substring
	}
	m.entries[key] = o
	m.version++
	return Version{N: m.version}, nil
}

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, key string) (bool, Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.entries[key]
	if ok {
		delete(m.entries, key)
		m.version++
	}
	return ok, Version{N: m.version}, nil
}

// Version implements Store.
func (m *Memory) Version(context.Context) (Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Version{N: m.version}, nil
}

// Load implements Store.
func (m *Memory) Load(context.Context) (map[string]Override, Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.entries), Version{N: m.version}, nil
}

// Purge implements Store.
func (m *Memory) Purge(_ context.Context, now time.Time) (Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.purgeLocked(now)
	return Version{N: m.version}, nil
}

func (m *Memory) purgeLocked(now time.Time) {
	removed := false
	for k, o := range m.entries {
		if o.Expired(now) {
			delete(m.entries, k)
			removed = true
		}
	}
	if removed {
		m.version++
	}
}
