package middleware

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/logevery"
	"github.com/costguard/costguard/internal/seconds"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/override"
)

// OverrideOptions say where the per-principal overrides live (see
// Limiter.SetOverride).
type OverrideOptions struct {
	// Store keeps them: override/redisoverride to share them between the
	// processes of one Redis. Nil: an override.Memory of MaxOverrides, for
	// this process only.
	Store override.Store `yaml:"-"`
	// MaxOverrides caps the principals with an override at once in the
	// in-memory store (a Redis store has its own cap). Default
	// override.DefaultMaxOverrides.
	MaxOverrides int `yaml:"max_overrides"`
	// PollInterval is how often the store is asked whether the overrides
	// changed. Default override.DefaultPollInterval (250 ms): every
	// process applies a change within a second. None: never (tests
	// refresh by hand).
	PollInterval time.Duration `yaml:"-"`
}

// Sentinel errors of the override API.
var (
	// ErrPlanNeeded: Principal was not told the principal's plan and
	// cannot know it (a user's or an API key's plan comes with its
	// requests).
	ErrPlanNeeded = errors.New("middleware: the principal's plan is needed")
)

// overrides applies the per-principal overrides: the watcher's snapshot,
// and the rules compiled from it for the settings in force.
type overrides struct {
	w      *override.Watcher
	engine *budget.Engine
	clock  limiter.Clock
	log    func(msg string, args ...any)
	start  time.Time
	cache  atomic.Pointer[overrideCache]
	// warn: an override that does not compile under the plans in force
	// (a reload removed its plan), logged at most once a minute.
	warn logevery.Gate
	// localOnly: the budgets are in a store of the caller's (shared, most
	// likely) and the overrides in this process's memory; the first
	// SetOverride says so.
	localOnly     bool
	localOnlyWarn sync.Once
}

// overrideCache holds the rules compiled for one snapshot under one
// settings: (principal key, plan) to the plan with its headers, nil for an
// override that does not compile. At most the snapshot's overrides times
// the plans.
type overrideCache struct {
	set   *settings
	snap  *override.Snapshot
	mu    sync.Mutex
	plans map[[2]string]*plan
}

// apply returns the plan the principal key on p is served by: p, or the
// rule its override compiles to. It reads one atomic pointer and, when
// there are overrides, a map; for a principal with one, the clock and the
// rule compiled for it under a lock (once per change).
func (ov *overrides) apply(set *settings, key string, p *plan) *plan {
	if ov == nil {
		return p
	}
	snap := ov.w.Snapshot()
	o, ok := snap.Find(key)
	if !ok || o.Expired(ov.clock.Now()) { // the clock is read only for a principal with one
		return p
	}
	c := ov.cache.Load()
	if c == nil || c.set != set || c.snap != snap {
		fresh := &overrideCache{set: set, snap: snap, plans: map[[2]string]*plan{}}
		if ov.cache.CompareAndSwap(c, fresh) {
			c = fresh
		} else if c = ov.cache.Load(); c.set != set || c.snap != snap {
			c = fresh // a request of another settings or snapshot: compile apart
		}
	}
	k := [2]string{key, p.Name()}
	c.mu.Lock()
	op, ok := c.plans[k]
	if !ok {
		op = ov.compile(set, p, o)
		c.plans[k] = op
	}
	c.mu.Unlock()
	if op == nil {
		return p
	}
	return op
}

// compile is the plan of an override, nil (logged) when it does not
// compile under set.
func (ov *overrides) compile(set *settings, p *plan, o override.Override) *plan {
	r, err := compileOverride(ov.engine, set, p.Rule, o)
	if err != nil {
		if held, due := ov.warn.Due(ov.clock.Now().Sub(ov.start)); due {
			ov.log("middleware: an override does not fit the plans in force and is not applied; set it again or delete it",
				"err", err, "plan", p.Name(), "overrides_since_last_warning", held+1)
		}
		return nil
	}
	op := newPlan(r)
	op.base = p.Name()
	return op
}

// compileOverride compiles o for a principal on base under set, and checks
// that the stores can decide it and that the fixed costs fit its burst.
func compileOverride(e *budget.Engine, set *settings, base *budget.Rule, o override.Override) (*budget.Rule, error) {
	r, err := set.pol.Override(base, o)
	if err != nil {
		return nil, err
	}
	if err := e.CheckRule(r); err != nil {
		return nil, err
	}
	if r.Burst < set.leastBurst {
		return nil, fmt.Errorf("%w: override on plan %q: burst %d is below %d, the largest fixed cost (InvalidCost, MinCost, a REST route's cost): some requests could never pass",
			budget.ErrInvalidConfig, base.Name(), r.Burst, set.leastBurst)
	}
	return r, nil
}

// SetOverride replaces the plan or limits of the principal (an identity
// key, "user:alice", "key:<sha256 hex>", "ip:203.0.113.7", or a user's
// name alone: see override.Principal) by o, until o.Until (zero: until
// DeleteOverride). It applies in this process at once, and in every
// process sharing the override store within a second. o must be valid
// (override.ErrInvalid), its plan one of the plans (budget.ErrUnknownPlan),
// and, when it replaces limits without naming a plan, valid on every plan
// (the principal's plan is not known here). The store holds at most its
// cap of overrides (override.ErrFull).
func (l *Limiter) SetOverride(ctx context.Context, principal string, o override.Override) error {
	key, err := override.Principal(principal)
	if err != nil {
		return err
	}
	if err := o.Validate(l.overrides.w.Now()); err != nil {
		return err
	}
	set := l.current()
	bases := []string{o.Plan}
	if o.Plan == "" {
		bases = set.pol.PlanNames()
	}
	for _, name := range bases {
		base, ok := set.pol.Plan(name)
		if !ok {
			return fmt.Errorf("%w %q (the plans are %s)", budget.ErrUnknownPlan, name, set.planList())
		}
		if _, err := compileOverride(l.engine, set, base, o); err != nil {
			return err
		}
	}
	if l.overrides.localOnly {
		l.overrides.localOnlyWarn.Do(func() {
			l.log.WarnContext(ctx, "middleware: this override applies in this process only: the budgets are in Dependencies.Store, but Dependencies.Overrides.Store is nil (the memory of this process); to share overrides between processes give an override/redisoverride store")
		})
	}
	return l.overrides.w.Put(ctx, key, o)
}

// DeleteOverride removes the principal's override, returning it to its
// plan's budgets as they stand; it reports whether there was one. Store
// calls take at most override.CallTimeout.
func (l *Limiter) DeleteOverride(ctx context.Context, principal string) (bool, error) {
	key, err := override.Principal(principal)
	if err != nil {
		return false, err
	}
	return l.overrides.w.Delete(ctx, key)
}

// PrincipalState is what Limiter.Principal reports of a principal: the
// admin API's JSON.
type PrincipalState struct {
	// Principal is the principal's key ("user:alice").
	Principal string `json:"principal"`
	// Plan is the plan in force: the override's when it names one, else
	// the principal's own.
	Plan string `json:"plan"`
	// Override is the override that applies, nil for none.
	Override *override.Override `json:"override"`
	// Policies are the budgets in force, as RateLimit-Policy names them:
	// the bucket, then the quota.
	Policies []PolicyState `json:"policies"`
}

// PolicyState is one budget as it stands.
type PolicyState struct {
	Name string `json:"name"`
	// Limit is the budget's capacity (a bucket's burst, a quota's limit).
	Limit int64 `json:"limit"`
	// Remaining is the whole points left.
	Remaining int64 `json:"remaining"`
	// ResetSeconds is the time until the budget is whole again, in whole
	// seconds rounded up.
	ResetSeconds int64 `json:"reset_seconds"`
}

// Principal reports the principal's plan, override and budgets without
// spending from them. plan is the principal's own plan ("": the
// anonymous plan for an "ip:" principal; for others, only an override
// naming a plan can tell, else ErrPlanNeeded: a user's or an API key's
// plan comes with its requests).
func (l *Limiter) Principal(ctx context.Context, principal, plan string) (PrincipalState, error) {
	key, err := override.Principal(principal)
	if err != nil {
		return PrincipalState{}, err
	}
	set := l.current()
	out := PrincipalState{Principal: key, Policies: []PolicyState{}}
	o, hasOverride := l.overrides.w.Snapshot().Get(key, l.overrides.w.Now())
	if hasOverride {
		out.Override = &o
	}
	if plan == "" && strings.HasPrefix(key, "ip:") {
		plan = set.anonymousPlan
	}
	if plan == "" && hasOverride && o.Plan != "" {
		plan = o.Plan // the override's plan replaces the principal's own
	}
	if plan == "" {
		return out, fmt.Errorf("%w: %s has no override naming its plan; say which plan it is on", ErrPlanNeeded, key)
	}
	p, ok := set.plans[plan]
	if !ok {
		return out, fmt.Errorf("%w %q (the plans are %s)", budget.ErrUnknownPlan, plan, set.planList())
	}
	out.Plan = plan
	if hasOverride && o.Plan != "" {
		out.Plan = o.Plan
	}
	p = l.overrides.apply(set, key, p)
	reads, err := l.engine.Read(ctx, key, p.Rule)
	if err != nil {
		return out, fmt.Errorf("middleware: reading the budgets of %s: %w", key, err)
	}
	for _, rd := range reads {
		out.Policies = append(out.Policies, PolicyState{
			Name: rd.Name, Limit: rd.Decision.Limit, Remaining: max(rd.Decision.Remaining, 0),
			ResetSeconds: seconds.Ceil(rd.Decision.ResetAfter),
		})
	}
	return out, nil
}
