package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/costguard/costguard/limiter"
)

// MaxRawIdentity is the longest identity, in bytes, that appears escaped in
// a key; longer ones are replaced by their SHA-256, which bounds the size of
// every key.
const MaxRawIdentity = 128

// identityEscaper percent-encodes the three bytes that could break the hash
// tag ('{', '}') or make two encodings collide ('%'). Every other byte,
// binary included, is kept: Redis keys are binary safe.
var identityEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// tag is the hash-tag content for identity. The three forms cannot meet:
// escaped identities contain '%' only as "%25", "%7B" or "%7D"; the empty
// identity is the lone "%" (Redis would hash a whole key whose tag is
// empty); long identities are "%#" and 64 hex digits.
func tag(identity string) string {
	switch {
	case identity == "":
		return "%"
	case len(identity) > MaxRawIdentity:
		sum := sha256.Sum256([]byte(identity))
		return "%#" + hex.EncodeToString(sum[:])
	}
	return identityEscaper.Replace(identity)
}

// Key returns the Redis key holding identity's state under algorithm a:
//
//	prefix:{tag}:algorithm
//
// tag is the escaped (or, beyond MaxRawIdentity bytes, hashed) identity and
// algorithm is a.String(). Redis Cluster hashes only the tag, so every key
// of one identity lives in the same slot.
func (s *Store) Key(identity string, a limiter.Algorithm) string {
	return s.keyFor(tag(identity), a)
}

// keyFor is Key for an identity already turned into its tag.
func (s *Store) keyFor(t string, a limiter.Algorithm) string {
	return s.keyName(t, a.String())
}

// keyName is prefix:{t}:name, the one layout of every key the store
// writes: name is an algorithm's (keyFor) or concurrencyName.
func (s *Store) keyName(t, name string) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + len(t) + len(name) + 4)
	b.WriteString(s.prefix)
	b.WriteString(":{")
	b.WriteString(t)
	b.WriteString("}:")
	b.WriteString(name)
	return b.String()
}
