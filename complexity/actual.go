package complexity

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/internal/jsontext"
)

// ActualCost prices op once it has run: the requested price (what
// AnalyzeOperation computes) with each list's size replaced by the number of
// items data, the response's "data" member as raw JSON, really holds. It is
// Shopify's actualQueryCost; requested − actual is what a budget can give
// back.
//
// The operation is walked exactly as AnalyzeOperation walks it (the same
// coercion, @skip/@include, fragments, sizes and limits, and the same errors
// for an operation it refuses), then the priced tree is read alongside the
// JSON in one pass:
//
//   - a field costs its own weight and argument cost, plus, for each item
//     it returned (a list's non-null elements, or the one object or value
//     of a non-list field), the type's weight and the item's own fields,
//     priced the same way;
//   - a null or missing value returned nothing: the field costs its own
//     weight and arguments alone, and nothing below it is priced;
//   - an object of an interface or union is priced as the member its
//     __typename names, when the operation selected __typename for it and
//     no member selects another field under that key (an alias could
//     forge it); otherwise as the costliest member whose selections are
//     exactly the object's keys; failing that, as the requested price
//     assumed (the costliest member);
//   - introspection fields (__typename, __schema, __type) cost what they
//     were priced at;
//   - a list that returned more items than it was priced for (an assumed
//     size the data overran, or a resolver that ignored its slicing
//     argument) costs the items it returned.
//
// So the result, rounded up to points like Report.Points, is below the
// requested points when lists returned less than their priced size, and
// above them only when a list returned more: that excess ran, and a caller
// holding a budget debits it after the response. Empty or null data leaves the
// base cost alone (a mutation's). data that is not JSON, or whose shape does
// not match the operation (a list where an object belongs, a key twice in
// one object, a string for an object), fails with an error wrapping
// ErrInvalidResponse. Values the operation does not select are skipped
// unread, without recursion; a value nested deeper than 10,000 levels is
// refused.
func (a *Analyzer) ActualCost(doc *ast.QueryDocument, op *ast.OperationDefinition, variables map[string]any, data []byte) (int64, error) {
	if op == nil {
		return 0, fmt.Errorf("%w: nil operation", ErrInvalidDocument)
	}
	w := a.acquire(doc, op, variables)
	defer a.release(w)
	w.plan = true
	set, base, _, err := w.run()
	if err != nil {
		return 0, err
	}
	r := response{b: data, s: &w.read, rec: a.recording}
	return r.data(&set, base)
}

// maxSkipDepth bounds the nesting of a value ActualCost skips, as
// encoding/json bounds what it decodes. The values it prices are bounded by
// the operation's depth.
const maxSkipDepth = 10000

// response reads a response's data alongside the operation's priced tree,
// with scratch space s.
type response struct {
	b []byte
	i int
	s *reading
	// names is set when every key in the priced tree is plain (see
	// plainKey), as the names of a parsed document are.
	names bool
	// what went wrong at byte at, once fail is called; data formats the
	// error.
	what string
	at   int
	// overran counts the lists read so far that returned more items than
	// they were priced for: a field is capped at its requested cost unless
	// one at or below it overran.
	overran int
	// rec receives the sizes of assumed lists; nil when not recording.
	rec *recording
}

// reading is the scratch space of reading a response, recycled with a
// walker or, for Plan.ActualCost, on its own.
type reading struct {
	seen []bool   // which fields of the objects of over 64 fields being read were found
	nest []byte   // the containers a skipped value has open
	text []byte   // a decoded key or __typename
	path []string // the response path of a failure, innermost key first
	// keyIndex indexes the keys of large sets whose keys came out of
	// order (see find).
	keyIndex map[*pricedField]map[string]int
	// reread counts the bytes read again to price objects of abstract
	// types whose concrete type the response does not name.
	reread int
	// sizes are the assumed lists' sizes seen so far, for a
	// ListSizeRecorder.
	sizes observations
}

// reset empties s for the next reading; false when it grew too large to
// keep.
func (s *reading) reset() bool {
	if cap(s.seen) > 1024 || cap(s.nest) > 1024 || cap(s.text) > 1024 || cap(s.path) > 256 {
		return false
	}
	clear(s.path[:cap(s.path)])
	s.seen, s.nest, s.text, s.path = s.seen[:0], s.nest[:0], s.text[:0], s.path[:0]
	s.keyIndex, s.reread = nil, 0
	return true
}

// data prices the whole data member, null or the root object, read
// against root, on top of the operation's base cost: in points, rounded
// up as Report.Points.
func (r *response) data(root *pricedSet, base Cost) (int64, error) {
	c, err := r.root(root)
	if r.rec != nil {
		r.rec.flush(&r.s.sizes, err == nil)
	}
	if err != nil {
		return 0, r.failure()
	}
	return addCost(base, c).Points(), nil
}

func (r *response) root(root *pricedSet) (Cost, error) {
	if len(r.b) == 0 {
		return 0, nil // no data member: nothing ran
	}
	var c Cost
	switch r.peek() {
	case 'n':
		if err := r.literal("null"); err != nil {
			return 0, err
		}
	case '{':
		var err error
		if c, err = r.object(root, 0); err != nil {
			return 0, err
		}
	default:
		return 0, r.fail("data is neither an object nor null")
	}
	if r.ws(); r.i < len(r.b) {
		return 0, r.fail("data continues after its value")
	}
	return c, nil
}

// object prices the object at r.i against set, the fields priced for one
// type, starting from the type's weight. A field whose key is missing costs
// as if it were null; a key no field has is skipped.
func (r *response) object(set *pricedSet, weight Cost) (Cost, error) {
	if r.peek() != '{' {
		return 0, r.fail("expected an object")
	}
	r.i++
	fields := set.fields
	// Which fields were found: a bit each, or past 64 fields a stretch of
	// s.seen; and how many.
	var seen uint64
	found := 0
	mark := len(r.s.seen)
	large := len(fields) > 64
	if large {
		r.s.seen = append(r.s.seen, make([]bool, len(fields))...)
	}
	total := weight
	if r.peek() == '}' {
		r.i++
	} else {
		hint := 0 // gqlgen writes the keys in the order they were priced
		for {
			var i int
			if hint < len(fields) && r.plainKey(fields[hint].key) {
				i = hint
			} else {
				key, err := r.key()
				if err != nil {
					return 0, err
				}
				i = r.find(set, key, hint)
			}
			if i < 0 {
				if err := r.skip(); err != nil {
					return 0, err
				}
			} else {
				if large {
					if r.s.seen[mark+i] {
						return 0, r.fail(fmt.Sprintf("key %q appears twice in one object", fields[i].key))
					}
					r.s.seen[mark+i] = true
				} else {
					bit := uint64(1) << (i & 63)
					if seen&bit != 0 {
						return 0, r.fail(fmt.Sprintf("key %q appears twice in one object", fields[i].key))
					}
					seen |= bit
				}
				hint, found = i+1, found+1
				c, err := r.field(&fields[i])
				if err != nil {
					return 0, err
				}
				total = addCost(total, c)
			}
			if c := r.peek(); c == ',' {
				r.i++
				continue
			} else if c == '}' {
				r.i++
				break
			}
			return 0, r.fail("expected ',' or '}' in an object")
		}
	}
	if found == len(fields) {
		if large {
			r.s.seen = r.s.seen[:mark]
		}
		return total, nil
	}
	if large {
		for i := range fields {
			if !r.s.seen[mark+i] {
				total = addCost(total, fields[i].absent())
			}
		}
		r.s.seen = r.s.seen[:mark]
		return total, nil
	}
	// The missing fields, in order.
	for missing := ^seen & (^uint64(0) >> (64 - len(fields))); missing != 0; missing &= missing - 1 {
		total = addCost(total, fields[bits.TrailingZeros64(missing)].absent())
	}
	return total, nil
}

// plainKey reads past `"key":` at r.i, as compact JSON writes a key
// without escapes, and reports whether it was there; if not, r.i is left
// alone for key to read whatever is. Those bytes are the JSON string key
// spells only if key holds no quote, backslash or control character: a
// GraphQL name never does (r.names), any other key is checked.
func (r *response) plainKey(key string) bool {
	b := r.b[r.i:]
	n := len(key)
	if len(b) < n+3 || b[0] != '"' || b[n+1] != '"' || b[n+2] != ':' || string(b[1:n+1]) != key {
		return false
	}
	if !r.names && !plain(key) {
		return false
	}
	r.i += n + 3
	return true
}

// plain reports whether s can be written as a JSON string as it is.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// find returns the index of the field with response key key, -1 if none;
// hint is where the key is expected.
func (r *response) find(set *pricedSet, key []byte, hint int) int {
	f := set.fields
	if hint < len(f) && f[hint].key == string(key) {
		return hint
	}
	if len(f) <= 16 {
		for i := range f {
			if f[i].key == string(key) {
				return i
			}
		}
		return -1
	}
	// Keys out of order in a large object: index them once per set of
	// fields.
	idx := r.s.keyIndex[&f[0]]
	if idx == nil {
		if r.s.keyIndex == nil {
			r.s.keyIndex = make(map[*pricedField]map[string]int)
		}
		idx = make(map[string]int, len(f))
		for i := range f {
			idx[f[i].key] = i
		}
		r.s.keyIndex[&f[0]] = idx
	}
	if i, ok := idx[string(key)]; ok {
		return i
	}
	return -1
}

// field prices the value of pf at r.i.
func (r *response) field(pf *pricedField) (Cost, error) {
	if pf.fixed {
		return pf.cost, r.skip()
	}
	if r.peek() == 'n' {
		return pf.absent(), r.literal("null")
	}
	if ret := pf.info.ret; pf.info.listDepth == 0 && !ret.composite {
		// A leaf, the commonest field: its value is read past, as item
		// would, a string (the commonest leaf) directly.
		var err error
		if r.i < len(r.b) && r.b[r.i] == '"' {
			_, _, err = r.str()
		} else {
			err = r.skip()
		}
		if err != nil {
			r.s.path = append(r.s.path, pf.key)
			return 0, err
		}
		return min(clampZero(addCost(pf.own, ret.weight)), pf.cost), nil
	}
	overran := r.overran
	items, n, err := r.values(pf, pf.info.listDepth)
	if err != nil {
		r.s.path = append(r.s.path, pf.key) // the failure is under pf
		return 0, err
	}
	if n > pf.n {
		r.overran++
	}
	if pf.assumed {
		r.observe(pf, n)
	}
	c := clampZero(addCost(pf.own, items))
	if r.overran == overran {
		// Within its priced sizes a field never costs more than its price
		// (fewer items can weigh more where weights are negative).
		c = min(c, pf.cost)
	}
	return c, nil
}

// absent is the actual cost of a field whose value is null or missing: it
// returned nothing, so it costs its own weight and arguments alone.
func (pf *pricedField) absent() Cost {
	if pf.fixed {
		return pf.cost
	}
	return min(clampZero(pf.own), pf.cost)
}

// values prices the non-null value at r.i of a field of pf's type with
// levels lists still to open: the sum over the items it holds, and how
// many there are (the non-null items of the innermost lists, as a list of
// lists is sized once).
func (r *response) values(pf *pricedField, levels int) (Cost, int64, error) {
	if levels == 0 {
		c, err := r.item(pf)
		return c, 1, err
	}
	if r.peek() != '[' {
		return 0, 0, r.fail("expected a list")
	}
	r.i++
	if r.peek() == ']' {
		r.i++
		return 0, 0, nil
	}
	// A list of objects of one type, the commonest, is read without item
	// deciding how for each.
	var objects *pricedSet
	if ret := pf.info.ret; levels == 1 && ret.composite && ret.oneType() {
		objects = pf.children
	}
	var sum Cost
	var n int64
	for {
		if r.peek() == 'n' {
			if err := r.literal("null"); err != nil {
				return 0, 0, err
			}
		} else {
			var c Cost
			k := int64(1)
			var err error
			if objects != nil {
				c, err = r.object(objects, pf.info.ret.weight)
			} else if levels == 1 {
				c, err = r.item(pf)
			} else {
				c, k, err = r.values(pf, levels-1)
			}
			if err != nil {
				return 0, 0, err
			}
			sum, n = addCost(sum, c), addCount(n, k)
		}
		if c := r.peek(); c == ',' {
			r.i++
			continue
		} else if c == ']' {
			r.i++
			return sum, n, nil
		}
		return 0, 0, r.fail("expected ',' or ']' in a list")
	}
}

// item prices one non-null item of pf's type at r.i: a leaf value costs
// its type's weight; an object, its type's weight and its fields.
func (r *response) item(pf *pricedField) (Cost, error) {
	ret := pf.info.ret
	if !ret.composite {
		return ret.weight, r.skip()
	}
	set := pf.children
	if set == nil {
		// Planning keeps every composite field's set; without one the
		// object can only cost its requested price.
		return pf.cost, r.skip()
	}
	switch {
	case ret.oneType():
		return r.object(set, ret.weight)
	case len(ret.possible) == 1:
		return r.object(set, memberWeight(ret, ret.possible[0]))
	}
	if m := set.members; m != nil {
		if len(m.typenames) > 0 {
			if i := r.member(ret, m); i >= 0 {
				return r.object(&m.sets[i], memberWeight(ret, ret.possible[i]))
			}
		}
		if c, ok, err := r.costliestFitting(ret, m); ok || err != nil {
			return c, err
		}
	}
	// The concrete type is not known: one object costs what the requested
	// price assumed, the costliest member.
	if r.peek() != '{' {
		return 0, r.fail("expected an object")
	}
	return set.cost, r.skip()
}

// costliestFitting prices the object at r.i, of an abstract type whose
// concrete type the response does not name, as the costliest member whose
// selections are the object's keys: the only members that could have
// written it. ok is false, and r.i left alone, when no member fits or
// when reading members again would pass the reader's budget of rereads
// (rereadBudget), which bounds the work of nested abstract objects.
func (r *response) costliestFitting(ret *typeInfo, m *memberSets) (best Cost, ok bool, err error) {
	start := r.i
	end := start
	// Each member is read from the same overrun count; the one priced
	// keeps its own.
	overran, bestOverran := r.overran, r.overran
	for i := range m.sets {
		if r.s.reread > rereadBudget(len(r.b)) {
			r.i, r.overran = start, overran
			return 0, false, nil
		}
		fits := r.keysFit(&m.sets[i])
		r.s.reread += r.i - start
		r.i = start
		if !fits {
			continue
		}
		r.overran = overran
		c, err := r.object(&m.sets[i], memberWeight(ret, ret.possible[i]))
		if err != nil {
			return 0, false, err
		}
		r.s.reread += r.i - start
		if !ok || c > best {
			best, ok, bestOverran = c, true, r.overran
		}
		end, r.i = r.i, start
	}
	r.i, r.overran = end, bestOverran
	return best, ok, nil
}

// rereadBudget is how many bytes of a response of n bytes the reader may
// read again to price objects of unnamed abstract types: past it, they
// cost their requested price, as without the reread.
func rereadBudget(n int) int { return 16*n + 1<<20 }

// keysFit reports whether the keys of the object at r.i are exactly those
// set selects, as a server writes every field it selects for the object's
// type (null when it failed); it reads past the object, skipping the
// values. False too for an object it cannot read, left for the caller's
// own read to report.
func (r *response) keysFit(set *pricedSet) bool {
	if r.peek() != '{' {
		return false
	}
	r.i++
	if r.next('}') {
		return len(set.fields) == 0
	}
	hint, n := 0, 0
	for {
		key, err := r.key()
		if err != nil {
			return false
		}
		i := r.find(set, key, hint)
		if i < 0 {
			return false
		}
		hint, n = i+1, n+1
		if r.skip() != nil {
			return false
		}
		if r.next('}') {
			return n == len(set.fields) // a key twice fails the member's read
		}
		if !r.next(',') {
			return false
		}
	}
}

// member reads the __typename of the object at r.i, without moving past
// it, and returns the member of ret it names, -1 if the object has no
// __typename where the operation selected one, or names no member that
// selected it under that key. Malformed JSON is left for the caller to
// find.
func (r *response) member(ret *typeInfo, m *memberSets) int {
	start := r.i
	defer func() { r.i = start }()
	if r.peek() != '{' {
		return -1
	}
	r.i++
	if r.next('}') {
		return -1
	}
	for {
		key, err := r.key()
		if err != nil {
			return -1
		}
		if k := typenameKeyIndex(m.typenames, key); k >= 0 && r.peek() == '"' {
			name, escaped, err := r.str()
			if err != nil {
				return -1
			}
			if escaped {
				r.s.text = jsontext.AppendUnquoted(r.s.text[:0], name)
				name = r.s.text
			}
			i := memberIndex(ret.possible, name)
			for _, t := range m.typenames {
				if t.member == i && t.key == m.typenames[k].key {
					return i
				}
			}
			return -1
		}
		if r.skip() != nil || !r.next(',') {
			return -1
		}
	}
}

// typenameKeyIndex returns the index of a typename key equal to key.
func typenameKeyIndex(keys []typenameKey, key []byte) int {
	for k := range keys {
		if keys[k].key == string(key) {
			return k
		}
	}
	return -1
}

// memberIndex finds the type named name among possible, sorted by name.
func memberIndex(possible []*typeInfo, name []byte) int {
	lo, hi := 0, len(possible)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if possible[mid].name < string(name) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(possible) && possible[lo].name == string(name) {
		return lo
	}
	return -1
}

// key reads an object key and the colon after it. The bytes are data's own
// unless the key holds escapes; then they are decoded into s.text and last
// until the next key is read.
func (r *response) key() ([]byte, error) {
	if r.peek() != '"' {
		return nil, r.fail("expected a key")
	}
	k, escaped, err := r.str()
	if err != nil {
		return nil, err
	}
	if escaped {
		r.s.text = jsontext.AppendUnquoted(r.s.text[:0], k)
		k = r.s.text
	}
	if !r.next(':') {
		return nil, r.fail("expected ':' after a key")
	}
	return k, nil
}

// skip reads past the value at r.i, checking its syntax. Containers are
// tracked in s.nest rather than by recursion, so any nesting costs one
// byte each, up to maxSkipDepth.
func (r *response) skip() error {
	if c := r.peek(); c != '{' && c != '[' {
		// A scalar, the commonest value skipped (a leaf): no containers.
		return r.scalar()
	}
	nest := r.s.nest[:0]
	for {
		// A value: a scalar, an empty container, or the start of one.
		if c := r.peek(); c == '{' || c == '[' {
			end := byte(']')
			if c == '{' {
				end = '}'
			}
			r.i++
			if !r.next(end) {
				if len(nest) == maxSkipDepth {
					return r.fail(fmt.Sprintf("value nested more than %d levels deep", maxSkipDepth))
				}
				nest = append(nest, end)
				if end == '}' {
					if err := r.skipKey(); err != nil {
						return err
					}
				}
				continue
			}
		} else if err := r.scalar(); err != nil {
			return err
		}
		// The value is complete: close the containers that end with it,
		// then move on to the next element.
		for {
			if len(nest) == 0 {
				r.s.nest = nest
				return nil
			}
			end := nest[len(nest)-1]
			if r.next(end) {
				nest = nest[:len(nest)-1]
				continue
			}
			if !r.next(',') {
				return r.fail(fmt.Sprintf("expected ',' or '%c'", end))
			}
			if end == '}' {
				if err := r.skipKey(); err != nil {
					return err
				}
			}
			break
		}
	}
}

// skipKey reads past an object key and its colon.
func (r *response) skipKey() error {
	if r.peek() != '"' {
		return r.fail("expected a key")
	}
	if _, _, err := r.str(); err != nil {
		return err
	}
	if !r.next(':') {
		return r.fail("expected ':' after a key")
	}
	return nil
}

// scalar reads past a string, number, true, false or null.
func (r *response) scalar() error {
	switch c := r.peek(); {
	case c == '"':
		_, _, err := r.str()
		return err
	case c == 't':
		return r.literal("true")
	case c == 'f':
		return r.literal("false")
	case c == 'n':
		return r.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return r.number()
	}
	return r.fail("expected a value")
}

// str reads the string at r.i (its opening quote), returning its contents
// as written and whether they hold escapes.
func (r *response) str() (raw []byte, escaped bool, err error) {
	b, start := r.b, r.i+1
	i := jsontext.PlainEnd(b, start)
	if i < len(b) && b[i] == '"' {
		// Plain to the closing quote, as most strings are.
		r.i = i + 1
		return b[start:i], false, nil
	}
	return r.strEscaped(start, i)
}

// strEscaped reads on from b[i], where the string starting at b[start]
// stops being plain.
func (r *response) strEscaped(start, i int) (raw []byte, escaped bool, err error) {
	b := r.b
	for {
		r.i = i
		if i >= len(b) {
			return nil, false, r.fail("unterminated string")
		}
		switch b[i] {
		case '"':
			r.i = i + 1
			return b[start:i], escaped, nil
		case '\\':
			escaped = true
			if i+1 >= len(b) {
				return nil, false, r.fail("unterminated string")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !hexDigits(b[i+2:i+6]) {
					return nil, false, r.fail(`invalid \u escape`)
				}
				i += 6
			default:
				return nil, false, r.fail("invalid escape")
			}
			i = jsontext.PlainEnd(b, i)
		default:
			return nil, false, r.fail("control character in a string")
		}
	}
}

// hexDigits reports whether b holds only hexadecimal digits.
func hexDigits(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// number reads past a JSON number.
func (r *response) number() error {
	b, i := r.b, r.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return r.fail("invalid number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return r.fail("invalid number")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return r.fail("invalid number")
		}
	}
	r.i = i
	return nil
}

// literal reads past word (true, false or null), which must be next.
func (r *response) literal(word string) error {
	r.ws()
	if len(r.b)-r.i < len(word) || string(r.b[r.i:r.i+len(word)]) != word {
		return r.fail("invalid literal")
	}
	r.i += len(word)
	return nil
}

// space marks the bytes JSON skips as whitespace.
var space = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// ws skips whitespace: one table look-up for the byte that ends it, which
// in compact JSON (gqlgen's) is the first.
func (r *response) ws() {
	b, i := r.b, r.i
	for i < len(b) && space[b[i]] {
		i++
	}
	r.i = i
}

// peek skips whitespace and returns the next byte, 0 at the end. Compact
// JSON has none, so a byte above the space is returned at once, inline.
func (r *response) peek() byte {
	if r.i < len(r.b) && r.b[r.i] > ' ' {
		return r.b[r.i]
	}
	return r.peekSpace()
}

func (r *response) peekSpace() byte {
	r.ws()
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

// next reads past c (never 0 nor whitespace) if it comes next (after
// whitespace).
func (r *response) next(c byte) bool {
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	if r.peekSpace() == c {
		r.i++
		return true
	}
	return false
}

// errFailed is what a read returns once fail has recorded why; data
// turns it into the error ActualCost returns.
var errFailed = errors.New("invalid response")

// fail records what is wrong at r.i. The path it is under is gathered as
// the failure returns through each field (see field), so reading a
// well-formed response tracks no path.
func (r *response) fail(what string) error {
	r.what, r.at = what, r.i
	r.s.path = r.s.path[:0]
	return errFailed
}

// failure is the error of the last fail, under the path gathered since.
func (r *response) failure() error {
	if path := r.s.path; len(path) > 0 {
		slices.Reverse(path)
		return fmt.Errorf("%w: %s at byte %d (under %s)", ErrInvalidResponse, r.what, r.at, strings.Join(path, "."))
	}
	return fmt.Errorf("%w: %s at byte %d", ErrInvalidResponse, r.what, r.at)
}
