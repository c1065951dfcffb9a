package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"

	"github.com/costguard/costguard/middleware"
)

// The headers the proxy adds to every operation it forwards, so the
// upstream knows whose budget paid for it. The client's own headers of
// those names are never forwarded (the forwarder passes an allowlist).
const (
	// HeaderPrincipal is the budget costguard charged the operation to:
	// "user:PRINCIPAL" for an API key's principal, "key:" and the key's
	// SHA-256 for a key without one, "ip:ADDRESS" for anonymous clients.
	// Never a credential.
	HeaderPrincipal = "X-Costguard-Principal"
	// HeaderPlan is that principal's plan.
	HeaderPlan = "X-Costguard-Plan"
	// HeaderSignature, with -principal-secret-file, signs the two:
	// "t=UNIX,v1=HEX", HEX the HMAC-SHA256 under the secret of UNIX,
	// PRINCIPAL and PLAN on lines of their own (joined by "\n", which no
	// header value holds, so no two triples sign alike). An upstream
	// reachable other than through the proxy checks it (and that UNIX is
	// recent) before trusting them.
	HeaderSignature = "X-Costguard-Signature"
)

// principalHeaders returns the headers naming the principal of the
// operation in ctx, signed under secret when it is not empty; none when
// costguard identified nobody (an operation it did not see).
func principalHeaders(secret []byte, now func() time.Time) func(context.Context) http.Header {
	return func(ctx context.Context) http.Header {
		rs, ok := middleware.RateLimitFrom(ctx)
		if !ok {
			return nil
		}
		name, plan := rs.Key, rs.Plan
		h := http.Header{HeaderPrincipal: {name}, HeaderPlan: {plan}}
		if len(secret) > 0 {
			h.Set(HeaderSignature, signPrincipal(secret, now().Unix(), name, plan))
		}
		return h
	}
}

// signPrincipal is HeaderSignature's value for principal and plan at unix.
func signPrincipal(secret []byte, unix int64, principal, plan string) string {
	t := strconv.FormatInt(unix, 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(t + "\n" + principal + "\n" + plan))
	return "t=" + t + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}
