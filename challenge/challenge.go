// Package challenge holds the challenges a shed or refused client can answer
// to be admitted anyway: the Challenger contract the middleware consumes, the
// header names it speaks, and PoW, a stateless proof-of-work challenger.
//
// A lane configured with `challenge: pow` answers a request it sheds or
// refuses with
//
//	Costguard-Challenge: pow; token="<token>"; bits=<N>
//
// A client that finds a nonce such that SHA-256(token ":" nonce) starts with
// at least N zero bits retries with
//
//	Costguard-Challenge-Response: <token>:<nonce>
//
// and that one request is admitted at normal priority. Tokens carry no
// server state: each is an HMAC under a configured secret that binds the
// identity it was issued to, the time it was issued and the work it asks
// for. A token expires after a minute (TTL) and is accepted once: PoW
// remembers the tokens it accepted until they expire, in a bounded set that
// refuses rather than forgets when full. Verifying costs one HMAC and one
// SHA-256 (about a microsecond); solving costs the client about 2^N hashes.
//
// Nothing here knows about GraphQL, buckets or stores; the middleware maps
// the sentinel errors to answers. docs/challenge.md describes the protocol.
package challenge

import (
	"context"
	"errors"
	"time"
)

// Header names of the protocol.
const (
	// HeaderChallenge is set on a shed or refused response of a lane with a
	// challenge. For PoW its value is `pow; token="<token>"; bits=<N>`.
	HeaderChallenge = "Costguard-Challenge"
	// HeaderChallengeResponse carries the client's answer on its retry. For
	// PoW its value is `<token>:<nonce>`.
	HeaderChallengeResponse = "Costguard-Challenge-Response"
)

// Challenger issues and checks challenges. The middleware calls Challenge
// when it sheds or refuses a request of a lane with a challenge, and writes
// the value returned into the HeaderChallenge response header; it calls
// Verify with the value of the HeaderChallengeResponse request header, and
// admits the request at normal priority only when Verify returns nil.
//
// identity is the bucket key the request is charged to ("user:…",
// "key:<sha256>", "ip:…"): an answer must be refused for any other identity
// than the one it was issued to. now is the time of the request, read once
// by the caller.
//
// The contract is small so that other challenges fit: a CAPTCHA challenger
// returns from Challenge a value pointing the client at a CAPTCHA page (for
// example `captcha; url="https://…"`) and checks in Verify the CAPTCHA
// provider's token with the provider, which is why both take a context.
//
// Verify must return a non-nil error for every answer it does not accept,
// including when it cannot decide (a provider that does not answer): the
// caller refuses the request on any error. Errors wrapping the sentinels of
// this package (ErrMalformed, ErrInvalidToken, ErrExpired,
// ErrInsufficientWork, ErrReplayed, ErrFull) let the caller say why.
// Implementations must be safe for concurrent use.
type Challenger interface {
	// Challenge returns the value of the HeaderChallenge header for a
	// request of identity refused at now. On error the caller sends no
	// challenge.
	Challenge(ctx context.Context, identity string, now time.Time) (string, error)
	// Verify accepts (nil) or refuses (an error) response, the value of the
	// HeaderChallengeResponse header of a request of identity made at now.
	Verify(ctx context.Context, identity, response string, now time.Time) error
}

// Sentinel errors. Verify returns them unwrapped, so checking them is cheap
// and refusing allocates nothing; they are safe to show to clients.
var (
	// ErrMalformed: the response does not parse: empty, no colon, too long,
	// a nonce with characters outside [A-Za-z0-9._~-], or a token that is
	// not a token of this challenger.
	ErrMalformed = errors.New("challenge: malformed response")
	// ErrInvalidToken: the token's MAC does not match. It was issued to
	// another identity, under another secret, or altered; by design these
	// cannot be told apart.
	ErrInvalidToken = errors.New("challenge: invalid token")
	// ErrExpired: the token is older than the TTL, or dated further in the
	// future than MaxSkew (a server whose clock is far ahead issued it).
	ErrExpired = errors.New("challenge: token expired")
	// ErrInsufficientWork: SHA-256(token ":" nonce) has fewer leading zero
	// bits than the token asks for, or the token asks for fewer bits than
	// the challenger now requires. The token is not used up: the client may
	// retry with a better nonce.
	ErrInsufficientWork = errors.New("challenge: insufficient work")
	// ErrReplayed: the token was already accepted once.
	ErrReplayed = errors.New("challenge: token already used")
	// ErrFull: the set of accepted tokens holds MaxUsed tokens that have not
	// expired. The challenger refuses every new answer until some expire,
	// rather than forget one and let it be replayed. The token is not used
	// up.
	ErrFull = errors.New("challenge: too many tokens in use")
	// ErrInvalidConfig wraps every configuration error NewPoW returns.
	ErrInvalidConfig = errors.New("challenge: invalid config")
)
