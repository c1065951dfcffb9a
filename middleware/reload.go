package middleware

import (
	"fmt"
	"reflect"
	"strings"
)

// Reload validates cfg and swaps in, atomically, what can change while
// requests run: the plans and field limits, the anonymous plan, API keys
// and identification (APIKeys, Identifier, TrustedProxies, ProxyHeader),
// the GraphQL options, the REST costs, the lanes, Concurrency.PerPrincipal,
// Subscriptions, the failure mode and the modes. A request in flight
// finishes under the configuration it started with, the next one sees the
// new one, and none is dropped. Budgets are kept: a principal's bucket is
// the same key under its plan's new limit. On error the running
// configuration stays.
//
// cfg is a whole Config, validated as New validates one: a configuration
// New refuses, Reload refuses. The fields that shape what New built (the
// stores, the body bounds, the shedder, the dependencies) cannot change:
// Store, MemoryStore, OverLimitCache, SplitBudget, StoreTimeout, Breaker,
// MaxBodyBytes, MaxBodyBytesInFlight, MaxUploadBytes, RetryAfterJitter,
// Overload, Concurrency.TTL and .Slots, Challenger, Observer, Logger,
// Clock and Overrides must be what New was given (the same values; a function is the
// same function), or Reload refuses, naming them: restart to change them.
// A plan may turn SplitBudget on only if some plan had it at New.
func (l *Limiter) Reload(cfg Config) error {
	if changed := fixedChanges(l.atNew, cfg); len(changed) > 0 {
		return fmt.Errorf("%w: Reload cannot change %s, which New fixed; restart to change them", ErrInvalidConfig, strings.Join(changed, ", "))
	}
	s, err := compileSettings(cfg)
	if err != nil {
		return err
	}
	if err := l.engine.Check(s.pol); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := l.checkChallenges(s); err != nil {
		return err
	}
	if err := l.checkSchemas(s); err != nil {
		return err
	}
	s.overrides = l.overrides
	l.reloadMu.Lock()
	defer l.reloadMu.Unlock()
	carryLaneCounts(l.settings.Load(), s)
	l.settings.Store(s)
	err = l.engine.Swap(s.pol) // checked above; it cannot fail
	l.prepare(s)               // the trusted documents' plans, compiled now rather than by a request
	return err
}

// fixedChanges names the fields New fixed that now differs from was.
// Since was passed New's checks, a now that changes none of them passes
// them too: Reload need only check the rest as New does.
func fixedChanges(was, now Config) []string {
	var changed []string
	for _, f := range []struct {
		name string
		a, b any
	}{
		{"Overload", was.Overload, now.Overload},
		{"Store", was.Store, now.Store},
		{"MemoryStore", was.MemoryStore, now.MemoryStore},
		{"OverLimitCache", was.OverLimitCache, now.OverLimitCache},
		{"SplitBudget", was.SplitBudget, now.SplitBudget},
		{"StoreTimeout", was.StoreTimeout, now.StoreTimeout},
		{"Breaker", was.Breaker, now.Breaker},
		{"MaxBodyBytes", was.MaxBodyBytes, now.MaxBodyBytes},
		{"MaxBodyBytesInFlight", was.MaxBodyBytesInFlight, now.MaxBodyBytesInFlight},
		{"MaxUploadBytes", was.MaxUploadBytes, now.MaxUploadBytes},
		{"RetryAfterJitter", was.RetryAfterJitter, now.RetryAfterJitter},
		{"Concurrency.TTL", was.Concurrency.TTL, now.Concurrency.TTL},
		{"Concurrency.Slots", was.Concurrency.Slots, now.Concurrency.Slots},
		{"Challenger", was.Challenger, now.Challenger},
		{"Observer", was.Observer, now.Observer},
		{"Logger", was.Logger, now.Logger},
		{"Clock", was.Clock, now.Clock},
		{"Overrides", was.Overrides, now.Overrides},
	} {
		// Only Overload, a *overload.Config that whoever rebuilds a Config
		// builds afresh, is compared by what it points to.
		if !same(reflect.ValueOf(f.a), reflect.ValueOf(f.b), f.name == "Overload") {
			changed = append(changed, f.name)
		}
	}
	return changed
}

// same reports whether a and b are the same configuration value: equal
// data, the same object behind a pointer or an interface, the same
// function. A pointer is followed only at the top, when deref is set, so
// a dependency is compared by identity, never by its state. A NaN is
// never the same; New refuses it anyway.
func same(a, b reflect.Value, deref bool) bool {
	if !a.IsValid() || !b.IsValid() {
		return a.IsValid() == b.IsValid()
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Func:
		return a.IsNil() == b.IsNil() && (a.IsNil() || a.Pointer() == b.Pointer())
	case reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return same(a.Elem(), b.Elem(), false)
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() || !deref {
			return a.Pointer() == b.Pointer()
		}
		return a.Pointer() == b.Pointer() || same(a.Elem(), b.Elem(), false)
	case reflect.Struct:
		for i := range a.NumField() {
			if !same(a.Field(i), b.Field(i), false) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() || a.IsNil() != b.IsNil() {
			return false
		}
		for _, k := range a.MapKeys() {
			if v := b.MapIndex(k); !v.IsValid() || !same(a.MapIndex(k), v, false) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.Len() != b.Len() || a.IsNil() != b.IsNil() {
			return false
		}
		for i := range a.Len() {
			if !same(a.Index(i), b.Index(i), false) {
				return false
			}
		}
		return true
	}
	if a.Comparable() {
		return a.Equal(b)
	}
	return false
}
