package middleware

import (
	"fmt"
	"time"

	"github.com/costguard/costguard/limiter/concurrency"
)

// ConcurrencyOptions cap the requests one principal has in flight at once,
// REST and GraphQL together, with leases (Dependencies.Slots) that expire
// so that a crashed process gives its slots back.
type ConcurrencyOptions struct {
	// PerPrincipal is the cap of plans that set no MaxConcurrent. Default:
	// no cap (None says the same).
	PerPrincipal int `yaml:"per_principal"`
}

// buildSlots picks the lease store and the life of a lease.
func (l *Limiter) buildSlots(cfg Dependencies) (concurrency.Slots, time.Duration, error) {
	ttl := cfg.SlotTTL
	if ttl == 0 {
		ttl = concurrency.DefaultTTL
	}
	if err := concurrency.ValidateTTL(ttl); err != nil {
		return nil, 0, fmt.Errorf("%w: SlotTTL: %w", ErrInvalidConfig, err)
	}
	slots := cfg.Slots
	if slots == nil {
		if shared, ok := cfg.Store.(concurrency.Slots); ok {
			slots = shared
		}
	}
	if slots == nil {
		mem, err := concurrency.NewMemory(concurrency.MemoryConfig{Clock: l.clock, MaxKeys: cfg.MemoryStore.MaxKeys})
		if err != nil {
			return nil, 0, fmt.Errorf("%w: concurrency slots: %w", ErrInvalidConfig, err)
		}
		slots = mem
	}
	return slots, ttl, nil
}
