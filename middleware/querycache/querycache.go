// Package querycache bounds gqlgen's cache of parsed documents by the
// memory they hold as well as by their number.
package querycache

import (
	"context"
	"errors"

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
type Cache struct{ c *lru[*ast.QueryDocument] }

// ErrInvalidConfig wraps the errors New returns.
var ErrInvalidConfig = errors.New("querycache: invalid config")

// New returns a cache of at most maxEntries documents and maxBytes
// estimated bytes; zero takes DefaultEntries and DefaultBytes. A document
// larger than maxBytes is never kept.
func New(maxEntries int, maxBytes int64) (*Cache, error) {
	c, err := newLRU[*ast.QueryDocument]("query cache", maxEntries, maxBytes, DefaultEntries, DefaultBytes)
	if err != nil {
		return nil, err
	}
	return &Cache{c}, nil
}

// Get implements graphql.Cache.
func (c *Cache) Get(_ context.Context, key string) (*ast.QueryDocument, bool) { return c.c.get(key) }

// Add implements graphql.Cache. gqlgen adds a document once it has parsed
// and validated it.
func (c *Cache) Add(_ context.Context, key string, doc *ast.QueryDocument) {
	c.c.add(key, doc, DocumentBytes(key))
}

// Len is the number of documents held; Bytes their estimated size.
func (c *Cache) Len() int { return c.c.len() }

// Bytes is the estimated memory of the documents held.
func (c *Cache) Bytes() int64 { return c.c.size() }

// DocumentBytes estimates what a parsed query holds in memory: what the
// cache charges an entry, and what a cache beside it (compiled cost plans)
// charges for the document an entry keeps alive.
func DocumentBytes(query string) int64 {
	size, _ := complexity.CheckDocument(query, complexity.DocumentLimits{}) // no limits: counts only
	return queryCacheEntryBytes + int64(len(query)) + int64(size.Tokens)*queryCacheBytesPerToken
}
