package middleware

import (
	"net/http"
	"strconv"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/seconds"
	"github.com/costguard/costguard/limiter"
)

// limitHeaders are a budget's RateLimit-Policy name (a structured-field
// string) and item.
type limitHeaders struct{ quoted, policy string }

// buildFieldHeaders renders the field and route limits' RateLimit-Policy
// items. Coordinates are checked against the schema when the extension is
// added to a server, route patterns by buildRoutes.
func (s *settings) buildFieldHeaders() {
	if coords := s.pol.FieldCoordinates(); len(coords) > 0 {
		s.fieldHeaders = make(map[string]limitHeaders, len(coords))
		for _, coord := range coords {
			s.fieldHeaders[coord] = newLimitHeaders(coord, s.pol.Field(coord).Limit)
		}
	}
	if routes := s.pol.RouteNames(); len(routes) > 0 {
		s.routeHeaders = make(map[string]limitHeaders, len(routes))
		for _, route := range routes {
			s.routeHeaders[route] = newLimitHeaders(route, s.pol.Route(route).Limit)
		}
	}
}

// newLimitHeaders renders the RateLimit-Policy name and item of the limit
// named name: q is what a full budget admits (a bucket's burst, a
// window's rate; a shaping limit's rate) and w the seconds it takes to be
// whole again (a bucket's refill from empty, a window; a shaping limit's
// period).
func newLimitHeaders(name string, l limiter.Limit) limitHeaders {
	q, w := l.Rate, seconds.Ceil(l.Period)
	if l.Algorithm == limiter.TokenBucket || l.Algorithm == limiter.LeakyBucketPolicing {
		q, w = l.Burst, fillSeconds(l.Burst, l.Rate, l.Period)
	}
	quoted := sfString(name)
	return limitHeaders{quoted: quoted, policy: quoted + ";q=" + strconv.FormatInt(q, 10) + ";w=" + strconv.FormatInt(w, 10)}
}

// clientAddr is r's client address key when a field or route limit
// counts by address, else "".
func (s *settings) clientAddr(r *http.Request) string {
	if !s.pol.AnyByIP() {
		return ""
	}
	return s.addrKey(r)
}

// headersOf are the RateLimit-Policy name and item of u, a budget decided
// beside plan p's bucket.
func (s *settings) headersOf(p *plan, u *budget.Use) limitHeaders {
	if u.Field != nil {
		return s.fieldHeaders[u.Field.Coord]
	}
	if u.Route != nil {
		return s.routeHeaders[u.Route.Route]
	}
	return limitHeaders{quoted: p.quotaQuoted, policy: p.quotaPolicy}
}

// setOutcomeHeaders writes the rate-limit headers of o on plan p: the
// bucket's, and when o was decided with other limits, RateLimit-Policy
// listing every policy that applied and RateLimit reporting the one
// closest to refusing (the least remaining share of its quota).
func (s *settings) setOutcomeHeaders(h http.Header, p *plan, o *budget.Outcome, now time.Time) {
	if len(o.Limits) == 0 {
		setBudgetHeaders(h, p, o.Decision, now, p.policyHeader, p.quotedName, o.Decision)
		return
	}
	// Each limit's names, looked up once (at most four budgets are decided
	// together; more are looked up again).
	var known [4]limitHeaders
	headers := func(i int) limitHeaders {
		if i < len(known) {
			return known[i]
		}
		return s.headersOf(p, &o.Limits[i])
	}
	for i := range min(len(o.Limits), len(known)) {
		known[i] = s.headersOf(p, &o.Limits[i])
	}
	// RateLimit reports the bucket unless another budget is closer to
	// empty, in its share of its capacity.
	share := float64(max(o.Decision.Remaining, 0)) / float64(p.Burst)
	name, d := p.quotedName, o.Decision
	for i := range o.Limits {
		u := &o.Limits[i]
		if u.Decision.Limit == 0 {
			continue // not read (see budget's decideGroup)
		}
		if sh := float64(max(u.Decision.Remaining, 0)) / float64(u.Capacity); sh < share {
			share, name, d = sh, headers(i).quoted, u.Decision
		}
	}
	v := new(headerValues)
	b := v.build(v.buf[:0], p, o.Decision, now, name, d)
	if len(o.Limits) == 1 && o.Limits[0].Quota != nil {
		v.vals[0] = p.bothPolicies // the common case, written once
	} else {
		size := len(p.policyHeader)
		for i := range o.Limits {
			if listed(o.Limits, i) {
				size += len(", ") + len(headers(i).policy)
			}
		}
		b = room(b, size)
		start := len(b)
		b = append(b, p.policyHeader...)
		for i := range o.Limits {
			if listed(o.Limits, i) {
				b = append(b, ", "...)
				b = append(b, headers(i).policy...)
			}
		}
		v.vals[0] = stringFrom(b, start)
	}
	v.set(h)
}

// listed reports whether uses[i] gets its own RateLimit-Policy item: the
// address's count of a limit counted ByBoth shares the principal's.
func listed(uses []budget.Use, i int) bool {
	u := &uses[i]
	if !u.ByAddr {
		return true
	}
	for j := range uses {
		if v := &uses[j]; !v.ByAddr && ((u.Field != nil && v.Field == u.Field) || (u.Route != nil && v.Route == u.Route)) {
			return false
		}
	}
	return true
}
