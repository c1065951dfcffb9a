package challenge

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Bounds and defaults of Config.
const (
	// DefaultBits is the work asked for when Config.Bits is zero: about
	// 65,536 hashes on average, about 15 ms of one core for a Go client
	// (BenchmarkSolve16).
	DefaultBits = 16
	// MinBits and MaxBits bound Config.Bits. Every bit doubles the client's
	// expected work; 32 bits is about four billion hashes.
	MinBits, MaxBits = 1, 32
	// DefaultTTL is how long a token is valid when Config.TTL is zero.
	DefaultTTL = time.Minute
	// MinTTL and MaxTTL bound Config.TTL.
	MinTTL, MaxTTL = time.Second, time.Hour
	// DefaultMaxSkew is how far in the future a token may be dated when
	// Config.MaxSkew is zero: room for servers sharing a secret whose
	// clocks disagree a little.
	DefaultMaxSkew = 5 * time.Second
	// DefaultMaxUsed bounds the accepted tokens remembered when
	// Config.MaxUsed is zero: about 35 MB of heap when full (35 bytes a
	// token, BenchmarkUsedSetMemory).
	DefaultMaxUsed = 1_000_000
	// MinSecretLen is the shortest Config.Secret accepted: 32 bytes, the
	// size of the HMAC-SHA256 output.
	MinSecretLen = 32
	// MaxTokenLen and MaxNonceLen bound the two halves of a response; a
	// longer response is refused before it is decoded.
	MaxTokenLen, MaxNonceLen = 256, 64
)

// Token layout: base64url (no padding) of
//
//	version(1) bits(1) issued-at(8, Unix ms, big-endian) salt(12) mac(32)
//
// where mac = HMAC-SHA256(secret, macDomain ‖ the first 22 bytes ‖ identity).
// The fields before the identity have fixed sizes, so the MAC input is
// unambiguous. 54 bytes encode to exactly 72 characters, without the unused
// trailing bits that would let two strings decode to the same token.
const (
	tokenVersion = 1
	saltLen      = 12
	offBits      = 1
	offIssued    = 2
	offSalt      = offIssued + 8
	offMAC       = offSalt + saltLen
	tokenLen     = offMAC + sha256.Size
	encodedLen   = tokenLen / 3 * 4 // tokenLen is a multiple of 3
	macDomain    = "costguard-pow-v1\x00"

	maxResponseLen = MaxTokenLen + 1 + MaxNonceLen
)

var tokenEncoding = base64.RawURLEncoding.Strict()

// Config configures a PoW. Zero fields take the documented defaults;
// Secret is required.
type Config struct {
	// Secret keys the HMAC that makes tokens stateless; at least
	// MinSecretLen (32) bytes. Every server that may verify a token must
	// share it. NewPoW copies it.
	Secret []byte
	// Bits is the number of leading zero bits asked of SHA-256(token ":"
	// nonce), between MinBits and MaxBits. The token carries it under the
	// MAC, so a client cannot lower it; Verify also refuses tokens asking
	// for fewer bits than this. Default: DefaultBits (16).
	Bits int
	// TTL is how long after it is issued a token is accepted, between
	// MinTTL and MaxTTL. Default: DefaultTTL (one minute).
	TTL time.Duration
	// MaxSkew is how far after now a token's issue time may lie, for
	// servers whose clocks differ; at most TTL. Default: DefaultMaxSkew
	// (5 s).
	MaxSkew time.Duration
	// MaxUsed bounds the accepted, unexpired tokens remembered to refuse
	// replays. When that many are held, Verify fails closed with ErrFull.
	// Default: DefaultMaxUsed (1,000,000).
	MaxUsed int
	// Rand is the source of the salt that makes every token unique. It must
	// be safe for concurrent use. Default: crypto/rand.Reader. Tests inject
	// a fixed source for deterministic tokens.
	Rand io.Reader
}

// PoW is the proof-of-work Challenger. It is safe for concurrent use and
// starts no goroutine: the set of used tokens is swept by Verify itself.
type PoW struct {
	bits   int
	ttlMS  int64
	skewMS int64
	rand   io.Reader
	header string    // `"; bits=N` ending every challenge
	macs   sync.Pool // of *signer
	used   usedSet
}

var _ Challenger = (*PoW)(nil)

// NewPoW validates cfg, fills in its defaults and returns a PoW.
func NewPoW(cfg Config) (*PoW, error) {
	if len(cfg.Secret) < MinSecretLen {
		return nil, fmt.Errorf("%w: Secret is %d bytes, want at least %d (32 random bytes, e.g. `openssl rand -base64 32`)",
			ErrInvalidConfig, len(cfg.Secret), MinSecretLen)
	}
	if cfg.Bits == 0 {
		cfg.Bits = DefaultBits
	}
	if cfg.Bits < MinBits || cfg.Bits > MaxBits {
		return nil, fmt.Errorf("%w: Bits %d is not between %d and %d", ErrInvalidConfig, cfg.Bits, MinBits, MaxBits)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < MinTTL || cfg.TTL > MaxTTL {
		return nil, fmt.Errorf("%w: TTL %v is not between %v and %v", ErrInvalidConfig, cfg.TTL, MinTTL, MaxTTL)
	}
	if cfg.MaxSkew == 0 {
		cfg.MaxSkew = min(DefaultMaxSkew, cfg.TTL)
	}
	if cfg.MaxSkew < 0 || cfg.MaxSkew > cfg.TTL {
		return nil, fmt.Errorf("%w: MaxSkew %v is not between 0 and TTL %v", ErrInvalidConfig, cfg.MaxSkew, cfg.TTL)
	}
	if cfg.MaxUsed == 0 {
		cfg.MaxUsed = DefaultMaxUsed
	}
	if cfg.MaxUsed < 0 {
		return nil, fmt.Errorf("%w: MaxUsed %d is negative", ErrInvalidConfig, cfg.MaxUsed)
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	secret := append([]byte(nil), cfg.Secret...)
	p := &PoW{
		bits:   cfg.Bits,
		ttlMS:  cfg.TTL.Milliseconds(),
		skewMS: cfg.MaxSkew.Milliseconds(),
		rand:   cfg.Rand,
		header: `"; bits=` + strconv.Itoa(cfg.Bits),
	}
	p.macs.New = func() any { return &signer{h: hmac.New(sha256.New, secret)} }
	p.used.init(cfg.MaxUsed, p.ttlMS+p.skewMS)
	return p, nil
}

// Bits returns the work this PoW asks for.
func (p *PoW) Bits() int { return p.bits }

// Used returns how many accepted tokens are remembered, expired ones not
// yet swept included.
func (p *PoW) Used() int { return p.used.len() }

// Challenge implements Challenger: it returns `pow; token="…"; bits=N`
// with a fresh token bound to identity and issued at now. It fails only
// when Config.Rand does.
func (p *PoW) Challenge(_ context.Context, identity string, now time.Time) (string, error) {
	var raw [tokenLen]byte
	raw[0] = tokenVersion
	raw[offBits] = byte(p.bits)
	binary.BigEndian.PutUint64(raw[offIssued:], uint64(now.UnixMilli()))
	if _, err := io.ReadFull(p.rand, raw[offSalt:offMAC]); err != nil {
		return "", fmt.Errorf("challenge: reading a salt: %w", err)
	}
	s := p.macs.Get().(*signer)
	mac := s.sign(raw[:offMAC], identity)
	copy(raw[offMAC:], mac[:]) // before Put: mac is the signer's own array
	p.macs.Put(s)
	var enc [encodedLen]byte
	tokenEncoding.Encode(enc[:], raw[:])
	return `pow; token="` + string(enc[:]) + p.header, nil
}

// Verify implements Challenger. It parses response as `<token>:<nonce>`
// and accepts it when the token was issued by a PoW with the same secret
// to identity, has not expired at now, asks for at least Bits bits,
// SHA-256(token ":" nonce) has that many leading zero bits, and the token
// was not accepted before. It returns nil or one of the sentinel errors,
// in that order of checks; only acceptance uses the token up.
func (p *PoW) Verify(_ context.Context, identity, response string, now time.Time) error {
	token, nonce, ok := splitResponse(response)
	if !ok || len(token) != encodedLen {
		return ErrMalformed
	}
	s := p.macs.Get().(*signer)
	defer p.macs.Put(s)
	s.buf = append(s.buf[:0], token...)
	var raw [tokenLen]byte
	if n, err := tokenEncoding.Decode(raw[:], s.buf); err != nil || n != tokenLen || raw[0] != tokenVersion {
		return ErrMalformed
	}
	mac := s.sign(raw[:offMAC], identity)
	if !hmac.Equal(mac[:], raw[offMAC:]) {
		return ErrInvalidToken
	}
	// The token is ours from here on: its fields are what we wrote.
	issued := int64(binary.BigEndian.Uint64(raw[offIssued:]))
	nowMS := now.UnixMilli()
	if issued > nowMS+p.skewMS || nowMS-issued >= p.ttlMS {
		return ErrExpired
	}
	want := int(raw[offBits])
	if want < p.bits || zeroBits(token, nonce) < want {
		return ErrInsufficientWork
	}
	return p.used.add(usedKey(mac[:usedKeyLen]), issued+p.ttlMS, nowMS)
}

// signer computes token MACs. PoW pools them: an HMAC keyed once and a
// scratch buffer, so that computing a MAC allocates nothing.
type signer struct {
	h   hash.Hash // HMAC-SHA256 under the secret
	buf []byte
	sum [sha256.Size]byte
}

// sign returns the MAC of a token's fields for identity.
func (s *signer) sign(fields []byte, identity string) *[sha256.Size]byte {
	s.buf = append(s.buf[:0], macDomain...)
	s.buf = append(s.buf, fields...)
	s.buf = append(s.buf, identity...)
	s.h.Reset()
	s.h.Write(s.buf)
	s.h.Sum(s.sum[:0])
	return &s.sum
}

// splitResponse cuts a response into its token and nonce, refusing any
// response whose length or nonce alphabet is out of bounds.
func splitResponse(response string) (token, nonce string, ok bool) {
	if len(response) > maxResponseLen {
		return "", "", false
	}
	token, nonce, ok = strings.Cut(strings.Trim(response, " \t"), ":")
	if !ok || token == "" || len(token) > MaxTokenLen || nonce == "" || len(nonce) > MaxNonceLen {
		return "", "", false
	}
	for i := 0; i < len(nonce); i++ {
		if !isNonceByte(nonce[i]) {
			return "", "", false
		}
	}
	return token, nonce, true
}

// isNonceByte reports whether c may appear in a nonce: the URI unreserved
// characters, so a nonce needs no quoting anywhere.
func isNonceByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// zeroBits is the work a nonce proves for a token: the number of leading
// zero bits of SHA-256(token ":" nonce), counted up to 64. Verify and Solve
// both count with it.
func zeroBits(token, nonce string) int {
	var buf [maxResponseLen]byte
	b := append(buf[:0], token...)
	b = append(b, ':')
	b = append(b, nonce...)
	return leadingZeros(sha256.Sum256(b))
}

// leadingZeros counts the leading zero bits of sum, up to 64.
func leadingZeros(sum [sha256.Size]byte) int {
	return bits.LeadingZeros64(binary.BigEndian.Uint64(sum[:8]))
}
