package complexity

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// WithAssumedSizes sets, per field coordinate ("Type.field"), the size
// assumed for that list field, exactly as @listSize(assumedSize: n) on the
// field would (on a field with several @listSize, as if each declared it),
// replacing any the schema declares: it sizes the list only
// where nothing else does (a size handed down by the parent, or a slicing
// argument the request gives, still wins), so a list an argument bounds is
// still priced at that bound. It is the configuration form of the sizes a
// ListSizeRecorder suggests. New refuses, with ErrInvalidOption, a
// coordinate that names no field of an object or interface type, a field
// that is not a list, and a negative size. Several calls merge, the last
// size of a coordinate winning.
func WithAssumedSizes(sizes map[string]int) Option {
	return func(c *config) error {
		if c.assumedSizes == nil {
			c.assumedSizes = make(map[string]int64, len(sizes))
		}
		for coord, n := range sizes {
			if n < 0 {
				return fmt.Errorf("%w: assumed size of %s must not be negative, got %d", ErrInvalidOption, coord, n)
			}
			c.assumedSizes[coord] = int64(n)
		}
		return nil
	}
}

// WithListSizeRecorder records into r, on every actual cost the Analyzer
// computes (ActualCost, Plan.ActualCost), the sizes of the lists whose
// price rested on an assumption: @listSize(assumedSize:), WithAssumedSizes
// or the default list size. One recorder may serve several Analyzers in
// turn (one per schema or configuration reload): it keys fields by
// coordinate.
func WithListSizeRecorder(r *ListSizeRecorder) Option {
	return func(c *config) error {
		c.recorder = r
		return nil
	}
}

// prepareListSizes numbers the list fields (for a response's scratch
// space), applies WithAssumedSizes and marks the sizes that are
// assumptions. It runs once every field is compiled.
func (c *compiled) prepareListSizes(cfg *config) error {
	for _, ti := range c.types {
		for _, fi := range ti.fields {
			if fi.list {
				fi.slot = c.lists
				c.lists++
			}
			fi.assumed.assumption = fi.assumed.ok
			for i := range fi.rules {
				fi.rules[i].assumed.assumption = fi.rules[i].assumed.ok
			}
		}
	}
	coords := make([]string, 0, len(cfg.assumedSizes))
	for coord := range cfg.assumedSizes {
		coords = append(coords, coord)
	}
	sort.Strings(coords) // the first bad coordinate is the same on every run
	for _, coord := range coords {
		typeName, fieldName, _ := strings.Cut(coord, ".")
		var fi *fieldInfo
		if ti := c.types[typeName]; ti != nil {
			fi = ti.fields[fieldName]
		}
		switch {
		case fi == nil:
			return fmt.Errorf("%w: assumed size for %q: no such field (a coordinate is Type.field of an object or interface type)", ErrInvalidOption, coord)
		case !fi.list:
			return fmt.Errorf("%w: assumed size for %s: the field is not a list", ErrInvalidOption, coord)
		}
		// Each @listSize of a field that has several reads as if it
		// declared the size.
		fi.assumed = declared{size: cfg.assumedSizes[coord], ok: true, assumption: true}
		for i := range fi.rules {
			fi.rules[i].assumed = fi.assumed
		}
	}
	return nil
}

// sizeAssumed reports whether field fi's list size n, from listSize with sz
// and d, rests on an assumption rather than on the request: neither handed
// down by its parent nor given by a slicing argument.
func (a *Analyzer) sizeAssumed(fi *fieldInfo, sz sizes, d declared) bool {
	if !fi.list {
		return false
	}
	if sz.spec != nil {
		if _, handed, _ := sz.lookup(fi.name); handed {
			return false
		}
	}
	return !d.ok || d.assumption || len(fi.sized) > 0
}

// MaxRecordedListFields bounds the fields a ListSizeRecorder holds; the
// lists of fields past it are not recorded (ListSizeRecorder.Dropped).
const MaxRecordedListFields = 4096

// ListSizeRecorder gathers the sizes lists returned where their price
// rested on an assumption, per field, to suggest the sizes to assume
// (WithAssumedSizes, @listSize(assumedSize:)). It is safe for concurrent
// use, and its memory is bounded: at most MaxRecordedListFields fields,
// each a fixed set of counters.
//
// A response counts once per field: its sample is the largest list the
// field returned anywhere in it (the innermost items, as a list of lists
// is sized once). However many lists one response holds, it adds one
// sample per field, so no single request weighs more than any other in a
// percentile. Its cost is bounded by the response: a few operations per
// list read, and one counter update per field at the end.
type ListSizeRecorder struct {
	mu      sync.Mutex
	entries map[string]*sizeEntry
	dropped atomic.Int64
}

// NewListSizeRecorder returns an empty recorder.
func NewListSizeRecorder() *ListSizeRecorder {
	return &ListSizeRecorder{entries: make(map[string]*sizeEntry)}
}

// sizeEntry is one field's counters.
type sizeEntry struct {
	assumed   atomic.Int64
	responses atomic.Int64
	overruns  atomic.Int64
	max       atomic.Int64
	buckets   [ListSizeBuckets]atomic.Int64
}

// entry returns the counters of coord, created on first use; nil past
// MaxRecordedListFields.
func (r *ListSizeRecorder) entry(coord string) *sizeEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entries[coord]
	if e == nil {
		if len(r.entries) >= MaxRecordedListFields {
			return nil
		}
		e = new(sizeEntry)
		r.entries[coord] = e
	}
	return e
}

// Dropped is how many samples were not recorded because their field came
// after MaxRecordedListFields others.
func (r *ListSizeRecorder) Dropped() int64 { return r.dropped.Load() }

// Fields returns what was recorded of each field, sorted by coordinate.
func (r *ListSizeRecorder) Fields() []ListSizeStats {
	r.mu.Lock()
	out := make([]ListSizeStats, 0, len(r.entries))
	for coord, e := range r.entries {
		s := ListSizeStats{
			Field:     coord,
			Assumed:   e.assumed.Load(),
			Responses: e.responses.Load(),
			Overruns:  e.overruns.Load(),
			Max:       e.max.Load(),
			Buckets:   make([]int64, ListSizeBuckets),
		}
		for i := range e.buckets {
			s.Buckets[i] = e.buckets[i].Load()
		}
		s.Buckets = trimZeros(s.Buckets)
		out = append(out, s)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b ListSizeStats) int { return strings.Compare(a.Field, b.Field) })
	return out
}

func trimZeros(b []int64) []int64 {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// ListSizeStats is what a ListSizeRecorder holds of one field, a list whose
// price rested on an assumption.
type ListSizeStats struct {
	// Field is the field's coordinate, "Type.field".
	Field string `json:"field"`
	// Assumed is the size it was priced at in the latest response.
	Assumed int64 `json:"assumed"`
	// Responses counts the responses in which it returned a list (null
	// or missing values do not count).
	Responses int64 `json:"responses"`
	// Overruns counts the responses in which it returned more items than
	// it was priced for: the excess was debited after the response; many
	// say Assumed is too small.
	Overruns int64 `json:"overruns"`
	// Max is the largest list it returned.
	Max int64 `json:"max"`
	// Buckets counts the responses by their largest list, in
	// ListSizeBucket's buckets, trailing empty buckets left off.
	Buckets []int64 `json:"buckets"`
}

// ListSizeBuckets is the number of buckets of ListSizeStats.Buckets.
const ListSizeBuckets = 4 + 4*(32-2)

// ListSizeBucket is the bucket a list of size items counts in: 0 to 3 have
// a bucket each, then each power of two [2^k, 2^(k+1)) is cut into four
// buckets of equal width, so a bucket's upper bound is within 25% of any
// size in it; sizes of 2^32 and above share the last bucket.
func ListSizeBucket(size int64) int {
	if size < 4 {
		return int(max(size, 0))
	}
	k := bits.Len64(uint64(size)) - 1
	if k >= 32 {
		return ListSizeBuckets - 1
	}
	return 4 + (k-2)*4 + int(size>>(k-2))&3
}

// bucketUpper is the largest size bucket b holds.
func bucketUpper(b int) int64 {
	if b < 4 {
		return int64(b)
	}
	if b >= ListSizeBuckets-1 {
		return 1<<63 - 1
	}
	k, sub := (b-4)/4+2, int64((b-4)%4)
	width := int64(1) << (k - 2)
	return (4+sub)*width + width - 1
}

// suggestedPercentile is the share of responses, in percent, whose largest
// list a suggested size covers.
const suggestedPercentile = 99

// Suggested is the size to assume for the field: the 99th percentile of
// its responses' largest lists, rounded up to its bucket's upper bound, then capped at Max and raised to 1 at least (a
// list assumed empty would price what it holds at 0). With fewer than 100
// responses it is close to Max. One response is one sample whatever it
// holds, so a client moves the percentile only by the share of responses it
// sends: above 1% of them, its lists can raise the suggestion up to their
// own size (Max shows it). 0 without responses.
func (s ListSizeStats) Suggested() int64 {
	if s.Responses <= 0 {
		return 0
	}
	rank := (s.Responses*suggestedPercentile + 99) / 100
	var seen int64
	for b, n := range s.Buckets {
		if seen += n; seen >= rank {
			return max(min(bucketUpper(b), s.Max), 1)
		}
	}
	return max(s.Max, 1)
}

// Merge adds o's samples to s, as if one recorder had seen both: counts
// and buckets are summed, Max and Assumed take the larger.
func (s *ListSizeStats) Merge(o ListSizeStats) {
	s.Responses = addCount(s.Responses, o.Responses)
	s.Overruns = addCount(s.Overruns, o.Overruns)
	s.Max, s.Assumed = max(s.Max, o.Max), max(s.Assumed, o.Assumed)
	if len(o.Buckets) > len(s.Buckets) {
		s.Buckets = append(s.Buckets, make([]int64, len(o.Buckets)-len(s.Buckets))...)
	}
	for i, n := range o.Buckets {
		s.Buckets[i] = addCount(s.Buckets[i], n)
	}
}

// recording is an Analyzer's link to its ListSizeRecorder: the recorder's
// counters of each list field, looked up by slot once.
type recording struct {
	r       *ListSizeRecorder
	entries []atomic.Pointer[sizeEntry]
	coords  []string
}

func newRecording(r *ListSizeRecorder, c *compiled) *recording {
	if r == nil {
		return nil
	}
	rec := &recording{r: r, entries: make([]atomic.Pointer[sizeEntry], c.lists), coords: make([]string, c.lists)}
	for _, ti := range c.types {
		for _, fi := range ti.fields {
			if fi.list {
				rec.coords[fi.slot] = fi.coord
			}
		}
	}
	return rec
}

// observed is a field's largest list so far in one response.
type observed struct {
	slot    int32
	max     int64
	priced  int64
	overran bool
}

// observations is a response's samples, one per field: at[slot] is 1 +
// the index of the field's in seen, 0 for none yet.
type observations struct {
	at   []int32
	seen []observed
}

// observe notes that pf, priced at an assumed size, returned a list of n
// items.
func (r *response) observe(pf *pricedField, n int64) {
	o := &r.s.sizes
	slot := pf.info.slot
	if int(slot) >= len(o.at) {
		if r.rec == nil || int(slot) >= len(r.rec.entries) {
			return // a field of another Analyzer's schema: cannot happen
		}
		o.at = make([]int32, len(r.rec.entries))
	}
	i := o.at[slot]
	if i == 0 {
		o.seen = append(o.seen, observed{slot: slot, max: -1})
		i = int32(len(o.seen))
		o.at[slot] = i
	}
	s := &o.seen[i-1]
	s.max, s.priced = max(s.max, n), pf.n
	s.overran = s.overran || n > pf.n
}

// flush adds a response's samples to the recorder when keep (the response
// was read to its end), and empties o.
func (rec *recording) flush(o *observations, keep bool) {
	for _, s := range o.seen {
		o.at[s.slot] = 0
		if !keep {
			continue
		}
		e := rec.entries[s.slot].Load()
		if e == nil {
			if e = rec.r.entry(rec.coords[s.slot]); e == nil {
				rec.r.dropped.Add(1)
				continue
			}
			rec.entries[s.slot].Store(e)
		}
		e.assumed.Store(s.priced)
		e.responses.Add(1)
		if s.overran {
			e.overruns.Add(1)
		}
		for m := e.max.Load(); s.max > m && !e.max.CompareAndSwap(m, s.max); m = e.max.Load() {
		}
		e.buckets[ListSizeBucket(s.max)].Add(1)
	}
	o.seen = o.seen[:0]
}

// FormatListSizes writes suggested sizes as @listSize lines to paste into
// a schema, one per field, sorted by coordinate: "Type.field
// @listSize(assumedSize: N)".
func FormatListSizes(sizes map[string]int) string {
	coords := make([]string, 0, len(sizes))
	for c := range sizes {
		coords = append(coords, c)
	}
	sort.Strings(coords)
	var b strings.Builder
	for _, c := range coords {
		fmt.Fprintf(&b, "%s @listSize(assumedSize: %d)\n", c, sizes[c])
	}
	return b.String()
}

// SuggestedSizes maps the coordinate of each field of stats that has
// responses to its Suggested size: the map WithAssumedSizes takes.
func SuggestedSizes(stats []ListSizeStats) map[string]int {
	out := make(map[string]int, len(stats))
	for _, s := range stats {
		if n := s.Suggested(); n > 0 {
			out[s.Field] = int(min(n, math.MaxInt32))
		}
	}
	return out
}
