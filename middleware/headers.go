package middleware

import (
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/middleware/identity"
)

// Header names the middleware reads or writes.
const (
	// HeaderRateLimitPolicy carries the plan as a structured-field item:
	// `"free";q=5000;w=3600` (quota in points; w = seconds an empty bucket
	// takes to fill).
	HeaderRateLimitPolicy = "RateLimit-Policy"
	// HeaderRateLimit carries the bucket after this request:
	// `"free";r=4890;t=80` (r = whole points left; t = seconds until full,
	// rounded up).
	HeaderRateLimit = "RateLimit"
	// HeaderXRateLimitLimit is the plan's burst.
	HeaderXRateLimitLimit = "X-RateLimit-Limit"
	// HeaderXRateLimitRemaining is the whole points left.
	HeaderXRateLimitRemaining = "X-RateLimit-Remaining"
	// HeaderXRateLimitUsed is limit − remaining.
	HeaderXRateLimitUsed = "X-RateLimit-Used"
	// HeaderXRateLimitReset is the Unix time, in seconds rounded up, at which
	// the bucket is full again.
	HeaderXRateLimitReset = "X-RateLimit-Reset"
	// HeaderRetryAfter is set on 429 and 503: whole seconds, rounded up,
	// never earlier than the true wait.
	HeaderRetryAfter = "Retry-After"
	// HeaderAPIKey is the alternative to "Authorization: Bearer <key>".
	HeaderAPIKey = identity.HeaderAPIKey
)

// setBudgetHeaders writes the rate-limit headers for decision d on plan p,
// as of now.
func setBudgetHeaders(h http.Header, p *plan, d limiter.Decision, now time.Time) {
	remaining := max(d.Remaining, 0)
	toFull := ceilSeconds(d.ResetAfter)
	h.Set(HeaderRateLimitPolicy, p.policyHeader)
	h.Set(HeaderRateLimit, p.quotedName+";r="+strconv.FormatInt(remaining, 10)+";t="+strconv.FormatInt(toFull, 10))
	h.Set(HeaderXRateLimitLimit, strconv.FormatInt(p.Burst, 10))
	h.Set(HeaderXRateLimitRemaining, strconv.FormatInt(remaining, 10))
	h.Set(HeaderXRateLimitUsed, strconv.FormatInt(max(p.Burst-remaining, 0), 10))
	h.Set(HeaderXRateLimitReset, strconv.FormatInt(unixCeil(now, d.ResetAfter), 10))
}

// ceilSeconds rounds d up to whole seconds; negative durations count as 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// unixCeil is the Unix time of now+d in seconds, rounded up.
func unixCeil(now time.Time, d time.Duration) int64 {
	t := now.Add(max(d, 0))
	s := t.Unix()
	if t.Nanosecond() != 0 {
		s++
	}
	return s
}

// fillSeconds is the time an empty bucket of burst points takes to fill at
// rate points per period, in whole seconds rounded up, computed without
// overflow (burst × period can exceed int64).
func fillSeconds(burst, rate int64, period time.Duration) int64 {
	hi, lo := bits.Mul64(uint64(burst), uint64(period))
	if hi >= uint64(rate) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(rate))
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return ceilSeconds(time.Duration(q))
}

// sfString renders s as a structured-field string (RFC 9651 §3.3.3). Plan
// names are checked at construction to be printable ASCII.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// validPlanName reports whether name can be a structured-field string and a
// readable log field: non-empty printable ASCII.
func validPlanName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return false
		}
	}
	return true
}
