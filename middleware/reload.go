package middleware

import "fmt"

// Reload validates policy exactly as New validates one, against the
// Limiter's Dependencies, and swaps it in whole, atomically: a policy New
// would refuse, Reload refuses, and then the running one stays. A request
// in flight finishes under the policy it started with, the next one sees
// the new one, and none is dropped. Budgets are kept: a principal's bucket
// is the same key under its plan's new limit. What New fixed is in
// Dependencies, which Reload does not see; so is nothing it could ignore.
//
// Two checks depend on what New built: a plan may turn SplitBudget on only
// if some plan had it at New, and a lane may ask for a challenge only with
// a Dependencies.Challenger.
func (l *Limiter) Reload(policy Policy) error {
	s, err := l.compileSettings(policy)
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
