// Package jsontext is the byte-level JSON scanning shared by the request
// path: finding where a string's plain run ends, eight bytes at a time,
// decoding a string's escapes, and
// checking a document's syntax exactly as encoding/json's Valid does,
// without its byte-by-byte state machine (a request body is checked on
// every request, before anything is charged).
package jsontext

import (
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
	var open containers
	i := space(b, 0)
	for {
		// A value starts at i.
		if i >= len(b) {
			return false
		}
		switch c := b[i]; c {
		case '{', '[':
			if !open.push(c == '{') {
				return false
			}
			i = space(b, i+1)
			if i < len(b) && b[i] == closing(c == '{') {
				open.pop()
				i++
				break // an empty container is a whole value
			}
			if c == '{' {
				if i = key(b, i); i < 0 {
					return false
				}
			}
			continue
		case '"':
			if i = str(b, i); i < 0 {
				return false
			}
		case 't':
			if i = literal(b, i, "true"); i < 0 {
				return false
			}
		case 'f':
			if i = literal(b, i, "false"); i < 0 {
				return false
			}
		case 'n':
			if i = literal(b, i, "null"); i < 0 {
				return false
			}
		default:
			if i = number(b, i); i < 0 {
				return false
			}
		}
		// A value ended at i: close what it completes, up to the next value.
	next:
		for {
			i = space(b, i)
			if open.depth == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			inObject := open.top()
			switch b[i] {
			case ',':
				i = space(b, i+1)
				if inObject {
					if i = key(b, i); i < 0 {
						return false
					}
				}
				break next
			case closing(inObject):
				open.pop()
				i++
			default:
				return false
			}
		}
	}
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

// key reads an object member's name and its colon from i, returning where
// the member's value starts, or -1.
func key(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = str(b, i); i < 0 {
		return -1
	}
	i = space(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return space(b, i+1)
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
