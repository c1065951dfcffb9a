package spenders

import "container/heap"

// summary is one Space-Saving summary (Metwally, Agrawal and El Abbadi,
// 2005) of weighted adds: at most capacity counters, each an item with an
// estimated total and the most that estimate can exceed the item's true
// total. An item without a counter, once all are taken, replaces the
// counter with the smallest estimate and inherits it as its error. With N
// the total weight added:
//
//	true ≤ estimate ≤ true + error,  error ≤ min estimate ≤ N / capacity
//
// and every item whose true total is above N / capacity holds a counter.
type summary struct {
	capacity int
	total    int64
	counters counterHeap // a min-heap by estimate
	index    map[string]*counter
}

type counter struct {
	item     string
	estimate int64
	err      int64
	at       int // position in the heap
}

func newSummary(capacity int) *summary {
	return &summary{capacity: capacity, index: make(map[string]*counter, capacity)}
}

// add adds w > 0 to item.
func (s *summary) add(item string, w int64) {
	s.total = saturatingAdd(s.total, w)
	if c, ok := s.index[item]; ok {
		c.estimate = saturatingAdd(c.estimate, w)
		heap.Fix(&s.counters, c.at)
		return
	}
	if len(s.counters) < s.capacity {
		c := &counter{item: item, estimate: w}
		s.index[item] = c
		heap.Push(&s.counters, c)
		return
	}
	c := s.counters[0] // the smallest estimate makes room
	delete(s.index, c.item)
	c.item, c.err, c.estimate = item, c.estimate, saturatingAdd(c.estimate, w)
	s.index[item] = c
	heap.Fix(&s.counters, 0)
}

// floor is the most an item without a counter can have been added: the
// smallest estimate once every counter is taken, else 0.
func (s *summary) floor() int64 {
	if len(s.counters) < s.capacity {
		return 0
	}
	return s.counters[0].estimate
}

// reset empties the summary, keeping its memory.
func (s *summary) reset() {
	s.total = 0
	s.counters = s.counters[:0]
	clear(s.index)
}

func saturatingAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

type counterHeap []*counter

func (h counterHeap) Len() int           { return len(h) }
func (h counterHeap) Less(i, j int) bool { return h[i].estimate < h[j].estimate }
func (h counterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}
func (h *counterHeap) Push(x any) {
	c := x.(*counter)
	c.at = len(*h)
	*h = append(*h, c)
}
func (h *counterHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
