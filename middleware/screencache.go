package middleware

import (
	"bytes"
	"hash/maphash"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/lexer"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/internal/jsontext"
)

// Bounds of the screened-query cache: most APIs serve a few hundred
// distinct documents, and a client sending fresh ones only makes each of
// its requests pay the lexer pass it would have paid without the cache.
const (
	screenCacheEntries = 1024
	screenCacheBytes   = 8 << 20
	// screenCacheMaxQuery is the longest query literal kept: screening a
	// longer document costs little next to parsing it.
	screenCacheMaxQuery = 64 << 10
	screenCacheShards   = 16
	// screenEntryBytes is an entry's fixed part (struct, map slot).
	screenEntryBytes = 128
)

// screenedQuery is what screening learned of one query: its decoded text,
// the document bounds it was found within, and the names written after
// '$' in it (which variables a request may keep).
type screenedQuery struct {
	query   string
	limits  complexity.DocumentLimits
	dollars []string // sorted
	// unreadable: the lexer fails on the document (gqlgen's parser will
	// refuse it), so no variable is dropped.
	unreadable bool
	bytes      int64
}

// readVariables returns the members of vars, a request's variables
// object (nil: none), that the document can read, in buf when they fit,
// and whether vars holds any other, which the caller drops. Memory grows
// with the variables the document names, never with those a body sends:
// an object of more members than the document has names is walked again,
// keeping only the named ones.
func (q *screenedQuery) readVariables(vars []byte, buf []jsontext.Member) (read []jsontext.Member, others bool) {
	if vars == nil || q.unreadable {
		return nil, false
	}
	if len(q.dollars) == 0 {
		return nil, len(bytes.TrimSpace(vars[1:len(vars)-1])) > 0
	}
	none := [][]byte{} // the values are counted by then
	read, status := jsontext.Members(vars, buf, jsontext.Limits{Count: none, MaxMembers: len(q.dollars)})
	if status == jsontext.Object {
		for i := range read {
			others = others || !q.reads(read[i].Name)
		}
		if !others {
			return read, false
		}
	}
	read, _ = jsontext.Members(vars, buf[:0], jsontext.Limits{Count: none, Keep: q.reads})
	return read, true
}

// reads reports whether the document names the variable whose name is
// written name (escapes undecoded).
func (q *screenedQuery) reads(name []byte) bool {
	m := jsontext.Member{Name: name}
	_, ok := slices.BinarySearch(q.dollars, string(m.Key()))
	return ok
}

// queryLiteral returns a query's JSON string literal as a cache key and
// the query it spells, which shares the key's bytes (shared) when the
// literal holds no escape.
func queryLiteral(literal []byte) (key, query string, shared bool) {
	key = string(literal)
	inner := literal[1 : len(literal)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return key, key[1 : len(key)-1], true
	}
	return key, jsonString(literal), false
}

// newScreenedQuery reads the '$' names of query, which passed lim; key is
// its literal (shared: query is a part of it).
func newScreenedQuery(key, query string, shared bool, lim complexity.DocumentLimits) *screenedQuery {
	q := &screenedQuery{query: query, limits: lim}
	q.dollars, q.unreadable = dollarNames(query)
	q.bytes = screenEntryBytes + int64(len(key))
	if !shared {
		q.bytes += int64(len(query))
	}
	for _, n := range q.dollars {
		q.bytes += int64(len(n)) + 16 // the string and its header
	}
	return q
}

// dollarNames returns the sorted, distinct names that follow '$' in query
// (its variables' declarations and uses), and whether the lexer failed.
func dollarNames(query string) (names []string, unreadable bool) {
	lex := lexer.New(&ast.Source{Input: query})
	afterDollar := false
	for {
		tok, err := lex.ReadToken()
		if err != nil {
			return nil, true
		}
		if tok.Kind == lexer.EOF {
			break
		}
		if afterDollar && tok.Kind == lexer.Name {
			names = append(names, tok.Value)
		}
		afterDollar = tok.Kind == lexer.Dollar
	}
	slices.Sort(names)
	return slices.Compact(names), false
}

// screenCache remembers screened queries by their JSON literal as the
// request body spells it, so a document seen before is neither decoded nor
// lexed again. It is bounded by entries and estimated bytes, evicting
// arbitrary entries (Go's map iteration order is random) when full; an
// entry is only ever what screening computes from its key, so nothing a
// client sends can change what another client's request finds.
type screenCache struct {
	seed   maphash.Seed
	shards [screenCacheShards]screenShard
}

type screenShard struct {
	mu    sync.RWMutex
	m     map[string]*screenedQuery
	bytes int64
}

func newScreenCache() *screenCache {
	c := &screenCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*screenedQuery)
	}
	return c
}

// get returns the entry of literal, or nil.
func (c *screenCache) get(literal []byte) *screenedQuery {
	s := &c.shards[maphash.Bytes(c.seed, literal)%screenCacheShards]
	s.mu.RLock()
	q := s.m[string(literal)]
	s.mu.RUnlock()
	return q
}

// put keeps q under key, evicting entries to stay within the bounds.
func (c *screenCache) put(key string, q *screenedQuery) {
	const entries, bytes = screenCacheEntries / screenCacheShards, screenCacheBytes / screenCacheShards
	if len(key) > screenCacheMaxQuery || q.bytes > bytes {
		return
	}
	s := &c.shards[maphash.String(c.seed, key)%screenCacheShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.m[key]; ok {
		s.bytes -= old.bytes
		delete(s.m, key)
	}
	for k, old := range s.m {
		if len(s.m) < entries && s.bytes+q.bytes <= bytes {
			break
		}
		s.bytes -= old.bytes
		delete(s.m, k)
	}
	s.m[key] = q
	s.bytes += q.bytes
}
