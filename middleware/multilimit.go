package middleware

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/seconds"
)

// limitHeaders are a budget's RateLimit-Policy name (a structured-field
// string) and item.
type limitHeaders struct{ quoted, policy string }

// buildFieldHeaders renders the field limits' RateLimit-Policy items.
// Coordinates are checked against the schema when the Extension is added
// to a server.
func (s *settings) buildFieldHeaders() {
	coords := s.pol.FieldCoordinates()
	if len(coords) == 0 {
		return
	}
	s.fieldHeaders = make(map[string]limitHeaders, len(coords))
	for _, coord := range coords {
		fl := s.pol.Field(coord)
		quoted := sfString(coord)
		s.fieldHeaders[coord] = limitHeaders{
			quoted: quoted,
			policy: quoted + ";q=" + strconv.FormatInt(fl.Limit.Burst, 10) + ";w=" + strconv.FormatInt(fillSeconds(fl.Limit.Burst, fl.Limit.Rate, fl.Limit.Period), 10),
		}
	}
}

// clientAddr is r's client address key when a field limit counts by
// address, else "".
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
	return limitHeaders{quoted: p.quotaQuoted, policy: p.quotaPolicy}
}

// setOutcomeHeaders writes the rate-limit headers of o on plan p: the
// bucket's, and when o was decided with other limits, RateLimit-Policy
// listing every policy that applied and RateLimit reporting the one
// closest to refusing (the least remaining share of its quota).
func (s *settings) setOutcomeHeaders(h http.Header, p *plan, o *budget.Outcome, now time.Time) {
	setBudgetHeaders(h, p, o.Decision, now)
	if len(o.Limits) == 0 {
		return
	}
	policies := p.policyHeader
	if len(o.Limits) == 1 && o.Limits[0].Field == nil {
		policies = p.bothPolicies // the common case, written once
	} else {
		size := len(p.policyHeader)
		for i := range o.Limits {
			size += len(", ") + len(s.headersOf(p, &o.Limits[i]).policy)
		}
		var b strings.Builder
		b.Grow(size) // one allocation
		b.WriteString(p.policyHeader)
		for i := range o.Limits {
			b.WriteString(", ")
			b.WriteString(s.headersOf(p, &o.Limits[i]).policy)
		}
		policies = b.String()
	}
	h[keyRateLimitPolicy][0] = policies // setBudgetHeaders made the slice
	share := float64(max(o.Decision.Remaining, 0)) / float64(p.Burst)
	var closest *budget.Use
	for i := range o.Limits {
		u := &o.Limits[i]
		if u.Decision.Limit == 0 {
			continue // not read (see budget's decideGroup)
		}
		if sh := float64(max(u.Decision.Remaining, 0)) / float64(u.Capacity); sh < share {
			share, closest = sh, u
		}
	}
	if closest != nil {
		var buf [budgetHeaderBytes]byte
		b := append(buf[:0], s.headersOf(p, closest).quoted...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, max(closest.Decision.Remaining, 0), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, seconds.Ceil(closest.Decision.ResetAfter), 10)
		h[keyRateLimit][0] = string(b)
	}
}
