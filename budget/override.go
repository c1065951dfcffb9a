package budget

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/concurrency"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/override"
)

// ErrUnknownPlan: an override names a plan the Policy does not have.
var ErrUnknownPlan = errors.New("budget: no such plan")

// OverridePrefix starts the keys of an override's budgets:
// "override:<id>:" and the principal's key, where id (16 hex digits) is
// derived from the limits the override's rule meters by. Identity keys
// never start so ("user:", "key:", "ip:"), so no principal can name
// another's override budget.
const OverridePrefix = "override:"

// Override compiles the rule a principal whose own plan is base is served
// by under o (override.Override; Until is the caller's): o's plan's rule,
// with o's limits in place of that plan's (or of base's, when o names no
// plan). The rule's budgets are kept under keys of their own, derived from
// its limits: a store never reads state kept under other limits as its
// own. An override starts with full budgets; deleting it returns the
// principal to its plan's budgets as they stand. Its RateLimit-Policy name
// is its plan's when it replaces only the plan, else "override:" and the
// plan's name. The error wraps ErrUnknownPlan or ErrInvalidConfig.
//
// Compile an override once per change of the override or the Policy, not
// per request.
func (p *Policy) Override(base *Rule, o override.Override) (*Rule, error) {
	start := base
	if o.Plan != "" {
		var ok bool
		if start, ok = p.plans[o.Plan]; !ok {
			return nil, fmt.Errorf("%w %q (the plans are %s)", ErrUnknownPlan, o.Plan, quotedList(p.names))
		}
	}
	if start == nil || start.lane != "" {
		return nil, fmt.Errorf("%w: an override applies to a plan", ErrInvalidConfig)
	}
	pl := start.Plan
	pl.Burst = cmpOr(o.Burst, pl.Burst)
	pl.Rate = cmpOr(o.Rate, pl.Rate)
	pl.Per = cmpOr(o.Per, pl.Per)
	name := start.name
	if o.Limited() {
		name = OverridePrefix + start.name
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: override on plan %q: "+format, append([]any{ErrInvalidConfig, start.name}, args...)...)
	}
	if o.Burst < 0 || o.Rate < 0 || o.Per < 0 {
		return nil, bad("burst, rate and per must not be negative")
	}
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: pl.Burst, Rate: pl.Rate, Period: pl.Per}
	if err := limit.Validate(); err != nil {
		return nil, bad("%w", err)
	}
	if oq := o.Quota; oq != nil {
		q := Quota{Limit: oq.Limit, Per: oq.Per}
		if sq := start.Plan.Quota; sq != nil && q.Per == 0 {
			q.Per = sq.Per
		}
		if q.Per == 0 {
			return nil, bad(`it has no quota, so a quota needs its window ("per")`)
		}
		q.Name = OverridePrefix + quotaName(start.name, q.Per)
		pl.Quota = &q
	}
	if pl.Quota != nil && pl.Quota.Limit < pl.Burst {
		return nil, bad("the quota's limit %d is below the burst %d, which could then never be spent", pl.Quota.Limit, pl.Burst)
	}
	quota, err := buildQuota(name, pl)
	if err != nil {
		// buildQuota says "budget: invalid config: plan "override:…": …",
		// about a plan the caller never named: keep what follows.
		msg := err.Error()
		if _, rest, ok := strings.Cut(msg, fmt.Sprintf("plan %q: ", name)); ok {
			msg = rest
		}
		return nil, bad("%s", msg)
	}
	r := &Rule{Plan: pl, name: name, limit: limit, failOpen: start.failOpen, shadow: start.shadow,
		maxConcurrent: start.maxConcurrent, quota: quota, policy: p, override: o.String()}
	if c := o.Concurrency; c != nil {
		switch {
		case *c < 0:
			return nil, bad("concurrency %d is negative (0 lifts the cap)", *c)
		case int64(*c) > concurrency.MaxLimit:
			return nil, bad("at most %d requests in flight can be capped", concurrency.MaxLimit)
		}
		r.maxConcurrent = int64(*c)
		r.Plan.MaxConcurrent = *c
		if *c == 0 {
			r.Plan.MaxConcurrent = None
		}
	}
	id := overrideID(limit, quota)
	r.keyPrefix = OverridePrefix + id + ":"
	if o.Limited() {
		r.overflow = OverridePrefix + id
	}
	return r, nil
}

// Override is the canonical form of the override the rule was compiled
// from (override.Override.String), "" for a plan's own rule.
func (r *Rule) Override() string { return r.override }

// overrideID names the limits an override's budgets are metered by: the
// first 8 bytes of the SHA-256 of the bucket's and the quota's limits, in
// hex. Two overrides with the same limits share their budgets' keys
// (which is harmless: the state means the same under both).
func overrideID(l limiter.Limit, q *QuotaRule) string {
	b := []byte("bucket ")
	b = strconv.AppendInt(b, l.Burst, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, l.Rate, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(l.Period), 10)
	if q != nil {
		b = append(b, " quota "...)
		b = strconv.AppendInt(b, q.Limit.Rate, 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(q.Limit.Period), 10)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func quotedList(names []string) string {
	out := ""
	for i, n := range names {
		if i > 0 {
			out += ", "
		}
		out += strconv.Quote(n)
	}
	return out
}

// Reading is one of a principal's budgets as it stands: its policy name
// (as RateLimit-Policy names it) and a peek's decision.
type Reading struct {
	Name     string
	Decision limiter.Decision
}

// Read peeks at the principal's budgets on r (its bucket, then its quota)
// without spending, through the store's guard. An error means the store
// could not answer (under a fail-open rule, the local fallback answers
// instead).
func (e *Engine) Read(ctx context.Context, key string, r *Rule) ([]Reading, error) {
	var tr guard.Trace
	if r.quota == nil {
		d, err := e.take(ctx, r.key(key), r, 0, &tr)
		if err != nil {
			return nil, err
		}
		return []Reading{{Name: r.name, Decision: d}}, nil
	}
	own := r.key(key)
	reqs := []limiter.Request{{Key: own, Limit: r.limit}, {Key: own, Name: quotaBudget, Limit: r.quota.Limit}}
	ds := make([]limiter.Decision, 2)
	if err := e.takeAll(ctx, r, reqs, ds, &tr, false); err != nil {
		return nil, err
	}
	return []Reading{{Name: r.name, Decision: ds[0]}, {Name: r.quota.Name, Decision: ds[1]}}, nil
}
