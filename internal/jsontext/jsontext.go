// Package jsontext is the one byte-level JSON walk of the request path:
// checking a document's syntax exactly as encoding/json's Valid does and
// finding an object's members with their values counted, in one pass
// without a decoder (a request body is walked on every request, before
// anything is charged); finding where a string's plain run ends, eight
// bytes at a time; and decoding a string's escapes.
package jsontext

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting Valid accepts, encoding/json's.
const MaxDepth = 10000

// PlainEnd returns the index of the first byte of b at or after i that is a
// quote, a backslash or a control character (below 0x20), or len(b): the
// end of the run a string's content can be copied from as it is.
func PlainEnd(b []byte, i int) int {
	// Sixteen bytes at a time (one test for both words, so long runs take
	// one branch per 16 bytes), then eight, then the last few one by one.
	for ; i+16 <= len(b); i += 16 {
		lo := special(binary.LittleEndian.Uint64(b[i:]))
		hi := special(binary.LittleEndian.Uint64(b[i+8:]))
		if lo|hi == 0 {
			continue
		}
		if lo != 0 {
			return i + bits.TrailingZeros64(lo)>>3
		}
		return i + 8 + bits.TrailingZeros64(hi)>>3
	}
	if i+8 <= len(b) {
		if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	for ; i < len(b) && plain[b[i]]; i++ {
	}
	return i
}

// plain marks the bytes a string's content holds as they are: not a quote,
// a backslash or a control character.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// special marks the bytes of x (eight bytes of data, the first lowest)
// that are a quote, a backslash or a control character, with their high
// bit: the zero-byte and less-than tests done on all eight at once. A
// borrow may also mark a byte above a marked one, never below, so the
// lowest mark is exact; bytes from 0x80 up are never marked.
func special(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote := x ^ (ones * '"')
	backslash := x ^ (ones * '\\')
	return ((quote-ones)&^quote | (backslash-ones)&^backslash | (x-ones*0x20)&^x) & highs
}

// IsHex reports whether c is a hexadecimal digit.
func IsHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Valid reports whether b is one JSON value with optional whitespace
// around it, exactly as encoding/json.Valid does (FuzzValid holds the two
// equal): the same grammar, strings that may hold any byte but control
// characters (invalid UTF-8 included), and nesting at most MaxDepth deep.
// It allocates only past 64 levels of nesting.
func Valid(b []byte) bool {
	return walk(b, nil) == Object
}

// Member is one member of a JSON object, by offsets into the bytes
// walked.
type Member struct {
	// Name is the member's name as written, without its quotes: escapes
	// are left as they are (Key decodes them).
	Name []byte
	// KeyStart is the index of the name's opening quote; Start and End
	// bound the value, from its first byte to one past its last.
	KeyStart, Start, End int
	// Values counts the values of a counted member (Limits.Count), the
	// value itself and every value inside it; Depth is how deep its
	// arrays and objects nest: 0 for a scalar, 1 for [1], 2 for [[1]].
	Values, Depth int
}

// Key returns the member's name decoded as encoding/json decodes it: Name
// itself unless it holds an escape or invalid UTF-8.
func (m *Member) Key() []byte {
	if bytes.IndexByte(m.Name, '\\') < 0 && utf8.Valid(m.Name) {
		return m.Name
	}
	return AppendUnquoted(nil, m.Name)
}

// Limits choose the members Members returns and bound those it counts.
type Limits struct {
	// Keep chooses the members returned by their names as written
	// (escapes undecoded); nil returns every member. Memory then grows
	// with the members kept, not with those a body repeats.
	Keep func(name []byte) bool
	// MaxMembers bounds the members kept; zero is no bound.
	MaxMembers int
	// Count names the kept members whose values are counted and bounded,
	// as written; nil counts every kept member.
	Count [][]byte
	// MaxValues bounds the values of the counted members together, and
	// MaxDepth the nesting of each; zero is no bound.
	MaxValues, MaxDepth int
}

// Status is what Members found.
type Status uint8

const (
	// Object: the bytes are one valid JSON object; every member is
	// returned. (Valid's walk also ends so for any other valid value.)
	Object Status = iota
	// Invalid: the bytes are not valid JSON.
	Invalid
	// NotObject: the bytes are valid JSON, but not an object.
	NotObject
	// TooMany: the counted members hold more values than MaxValues; the
	// walk stopped inside the last member returned.
	TooMany
	// TooDeep: the last member returned, a counted one, nests deeper than
	// MaxDepth; the walk stopped there.
	TooDeep
	// TooManyMembers: more members were kept than MaxMembers; the walk
	// stopped at the first one past it, which is not returned.
	TooManyMembers
)

// Members checks b as Valid does and, when it is an object, appends its
// members to dst in order, counting the values of those lim counts. The
// walk stops as soon as a bound is passed, so refusing a body of a million
// values costs the values up to the bound, not the million.
func Members(b []byte, dst []Member, lim Limits) ([]Member, Status) {
	if i := space(b, 0); i >= len(b) || b[i] != '{' {
		if Valid(b) {
			return dst, NotObject
		}
		return dst, Invalid
	}
	m := members{lim: lim}
	status := walk(b, &m)
	dst = append(dst, m.first[:min(m.n, len(m.first))]...)
	return append(dst, m.more...), status
}

// members is what walk records for Members: the members of the outermost
// object and the values inside them. The first few are kept in place, so
// that a caller's buffer for them need not escape to the heap.
type members struct {
	first   [8]Member
	more    []Member // the members after the first eight
	n       int
	lim     Limits
	kept    bool   // the member being walked is kept
	counted bool   // the member being walked is counted
	stop    Status // why member stopped the walk
	values  int    // values counted so far, in every counted member
}

// member records a member whose name's quote is at keyStart, whose name
// ends at nameEnd and whose value starts at start, if it is kept; past
// MaxMembers it reports TooManyMembers.
func (m *members) member(b []byte, keyStart, nameEnd, start int) Status {
	name := b[keyStart+1 : nameEnd-1]
	m.kept = m.lim.Keep == nil || m.lim.Keep(name)
	m.counted = false
	if !m.kept {
		return Object
	}
	if m.lim.MaxMembers > 0 && m.n == m.lim.MaxMembers {
		return TooManyMembers
	}
	rec := Member{Name: name, KeyStart: keyStart, Start: start}
	if m.n < len(m.first) {
		m.first[m.n] = rec
	} else {
		m.more = append(m.more, rec)
	}
	m.n++
	m.counted = m.lim.Count == nil
	for _, c := range m.lim.Count {
		m.counted = m.counted || string(c) == string(name)
	}
	return Object
}

// current is the member being walked.
func (m *members) current() *Member {
	if m.n <= len(m.first) {
		return &m.first[m.n-1]
	}
	return &m.more[m.n-len(m.first)-1]
}

// value counts a value starting inside the current member at nesting
// depth (the outermost object is 1), and reports a bound it passes.
func (m *members) value(depth int, container bool) Status {
	if !m.counted {
		return Object
	}
	cur := m.current()
	cur.Values++
	m.values++
	if container {
		cur.Depth = max(cur.Depth, depth)
	}
	switch {
	case m.lim.MaxValues > 0 && m.values > m.lim.MaxValues:
		return TooMany
	case m.lim.MaxDepth > 0 && cur.Depth > m.lim.MaxDepth:
		return TooDeep
	}
	return Object
}

// end records where the current member's value ends, if it is kept.
func (m *members) end(i int) {
	if m.kept {
		m.current().End = i
	}
}

// walk checks b's syntax, telling rec (unless nil: Valid) of the members
// of the outermost object and of the values inside them.
func walk(b []byte, rec *members) Status {
	var open containers
	i := space(b, 0)
	for {
		// A value starts at i.
		if i >= len(b) {
			return Invalid
		}
		c := b[i]
		if rec != nil && open.depth > 0 {
			if s := rec.value(open.depth, c == '{' || c == '['); s != Object {
				return s
			}
		}
		switch c {
		case '{', '[':
			if !open.push(c == '{') {
				return Invalid
			}
			i = space(b, i+1)
			if i < len(b) && b[i] == closing(c == '{') {
				open.pop()
				i++
				break // an empty container is a whole value
			}
			if c == '{' {
				if i = key(b, i, open.depth, rec); i < 0 {
					return rec.stopped()
				}
			}
			continue
		case '"':
			i = str(b, i)
		case 't':
			i = literal(b, i, "true")
		case 'f':
			i = literal(b, i, "false")
		case 'n':
			i = literal(b, i, "null")
		default:
			i = number(b, i)
		}
		if i < 0 {
			return Invalid
		}
		// A value ended at i: close what it completes, up to the next value.
		if i = closeValue(b, i, &open, rec); i < 0 {
			return rec.stopped()
		}
		if open.depth == 0 {
			if i == len(b) {
				return Object
			}
			return Invalid
		}
	}
}

// closeValue moves past what the value ending at i completes: the containers it
// closes and the comma (and name) before the next value, which it returns
// the start of; at the end of the outermost value it returns where the
// space after it ends. -1: a syntax error.
func closeValue(b []byte, i int, open *containers, rec *members) int {
	for {
		if rec != nil && open.depth == 1 {
			rec.end(i)
		}
		i = space(b, i)
		if open.depth == 0 {
			return i
		}
		if i >= len(b) {
			return -1
		}
		inObject := open.top()
		switch b[i] {
		case ',':
			i = space(b, i+1)
			if inObject {
				return key(b, i, open.depth, rec)
			}
			return i
		case closing(inObject):
			open.pop()
			i++
		default:
			return -1
		}
	}
}

// key reads an object member's name and its colon from i, returning where
// the member's value starts, or -1: a syntax error, or a member of the
// outermost object (depth 1) that rec, recording it, refused (rec.stop).
func key(b []byte, i, depth int, rec *members) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	nameEnd := str(b, i)
	if nameEnd < 0 {
		return -1
	}
	j := space(b, nameEnd)
	if j >= len(b) || b[j] != ':' {
		return -1
	}
	start := space(b, j+1)
	if rec != nil && depth == 1 {
		if rec.stop = rec.member(b, i, nameEnd, start); rec.stop != Object {
			return -1
		}
	}
	return start
}

// stopped is the status of a walk that stopped at a -1: what rec refused,
// else a syntax error.
func (m *members) stopped() Status {
	if m != nil && m.stop != Object {
		return m.stop
	}
	return Invalid
}

// containers is the stack of the arrays and objects open around a value,
// a bit each (set: an object), the first 64 without allocating.
type containers struct {
	depth   int
	shallow uint64
	deep    []uint64 // bits of levels 65 and deeper
}

func (c *containers) push(object bool) bool {
	if c.depth == MaxDepth {
		return false
	}
	level := c.depth
	c.depth++
	word, bit := &c.shallow, uint(level%64)
	if level >= 64 {
		w := level/64 - 1
		if w == len(c.deep) {
			c.deep = append(c.deep, 0)
		}
		word = &c.deep[w]
	}
	if object {
		*word |= 1 << bit
	} else {
		*word &^= 1 << bit
	}
	return true
}

func (c *containers) pop() { c.depth-- }

// top reports whether the innermost open container is an object.
func (c *containers) top() bool {
	level := c.depth - 1
	word := c.shallow
	if level >= 64 {
		word = c.deep[level/64-1]
	}
	return word&(1<<uint(level%64)) != 0
}

func closing(object bool) byte {
	if object {
		return '}'
	}
	return ']'
}

// space returns the index of the first byte at or after i that is not
// JSON whitespace.
func space(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// str reads the string whose opening quote is at i, returning the index
// past its closing quote, or -1.
func str(b []byte, i int) int {
	i++
	for {
		i = PlainEnd(b, i)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !IsHex(b[i+2]) || !IsHex(b[i+3]) || !IsHex(b[i+4]) || !IsHex(b[i+5]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		default: // a control character
			return -1
		}
	}
}

// literal reads word (true, false or null) at i.
func literal(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

// number reads a number at i: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func number(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i++; i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		i = digits(b, i)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		i = digits(b, i)
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

// AppendUnquoted appends to dst the content of a JSON string literal whose
// quotes are already removed and whose syntax is valid (Valid, or a
// scanner that checked it), decoded as encoding/json decodes it: escapes
// resolved, invalid UTF-8 and lone surrogates turned into U+FFFD.
func AppendUnquoted(dst, content []byte) []byte {
	for i := 0; i < len(content); {
		end := PlainEnd(content, i)
		if run := content[i:end]; utf8.Valid(run) {
			dst = append(dst, run...)
		} else {
			for len(run) > 0 {
				r, size := utf8.DecodeRune(run)
				dst = utf8.AppendRune(dst, r) // RuneError for an invalid byte
				run = run[size:]
			}
		}
		if i = end; i >= len(content) {
			break
		}
		i++ // the backslash
		switch e := content[i]; e {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(content[i+1 : i+5])
			i += 4
			if utf16.IsSurrogate(r) {
				if i+6 < len(content) && content[i+1] == '\\' && content[i+2] == 'u' { // a pair: \uD83D\uDE00
					if r2 := utf16.DecodeRune(r, hex4(content[i+3:i+7])); r2 != utf8.RuneError {
						dst = utf8.AppendRune(dst, r2)
						i += 7
						continue
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, e)
		}
		i++
	}
	return dst
}

// hex4 is the value of four hexadecimal digits (valid JSON guarantees them).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c <= '9':
			r = r<<4 | rune(c-'0')
		case c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			r = r<<4 | rune(c-'a'+10)
		}
	}
	return r
}
