package client

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The codes of a refusal body that mean "not now": the request may fit
// later, after the wait the server gives.
var laterCodes = map[string]bool{
	"RATE_LIMITED": true, "RATE_LIMITER_UNAVAILABLE": true, "QUOTA_EXCEEDED": true,
	"FIELD_RATE_LIMITED": true, "ROUTE_RATE_LIMITED": true, "CONCURRENCY_LIMITED": true,
	"OVERLOADED": true,
	// The REST adapter's lower-case codes.
	"rate_limited": true, "rate_limiter_unavailable": true, "quota_exceeded": true,
	"route_rate_limited": true, "concurrency_limited": true, "overloaded": true,
}

// holdCodes are the refusals that apply to every request of the caller,
// whatever its price or route: until their Retry-After runs out nothing
// fits.
var holdCodes = map[string]bool{
	"RATE_LIMITER_UNAVAILABLE": true, "QUOTA_EXCEEDED": true, "CONCURRENCY_LIMITED": true, "OVERLOADED": true,
	"rate_limiter_unavailable": true, "quota_exceeded": true, "concurrency_limited": true, "overloaded": true,
}

// holds reports whether s is a refusal that applies to every request: one
// of holdCodes, or a 429 or 503 without a code (from a proxy, say).
func (s *signals) holds() bool {
	return s.refused && s.retryAfter > 0 && (holdCodes[s.code] || s.code == "")
}

// codeRateLimited is the bucket's refusal.
const codeRateLimited = "RATE_LIMITED"

// codeNeverFits refuses an operation that costs more than the plan ever
// holds: it is never retried.
const codeNeverFits = "MAX_COST_EXCEEDED"

// policyItem is one item of RateLimit-Policy (q, w) or RateLimit (r, t);
// a parameter absent or malformed is -1.
type policyItem struct {
	name       string
	q, w, r, t int64
}

// signals are the budget signals of one response.
type signals struct {
	policies []policyItem // RateLimit-Policy, in order: the plan's first
	states   []policyItem // RateLimit
	// X-RateLimit-*: -1 when absent or malformed.
	limit, remaining int64
	reset            time.Time // zero when absent
	retryAfter       time.Duration
	// From the body: extensions.cost and the first refusal code.
	cost *costExtension
	code string
	// price is what the server priced the operation at
	// (requestedQueryCost, or the refusal's cost); 0 when not said.
	price int64
	// refused: the server said "not now" (429, 503 or a code of
	// laterCodes); neverFits: it said "never" (MAX_COST_EXCEEDED).
	refused, neverFits bool
}

// spent is what the answered request cost, or would have cost when
// refused: its actual cost when the server gave it, else its price, else
// one point.
func (s *signals) spent() int64 {
	if c := s.cost; c != nil && c.ActualQueryCost != nil && *c.ActualQueryCost >= 0 {
		return *c.ActualQueryCost
	}
	return max(s.price, 1)
}

// costExtension is extensions.cost.
type costExtension struct {
	RequestedQueryCost int64  `json:"requestedQueryCost"`
	ActualQueryCost    *int64 `json:"actualQueryCost"`
	ThrottleStatus     struct {
		MaximumAvailable   int64   `json:"maximumAvailable"`
		CurrentlyAvailable *int64  `json:"currentlyAvailable"`
		RestoreRate        float64 `json:"restoreRate"`
	} `json:"throttleStatus"`
}

// answer is the part of a GraphQL (or REST refusal) body read.
type answer struct {
	Errors []struct {
		Extensions struct {
			Code              string   `json:"code"`
			Cost              *int64   `json:"cost"`
			RetryAfterSeconds *float64 `json:"retryAfterSeconds"`
		} `json:"extensions"`
	} `json:"errors"`
	Extensions struct {
		Cost *costExtension `json:"cost"`
	} `json:"extensions"`
	// The REST adapter's refusal: {"error":code,"retry_after_seconds":N}.
	Error             string   `json:"error"`
	RetryAfterSeconds *float64 `json:"retry_after_seconds"`
}

// readSignals reads the budget signals of resp at now: its headers, and
// its body when it is JSON of at most maxBodyBytes, which it buffers and
// puts back so that the caller reads it whole. A longer or failing body is
// passed on with what was read put back before the rest.
func readSignals(resp *http.Response, now time.Time) signals {
	s := readHeaders(resp.Header, now)
	s.refused = resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
	if body, ok := bufferBody(resp); ok {
		s.readBody(body)
	}
	if s.code == codeRateLimited && s.price > s.planLimit() && s.planLimit() > 0 {
		// The bucket's refusal of an operation priced above what the plan
		// ever holds: the bucket could not pay even the refusal's
		// InvalidCost, so the server said "not now" where, once it can, it
		// says MAX_COST_EXCEEDED. It never fits.
		s.neverFits, s.refused = true, false
	}
	return s
}

// planLimit is the most the plan's bucket holds, as this answer says
// (extensions.cost, else X-RateLimit-Limit, else the first
// RateLimit-Policy item's q), or 0 when it does not say.
func (s *signals) planLimit() int64 {
	switch {
	case s.cost != nil && s.cost.ThrottleStatus.MaximumAvailable > 0:
		return s.cost.ThrottleStatus.MaximumAvailable
	case s.limit > 0:
		return s.limit
	case len(s.policies) > 0 && s.policies[0].q > 0:
		return s.policies[0].q
	}
	return 0
}

// bufferBody reads resp's body when it is JSON, and replaces it with one
// that reads the same bytes; ok is false when the body is not read whole
// (not JSON, too long, or failing), and is then passed on untouched.
func bufferBody(resp *http.Response) ([]byte, bool) {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json")) ||
		resp.Body == nil || resp.Body == http.NoBody || resp.ContentLength > maxBodyBytes {
		return nil, false
	}
	orig := resp.Body
	b, err := io.ReadAll(io.LimitReader(orig, maxBodyBytes+1))
	if err != nil || len(b) > maxBodyBytes {
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(b), orig), orig}
		return nil, false
	}
	resp.Body = readCloser{bytes.NewReader(b), orig}
	return b, true
}

// readCloser reads from one reader and closes the body it replaced.
type readCloser struct {
	io.Reader
	io.Closer
}

// readBody reads the cost and refusal signals of a JSON body.
func (s *signals) readBody(b []byte) {
	var a answer
	if json.Unmarshal(b, &a) != nil {
		return
	}
	s.cost = a.Extensions.Cost
	if s.cost != nil {
		s.price = max(s.cost.RequestedQueryCost, 0)
	}
	wait := a.RetryAfterSeconds
	s.code = a.Error
	for _, e := range a.Errors {
		if c := e.Extensions.Code; laterCodes[c] || c == codeNeverFits {
			s.code, wait = c, e.Extensions.RetryAfterSeconds
			if e.Extensions.Cost != nil && *e.Extensions.Cost > 0 {
				s.price = *e.Extensions.Cost
			}
			break
		}
	}
	switch {
	case s.code == codeNeverFits:
		s.neverFits, s.refused = true, false
	case laterCodes[s.code]:
		s.refused = true
	}
	if wait != nil && *wait > 0 && *wait < math.MaxInt32 {
		s.retryAfter = max(s.retryAfter, time.Duration(*wait*float64(time.Second)))
	}
}

// readHeaders reads the rate-limit headers of h; what is malformed is
// left out.
func readHeaders(h http.Header, now time.Time) signals {
	s := signals{
		policies:  parseItems(h.Values("RateLimit-Policy")),
		states:    parseItems(h.Values("RateLimit")),
		limit:     headerInt(h, "X-RateLimit-Limit"),
		remaining: headerInt(h, "X-RateLimit-Remaining"),
	}
	if reset := headerInt(h, "X-RateLimit-Reset"); reset > 0 && reset < math.MaxInt32*4 {
		s.reset = time.Unix(reset, 0)
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil && n > 0 {
			s.retryAfter = time.Duration(n) * time.Second
		} else if t, err := http.ParseTime(v); err == nil && t.After(now) {
			s.retryAfter = t.Sub(now)
		}
	}
	return s
}

// headerInt is the non-negative integer value of h's header key, or -1.
func headerInt(h http.Header, key string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(h.Get(key)), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// parseItems reads the items of a structured-field list spread over
// values: `"name";q=5000;w=3600, "other";q=5;w=900`. An item whose name
// is neither a string nor a token is left out; a parameter that is not a
// non-negative integer stays -1.
func parseItems(values []string) []policyItem {
	var out []policyItem
	for _, v := range values {
		for _, member := range splitList(v) {
			params := strings.Split(member, ";")
			name, ok := itemName(strings.TrimSpace(params[0]))
			if !ok {
				continue
			}
			it := policyItem{name: name, q: -1, w: -1, r: -1, t: -1}
			for _, p := range params[1:] {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				n, err := strconv.ParseInt(val, 10, 64)
				if err != nil || n < 0 {
					continue
				}
				switch k {
				case "q":
					it.q = n
				case "w":
					it.w = n
				case "r":
					it.r = n
				case "t":
					it.t = n
				}
			}
			out = append(out, it)
		}
	}
	return out
}

// splitList splits a structured-field list at the commas outside its
// strings.
func splitList(v string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			out = append(out, v[start:i])
			start = i + 1
		}
	}
	return append(out, v[start:])
}

// itemName is the name of a list member: a structured-field string
// (unescaped) or token.
func itemName(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	if s[0] != '"' {
		if strings.ContainsAny(s, " \t\"") {
			return "", false
		}
		return clip(s), true
	}
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		if s[i] == '\\' && i+1 < len(s)-1 {
			i++
		}
		b.WriteByte(s[i])
	}
	return clip(b.String()), true
}
