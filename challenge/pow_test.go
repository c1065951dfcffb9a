package challenge_test

import (
	"context"
	"encoding/base64"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/challenge"
)

var (
	ctx    = context.Background()
	t0     = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	secret = []byte("0123456789abcdef0123456789abcdef") // 32 bytes
)

const (
	alice    = "user:alice"
	testBits = 8 // ~256 hashes a solve: fast under -race
)

// counter is a deterministic, concurrency-safe salt source: every read
// returns bytes of a new counter value, so tokens differ.
type counter struct{ n atomic.Uint64 }

func (c *counter) Read(b []byte) (int, error) {
	v := c.n.Add(1)
	for i := range b {
		b[i] = byte(v >> (8 * (i % 8)))
	}
	return len(b), nil
}

func newPoW(t testing.TB, cfg challenge.Config) *challenge.PoW {
	t.Helper()
	if cfg.Secret == nil {
		cfg.Secret = secret
	}
	if cfg.Bits == 0 {
		cfg.Bits = testBits
	}
	if cfg.Rand == nil {
		cfg.Rand = new(counter)
	}
	p, err := challenge.NewPoW(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// issue returns the token of a challenge p issues to identity at now.
func issue(t testing.TB, p *challenge.PoW, identity string, now time.Time) string {
	t.Helper()
	h, err := p.Challenge(ctx, identity, now)
	if err != nil {
		t.Fatal(err)
	}
	token, bits, err := challenge.ParseChallenge(h)
	if err != nil || bits != p.Bits() {
		t.Fatalf("ParseChallenge(%q) = %d, %v", h, bits, err)
	}
	return token
}

// solved returns a valid response to a token p issues to identity at now.
func solved(t testing.TB, p *challenge.PoW, identity string, now time.Time) string {
	t.Helper()
	token := issue(t, p, identity, now)
	return token + ":" + challenge.Solve(token, p.Bits())
}

// nonceWith returns a nonce whose hash with token has exactly zeros
// leading zero bits.
func nonceWith(t testing.TB, token string, zeros int) string {
	t.Helper()
	for i := 0; i < 1<<24; i++ {
		n := "n" + strconv.Itoa(i)
		if z := countZeros(token + ":" + n); z == zeros {
			return n
		}
	}
	t.Fatalf("no nonce with %d zero bits", zeros)
	return ""
}

// countZeros is the reference: leading zero bits of SHA-256(s), bit by bit.
func countZeros(s string) int {
	sum := sha256Sum(s)
	n := 0
	for _, b := range sum {
		for i := 7; i >= 0; i-- {
			if b>>i&1 != 0 {
				return n
			}
			n++
		}
	}
	return n
}

// retoken decodes token, lets edit change its bytes and encodes it again.
func retoken(t testing.TB, token string, edit func(raw []byte)) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		t.Fatal(err)
	}
	edit(raw)
	return base64.RawURLEncoding.EncodeToString(raw)
}

func TestVerify(t *testing.T) {
	const ttl = time.Minute
	tests := []struct {
		name string
		// issuedAt and verifyAt are offsets from t0.
		issuedAt, verifyAt time.Duration
		identity           string // of the verifying request; alice if empty
		// response builds the header from a token issued to alice and
		// its solution.
		response func(t *testing.T, token, nonce string) string
		want     error
	}{
		{name: "valid", want: nil},
		{name: "valid, whitespace around the header",
			response: func(_ *testing.T, tok, n string) string { return " \t" + tok + ":" + n + " " }},
		{name: "exactly the bits asked",
			response: func(t *testing.T, tok, _ string) string { return tok + ":" + nonceWith(t, tok, testBits) }},
		{name: "more bits than asked",
			response: func(t *testing.T, tok, _ string) string { return tok + ":" + nonceWith(t, tok, testBits+3) }},
		{name: "one bit short",
			response: func(t *testing.T, tok, _ string) string { return tok + ":" + nonceWith(t, tok, testBits-1) },
			want:     challenge.ErrInsufficientWork},
		{name: "wrong nonce",
			response: func(t *testing.T, tok, _ string) string { return tok + ":" + nonceWith(t, tok, 0) },
			want:     challenge.ErrInsufficientWork},
		{name: "nonce of another token",
			response: func(t *testing.T, tok, _ string) string {
				other := retoken(t, tok, func(raw []byte) { raw[20] ^= 1 })
				return tok + ":" + nonceWith(t, other, testBits+6)
			},
			want: challenge.ErrInsufficientWork},
		{name: "last millisecond of the TTL", verifyAt: ttl - time.Millisecond},
		{name: "TTL reached", verifyAt: ttl, want: challenge.ErrExpired},
		{name: "long expired", verifyAt: 24 * time.Hour, want: challenge.ErrExpired},
		{name: "sub-millisecond issue time is truncated", issuedAt: 999 * time.Microsecond, verifyAt: ttl,
			want: challenge.ErrExpired},
		{name: "dated MaxSkew ahead", issuedAt: challenge.DefaultMaxSkew},
		{name: "dated beyond MaxSkew", issuedAt: challenge.DefaultMaxSkew + time.Millisecond,
			want: challenge.ErrExpired},
		{name: "another identity", identity: "user:mallory", want: challenge.ErrInvalidToken},
		{name: "an identity sharing a prefix", identity: "user:alic", want: challenge.ErrInvalidToken},
		{name: "an ip identity", identity: "ip:198.51.100.4", want: challenge.ErrInvalidToken},
		{name: "issue time moved",
			response: func(t *testing.T, tok, _ string) string {
				tok = retoken(t, tok, func(raw []byte) { raw[9]++ })
				return tok + ":" + challenge.Solve(tok, testBits)
			},
			want: challenge.ErrInvalidToken},
		{name: "bits lowered by the client",
			response: func(t *testing.T, tok, _ string) string {
				tok = retoken(t, tok, func(raw []byte) { raw[1] = 1 })
				return tok + ":" + challenge.Solve(tok, 1)
			},
			want: challenge.ErrInvalidToken},
		{name: "MAC truncated", want: challenge.ErrMalformed,
			response: func(t *testing.T, tok, n string) string {
				return retoken(t, tok, func(raw []byte) {})[:68] + ":" + n
			}},
		{name: "unknown version", want: challenge.ErrMalformed,
			response: func(t *testing.T, tok, n string) string {
				return retoken(t, tok, func(raw []byte) { raw[0] = 2 }) + ":" + n
			}},
		{name: "padded token", want: challenge.ErrMalformed,
			response: func(_ *testing.T, tok, n string) string { return tok + "==:" + n }},
		{name: "standard base64 alphabet", want: challenge.ErrMalformed,
			response: func(_ *testing.T, tok, n string) string {
				return strings.NewReplacer("-", "+", "_", "/").Replace(tok[:71]) + "+:" + n
			}},
		{name: "not base64", want: challenge.ErrMalformed,
			response: func(_ *testing.T, tok, n string) string { return "!" + tok[1:] + ":" + n }},
		{name: "empty", want: challenge.ErrMalformed,
			response: func(*testing.T, string, string) string { return "" }},
		{name: "blank", want: challenge.ErrMalformed,
			response: func(*testing.T, string, string) string { return " \t " }},
		{name: "no colon", want: challenge.ErrMalformed,
			response: func(_ *testing.T, tok, n string) string { return tok + n }},
		{name: "only a colon", want: challenge.ErrMalformed,
			response: func(*testing.T, string, string) string { return ":" }},
		{name: "no nonce", want: challenge.ErrMalformed,
			response: func(_ *testing.T, tok, _ string) string { return tok + ":" }},
		{name: "no token", want: challenge.ErrMalformed,
			response: func(_ *testing.T, _, n string) string { return ":" + n }},
		{name: "colon in the nonce", want: challenge.ErrMalformed,
			response: func(_ *testing.T, tok, n string) string { return tok + ":" + n + ":1" }},
		{name: "space in the nonce", want: challenge.ErrMalformed,
			response: func(_ *testing.T, tok, n string) string { return tok + ":1 " + n }},
		{name: "non-ASCII nonce", want: challenge.ErrMalformed,
			response: func(_ *testing.T, tok, _ string) string { return tok + ":é" }},
		{name: "nonce of MaxNonceLen is read", want: challenge.ErrInsufficientWork,
			response: func(t *testing.T, tok, _ string) string {
				for i := 0; ; i++ {
					n := strconv.Itoa(i) + strings.Repeat("~", challenge.MaxNonceLen)
					n = n[:challenge.MaxNonceLen]
					if countZeros(tok+":"+n) < testBits {
						return tok + ":" + n
					}
				}
			}},
		{name: "nonce longer than MaxNonceLen", want: challenge.ErrMalformed,
			response: func(_ *testing.T, tok, _ string) string {
				return tok + ":" + strings.Repeat("0", challenge.MaxNonceLen+1)
			}},
		{name: "token longer than MaxTokenLen", want: challenge.ErrMalformed,
			response: func(_ *testing.T, _, n string) string {
				return strings.Repeat("A", challenge.MaxTokenLen+1) + ":" + n
			}},
		{name: "huge header", want: challenge.ErrMalformed,
			response: func(_ *testing.T, tok, n string) string { return strings.Repeat(tok, 1<<12) + ":" + n }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPoW(t, challenge.Config{TTL: ttl})
			token := issue(t, p, alice, t0.Add(tc.issuedAt))
			response := token + ":" + challenge.Solve(token, testBits)
			if tc.response != nil {
				response = tc.response(t, token, challenge.Solve(token, testBits))
			}
			identity := alice
			if tc.identity != "" {
				identity = tc.identity
			}
			err := p.Verify(ctx, identity, response, t0.Add(tc.verifyAt))
			if err != tc.want { // sentinels are returned unwrapped
				t.Fatalf("Verify(%q) = %v, want %v", response, err, tc.want)
			}
			if want := 0; err == nil {
				want = 1
				if p.Used() != want {
					t.Errorf("Used() = %d after acceptance, want %d", p.Used(), want)
				}
			} else if p.Used() != want {
				t.Errorf("Used() = %d after a refusal, want %d", p.Used(), want)
			}
		})
	}
}

// Every single-byte change of a token is refused, whatever the nonce.
func TestVerifyTamperedBytes(t *testing.T) {
	p := newPoW(t, challenge.Config{})
	token := issue(t, p, alice, t0)
	raw, _ := base64.RawURLEncoding.DecodeString(token)
	for i := range raw {
		for _, flip := range []byte{0x01, 0x80, 0xff} {
			tampered := retoken(t, token, func(raw []byte) { raw[i] ^= flip })
			err := p.Verify(ctx, alice, tampered+":"+challenge.Solve(tampered, testBits), t0)
			want := challenge.ErrInvalidToken
			if i == 0 {
				want = challenge.ErrMalformed // the version byte
			}
			if err != want {
				t.Errorf("byte %d ^ %#x: Verify = %v, want %v", i, flip, err, want)
			}
		}
	}
	if err := p.Verify(ctx, alice, token+":"+challenge.Solve(token, testBits), t0); err != nil {
		t.Fatalf("the untouched token: %v", err)
	}
}

func TestVerifyOtherSecretOrBits(t *testing.T) {
	p := newPoW(t, challenge.Config{})
	other := newPoW(t, challenge.Config{Secret: []byte(strings.Repeat("x", 32))})
	if err := p.Verify(ctx, alice, solved(t, other, alice, t0), t0); err != challenge.ErrInvalidToken {
		t.Errorf("a token under another secret: %v, want ErrInvalidToken", err)
	}
	// Same secret, less work asked: e.g. Bits raised while the token was
	// out. The token asks 4 bits and the nonce proves them; 8 are required.
	easy := newPoW(t, challenge.Config{Bits: 4})
	tok := issue(t, easy, alice, t0)
	if err := p.Verify(ctx, alice, tok+":"+nonceWith(t, tok, 4), t0); err != challenge.ErrInsufficientWork {
		t.Errorf("a token asking fewer bits than required: %v, want ErrInsufficientWork", err)
	}
	// The converse is accepted: the token's own, larger count rules.
	hard := newPoW(t, challenge.Config{Bits: 10})
	tok = issue(t, hard, alice, t0)
	if err := p.Verify(ctx, alice, tok+":"+nonceWith(t, tok, 9), t0); err != challenge.ErrInsufficientWork {
		t.Errorf("9 bits for a 10-bit token: %v, want ErrInsufficientWork", err)
	}
	if err := p.Verify(ctx, alice, tok+":"+nonceWith(t, tok, 10), t0); err != nil {
		t.Errorf("10 bits for a 10-bit token: %v", err)
	}
}

func TestReplay(t *testing.T) {
	p := newPoW(t, challenge.Config{})
	token := issue(t, p, alice, t0)
	good := token + ":" + challenge.Solve(token, testBits)
	steps := []struct {
		name     string
		response string
		at       time.Duration
		want     error
	}{
		{"a wrong nonce does not use the token up", token + ":" + nonceWith(t, token, 0), 0, challenge.ErrInsufficientWork},
		{"first use", good, time.Second, nil},
		{"second use", good, 2 * time.Second, challenge.ErrReplayed},
		{"another nonce for the same token", token + ":" + nonceWith(t, token, testBits+1), 3 * time.Second, challenge.ErrReplayed},
		{"after expiry the token is expired, not new", good, time.Hour, challenge.ErrExpired},
	}
	for _, s := range steps {
		if err := p.Verify(ctx, alice, s.response, t0.Add(s.at)); err != s.want {
			t.Fatalf("%s: Verify = %v, want %v", s.name, err, s.want)
		}
	}
}

// Accepted tokens are forgotten once expired, the next verification after
// that gives their memory back.
func TestUsedTokensExpire(t *testing.T) {
	const ttl = time.Minute
	p := newPoW(t, challenge.Config{TTL: ttl, MaxSkew: time.Second})
	for i := range 100 {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		if err := p.Verify(ctx, alice, solved(t, p, alice, at), at); err != nil {
			t.Fatal(err)
		}
	}
	if p.Used() != 100 {
		t.Fatalf("Used() = %d, want 100", p.Used())
	}
	// Tokens are remembered at most (TTL+MaxSkew)/64 past their expiry.
	width := (ttl + time.Second) / 64
	at := t0.Add(10*time.Second + ttl + width + time.Millisecond) // all 100 expired
	if err := p.Verify(ctx, alice, solved(t, p, alice, at), at); err != nil {
		t.Fatal(err)
	}
	if p.Used() != 1 {
		t.Fatalf("Used() = %d after the first 100 expired, want 1", p.Used())
	}
}

// A full set refuses new tokens and keeps every unexpired one: no token is
// forgotten early, so none can be replayed.
func TestFullFailsClosed(t *testing.T) {
	const ttl = time.Minute
	p := newPoW(t, challenge.Config{TTL: ttl, MaxUsed: 3})
	var held []string
	for range 3 {
		r := solved(t, p, alice, t0)
		if err := p.Verify(ctx, alice, r, t0); err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	late := t0.Add(30 * time.Second)
	fresh := solved(t, p, alice, late)
	if err := p.Verify(ctx, alice, fresh, late); err != challenge.ErrFull {
		t.Fatalf("a fresh token in a full set: %v, want ErrFull", err)
	}
	for _, r := range held {
		if err := p.Verify(ctx, alice, r, late); err != challenge.ErrReplayed {
			t.Fatalf("a held token in a full set: %v, want ErrReplayed", err)
		}
	}
	if err := p.Verify(ctx, alice, "garbage", late); err != challenge.ErrMalformed {
		t.Fatalf("garbage in a full set: %v, want ErrMalformed", err)
	}
	// Once the held tokens expire (and their generation ends), the refused
	// token, still valid and not used up, is accepted.
	later := t0.Add(ttl + 2*time.Second)
	if err := p.Verify(ctx, alice, fresh, later); err != nil {
		t.Fatalf("after the held tokens expired: %v", err)
	}
	if p.Used() != 1 {
		t.Fatalf("Used() = %d, want 1", p.Used())
	}
}

func TestChallengeHeader(t *testing.T) {
	p, err := challenge.NewPoW(challenge.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	h1, err := p.Challenge(ctx, alice, t0)
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := p.Challenge(ctx, alice, t0)
	re := regexp.MustCompile(`^pow; token="[A-Za-z0-9_-]{72}"; bits=16$`)
	if !re.MatchString(h1) {
		t.Errorf("Challenge = %q, want %v", h1, re)
	}
	if h1 == h2 {
		t.Errorf("two challenges at the same instant are equal: %q", h1)
	}
	if len(h1) > challenge.MaxTokenLen {
		t.Errorf("the header (%d bytes) is longer than MaxTokenLen", len(h1))
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("entropy exhausted") }

func TestChallengeRandFails(t *testing.T) {
	p := newPoW(t, challenge.Config{Rand: failingReader{}})
	if h, err := p.Challenge(ctx, alice, t0); err == nil || h != "" {
		t.Fatalf("Challenge = %q, %v; want an error", h, err)
	}
}

// The documented defaults, pinned.
func TestDefaults(t *testing.T) {
	p, err := challenge.NewPoW(challenge.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if p.Bits() != 16 || challenge.DefaultBits != 16 {
		t.Errorf("default Bits = %d, want 16", p.Bits())
	}
	token := issue(t, p, alice, t0)
	r := token + ":" + challenge.Solve(token, 16)
	if err := p.Verify(ctx, alice, r, t0.Add(time.Minute)); err != challenge.ErrExpired {
		t.Errorf("default TTL: at one minute: %v, want ErrExpired", err)
	}
	if err := p.Verify(ctx, alice, r, t0.Add(time.Minute-time.Millisecond)); err != nil {
		t.Errorf("default TTL: a millisecond before one minute: %v", err)
	}
	if err := p.Verify(ctx, alice, solved(t, p, alice, t0.Add(5*time.Second)), t0); err != nil {
		t.Errorf("default MaxSkew: dated 5 s ahead: %v", err)
	}
	r = solved(t, p, alice, t0.Add(5*time.Second+time.Millisecond))
	if err := p.Verify(ctx, alice, r, t0); err != challenge.ErrExpired {
		t.Errorf("default MaxSkew: dated 5.001 s ahead: %v, want ErrExpired", err)
	}
	// DefaultMaxUsed is pinned in TestDefaultMaxUsed (internal).
}

func TestSecretIsCopied(t *testing.T) {
	s := append([]byte(nil), secret...)
	p := newPoW(t, challenge.Config{Secret: s})
	r := solved(t, p, alice, t0)
	clear(s)
	if err := p.Verify(ctx, alice, r, t0); err != nil {
		t.Fatalf("after the caller cleared its secret: %v", err)
	}
}

func TestNewPoWConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     challenge.Config
		wantErr string // substring; "" = valid
	}{
		{name: "minimal", cfg: challenge.Config{Secret: secret}},
		{name: "no secret", cfg: challenge.Config{}, wantErr: "Secret is 0 bytes, want at least 32"},
		{name: "secret of 31 bytes", cfg: challenge.Config{Secret: secret[:31]}, wantErr: "Secret is 31 bytes, want at least 32"},
		{name: "secret of 64 bytes", cfg: challenge.Config{Secret: append(secret, secret...)}},
		{name: "MinBits", cfg: challenge.Config{Secret: secret, Bits: 1}},
		{name: "MaxBits", cfg: challenge.Config{Secret: secret, Bits: 32}},
		{name: "negative bits", cfg: challenge.Config{Secret: secret, Bits: -1}, wantErr: "Bits -1 is not between 1 and 32"},
		{name: "bits above MaxBits", cfg: challenge.Config{Secret: secret, Bits: 33}, wantErr: "Bits 33"},
		{name: "MinTTL", cfg: challenge.Config{Secret: secret, TTL: time.Second}},
		{name: "TTL below MinTTL", cfg: challenge.Config{Secret: secret, TTL: 999 * time.Millisecond}, wantErr: "TTL 999ms"},
		{name: "negative TTL", cfg: challenge.Config{Secret: secret, TTL: -time.Minute}, wantErr: "TTL -1m0s"},
		{name: "TTL above MaxTTL", cfg: challenge.Config{Secret: secret, TTL: 2 * time.Hour}, wantErr: "TTL 2h0m0s"},
		{name: "short TTL caps the default skew", cfg: challenge.Config{Secret: secret, TTL: 2 * time.Second}},
		{name: "skew equal to TTL", cfg: challenge.Config{Secret: secret, MaxSkew: time.Minute}},
		{name: "skew above TTL", cfg: challenge.Config{Secret: secret, MaxSkew: time.Minute + 1}, wantErr: "MaxSkew"},
		{name: "negative skew", cfg: challenge.Config{Secret: secret, MaxSkew: -1}, wantErr: "MaxSkew -1ns"},
		{name: "negative MaxUsed", cfg: challenge.Config{Secret: secret, MaxUsed: -1}, wantErr: "MaxUsed -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := challenge.NewPoW(tc.cfg)
			if tc.wantErr == "" {
				if err != nil || p == nil {
					t.Fatalf("NewPoW = %v, %v", p, err)
				}
				return
			}
			if !errors.Is(err, challenge.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("NewPoW error = %v, want ErrInvalidConfig with %q", err, tc.wantErr)
			}
			if p != nil {
				t.Fatal("NewPoW returned a PoW with its error")
			}
		})
	}
}

func TestParseChallenge(t *testing.T) {
	tok := strings.Repeat("A", 72)
	tests := []struct {
		header    string
		wantToken string
		wantBits  int
		wantErr   bool
	}{
		{header: `pow; token="` + tok + `"; bits=16`, wantToken: tok, wantBits: 16},
		{header: `POW;bits=3;token=` + tok, wantToken: tok, wantBits: 3},
		{header: `pow; realm="api"; token="` + tok + `"; bits=0; v=2`, wantToken: tok, wantBits: 0},
		{header: `pow; token="` + tok + `"; bits=32`, wantToken: tok, wantBits: 32},
		{header: `pow; token="` + tok + `"; bits=33`, wantErr: true},
		{header: `pow; token="` + tok + `"; bits=-1`, wantErr: true},
		{header: `pow; token="` + tok + `"; bits=x`, wantErr: true},
		{header: `pow; token="` + tok + `"`, wantErr: true},
		{header: `pow; bits=16`, wantErr: true},
		{header: `pow; token=""; bits=16`, wantErr: true},
		{header: `captcha; url="https://example.com/"`, wantErr: true},
		{header: ``, wantErr: true},
		{header: `pow; token="` + strings.Repeat("A", challenge.MaxTokenLen+1) + `"; bits=1`, wantErr: true},
		{header: `pow; token="` + strings.Repeat("A", 2000) + `"; bits=1`, wantErr: true},
	}
	for _, tc := range tests {
		token, bits, err := challenge.ParseChallenge(tc.header)
		if tc.wantErr {
			if err != challenge.ErrMalformed {
				t.Errorf("ParseChallenge(%.60q) = %q, %d, %v; want ErrMalformed", tc.header, token, bits, err)
			}
			continue
		}
		if err != nil || token != tc.wantToken || bits != tc.wantBits {
			t.Errorf("ParseChallenge(%.60q) = %q, %d, %v; want %q, %d", tc.header, token, bits, err, tc.wantToken, tc.wantBits)
		}
	}
}

func TestSolve(t *testing.T) {
	token := issue(t, newPoW(t, challenge.Config{}), alice, t0)
	for _, bits := range []int{0, 1, 4, 8, 12} {
		n := challenge.Solve(token, bits)
		if z := countZeros(token + ":" + n); n == "" || z < bits {
			t.Errorf("Solve(%d) = %q with %d zero bits", bits, n, z)
		}
	}
	if n := challenge.Solve(token, 0); n != "0" {
		t.Errorf("Solve(0) = %q, want 0", n)
	}
	for _, bits := range []int{-1, challenge.MaxBits + 1, 256} {
		if n := challenge.Solve(token, bits); n != "" {
			t.Errorf("Solve(%d) = %q, want \"\"", bits, n)
		}
	}
}

// Under -race: distinct tokens verified concurrently are all accepted, and
// one token presented by many goroutines at once is accepted exactly once.
func TestConcurrentVerify(t *testing.T) {
	p := newPoW(t, challenge.Config{})
	const workers, each = 16, 20
	responses := make([][]string, workers)
	for w := range responses {
		for i := range each {
			responses[w] = append(responses[w], solved(t, p, "user:"+strconv.Itoa(w*each+i), t0))
		}
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			for i, r := range responses[w] {
				if err := p.Verify(ctx, "user:"+strconv.Itoa(w*each+i), r, t0); err != nil {
					t.Errorf("worker %d, token %d: %v", w, i, err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if p.Used() != workers*each {
		t.Fatalf("Used() = %d, want %d", p.Used(), workers*each)
	}

	same := solved(t, p, alice, t0)
	var accepted, replayed atomic.Int64
	start = make(chan struct{})
	for range 64 {
		wg.Go(func() {
			<-start
			switch err := p.Verify(ctx, alice, same, t0); err {
			case nil:
				accepted.Add(1)
			case challenge.ErrReplayed:
				replayed.Add(1)
			default:
				t.Errorf("Verify = %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if accepted.Load() != 1 || replayed.Load() != 63 {
		t.Fatalf("one token, 64 goroutines: %d accepted, %d replayed; want 1 and 63", accepted.Load(), replayed.Load())
	}
}

// Refusing costs the server no allocation, whatever the client sends.
func TestRefusalsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops Puts under -race")
	}
	p := newPoW(t, challenge.Config{})
	token := issue(t, p, alice, t0)
	good := token + ":" + challenge.Solve(token, testBits)
	if err := p.Verify(ctx, alice, good, t0); err != nil {
		t.Fatal(err)
	}
	refusals := []struct {
		name, identity, response string
		at                       time.Time
		want                     error
	}{
		{"malformed", alice, strings.Repeat("x", 300), t0, challenge.ErrMalformed},
		{"not base64", alice, "!" + token[1:] + ":1", t0, challenge.ErrMalformed},
		{"other identity", "user:mallory", good, t0, challenge.ErrInvalidToken},
		{"expired", alice, good, t0.Add(time.Hour), challenge.ErrExpired},
		{"insufficient work", alice, token + ":" + nonceWith(t, token, 0), t0, challenge.ErrInsufficientWork},
		{"replayed", alice, good, t0, challenge.ErrReplayed},
	}
	for _, r := range refusals {
		var err error
		allocs := testing.AllocsPerRun(100, func() { err = p.Verify(ctx, r.identity, r.response, r.at) })
		if err != r.want || allocs != 0 {
			t.Errorf("%s: Verify = %v with %.1f allocations, want %v with none", r.name, err, allocs, r.want)
		}
	}
}

// Under -race: challenges issued concurrently each carry their own MAC,
// so every one verifies. The signer's sum was once read after the signer
// went back to its pool, where another challenge could overwrite it; the
// race detector caught that in the example server's reload test, and may
// catch it here (the window is a few instructions wide).
func TestConcurrentChallenge(t *testing.T) {
	p := newPoW(t, challenge.Config{Bits: 1})
	const workers, each = 8, 50
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			for i := range each {
				id := "user:" + strconv.Itoa(w*each+i)
				if err := p.Verify(ctx, id, solved(t, p, id, t0), t0); err != nil {
					t.Errorf("worker %d, challenge %d: %v", w, i, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
}
