package challenge_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"testing"
	"time"

	"github.com/costguard/costguard/challenge"
)

// benchBatch is how many solved tokens BenchmarkVerify prepares; it starts
// a fresh PoW (timer stopped) each time it has used them all up, so the
// cost of growing the used set is in the measurement.
const benchBatch = 4096

// BenchmarkVerify measures accepting a valid response: parse, decode, one
// HMAC, one SHA-256, one insertion in the used set. The cost does not
// depend on Bits. Its peers are the two hashes it cannot avoid, run
// bare on the same bytes: peer_hmac_sha256 (a new crypto/hmac per call, as
// a naive verifier would) and peer_sha256 (the work check alone).
func BenchmarkVerify(b *testing.B) {
	now := t0.Add(time.Second)
	newBatch := func(b *testing.B) (*challenge.PoW, []string) {
		p := newPoW(b, challenge.Config{})
		rs := make([]string, benchBatch)
		for i := range rs {
			rs[i] = solved(b, p, "user:"+strconv.Itoa(i), t0)
		}
		return p, rs
	}
	b.Run("pow", func(b *testing.B) {
		p, rs := newBatch(b)
		i := 0
		for b.Loop() {
			if i == benchBatch {
				// The tokens are used up. Tokens are stateless: a
				// fresh PoW under the same secret accepts them again.
				b.StopTimer()
				p, i = newPoW(b, challenge.Config{}), 0
				b.StartTimer()
			}
			if err := p.Verify(ctx, "user:"+strconv.Itoa(i), rs[i], now); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("pow_refuse_other_identity", func(b *testing.B) {
		p, rs := newBatch(b)
		for b.Loop() {
			if err := p.Verify(ctx, "user:mallory", rs[0], now); err != challenge.ErrInvalidToken {
				b.Fatal(err)
			}
		}
	})
	b.Run("pow_refuse_malformed", func(b *testing.B) {
		p := newPoW(b, challenge.Config{})
		junk := string(make([]byte, 300))
		for b.Loop() {
			if err := p.Verify(ctx, alice, junk, now); err != challenge.ErrMalformed {
				b.Fatal(err)
			}
		}
	})
	b.Run("peer_hmac_sha256", func(b *testing.B) {
		_, rs := newBatch(b)
		raw, _ := base64.RawURLEncoding.DecodeString(rs[0][:72])
		msg := append([]byte("costguard-pow-v1\x00"), raw[:22]...)
		msg = append(msg, "user:0"...)
		var sum [sha256.Size]byte
		for b.Loop() {
			h := hmac.New(sha256.New, secret)
			h.Write(msg)
			h.Sum(sum[:0])
		}
	})
	b.Run("peer_sha256", func(b *testing.B) {
		_, rs := newBatch(b)
		msg := []byte(rs[0])
		for b.Loop() {
			_ = sha256.Sum256(msg)
		}
	})
}

// BenchmarkChallenge measures issuing a challenge: a salt from crypto/rand,
// one HMAC, the encoding.
func BenchmarkChallenge(b *testing.B) {
	p, err := challenge.NewPoW(challenge.Config{Secret: secret})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := p.Challenge(ctx, alice, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSolve16 measures what a 16-bit challenge costs a client: Solve
// on a fresh token per iteration, 2^16 = 65,536 hashes on average
// (reported as hashes/op). Its peer is peer_sha256_x65536: 65,536 bare
// SHA-256 of an input as long as a response.
func BenchmarkSolve16(b *testing.B) {
	b.Run("solve", func(b *testing.B) {
		p := newPoW(b, challenge.Config{Bits: 16})
		var hashes, solved int
		for b.Loop() {
			b.StopTimer()
			token := issue(b, p, alice, t0.Add(time.Duration(solved)*time.Millisecond))
			b.StartTimer()
			n, _ := strconv.Atoi(challenge.Solve(token, 16))
			hashes += n + 1
			solved++
		}
		b.ReportMetric(float64(hashes)/float64(solved), "hashes/op")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(hashes), "ns/hash")
	})
	b.Run("peer_sha256_x65536", func(b *testing.B) {
		msg := []byte(issue(b, newPoW(b, challenge.Config{}), alice, t0) + ":12345")
		for b.Loop() {
			for range 1 << 16 {
				_ = sha256.Sum256(msg)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N<<16), "ns/hash")
	})
}
