package complexity

import (
	"fmt"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
)

// WithCountedFields asks the Analyzer to count the selections of these
// schema coordinates ("Type.field"): Report.FieldCounts then says how many
// times each would execute, for the coordinates selected at least once.
// A coordinate on an interface counts that field on every object type
// implementing it. A coordinate the schema does not have fails New with
// ErrInvalidOption; one given twice is counted once, at its first place.
// Calls add up.
func WithCountedFields(coordinates ...string) Option {
	return func(c *config) error {
		c.counted = append(c.counted, coordinates...)
		return nil
	}
}

// FieldCount is how many times the selections of one schema coordinate
// would execute (see WithCountedFields).
type FieldCount struct {
	// Coordinate is the schema coordinate counted: "Mutation.createIssue".
	Coordinate string `json:"coordinate"`
	// Count is the number of times the field would execute: each response
	// key selecting it counts once per object of its parent (fields the
	// executor merges into one key count once), and under lists once per
	// item, by the lists' priced sizes (n, as the node count uses them).
	// Under an interface or union it is the largest count among the
	// possible types, as depth and nodes are. It saturates at MaxInt64.
	Count int64 `json:"count"`
	// Path is the response path (response keys, aliases included) of the
	// first place the field is selected with a count above zero, depth
	// first in document order; under an interface or union, in the first
	// possible type (by name) reaching the largest count.
	Path []string `json:"path"`
}

// counting is what New resolves of WithCountedFields.
type counting struct {
	coords []string // deduplicated, in the order given
	// byField lists, for each field definition counted, the indexes of the
	// coordinates it counts toward (an interface's coordinate is counted
	// on each implementation's field).
	byField map[*fieldInfo][]int
}

// compileCounted resolves the coordinates of WithCountedFields against the
// schema; nil when there are none.
func compileCounted(c *compiled, coordinates []string) (*counting, error) {
	if len(coordinates) == 0 {
		return nil, nil
	}
	ct := &counting{byField: map[*fieldInfo][]int{}}
	seen := map[string]bool{}
	for _, coord := range coordinates {
		if seen[coord] {
			continue
		}
		seen[coord] = true
		typeName, fieldName, ok := strings.Cut(coord, ".")
		ti := c.types[typeName]
		switch {
		case !ok || typeName == "" || fieldName == "":
			return nil, fmt.Errorf("%w: counted field %q is not a schema coordinate Type.field", ErrInvalidOption, coord)
		case ti == nil:
			return nil, fmt.Errorf("%w: counted field %q: the schema has no type %s", ErrInvalidOption, coord, typeName)
		case ti.fields == nil || ti.fields[fieldName] == nil:
			return nil, fmt.Errorf("%w: counted field %q: type %s has no field %s", ErrInvalidOption, coord, typeName, fieldName)
		}
		j := len(ct.coords)
		ct.coords = append(ct.coords, coord)
		ct.byField[ti.fields[fieldName]] = append(ct.byField[ti.fields[fieldName]], j)
		if ti.def.Kind == ast.Interface {
			for _, p := range ti.possible {
				if fi := p.fields[fieldName]; fi != nil {
					ct.byField[fi] = append(ct.byField[fi], j)
				}
			}
		}
	}
	return ct, nil
}

// setCounts are the counts of a priced set, per object of its parent
// type, one entry per counted coordinate. Once its set is priced it is
// never changed: memoised sets share it.
type setCounts struct{ c []coordCount }

// coordCount is one coordinate's count in a set, and where the path of
// its first occurrence goes: through response key key, then on in next
// (nil when the field at key is the occurrence).
type coordCount struct {
	n    int64
	key  string
	next *setCounts
}

func newSetCounts(k int) *setCounts { return &setCounts{c: make([]coordCount, k)} }

// add counts m more executions of coordinate j through response key key.
func (s *setCounts) add(j int, m int64, key string, next *setCounts) {
	e := &s.c[j]
	if e.n == 0 {
		e.key, e.next = key, next
	}
	e.n = addCount(e.n, m)
}

// Counting rides on the pricing walk: priceGroups folds each field it
// prices into its set's counts (countField) and leaves them in w.counts;
// priceChildren takes the maximum over an abstract type's members, and
// keeps a memoised set's counts in w.memoCounts to hand them out again on
// every hit. Sets with nothing counted below have nil counts, so counting
// allocates only where counted fields are.

// countField adds a priced field to counts, its set's: one for each
// coordinate the field itself counts toward, and n times the counts of its
// children, which a composite field's pricing left in w.counts.
func (w *walker) countField(counts **setCounts, fi *fieldInfo, key string, n int64) {
	var child *setCounts
	if fi.ret.composite {
		child = w.counts
	}
	w.a.counting.field(counts, w.a.counting.byField[fi], key, n, child)
}

// field adds to *counts (allocated on first use) a field at response key
// key, counting toward coordinates own itself, whose n items hold child.
func (ct *counting) field(counts **setCounts, own []int, key string, n int64, child *setCounts) {
	if len(own) == 0 && (child == nil || n == 0) {
		return
	}
	set := *counts
	if set == nil {
		set = newSetCounts(len(ct.coords))
		*counts = set
	}
	for _, j := range own {
		set.add(j, 1, key, nil)
	}
	if child != nil && n > 0 {
		for j := range child.c {
			if m := child.c[j].n; m > 0 {
				set.add(j, mulCount(n, m), key, child)
			}
		}
	}
}

// memoCount keeps the counts of memoised set memo, just priced.
func (w *walker) memoCount(memo *pricedSet) {
	if w.counts == nil {
		return
	}
	if w.memoCounts == nil {
		w.memoCounts = make(map[*pricedSet]*setCounts)
	}
	w.memoCounts[memo] = w.counts
}

// maxCounts folds a member's counts into the running maximum of an
// abstract set: per coordinate the larger count wins, the first member on
// a tie. acc is borrowed (owned false) until it must be changed, so a
// single member's counts are shared rather than copied.
func maxCounts(acc *setCounts, owned bool, s *setCounts) (*setCounts, bool) {
	switch {
	case s == nil:
		return acc, owned
	case acc == nil:
		return s, false
	}
	for j := range s.c {
		if s.c[j].n > acc.c[j].n {
			if !owned {
				acc, owned = &setCounts{c: append([]coordCount(nil), acc.c...)}, true
			}
			acc.c[j] = s.c[j]
		}
	}
	return acc, owned
}

// fieldCounts lists the counted coordinates of root's counts above zero,
// in the order given to WithCountedFields.
func (ct *counting) fieldCounts(root *setCounts) []FieldCount {
	if root == nil {
		return nil
	}
	n := 0
	for _, e := range root.c {
		if e.n > 0 {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]FieldCount, 0, n)
	for j, e := range root.c {
		if e.n == 0 {
			continue
		}
		fc := FieldCount{Coordinate: ct.coords[j], Count: e.n}
		for at := e; ; at = at.next.c[j] {
			fc.Path = append(fc.Path, at.key)
			if at.next == nil {
				break
			}
		}
		out = append(out, fc)
	}
	return out
}
