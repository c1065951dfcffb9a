package querycache

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/99designs/gqlgen/graphql"
)

// Defaults of NewPersisted.
const (
	DefaultPersistedEntries = 1000
	DefaultPersistedBytes   = 16 << 20
	// persistedEntryBytes is an entry's fixed part: the map entry, the
	// list element and the two string headers.
	persistedEntryBytes = 256
)

var _ graphql.Cache[string] = (*Persisted)(nil)

// Persisted is a cache for gqlgen's automatic persisted queries
// (extension.AutomaticPersistedQuery.Cache), hash to document, bounded by
// the bytes of what it holds as well as by its number of entries: every
// client may register documents, so a flood of distinct ones must evict
// rather than grow. An entry is charged its hash's and its document's
// bytes and 256 more; the least recently used go first. Safe for
// concurrent use.
type Persisted struct {
	mu         sync.Mutex
	maxEntries int
	maxBytes   int64
	bytes      int64
	order      *list.List // front: most recently used
	items      map[string]*list.Element
}

type persistedEntry struct {
	key, query string
	bytes      int64
}

// NewPersisted returns a cache of at most maxEntries documents and
// maxBytes bytes; zero takes DefaultPersistedEntries and
// DefaultPersistedBytes. A document larger than maxBytes is never kept.
func NewPersisted(maxEntries int, maxBytes int64) (*Persisted, error) {
	if maxEntries < 0 || maxBytes < 0 {
		return nil, fmt.Errorf("%w: persisted query cache bounds must not be negative (entries %d, bytes %d)", ErrInvalidConfig, maxEntries, maxBytes)
	}
	if maxEntries == 0 {
		maxEntries = DefaultPersistedEntries
	}
	if maxBytes == 0 {
		maxBytes = DefaultPersistedBytes
	}
	return &Persisted{maxEntries: maxEntries, maxBytes: maxBytes, order: list.New(), items: make(map[string]*list.Element)}, nil
}

// Get implements graphql.Cache.
func (c *Persisted) Get(_ context.Context, key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return "", false
	}
	c.order.MoveToFront(el)
	return el.Value.(*persistedEntry).query, true
}

// Add implements graphql.Cache. gqlgen adds a document once its hash was
// checked against it, before it is parsed.
func (c *Persisted) Add(_ context.Context, key, query string) {
	size := int64(len(key)+len(query)) + persistedEntryBytes
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
		e := c.order.Remove(c.order.Back()).(*persistedEntry)
		delete(c.items, e.key)
		c.bytes -= e.bytes
	}
	c.items[key] = c.order.PushFront(&persistedEntry{key: key, query: query, bytes: size})
	c.bytes += size
}

// Len is the number of documents held.
func (c *Persisted) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// Bytes is what the documents held are charged.
func (c *Persisted) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
