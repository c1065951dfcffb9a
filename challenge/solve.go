package challenge

import (
	"strconv"
	"strings"
)

// maxChallengeLen bounds the header ParseChallenge reads.
const maxChallengeLen = 1024

// ParseChallenge reads the value of a HeaderChallenge header of the PoW
// challenge, `pow; token="…"; bits=N`, as a client does. Parameters may
// come in any order, their values quoted or not; unknown parameters are
// ignored. It returns ErrMalformed for any other challenge, and for bits
// outside 0..MaxBits, which no client should try.
func ParseChallenge(header string) (token string, bits int, err error) {
	if len(header) > maxChallengeLen {
		return "", 0, ErrMalformed
	}
	scheme, params, _ := strings.Cut(header, ";")
	if !strings.EqualFold(strings.TrimSpace(scheme), "pow") {
		return "", 0, ErrMalformed
	}
	bits = -1
	for params != "" {
		var param string
		param, params, _ = strings.Cut(params, ";")
		name, value, ok := strings.Cut(param, "=")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "token":
			token = value
		case "bits":
			n, err := strconv.Atoi(value)
			if err != nil || n < 0 || n > MaxBits {
				return "", 0, ErrMalformed
			}
			bits = n
		}
	}
	if token == "" || len(token) > MaxTokenLen || bits < 0 {
		return "", 0, ErrMalformed
	}
	return token, bits, nil
}

// Solve finds a nonce such that SHA-256(token ":" nonce) has at least bits
// leading zero bits, trying the decimal numbers 0, 1, 2, … in turn: about
// 2^bits hashes. The answer to send is token + ":" + nonce. Solve returns
// "" for bits outside 0..MaxBits; it does not check the token, so a
// client solving a token it mistyped learns that from Verify.
func Solve(token string, bits int) (nonce string) {
	if bits < 0 || bits > MaxBits {
		return ""
	}
	for i := uint64(0); ; i++ {
		var digits [20]byte
		n := strconv.AppendUint(digits[:0], i, 10)
		if zeroBits(token, string(n)) >= bits {
			return string(n)
		}
	}
}
