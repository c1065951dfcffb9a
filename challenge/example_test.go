package challenge_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/costguard/costguard/challenge"
)

// zeroSalt makes the example's token deterministic. Production leaves
// Config.Rand unset (crypto/rand), so every token is unique.
type zeroSalt struct{}

func (zeroSalt) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// A server challenges a refused client; the client solves the 16-bit
// challenge and retries with its answer, which is accepted once.
func Example() {
	ctx := context.Background()
	pow, err := challenge.NewPoW(challenge.Config{
		Secret: []byte("an example secret of 32+ bytes!!"), // from config, e.g. `openssl rand -base64 32`
		Bits:   16,
		Rand:   zeroSalt{},
	})
	if err != nil {
		panic(err)
	}
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC) // the request's time; production reads the clock

	// Server: the request of "ip:198.51.100.4" is shed; the response says
	header, _ := pow.Challenge(ctx, "ip:198.51.100.4", now)
	fmt.Println(challenge.HeaderChallenge+":", header)

	// Client: 65,536 hashes on average (this token took 6,587).
	token, bits, _ := challenge.ParseChallenge(header)
	nonce := challenge.Solve(token, bits)
	response := token + ":" + nonce
	fmt.Println("nonce:", nonce)

	// Server: the retry carries Costguard-Challenge-Response.
	fmt.Println("retry:", pow.Verify(ctx, "ip:198.51.100.4", response, now.Add(2*time.Second)))
	fmt.Println("again:", pow.Verify(ctx, "ip:198.51.100.4", response, now.Add(3*time.Second)))
	fmt.Println("other client:", pow.Verify(ctx, "ip:203.0.113.7", response, now.Add(3*time.Second)))
	err = pow.Verify(ctx, "ip:198.51.100.4", response, now.Add(time.Minute))
	fmt.Println("a minute later:", errors.Is(err, challenge.ErrExpired))
	// Output:
	// Costguard-Challenge: pow; token="ARAAAAG43VjiAAAAAAAAAAAAAAAAANh7_sYV6uCm1YxPsVILCIHKqVfjLuzHj72O8LWidetL"; bits=16
	// nonce: 6586
	// retry: <nil>
	// again: challenge: token already used
	// other client: challenge: invalid token
	// a minute later: true
}

// captcha is a Challenger that sends clients to a CAPTCHA page and checks
// the token the page hands them with the CAPTCHA provider.
type captcha struct {
	page string
	// check asks the provider whether token was solved for identity.
	check func(ctx context.Context, identity, token string) error
}

var _ challenge.Challenger = captcha{}

func (c captcha) Challenge(_ context.Context, _ string, _ time.Time) (string, error) {
	return `captcha; url="` + c.page + `"`, nil
}

func (c captcha) Verify(ctx context.Context, identity, response string, _ time.Time) error {
	if response == "" || len(response) > 4096 {
		return challenge.ErrMalformed
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second) // every network call bounded
	defer cancel()
	if err := c.check(ctx, identity, response); err != nil {
		return fmt.Errorf("%w: %w", challenge.ErrInvalidToken, err)
	}
	return nil
}

// A CAPTCHA plugs in through the same two methods: the challenge points to
// the page, the response is the provider's token.
func ExampleChallenger() {
	var c challenge.Challenger = captcha{
		page: "https://example.com/captcha",
		check: func(_ context.Context, _, token string) error {
			if token != "solved-by-a-human" { // a real check calls the provider
				return errors.New("provider says no")
			}
			return nil
		},
	}
	ctx, now := context.Background(), time.Now()
	header, _ := c.Challenge(ctx, "ip:198.51.100.4", now)
	fmt.Println(header)
	fmt.Println(c.Verify(ctx, "ip:198.51.100.4", "solved-by-a-human", now))
	fmt.Println(c.Verify(ctx, "ip:198.51.100.4", "a-guess", now))
	// Output:
	// captcha; url="https://example.com/captcha"
	// <nil>
	// challenge: invalid token: provider says no
}
