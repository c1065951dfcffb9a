package middleware

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/guard"
)

// Quota is a plan's second budget: Limit points per fixed window of Per,
// drawn by the same cost as the plan's bucket ("5,000 an hour, 100,000 a
// day"). Windows are aligned on multiples of Per since the Unix epoch, so a
// 24h quota renews at midnight UTC and a 1h quota on the hour. A request is
// admitted only if the bucket and the quota (and the field limits it
// selects) can all pay; otherwise none of them is debited.
type Quota struct {
	// Limit is the points one window admits. It must be at least the
	// plan's Burst: a smaller quota would make the burst unreachable.
	Limit int64
	// Per is the window.
	Per time.Duration
	// Name is the quota's policy name in RateLimit-Policy. Default: the
	// plan's name and "-daily" (Per 24h), "-hourly" (1h), "-weekly" (168h)
	// or "-quota".
	Name string
}

// FieldLimitBy says whose selections of a field a FieldLimit counts.
type FieldLimitBy string

const (
	// ByPrincipal counts per principal (the identity that pays: user, API
	// key, or client address for anonymous requests). The default.
	ByPrincipal FieldLimitBy = "principal"
	// ByIP counts per client address (IPv6 by /64), whoever the principal
	// is, resolved as anonymous clients are (TrustedProxies). Without the
	// GraphQL wrapper the address is unknown and all requests share one
	// count.
	ByIP FieldLimitBy = "ip"
)

// FieldLimit is a rate on one schema field ("Mutation.login": 5 a minute),
// counted per selection: each alias, each occurrence through fragments,
// and each item of an enclosing list by its priced size. It is a token
// bucket: Limit selections at once, refilled at Limit per Per.
type FieldLimit struct {
	Limit int64
	Per   time.Duration
	// By is ByPrincipal (the default) or ByIP.
	By FieldLimitBy
}

// GraphQL error codes of the limits decided beside the plan's bucket (both
// answered 429 with Retry-After; REST: quota_exceeded).
const (
	// CodeQuotaExceeded: the plan's Quota cannot pay the cost in the
	// current window; Retry-After is the window's end.
	CodeQuotaExceeded = "QUOTA_EXCEEDED"
	// CodeFieldRateLimited: the operation selects a field with a
	// FieldLimit more times than that limit has left. The error's path is
	// the field's first selection and extensions.field its coordinate. An
	// operation selecting it more times than the limit at all is never
	// admitted (no Retry-After) and pays InvalidCost.
	CodeFieldRateLimited = "FIELD_RATE_LIMITED"
)

// Budget names beside a principal's bucket (limiter.Request.Name): the
// plan's quota and one per limited field.
const (
	quotaBudget       = "quota"
	fieldBudgetPrefix = "field:"
)

// quotaLimit is a validated Quota.
type quotaLimit struct {
	limit  limiter.Limit
	quoted string // the policy's name, as a structured-field string
	policy string // its RateLimit-Policy item
	// bothPolicies is RateLimit-Policy for the plan and its quota.
	bothPolicies string
}

// fieldLimit is a validated FieldLimit.
type fieldLimit struct {
	coord  string
	limit  limiter.Limit
	byIP   bool
	budget string // fieldBudgetPrefix + coord
	quoted string
	policy string
}

// quotaName is a quota's default policy name.
func quotaName(plan string, per time.Duration) string {
	switch per {
	case 24 * time.Hour:
		return plan + "-daily"
	case time.Hour:
		return plan + "-hourly"
	case 7 * 24 * time.Hour:
		return plan + "-weekly"
	}
	return plan + "-quota"
}

// buildQuota validates plan name's quota; policyHeader is the plan's
// RateLimit-Policy item.
func buildQuota(name string, p Plan, policyHeader string) (*quotaLimit, error) {
	q := p.Quota
	if q == nil {
		return nil, nil
	}
	if q.Limit <= 0 || q.Per <= 0 {
		return nil, fmt.Errorf("%w: plan %q: quota limit (%d) and per (%v) must be positive", ErrInvalidConfig, name, q.Limit, q.Per)
	}
	if q.Limit < p.Burst {
		return nil, fmt.Errorf("%w: plan %q: quota limit %d is below the burst %d, which could then never be spent", ErrInvalidConfig, name, q.Limit, p.Burst)
	}
	if p.SplitBudget {
		return nil, fmt.Errorf("%w: plan %q: a quota cannot be combined with SplitBudget (leases are spent locally, the quota in one atomic step with the bucket)", ErrInvalidConfig, name)
	}
	qn := q.Name
	if qn == "" {
		qn = quotaName(name, q.Per)
	}
	if !validPlanName(qn) {
		return nil, fmt.Errorf("%w: plan %q: quota name %q must be non-empty printable ASCII", ErrInvalidConfig, name, qn)
	}
	limit := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: q.Limit, Period: q.Per}
	if err := limit.Validate(); err != nil {
		return nil, fmt.Errorf("%w: plan %q: quota: %w", ErrInvalidConfig, name, err)
	}
	quoted := sfString(qn)
	ql := &quotaLimit{
		limit:  limit,
		quoted: quoted,
		policy: quoted + ";q=" + strconv.FormatInt(q.Limit, 10) + ";w=" + strconv.FormatInt(ceilSeconds(q.Per), 10),
	}
	ql.bothPolicies = policyHeader + ", " + ql.policy
	return ql, nil
}

// buildFieldLimits validates the field limits. Coordinates are checked
// against the schema when the Extension is added to a server.
func (s *settings) buildFieldLimits(fls map[string]FieldLimit) error {
	if len(fls) == 0 {
		return nil
	}
	// One decision takes the bucket, the quota and every limited field an
	// operation selects in one TakeAll, which refuses more than
	// limiter.MaxTakeAll budgets: past that, an operation selecting them
	// all would fail like a broken store (and count towards the breaker).
	if most := limiter.MaxTakeAll - 2; len(fls) > most {
		return fmt.Errorf("%w: %d field limits; at most %d fit one decision with the bucket and the quota", ErrInvalidConfig, len(fls), most)
	}
	s.fieldLimits = make(map[string]*fieldLimit, len(fls))
	for _, coord := range slices.Sorted(maps.Keys(fls)) {
		fl := fls[coord]
		typ, field, ok := strings.Cut(coord, ".")
		if !ok || typ == "" || field == "" || strings.Contains(field, ".") || !validPlanName(coord) {
			return fmt.Errorf("%w: field limit %q: want a schema coordinate Type.field", ErrInvalidConfig, coord)
		}
		if fl.Limit <= 0 || fl.Per <= 0 {
			return fmt.Errorf("%w: field limit %q: limit (%d) and per (%v) must be positive", ErrInvalidConfig, coord, fl.Limit, fl.Per)
		}
		switch fl.By {
		case "", ByPrincipal, ByIP:
		default:
			return fmt.Errorf("%w: field limit %q: by %q is neither %q nor %q", ErrInvalidConfig, coord, fl.By, ByPrincipal, ByIP)
		}
		limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: fl.Limit, Rate: fl.Limit, Period: fl.Per}
		if err := limit.Validate(); err != nil {
			return fmt.Errorf("%w: field limit %q: %w", ErrInvalidConfig, coord, err)
		}
		quoted := sfString(coord)
		s.fieldLimits[coord] = &fieldLimit{
			coord:  coord,
			limit:  limit,
			byIP:   fl.By == ByIP,
			budget: fieldBudgetPrefix + coord,
			quoted: quoted,
			policy: quoted + ";q=" + strconv.FormatInt(fl.Limit, 10) + ";w=" + strconv.FormatInt(fillSeconds(fl.Limit, fl.Limit, fl.Per), 10),
		}
		s.fieldCoords = append(s.fieldCoords, coord)
		s.anyByIP = s.anyByIP || fl.By == ByIP
	}
	for _, p := range s.plans {
		if p.SplitBudget {
			return fmt.Errorf("%w: plan %q: field limits cannot be combined with SplitBudget (leases are spent locally, field limits in one atomic step with the bucket)", ErrInvalidConfig, p.name)
		}
	}
	return nil
}

// clientAddr is r's client address key when a field limit counts by
// address, else "".
func (s *settings) clientAddr(r *http.Request) string {
	if !s.anyByIP {
		return ""
	}
	return s.addrKey(r)
}

// multiLimited reports whether requests on p may be decided by more than
// the plan's bucket.
func (s *settings) multiLimited(p *plan) bool { return p.quota != nil || len(s.fieldLimits) > 0 }

// limitUse is one budget decided beside the plan's bucket, kept for the
// headers and, when it refused, the error.
type limitUse struct {
	quoted, policy string
	capacity       int64
	d              limiter.Decision
	field          *fieldLimit // nil: the plan's quota
	count          int64       // the field's selections
	path           []string    // the field's first selection
}

// multiScratch holds a decision's requests, answers, uses and taken groups
// in one allocation, sized for a bucket and a quota (the common case);
// multiScratch4 for up to two field limits more. Larger decisions take
// slices of their own.
type multiScratch struct {
	reqs   [2]limiter.Request
	ds     [2]limiter.Decision
	uses   [1]limitUse
	groups [2]takenGroup
}

type multiScratch4 struct {
	reqs   [4]limiter.Request
	ds     [4]limiter.Decision
	uses   [3]limitUse
	groups [2]takenGroup
}

// newScratch returns room for a decision of n budgets: reqs and uses
// empty with capacity n and n-1, ds of length n, groups empty.
func newScratch(n int) (reqs []limiter.Request, ds []limiter.Decision, uses []limitUse, groups []takenGroup) {
	switch {
	case n <= 2:
		sc := new(multiScratch)
		return sc.reqs[:0], sc.ds[:n], sc.uses[:0], sc.groups[:0]
	case n <= 4:
		sc := new(multiScratch4)
		return sc.reqs[:0], sc.ds[:n], sc.uses[:0], sc.groups[:0]
	}
	return make([]limiter.Request, 0, n), make([]limiter.Decision, n), make([]limitUse, 0, n-1), nil
}

// takenGroup is what one TakeAll debited, to give back on a later refusal.
type takenGroup struct {
	from guard.Receipt
	reqs []limiter.Request
}

// spendAll debits cost from id's bucket on plan p, its quota and the field
// limits counts selects, all or nothing, then from lane ln's budget as
// spendIn does. Field limits by client address key on addr; when that is
// not the principal's key they are decided first, apart (a Redis Cluster
// keeps one principal's budgets in one slot, not an address's), and given
// back when the principal's budgets refuse.
func (l *Limiter) spendAll(ctx context.Context, set *settings, id identity.Identity, addr string, p *plan, ln *lane, cost int64, counts []complexity.FieldCount) outcome {
	if !set.multiLimited(p) {
		return l.spendIn(ctx, id, p, ln, cost)
	}
	if cost > p.Burst {
		return outcome{verdict: overBudget}
	}
	// The principal's requests come first (the bucket, the quota, its
	// field limits), then the address's; uses[i] describes reqs[i+1].
	n := 1
	if p.quota != nil {
		n++
	}
	for _, c := range counts {
		if set.fieldLimits[c.Coordinate] != nil && c.Count > 0 {
			n++
		}
	}
	if n == 1 { // no quota, no limited field selected: the bucket alone
		return l.spendIn(ctx, id, p, ln, cost)
	}
	reqs, ds, uses, groups := newScratch(n)
	reqs = append(reqs, limiter.Request{Key: id.Key, Limit: p.limit, Cost: cost})
	if q := p.quota; q != nil {
		reqs = append(reqs, limiter.Request{Key: id.Key, Name: quotaBudget, Limit: q.limit, Cost: cost})
		uses = append(uses, limitUse{quoted: q.quoted, policy: q.policy, capacity: q.limit.Rate})
	}
	mineEnd := 0
	for pass := range 2 { // the principal's field limits, then the address's
		for _, c := range counts {
			fl := set.fieldLimits[c.Coordinate]
			if fl == nil || c.Count <= 0 || (fl.byIP && addr != id.Key) != (pass == 1) {
				continue
			}
			key := id.Key
			if pass == 1 {
				key = addr
			}
			reqs = append(reqs, limiter.Request{Key: key, Name: fl.budget, Limit: fl.limit, Cost: c.Count})
			uses = append(uses, limitUse{quoted: fl.quoted, policy: fl.policy, capacity: fl.limit.Burst, field: fl, count: c.Count, path: c.Path})
		}
		if pass == 0 {
			mineEnd = len(reqs)
		}
	}
	mine, theirs := reqs[:mineEnd], reqs[mineEnd:]
	o := outcome{limits: uses, groups: groups}
	// The address's field limits are taken first.
	if len(theirs) > 0 {
		if !l.decideGroup(ctx, p, theirs, ds[mineEnd:], &o, mineEnd-1) {
			return o
		}
	}
	if !l.decideGroup(ctx, p, mine, ds[:mineEnd], &o, -1) {
		l.giveBack(ctx, p, o.groups)
		o.groups = nil
		return o
	}
	o.verdict, o.charged = admitted, cost
	if ln == nil || ln.budget == nil {
		return o
	}
	lo := l.spend(ctx, identity.Identity{Key: ln.key(id)}, ln.budget, cost)
	addLane(&o.trace, lo.trace)
	if lo.verdict == admitted {
		o.laneCharged, o.laneTrace = cost, lo.trace
		return o
	}
	if after, ok := l.giveBack(ctx, p, o.groups); ok {
		// The principal's group is the last: its decisions after the refund.
		o.decision = after[0]
		for i := 1; i < len(after); i++ {
			o.limits[i-1].d = after[i]
		}
	}
	o.groups = nil
	o.verdict, o.retryAfter, o.charged, o.byLane = lo.verdict, lo.retryAfter, 0, ln
	if lo.verdict == overBudget {
		o.known = false
	}
	return o
}

// decideGroup takes the requests of one owner in one atomic step and
// records the result in o: the bucket's decision (when the group holds
// it), each other limit's in o.limits (request i at o.limits[offset+i];
// offset is -1 for the principal's group, whose request 0 is the bucket),
// and the verdict of a refusal. It reports whether everything was debited.
func (l *Limiter) decideGroup(ctx context.Context, p *plan, reqs []limiter.Request, ds []limiter.Decision, o *outcome, offset int) bool {
	err := l.takeAll(ctx, p, reqs, ds, &o.trace)
	from := o.trace.Receipt
	principal := offset < 0
	decided := err == nil || errors.Is(err, limiter.ErrCostExceedsCapacity)
	if principal {
		// The over-limit cache answers a refusal it remembers without the
		// store: the budgets it did not ask about come back unknown (Limit 0).
		o.decision, o.known = ds[0], decided && ds[0].Limit != 0
	}
	if !decided {
		o.verdict, o.retryAfter, o.known = unavailable, l.retryAfter(unavailableRetryAfter), false
		return false
	}
	for i := range reqs {
		if !principal || i > 0 {
			o.limits[offset+i].d = ds[i]
		}
	}
	if err == nil && limiter.AllAllowed(ds) {
		o.groups = append(o.groups, takenGroup{from: from, reqs: reqs})
		return true
	}
	// Report the refusal that waits longest: Retry-After is when every
	// refusing budget can pay (never earlier for any of them). A cost
	// above a capacity (a field selected more often than its limit) can
	// never be paid, and wins.
	best := -1
	var wait time.Duration
	exceeds := errors.Is(err, limiter.ErrCostExceedsCapacity)
	for i, d := range ds {
		if d.Allowed || d.Limit == 0 { // admitted alone, or not asked (the over-limit cache)
			continue
		}
		if d.RetryAfter <= 0 {
			if exceeds {
				best, o.never = i, true
				break
			}
			continue // a store breaking its contract: nothing to report
		}
		if best < 0 || d.RetryAfter > wait {
			best, wait = i, d.RetryAfter
		}
	}
	switch {
	case best < 0: // a store broke its contract: refuse, honestly unknown
		o.verdict, o.retryAfter, o.known = unavailable, l.retryAfter(unavailableRetryAfter), false
		return false
	case principal && best == 0:
		o.verdict = rateLimited
	default:
		o.byLimit = &o.limits[offset+best]
		o.verdict = quotaExceeded
		if o.byLimit.field != nil {
			o.verdict = fieldLimited
		}
	}
	if !o.never {
		o.retryAfter = l.retryAfter(wait)
	}
	return false
}

// takeAll is TakeAll through the store's guard, as take is for one
// budget; tr records the call. When the overflow buckets decide, the keys
// of reqs become theirs, so that what was taken is given back there too.
func (l *Limiter) takeAll(ctx context.Context, p *plan, reqs []limiter.Request, ds []limiter.Decision, tr *guard.Trace) error {
	err := l.stores.TakeAll(ctx, p.call(), reqs, ds, tr)
	l.noteCall(p, tr)
	return err
}

// giveBack refunds what the groups debited (a later budget refused) and
// returns the decisions of the last group after its refund. Refunds that
// fail return by refill.
func (l *Limiter) giveBack(ctx context.Context, p *plan, groups []takenGroup) (after []limiter.Decision, ok bool) {
	for _, g := range groups {
		ds := make([]limiter.Decision, len(g.reqs))
		err := l.stores.RefundAll(ctx, g.from, g.reqs, ds)
		if err != nil && !errors.Is(err, guard.ErrBreakerOpen) {
			l.refundFailed(ctx, p, err)
		}
		after, ok = ds, err == nil
	}
	return after, ok
}

// refundQuota gives amount back to the quota o debited with the bucket,
// as the bucket's refund does; field limits keep what they counted.
func (l *Limiter) refundQuota(ctx context.Context, p *plan, o *outcome, amount int64) {
	if p.quota == nil || len(o.groups) == 0 {
		return
	}
	g := o.groups[len(o.groups)-1] // the principal's: the bucket, then the quota
	if len(g.reqs) < 2 || g.reqs[1].Name != quotaBudget {
		return
	}
	req := g.reqs[1]
	req.Cost = amount
	ds := make([]limiter.Decision, 1)
	if err := l.stores.RefundAll(ctx, g.from, []limiter.Request{req}, ds); err != nil {
		if !errors.Is(err, guard.ErrBreakerOpen) {
			l.refundFailed(ctx, p, err)
		}
		return
	}
	o.limits[0].d = ds[0]
}

// setOutcomeHeaders writes the rate-limit headers of o on plan p: the
// bucket's, and when o was decided with other limits, RateLimit-Policy
// listing every policy that applied and RateLimit reporting the one
// closest to refusing (the least remaining share of its quota).
func setOutcomeHeaders(h http.Header, p *plan, o *outcome, now time.Time) {
	setBudgetHeaders(h, p, o.decision, now)
	if len(o.limits) == 0 {
		return
	}
	policies := p.policyHeader
	if len(o.limits) == 1 && o.limits[0].field == nil {
		policies = p.quota.bothPolicies // the common case, written once
	} else {
		size := len(p.policyHeader)
		for i := range o.limits {
			size += len(", ") + len(o.limits[i].policy)
		}
		var b strings.Builder
		b.Grow(size) // one allocation
		b.WriteString(p.policyHeader)
		for i := range o.limits {
			b.WriteString(", ")
			b.WriteString(o.limits[i].policy)
		}
		policies = b.String()
	}
	h[keyRateLimitPolicy][0] = policies // setBudgetHeaders made the slice
	share := float64(max(o.decision.Remaining, 0)) / float64(p.Burst)
	var closest *limitUse
	for i := range o.limits {
		u := &o.limits[i]
		if u.d.Limit == 0 {
			continue // not read (see decideGroup)
		}
		if s := float64(max(u.d.Remaining, 0)) / float64(u.capacity); s < share {
			share, closest = s, u
		}
	}
	if closest != nil {
		var buf [budgetHeaderBytes]byte
		b := append(buf[:0], closest.quoted...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, max(closest.d.Remaining, 0), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, ceilSeconds(closest.d.ResetAfter), 10)
		h[keyRateLimit][0] = string(b)
	}
}
