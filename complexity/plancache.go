package complexity

import (
	"container/list"
	"sync"

	"github.com/vektah/gqlparser/v2/ast"
)

// PlanCache keeps the compiled plans of one Analyzer, least recently used
// out first, bounded by a number of plans and by their Plan.Size in bytes.
// It is keyed by the document and operation pointers, as a server's query
// cache hands out the same parsed document for the same query text, so it
// belongs beside that cache and bounded like it. It is safe for concurrent
// use.
type PlanCache struct {
	a          *Analyzer
	maxEntries int
	maxBytes   int64

	mu    sync.Mutex
	bytes int64
	lru   *list.List // of *planEntry, most recent first
	index map[planKey]*list.Element
}

type planKey struct {
	doc *ast.QueryDocument
	op  *ast.OperationDefinition
}

type planEntry struct {
	key   planKey
	plan  *Plan
	bytes int64 // what the entry is charged: the plan's size and its document's
}

// NewPlanCache returns a cache of a's plans holding at most maxEntries
// plans and maxBytes bytes of them (Plan.Size; 0 means no byte bound). A
// plan larger than maxBytes is compiled and returned but not kept.
func (a *Analyzer) NewPlanCache(maxEntries int, maxBytes int64) *PlanCache {
	return &PlanCache{a: a, maxEntries: maxEntries, maxBytes: maxBytes, lru: list.New(), index: map[planKey]*list.Element{}}
}

// Get returns the plan of op in doc, compiling it on a miss. Two callers
// missing at once may both compile; the plans are the same. An entry is
// charged its Plan.Size only: use GetCharging when the cache may outlive
// the documents' own cache.
func (c *PlanCache) Get(doc *ast.QueryDocument, op *ast.OperationDefinition) (*Plan, error) {
	return c.GetCharging(doc, op, nil)
}

// GetCharging is Get, charging a new entry documentBytes() on top of its
// plan's size: an entry keeps its document alive, so once the server's
// query cache has dropped the document, only this charge bounds the
// memory it holds. documentBytes runs on a miss only.
func (c *PlanCache) GetCharging(doc *ast.QueryDocument, op *ast.OperationDefinition, documentBytes func() int64) (*Plan, error) {
	key := planKey{doc, op}
	c.mu.Lock()
	if e, ok := c.index[key]; ok {
		c.lru.MoveToFront(e)
		p := e.Value.(*planEntry).plan
		c.mu.Unlock()
		return p, nil
	}
	c.mu.Unlock()
	p, err := c.a.Compile(doc, op)
	if err != nil {
		return nil, err
	}
	size := p.Size()
	if documentBytes != nil {
		size += documentBytes()
	}
	if c.maxEntries <= 0 || (c.maxBytes > 0 && size > c.maxBytes) {
		return p, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.index[key]; ok {
		return p, nil
	}
	c.index[key] = c.lru.PushFront(&planEntry{key: key, plan: p, bytes: size})
	c.bytes += size
	for c.lru.Len() > c.maxEntries || (c.maxBytes > 0 && c.bytes > c.maxBytes) {
		old := c.lru.Remove(c.lru.Back()).(*planEntry)
		delete(c.index, old.key)
		c.bytes -= old.bytes
	}
	return p, nil
}

// Len returns the number of plans kept and the bytes they are charged
// (Plan.Size, and GetCharging's document bytes).
func (c *PlanCache) Len() (plans int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.bytes
}
