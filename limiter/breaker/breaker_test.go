package breaker_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter/breaker"
)

// step is one call: at elapsed, ask Allow, and when allowed end it with
// result. A ticket held (hold) ends later, at the step that names it.
type step struct {
	at      time.Duration
	allowed bool
	result  breaker.Result
	hold    bool           // keep the ticket; a later step with release ends it
	release int            // 1 + index of the held step this one ends (no new call)
	state   breaker.State  // after the step (zero: closed)
	change  breaker.Change // the transition of Allow or Done, if any
}

func TestTransitions(t *testing.T) {
	const (
		ok   = breaker.Success
		fail = breaker.Failure
		gone = breaker.Abandoned
	)
	closed, open, half := breaker.Closed, breaker.Open, breaker.HalfOpen
	none := breaker.Change{}
	tests := []struct {
		name  string
		steps []step
	}{
		{"successes keep it closed", []step{
			{allowed: true, result: ok, state: closed},
			{allowed: true, result: ok, state: closed},
		}},
		{"three failures in a row open it", []step{
			{allowed: true, result: fail, state: closed},
			{allowed: true, result: fail, state: closed},
			{allowed: true, result: fail, state: open, change: breaker.Change{From: closed, To: open}},
			{at: time.Millisecond, allowed: false, state: open},
		}},
		{"a success resets the count", []step{
			{allowed: true, result: fail, state: closed},
			{allowed: true, result: fail, state: closed},
			{allowed: true, result: ok, state: closed},
			{allowed: true, result: fail, state: closed},
			{allowed: true, result: fail, state: closed},
		}},
		{"client cancellations are no failures", []step{
			{allowed: true, result: fail, state: closed},
			{allowed: true, result: gone, state: closed},
			{allowed: true, result: gone, state: closed},
			{allowed: true, result: fail, state: closed},
		}},
		{"after the cool-down one probe closes it", []step{
			{allowed: true, result: fail}, {allowed: true, result: fail},
			{allowed: true, result: fail, state: open, change: breaker.Change{From: closed, To: open}},
			{at: 999 * time.Millisecond, allowed: false, state: open},
			{at: time.Second, allowed: true, hold: true, state: half, change: breaker.Change{From: open, To: half}},
			{at: time.Second, allowed: false, state: half}, // the probe is in flight
			{at: 2 * time.Second, allowed: false, state: half},
			{at: 2 * time.Second, release: 5, result: ok, state: closed, change: breaker.Change{From: half, To: closed}},
			{at: 2 * time.Second, allowed: true, result: ok, state: closed},
		}},
		{"a failed probe re-opens for a new cool-down", []step{
			{allowed: true, result: fail}, {allowed: true, result: fail},
			{allowed: true, result: fail, state: open, change: breaker.Change{From: closed, To: open}},
			{at: time.Second, allowed: true, result: fail, state: open, change: breaker.Change{From: half, To: open}},
			{at: 1500 * time.Millisecond, allowed: false, state: open},
			{at: 2 * time.Second, allowed: true, result: ok, state: closed, change: breaker.Change{From: half, To: closed}},
		}},
		{"an abandoned probe frees the place", []step{
			{allowed: true, result: fail}, {allowed: true, result: fail},
			{allowed: true, result: fail, state: open, change: breaker.Change{From: closed, To: open}},
			{at: time.Second, allowed: true, result: gone, state: half, change: breaker.Change{From: open, To: half}},
			{at: time.Second, allowed: true, result: ok, state: closed, change: breaker.Change{From: half, To: closed}},
		}},
		{"a late call changes nothing once open", []step{
			{allowed: true, hold: true},
			{allowed: true, result: fail}, {allowed: true, result: fail},
			{allowed: true, result: fail, state: open, change: breaker.Change{From: closed, To: open}},
			{release: 1, result: ok, state: open},
			{release: 1, result: fail, state: open},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := breaker.New(breaker.Config{Failures: 3, CoolDown: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
			held := map[int]breaker.Ticket{}
			for i, s := range tc.steps {
				now := start.Add(s.at)
				var ch breaker.Change
				if s.release > 0 {
					ch = b.Done(now, held[s.release-1], s.result)
				} else {
					tk := b.Allow(now)
					if tk.Allowed != s.allowed {
						t.Fatalf("step %d: allowed %v, want %v", i, tk.Allowed, s.allowed)
					}
					ch = tk.Change
					switch {
					case s.hold:
						held[i] = tk
					case tk.Allowed:
						if c := b.Done(now, tk, s.result); c.Changed() {
							ch = c
						}
					}
				}
				if s.change != none && ch != s.change || s.change == none && ch.Changed() {
					t.Errorf("step %d: change %v, want %v", i, ch, s.change)
				}
				if got := b.State(); got != s.state {
					t.Errorf("step %d: state %v, want %v", i, got, s.state)
				}
			}
		})
	}
}

func TestDefaultsAndValidation(t *testing.T) {
	b, err := breaker.New(breaker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_900_000_000, 0)
	for i := range breaker.DefaultFailures {
		tk := b.Allow(now)
		if ch := b.Done(now, tk, breaker.Failure); ch.Changed() != (i == breaker.DefaultFailures-1) {
			t.Fatalf("failure %d: change %v", i+1, ch)
		}
	}
	if b.Allow(now.Add(breaker.DefaultCoolDown - 1)).Allowed {
		t.Error("allowed before the default cool-down")
	}
	if !b.Allow(now.Add(breaker.DefaultCoolDown)).Allowed {
		t.Error("no probe after the default cool-down")
	}
	for _, cfg := range []breaker.Config{{Failures: -1}, {CoolDown: -time.Second}} {
		if _, err := breaker.New(cfg); !errors.Is(err, breaker.ErrInvalidConfig) {
			t.Errorf("%+v: err %v", cfg, err)
		}
	}
	for s, want := range map[breaker.State]string{breaker.Closed: "closed", breaker.Open: "open", breaker.HalfOpen: "half_open"} {
		if s.String() != want {
			t.Errorf("%d: %q", s, s.String())
		}
	}
}

// Under concurrent callers a half-open breaker lets exactly one probe
// through.
func TestOneProbe(t *testing.T) {
	b, _ := breaker.New(breaker.Config{Failures: 1, CoolDown: time.Second})
	now := time.Unix(1_900_000_000, 0)
	b.Done(now, b.Allow(now), breaker.Failure)
	later := now.Add(time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	probes := 0
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.Allow(later).Allowed {
				mu.Lock()
				probes++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if probes != 1 {
		t.Fatalf("%d probes, want 1", probes)
	}
}
