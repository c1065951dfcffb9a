package override

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"
)

// Store keeps the overrides of every principal, by principal key, with a
// version that changes on every change. Memory keeps them for one process;
// override/redisoverride for every process sharing a Redis.
type Store interface {
	// Put sets key's override, first removing those expired at now. It
	// returns ErrFull when the store holds its most overrides and key has
	// none.
	Put(ctx context.Context, key string, o Override, now time.Time) error
	// Delete removes key's override and reports whether there was one.
	Delete(ctx context.Context, key string) (bool, error)
	// Version is the store's version: any change moves it.
	Version(ctx context.Context) (int64, error)
	// Load returns every override with the version they are at, in one
	// atomic read.
	Load(ctx context.Context) (map[string]Override, int64, error)
	// Purge removes the overrides expired at now.
	Purge(ctx context.Context, now time.Time) error
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
func (m *Memory) Put(_ context.Context, key string, o Override, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.purgeLocked(now)
	if _, ok := m.entries[key]; !ok && len(m.entries) >= m.max {
		return fmt.Errorf("%w: %d principals have one (the most this store holds)", ErrFull, m.max)
	}
	m.entries[key] = o
	m.version++
	return nil
}

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, key string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.entries[key]
	if ok {
		delete(m.entries, key)
		m.version++
	}
	return ok, nil
}

// Version implements Store.
func (m *Memory) Version(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version, nil
}

// Load implements Store.
func (m *Memory) Load(context.Context) (map[string]Override, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.entries), m.version, nil
}

// Purge implements Store.
func (m *Memory) Purge(_ context.Context, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.purgeLocked(now)
	return nil
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
