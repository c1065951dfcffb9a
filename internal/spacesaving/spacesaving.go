// Package spacesaving keeps the heaviest keys of a weighted stream in
// bounded memory: the Space-Saving summary (Metwally, Agrawal and El
// Abbadi, 2005). Packages spenders (top spenders per plan) and opcosts
// (costs per operation name) keep their clients' keys with it, so a flood
// of distinct keys costs a fixed number of counters.
package spacesaving

import "strings"

// Summary is at most Capacity counters, each a key with an estimated
// total, the most that estimate can exceed the key's true total, and a
// value of the caller's. A key without a counter, once all are taken,
// replaces the counter with the smallest estimate and inherits that
// estimate as its error. With N the total weight added:
//
//	true ≤ Estimate ≤ true + Err,  Err ≤ Floor() ≤ N / Capacity
//
// and every key whose true total is above N / Capacity holds a counter.
// A Summary is not safe for concurrent use.
type Summary[V any] struct {
	capacity int
	total    int64
	heap     []*Counter[V] // a min-heap by Estimate
	index    map[string]*Counter[V]
}

// Counter is one key's counter.
type Counter[V any] struct {
	Key      string
	Estimate int64
	Err      int64
	Value    V
	at       int // position in the heap
}

// New returns an empty Summary of capacity (≥ 1) counters.
func New[V any](capacity int) *Summary[V] {
	return &Summary[V]{capacity: max(capacity, 1), index: make(map[string]*Counter[V], capacity)}
}

// Add adds w (≥ 0) to key and returns key's counter. isNew reports that
// key got its counter with this call: a fresh one, or the counter with the
// smallest estimate taken from another key, in which case evict (when not
// nil) is called with it first, still holding the other key's Key and
// Value. A new counter's Value is the zero V. A new counter keeps a copy
// of key, never the caller's memory; bounding key's length is the
// caller's.
func (s *Summary[V]) Add(key string, w int64, evict func(*Counter[V])) (c *Counter[V], isNew bool) {
	s.total = SaturatingAdd(s.total, w)
	if c := s.index[key]; c != nil {
		c.Estimate = SaturatingAdd(c.Estimate, w)
		s.down(c.at)
		return c, false
	}
	key = strings.Clone(key)
	if len(s.heap) < s.capacity {
		c := &Counter[V]{Key: key, Estimate: w, at: len(s.heap)}
		s.index[key] = c
		s.heap = append(s.heap, c)
		s.up(c.at)
		return c, true
	}
	c = s.heap[0] // the smallest estimate makes room
	if evict != nil {
		evict(c)
	}
	delete(s.index, c.Key)
	var zero V
	c.Key, c.Err, c.Estimate, c.Value = key, c.Estimate, SaturatingAdd(c.Estimate, w), zero
	s.index[key] = c
	s.down(0)
	return c, true
}

// Total is the weight added since New or Reset, exactly (saturating).
func (s *Summary[V]) Total() int64 { return s.total }

// Floor is the most a key without a counter can have been added: the
// smallest estimate once every counter is taken, else 0.
func (s *Summary[V]) Floor() int64 {
	if len(s.heap) < s.capacity {
		return 0
	}
	return s.heap[0].Estimate
}

// Counters returns the counters, in no particular order. The slice is the
// summary's own: read it, do not keep it past the next Add or Reset.
func (s *Summary[V]) Counters() []*Counter[V] { return s.heap }

// Reset empties the summary, keeping its memory.
func (s *Summary[V]) Reset() {
	s.total = 0
	clear(s.heap)
	s.heap = s.heap[:0]
	clear(s.index)
}

// SaturatingAdd is a + b for non-negative a and b, at most the largest
// int64.
func SaturatingAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

func (s *Summary[V]) swap(i, j int) {
	h := s.heap
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}

// up moves the counter at i towards the root while it is smaller than its
// parent (a counter just appended).
func (s *Summary[V]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if s.heap[p].Estimate <= s.heap[i].Estimate {
			return
		}
		s.swap(i, p)
		i = p
	}
}

// down moves the counter at i away from the root while a child is smaller
// (a counter whose estimate only grew).
func (s *Summary[V]) down(i int) {
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.heap[r].Estimate < s.heap[l].Estimate {
			m = r
		}
		if s.heap[i].Estimate <= s.heap[m].Estimate {
			return
		}
		s.swap(i, m)
		i = m
	}
}
