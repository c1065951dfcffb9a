package middleware

import (
	"math"
	"math/bits"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/costguard/costguard/internal/seconds"
	"github.com/costguard/costguard/limiter"
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
)

// The headers' canonical keys, so that setting them needs no
// canonicalization (which allocates for keys such as "RateLimit").
var (
	keyRateLimitPolicy     = textproto.CanonicalMIMEHeaderKey(HeaderRateLimitPolicy)
	keyRateLimit           = textproto.CanonicalMIMEHeaderKey(HeaderRateLimit)
	keyXRateLimitLimit     = textproto.CanonicalMIMEHeaderKey(HeaderXRateLimitLimit)
	keyXRateLimitRemaining = textproto.CanonicalMIMEHeaderKey(HeaderXRateLimitRemaining)
	keyXRateLimitUsed      = textproto.CanonicalMIMEHeaderKey(HeaderXRateLimitUsed)
	keyXRateLimitReset     = textproto.CanonicalMIMEHeaderKey(HeaderXRateLimitReset)
	budgetHeaderKeys       = [...]string{keyRateLimitPolicy, keyRateLimit, keyXRateLimitLimit, keyXRateLimitRemaining, keyXRateLimitUsed, keyXRateLimitReset}
)

// headerValueBytes is room, inside a headerValues, for the values built
// per response: a plan's RateLimit and three numbers take about 45 bytes
// (the common lists of policies are precomputed). Values that do not fit
// take one allocation more, of the size they need. The whole value is 160
// bytes, an allocation size class.
const headerValueBytes = 160 - len(budgetHeaderKeys)*16

// headerValues is what one response's rate-limit headers hold, in one
// allocation: the six values (each header's one-element slice is a part of
// vals) and the bytes of those built per response, which their strings
// point into. The bytes are written once, before any string is made of
// them, and never after: each value is appended past the last.
type headerValues struct {
	vals [len(budgetHeaderKeys)]string
	buf  [headerValueBytes]byte
}

// stringFrom is b[start:] as a string sharing b's bytes, which are never
// written again (see headerValues).
func stringFrom(b []byte, start int) string {
	if start == len(b) {
		return ""
	}
	return unsafe.String(&b[start], len(b)-start)
}

// room returns b, or when fewer than n bytes are left past its length an
// empty slice of capacity n: the bytes before stay as they are.
func room(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		return make([]byte, 0, n)
	}
	return b
}

// setBudgetHeaders writes the rate-limit headers for decision d on plan p,
// as of now: RateLimit-Policy is policies, RateLimit reports rl, the
// decision of the budget quoted as name (the bucket's d, or a limit closer
// to empty). Every response of a limited route carries them, so they are
// built in one allocation (headerValues).
func setBudgetHeaders(h http.Header, p *plan, d limiter.Decision, now time.Time, policies, name string, rl limiter.Decision) {
	v := new(headerValues)
	v.vals[0] = policies
	v.build(v.buf[:0], p, d, now, name, rl)
	v.set(h)
}

// build appends to b the values of every header but RateLimit-Policy (see
// setBudgetHeaders) and records them in v; it returns b past them.
func (v *headerValues) build(b []byte, p *plan, d limiter.Decision, now time.Time, name string, rl limiter.Decision) []byte {
	remaining := max(d.Remaining, 0)
	left, reset, used, whole := max(rl.Remaining, 0), seconds.Ceil(rl.ResetAfter), max(p.Burst-remaining, 0), unixCeil(now, d.ResetAfter)
	b = room(b, len(name)+len(";r=;t=")+decimalLen(left)+decimalLen(reset)+decimalLen(remaining)+decimalLen(used)+decimalLen(whole))
	start := len(b)
	b = append(b, name...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, left, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	v.vals[1] = stringFrom(b, start)
	v.vals[2] = p.burstText
	start = len(b)
	b = strconv.AppendInt(b, remaining, 10)
	v.vals[3] = stringFrom(b, start)
	start = len(b)
	b = strconv.AppendInt(b, used, 10)
	v.vals[4] = stringFrom(b, start)
	start = len(b)
	b = strconv.AppendInt(b, whole, 10)
	v.vals[5] = stringFrom(b, start)
	return b
}

// set writes v's six headers to h.
func (v *headerValues) set(h http.Header) {
	for i, k := range budgetHeaderKeys {
		h[k] = v.vals[i : i+1 : i+1]
	}
}

// decimalLen is the length of n ≥ 0 in decimal: ⌊log10 n⌋ + 1, from
// its bit length (log10 2 ≈ 1233/4096) and one comparison.
func decimalLen(n int64) int {
	l := bits.Len64(uint64(n)) * 1233 >> 12 // ⌊log10 n⌋ or one less
	if l < len(pow10) && uint64(n) >= pow10[l] {
		l++
	}
	return max(l, 1)
}

// pow10 are the powers of ten an int64 holds.
var pow10 = [...]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18}

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
	return seconds.Ceil(time.Duration(q))
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
