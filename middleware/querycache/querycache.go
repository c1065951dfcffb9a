// Package querycache bounds gqlgen's cache of parsed documents by the
// memory they hold as well as by their number.
package querycache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/complexity"
)

// Defaults of New.
const (
	DefaultEntries = 1000
	DefaultBytes   = 32 << 20
	// queryCacheBytesPerToken is what one token of a document costs once
	// parsed (gqlparser's syntax tree: 20 to 200 bytes a token for the
	// shapes TestQueryCacheEstimateCoversTheTree measures), on top of the
	// document's own bytes, which the tree keeps.
	queryCacheBytesPerToken = 256
	// queryCacheEntryBytes is an entry's fixed part: the document and
	// operation structs, the map entry and the list element.
	queryCacheEntryBytes = 8 << 10
)

var _ graphql.Cache[*ast.QueryDocument] = (*Cache)(nil)

// Cache is a gqlgen query cache (handler.Server.SetQueryCache) bounded
// by the memory of the documents it holds as well as by their number:
// gqlgen's lru.New counts entries only, so 1,000 documents of a megabyte
// each could pin gigabytes. An entry is charged its query's bytes plus an
// estimate of its parsed tree (8 KiB, and 256 bytes a token), which a test
// holds above what gqlparser's tree really takes; the least recently used
// entries go first. Safe for concurrent use.
type Cache struct {
	mu         sync.Mutex
	maxEntries int
	maxBytes   int64
	bytes      int64
	order      *list.List // front: most recently used
	items      map[string]*list.Element
}

type queryCacheEntry struct {
	key   string
	doc   *ast.QueryDocument
	bytes int64
}

// ErrInvalidConfig wraps the errors New returns.
var ErrInvalidConfig = errors.New("querycache: invalid config")

// New returns a cache of at most maxEntries documents and maxBytes
// estimated bytes; zero takes DefaultEntries and DefaultBytes. A document
// larger than maxBytes is never kept.
func New(maxEntries int, maxBytes int64) (*Cache, error) {
	if maxEntries < 0 || maxBytes < 0 {
		return nil, fmt.Errorf("%w: query cache bounds must not be negative (entries %d, bytes %d)", ErrInvalidConfig, maxEntries, maxBytes)
	}
	if maxEntries == 0 {
		maxEntries = DefaultEntries
	}
	if maxBytes == 0 {
		maxBytes = DefaultBytes
	}
	return &Cache{maxEntries: maxEntries, maxBytes: maxBytes, order: list.New(), items: make(map[string]*list.Element)}, nil
}

// Get implements graphql.Cache.
func (c *Cache) Get(_ context.Context, key string) (*ast.QueryDocument, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*queryCacheEntry).doc, true
}

// Add implements graphql.Cache. gqlgen adds a document once it has parsed
// and validated it.
func (c *Cache) Add(_ context.Context, key string, doc *ast.QueryDocument) {
	size := DocumentBytes(key)
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
		c.remove(c.order.Back())
	}
	c.items[key] = c.order.PushFront(&queryCacheEntry{key: key, doc: doc, bytes: size})
	c.bytes += size
}

// Len is the number of documents held; Bytes their estimated size.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// Bytes is the estimated memory of the documents held.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

func (c *Cache) remove(el *list.Element) {
	e := c.order.Remove(el).(*queryCacheEntry)
	delete(c.items, e.key)
	c.bytes -= e.bytes
}

// DocumentBytes estimates what a parsed query holds in memory: what the
// cache charges an entry, and what a cache beside it (compiled cost plans)
// charges for the document an entry keeps alive.
func DocumentBytes(query string) int64 {
	size, _ := complexity.CheckDocument(query, complexity.DocumentLimits{}) // no limits: counts only
	return queryCacheEntryBytes + int64(len(query)) + int64(size.Tokens)*queryCacheBytesPerToken
}
