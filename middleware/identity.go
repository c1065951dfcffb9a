package middleware

import (
	"context"
	"net/http"

	"github.com/costguard/costguard/identity"
)

// Who pays for a request is package identity's to decide; these are its
// names, so a Config reads as one package.
type (
	// Identity names whose budget a request spends: a bucket key and a plan.
	Identity = identity.Identity
	// Identifier decides who pays for a request. Identify returns
	// ErrUnknownAPIKey for a credential it does not recognise (answered
	// 401); any other error is answered 503 and logged.
	Identifier = identity.Identifier
	// IdentifierFunc adapts a function to Identifier.
	IdentifierFunc = identity.IdentifierFunc
	// KeyLookup resolves an API key to its principal and plan.
	KeyLookup = identity.KeyLookup
	// APIKey is what a static API key grants.
	APIKey = identity.APIKey
	// StaticKeys is a fixed KeyLookup that keeps only the keys' SHA-256.
	StaticKeys = identity.StaticKeys
)

// ErrUnknownAPIKey: the request presented an API key nobody issued.
var ErrUnknownAPIKey = identity.ErrUnknownAPIKey

// NewStaticKeys returns a lookup for the given keys (API key → grant).
func NewStaticKeys(keys map[string]APIKey) *StaticKeys { return identity.NewStaticKeys(keys) }

// WithPrincipal tells the default Identifier that the request is made by an
// authenticated principal on the named plan (see identity.WithPrincipal).
func WithPrincipal(ctx context.Context, name, plan string) context.Context {
	return identity.WithPrincipal(ctx, name, plan)
}

// PrincipalFrom returns what WithPrincipal stored in ctx.
func PrincipalFrom(ctx context.Context) (name, plan string, ok bool) {
	return identity.PrincipalFrom(ctx)
}

// HashAPIKey returns the lowercase hex SHA-256 of an API key: the only form
// of a key that appears in bucket keys and logs.
func HashAPIKey(apiKey string) string { return identity.HashAPIKey(apiKey) }

// APIKeyFrom extracts the API key a request presents.
func APIKeyFrom(r *http.Request) (string, bool) { return identity.APIKeyFrom(r) }
