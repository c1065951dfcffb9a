package querycache

import (
	"container/list"
	"fmt"
	"sync"
)

// lru holds values by key, bounded by their number and by the bytes each
// is charged; the least recently used go first. Safe for concurrent use.
type lru[V any] struct {
	mu         sync.Mutex
	maxEntries int
	maxBytes   int64
	bytes      int64
	order      *list.List // front: most recently used
	items      map[string]*list.Element
}

type lruEntry[V any] struct {
	key   string
	value V
	bytes int64
}

// newLRU checks the bounds (zero takes the defaults given) and returns an
// empty cache; what names the bounds in an error.
func newLRU[V any](what string, maxEntries int, maxBytes int64, defEntries int, defBytes int64) (*lru[V], error) {
	if maxEntries < 0 || maxBytes < 0 {
		return nil, fmt.Errorf("%w: %s bounds must not be negative (entries %d, bytes %d)", ErrInvalidConfig, what, maxEntries, maxBytes)
	}
	if maxEntries == 0 {
		maxEntries = defEntries
	}
	if maxBytes == 0 {
		maxBytes = defBytes
	}
	return &lru[V]{maxEntries: maxEntries, maxBytes: maxBytes, order: list.New(), items: make(map[string]*list.Element)}, nil
}

func (c *lru[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*lruEntry[V]).value, true
}

// add keeps value under key, charged size bytes, unless key is held (it is
// then only marked used) or size alone is above the byte bound.
func (c *lru[V]) add(key string, value V, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		return
	}
	if size > c.maxBytes {
		return
	}
	for c.order.Len() >= c.maxEntries || c.bytes+size > c.maxBytes {
		e := c.order.Remove(c.order.Back()).(*lruEntry[V])
		delete(c.items, e.key)
		c.bytes -= e.bytes
	}
	c.items[key] = c.order.PushFront(&lruEntry[V]{key: key, value: value, bytes: size})
	c.bytes += size
}

func (c *lru[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

func (c *lru[V]) size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
