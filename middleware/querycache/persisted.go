package querycache

import (
	"context"

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
type Persisted struct{ c *lru[string] }

// NewPersisted returns a cache of at most maxEntries documents and
// maxBytes bytes; zero takes DefaultPersistedEntries and
// DefaultPersistedBytes. A document larger than maxBytes is never kept.
func NewPersisted(maxEntries int, maxBytes int64) (*Persisted, error) {
	c, err := newLRU[string]("persisted query cache", maxEntries, maxBytes, DefaultPersistedEntries, DefaultPersistedBytes)
	if err != nil {
		return nil, err
	}
	return &Persisted{c}, nil
}

// Get implements graphql.Cache.
func (c *Persisted) Get(_ context.Context, key string) (string, bool) { return c.c.get(key) }

// Add implements graphql.Cache. gqlgen adds a document once its hash was
// checked against it, before it is parsed.
func (c *Persisted) Add(_ context.Context, key, query string) {
	c.c.add(key, query, int64(len(key)+len(query))+persistedEntryBytes)
}

// Len is the number of documents held.
func (c *Persisted) Len() int { return c.c.len() }

// Bytes is what the documents held are charged.
func (c *Persisted) Bytes() int64 { return c.c.size() }
