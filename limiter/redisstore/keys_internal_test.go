package redisstore

import (
	"strings"
	"testing"

	"github.com/costguard/costguard/limiter"
)

// untag inverts tag for identities short enough to be escaped; it is the
// proof that escaping is injective.
func untag(t string) (string, bool) {
	switch {
	case t == "%":
		return "", true
	case strings.HasPrefix(t, "%#"):
		return "", false // hashed: one-way
	}
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		if t[i] != '%' {
			b.WriteByte(t[i])
			continue
		}
		if i+2 >= len(t) {
			return "", false
		}
		switch t[i+1 : i+3] {
		case "25":
			b.WriteByte('%')
		case "7B":
			b.WriteByte('{')
		case "7D":
			b.WriteByte('}')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

func TestTag(t *testing.T) {
	long := strings.Repeat("x", MaxRawIdentity+1)
	tests := []struct{ identity, want string }{
		{"user42", "user42"},
		{"", "%"},
		{"a}b", "a%7Db"},
		{"{x}", "%7Bx%7D"},
		{"%", "%25"},
		{"%7B", "%257B"},
		{"\x00\xff\n ", "\x00\xff\n "},
		{strings.Repeat("y", MaxRawIdentity), strings.Repeat("y", MaxRawIdentity)},
		// SHA-256 of 129 × "x" (sha256sum agrees).
		{long, "%#0ec9eb33e74510bcdd1f2ea55206e82f21649c5c2becbf2b433eb475b34c01bd"},
	}
	for _, tt := range tests {
		if got := tag(tt.identity); got != tt.want {
			t.Errorf("tag(%q) = %q, want %q", tt.identity, got, tt.want)
		}
	}
}

// trickyIdentities are inputs that could break a naive hash tag or collide.
func trickyIdentities() []string {
	kb := strings.Repeat("k", 1024)
	return []string{
		"", "a", "a}b", "a{b", "{x}", "{", "}", "{}", "}{", "%", "%%", "%7B", "%7D", "%25",
		"%#", "a:b", "a}:token_bucket", "\x00", "\x00\x01\xfe\xff", "é", " ",
		kb, kb + "!", strings.Repeat("{", 200), strings.Repeat("}", MaxRawIdentity),
	}
}

// FuzzTag: for every identity the tag holds no brace (so the hash tag is
// exactly the tag), and short identities decode back (so no two collide).
func FuzzTag(f *testing.F) {
	for _, id := range trickyIdentities() {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, identity string) {
		got := tag(identity)
		if strings.ContainsAny(got, "{}") {
			t.Fatalf("tag(%q) = %q contains a brace", identity, got)
		}
		if len(identity) > MaxRawIdentity {
			if !strings.HasPrefix(got, "%#") {
				t.Fatalf("tag of %d bytes = %q, want hashed", len(identity), got)
			}
			return
		}
		back, ok := untag(got)
		if !ok || back != identity {
			t.Fatalf("tag(%q) = %q decodes to %q, %v", identity, got, back, ok)
		}
	})
}

func TestKeysDistinctAndTagged(t *testing.T) {
	s := &Store{prefix: DefaultPrefix}
	seen := map[string]string{}
	for _, id := range trickyIdentities() {
		for a := limiter.TokenBucket; a <= limiter.SlidingCounter; a++ {
			k := s.Key(id, a)
			if prev, dup := seen[k]; dup {
				t.Fatalf("identities %q and %q share key %q", prev, id, k)
			}
			seen[k] = id
			// Redis Cluster hashes the bytes between the first '{' and the
			// next '}': they must be exactly the tag, never empty.
			open := strings.IndexByte(k, '{')
			end := strings.IndexByte(k[open+1:], '}')
			if open < 0 || end <= 0 || k[open+1:open+1+end] != tag(id) {
				t.Fatalf("key %q: hash tag is not tag(%q) = %q", k, id, tag(id))
			}
			if want := ":" + a.String(); !strings.HasSuffix(k, want) {
				t.Fatalf("key %q does not end in %q", k, want)
			}
			if len(k) > len(DefaultPrefix)+3*MaxRawIdentity+32 {
				t.Fatalf("key of %d bytes for a %d-byte identity: keys must stay bounded", len(k), len(id))
			}
		}
	}
}
