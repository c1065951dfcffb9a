// Package kept copies what a client sent before anything keeps it past
// its request. A Go substring shares its whole backing array: a 64-byte
// operation name cut from a 900 KB document keeps the 900 KB alive for as
// long as the name is held. The tables that outlive a request (the
// timeline, the operation costs, the top spenders, the API-key cache, the
// admin stats) cut what they store to this package's bounds and copy it
// at their own insert (String, Key, or Cut and a clone), so that each
// holds a copy of bounded size whatever its caller hands it. The
// limiter's in-process stores copy their keys the same way, at their own
// bound (shardmap.OwnString, 1 KiB).
package kept

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Bounds shared by the tables: the operation name an Event carries and the
// operation costs keep, a principal's bucket key, and the names a table
// labels its rows with (plans, lanes, codes, policies, kinds, outcomes).
const (
	MaxOperation = 64
	MaxKey       = 512
	MaxName      = 256
)

// hashLen is the length of the suffix Key gives a key it shortens: "~"
// and the key's SHA-256 in unpadded base64url.
const hashLen = 1 + 43

// String returns a copy of s cut to at most limit bytes, never inside a
// UTF-8 sequence: for what a table shows (names, codes), where the first
// bytes say enough. The copy shares no memory with s; "" stays "".
func String(s string, limit int) string {
	return strings.Clone(Cut(s, limit))
}

// Cut is s cut to at most limit bytes, never inside a UTF-8 sequence,
// sharing s's memory: for a lookup, which keeps nothing, to find what
// String stored.
func Cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	n := max(limit, 0)
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Key returns a copy of key of at most limit bytes (limit ≥ 64) that names
// key alone: key itself when it fits, else its first bytes, "~" and its
// SHA-256, so two keys that share a long prefix stay two keys. For what a
// table is looked up by (principals' keys); Bound gives the same name
// without copying a key that fits.
func Key(key string, limit int) string {
	if len(key) <= limit {
		return strings.Clone(key)
	}
	return shorten(key, limit)
}

// Bound is Key without the copy of a key that fits: what a lookup, which
// keeps nothing, uses to find what Key stored.
func Bound(key string, limit int) string {
	if len(key) <= limit {
		return key
	}
	return shorten(key, limit)
}

// shorten is the name Key gives key, longer than limit: a fresh string.
func shorten(key string, limit int) string {
	sum := sha256.Sum256([]byte(key))
	var b strings.Builder
	b.Grow(limit)
	b.WriteString(Cut(key, limit-hashLen))
	b.WriteByte('~')
	b.WriteString(base64.RawURLEncoding.EncodeToString(sum[:]))
	return b.String()
}

// Shares reports whether any byte of s lies in from's memory: what a test
// of a table asks of a string it stored and the input it stored it from.
func Shares(s, from string) bool {
	if len(s) == 0 || len(from) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	lo := uintptr(unsafe.Pointer(unsafe.StringData(from)))
	return p+uintptr(len(s)) > lo && p < lo+uintptr(len(from))
}

// MaxNames is the most distinct names a Names holds.
const MaxNames = 1024

// Names holds one copy of each name a table labels its rows with (plans,
// kinds, outcomes, codes): a few dozen in practice, repeated on every row,
// so a row shares the copy instead of making its own. At most MaxNames
// names of at most MaxName bytes are held; past that, each row gets a copy
// of its own. The zero Names is ready to use. It is not safe for
// concurrent use: the table's lock guards it.
type Names struct{ m map[string]string }

// Own returns the held copy of s cut to MaxName bytes, holding one first.
func (n *Names) Own(s string) string {
	s = Cut(s, MaxName)
	if c, ok := n.m[s]; ok {
		return c
	}
	c := strings.Clone(s)
	if len(n.m) < MaxNames {
		if n.m == nil {
			n.m = make(map[string]string)
		}
		n.m[c] = c
	}
	return c
}
