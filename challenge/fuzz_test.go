package challenge_test

import (
	"strings"
	"testing"

	"github.com/costguard/costguard/challenge"
)

var sentinels = []error{
	challenge.ErrMalformed, challenge.ErrInvalidToken, challenge.ErrExpired,
	challenge.ErrInsufficientWork, challenge.ErrReplayed, challenge.ErrFull,
}

// Verify never panics on any header and any identity, answers nil or one of
// the sentinels, and never accepts the same response twice.
func FuzzVerify(f *testing.F) {
	p := newPoW(f, challenge.Config{MaxUsed: 1 << 16})
	for i := range 4 {
		f.Add(alice, solved(f, p, alice, t0))
		f.Add("ip:203.0.113.7", solved(f, p, alice, t0)+strings.Repeat(" ", i))
	}
	token := issue(f, p, alice, t0)
	for _, s := range []string{"", ":", "::", " ", token, token + ":", ":0", token + "==:0", token + ":0:0",
		token + ":" + strings.Repeat("9", 64), strings.Repeat("A", 300) + ":0", "\x00:\xff", token[:71] + "é:1"} {
		f.Add(alice, s)
	}
	f.Fuzz(func(t *testing.T, identity, response string) {
		err := p.Verify(ctx, identity, response, t0)
		if err == nil {
			if again := p.Verify(ctx, identity, response, t0); again != challenge.ErrReplayed {
				t.Fatalf("accepted %q, then %v on its second use", response, again)
			}
			return
		}
		for _, s := range sentinels {
			if err == s {
				return
			}
		}
		t.Fatalf("Verify(%q) = %v: not a sentinel", response, err)
	})
}

// ParseChallenge never panics and returns only what a client can use.
func FuzzParseChallenge(f *testing.F) {
	for _, s := range []string{`pow; token="abc"; bits=16`, `pow;token=abc;bits=0`, `pow; bits=32; token="x"`,
		`pow; token="`, `pow;;;=;"`, `POW; token=""""; bits=1`, `captcha; url="x"`, ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		token, bits, err := challenge.ParseChallenge(header)
		if err != nil {
			if err != challenge.ErrMalformed || token != "" || bits != 0 {
				t.Fatalf("ParseChallenge(%q) = %q, %d, %v", header, token, bits, err)
			}
			return
		}
		if token == "" || len(token) > challenge.MaxTokenLen || bits < 0 || bits > challenge.MaxBits {
			t.Fatalf("ParseChallenge(%q) = %q, %d: out of bounds", header, token, bits)
		}
	})
}
