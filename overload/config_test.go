package overload_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/overload"
)

func TestInvalidConfig(t *testing.T) {
	valid := func() overload.Config {
		return overload.Config{
			MaxInFlight: 64,
			Degradation: []overload.Feature{{Name: "recommendations", At: 0.7}, {Name: "search", At: 0.85}},
		}
	}
	adaptive := func(c *overload.Config) { c.Adaptive = true }
	tests := []struct {
		name   string
		modify func(*overload.Config)
		want   []string // substrings of the error
	}{
		{"no capacity", func(c *overload.Config) { c.MaxInFlight = 0 }, []string{"MaxInFlight 0"}},
		{"negative capacity", func(c *overload.Config) { c.MaxInFlight = -1 }, []string{"MaxInFlight -1"}},
		{"capacity too large", func(c *overload.Config) { c.MaxInFlight = overload.MaxCapacity + 1 }, []string{"MaxInFlight"}},
		{"capacity leaves sheddable nothing", func(c *overload.Config) { c.MaxInFlight = 1 }, []string{"MaxInFlight 1", "sheddable", "at least 2"}},
		{"shed_at zero", func(c *overload.Config) { c.ShedAt = map[overload.Priority]float64{overload.Normal: 0} }, []string{"ShedAt[normal] 0"}},
		{"shed_at negative", func(c *overload.Config) { c.ShedAt = map[overload.Priority]float64{overload.High: -0.1} }, []string{"ShedAt[high]"}},
		{"shed_at above 1", func(c *overload.Config) { c.ShedAt = map[overload.Priority]float64{overload.High: 1.1} }, []string{"ShedAt[high] 1.1"}},
		{"shed_at NaN", func(c *overload.Config) { c.ShedAt = map[overload.Priority]float64{overload.Sheddable: math.NaN()} }, []string{"ShedAt[sheddable] NaN"}},
		{"critical below 1", func(c *overload.Config) { c.ShedAt = map[overload.Priority]float64{overload.Critical: 0.95} }, []string{"ShedAt[critical]"}},
		{"unknown priority", func(c *overload.Config) { c.ShedAt = map[overload.Priority]float64{overload.Priority(7): 0.5} }, []string{"Priority(7)"}},
		{"sheddable above normal (given)", func(c *overload.Config) {
			c.ShedAt = map[overload.Priority]float64{overload.Sheddable: 0.9, overload.Normal: 0.6}
		}, []string{"ShedAt[sheddable] 0.9", "ShedAt[normal] 0.6"}},
		{"normal below the default sheddable", func(c *overload.Config) {
			c.ShedAt = map[overload.Priority]float64{overload.Normal: 0.4}
		}, []string{"ShedAt[sheddable] 0.5", "ShedAt[normal] 0.4"}},
		{"high below normal", func(c *overload.Config) { c.ShedAt = map[overload.Priority]float64{overload.High: 0.7} }, []string{"ShedAt[normal] 0.8", "ShedAt[high] 0.7"}},
		{"tiny share leaves a lane nothing", func(c *overload.Config) {
			c.ShedAt = map[overload.Priority]float64{overload.Sheddable: 0.01}
		}, []string{"priority sheddable no slot", "at least 100"}},
		{"negative queue bound", func(c *overload.Config) { c.MaxQueue = -1 }, []string{"MaxQueue -1"}},
		{"unnamed feature", func(c *overload.Config) { c.Degradation[1].Name = "" }, []string{"Degradation[1] has no name"}},
		{"duplicate feature", func(c *overload.Config) { c.Degradation[1].Name = "recommendations" }, []string{`"recommendations" is listed twice`}},
		{"feature at 0", func(c *overload.Config) { c.Degradation[0].At = 0 }, []string{`"recommendations": At 0`}},
		{"feature above 1", func(c *overload.Config) { c.Degradation[1].At = 1.5 }, []string{`"search": At 1.5`}},
		{"feature NaN", func(c *overload.Config) { c.Degradation[1].At = math.NaN() }, []string{`"search": At NaN`}},
		{"features out of order", func(c *overload.Config) { c.Degradation[1].At = 0.6 }, []string{`"search": At 0.6 is below the 0.7 of "recommendations"`}},
		{"feature that never comes back", func(c *overload.Config) { c.Degradation[0].At = 0.05 }, []string{"not above Hysteresis 0.1"}},
		{"hysteresis 1", func(c *overload.Config) { c.Hysteresis = 1 }, []string{"Hysteresis 1"}},
		{"hysteresis negative", func(c *overload.Config) { c.Hysteresis = -0.1 }, []string{"Hysteresis -0.1"}},
		{"negative hold", func(c *overload.Config) { c.Hold = -time.Second }, []string{"Hold -1s"}},
		{"retry-after below a second", func(c *overload.Config) { c.RetryAfterMax = 500 * time.Millisecond }, []string{"RetryAfterMax 500ms"}},
		{"adaptive min negative", func(c *overload.Config) { adaptive(c); c.Tuning.MinInFlight = -1 }, []string{"MinInFlight -1"}},
		{"adaptive min above max", func(c *overload.Config) { adaptive(c); c.Tuning.MinInFlight = 65 }, []string{"MinInFlight 65 is above MaxInFlight 64"}},
		{"adaptive min leaves a lane nothing", func(c *overload.Config) { adaptive(c); c.Tuning.MinInFlight = 1 }, []string{"Tuning.MinInFlight 1", "sheddable"}},
		{"backoff 1", func(c *overload.Config) { adaptive(c); c.Tuning.Backoff = 1 }, []string{"Backoff 1"}},
		{"backoff negative", func(c *overload.Config) { adaptive(c); c.Tuning.Backoff = -0.5 }, []string{"Backoff -0.5"}},
		{"backoff rounds to 1", func(c *overload.Config) { adaptive(c); c.Tuning.Backoff = 0.9999999 }, []string{"rounds to 1"}},
		{"tolerance 1", func(c *overload.Config) { adaptive(c); c.Tuning.Tolerance = 1 }, []string{"Tolerance 1"}},
		{"tolerance infinite", func(c *overload.Config) { adaptive(c); c.Tuning.Tolerance = math.Inf(1) }, []string{"Tolerance +Inf"}},
		{"negative target", func(c *overload.Config) { adaptive(c); c.Tuning.Target = -time.Millisecond }, []string{"Target -1ms"}},
		{"windows inverted", func(c *overload.Config) { adaptive(c); c.Tuning.ShortWindow, c.Tuning.LongWindow = 50, 20 }, []string{"windows 50 and 20"}},
		{"negative short window", func(c *overload.Config) { adaptive(c); c.Tuning.ShortWindow = -1 }, []string{"windows -1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid()
			tc.modify(&cfg)
			_, err := overload.New(cfg)
			if !errors.Is(err, overload.ErrInvalidConfig) {
				t.Fatalf("New: %v, want ErrInvalidConfig", err)
			}
			if verr := cfg.Validate(); verr == nil || verr.Error() != err.Error() {
				t.Errorf("Validate: %v, New: %v", verr, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if err := valid().Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	// Tuning is not looked at unless Adaptive is set.
	cfg := valid()
	cfg.Tuning.Backoff = 7
	if err := cfg.Validate(); err != nil {
		t.Errorf("tuning without Adaptive: %v", err)
	}
}

// The documented defaults, pinned.
func TestDefaults(t *testing.T) {
	want := map[overload.Priority]float64{overload.Sheddable: 0.5, overload.Normal: 0.8, overload.High: 0.9, overload.Critical: 1}
	got := overload.DefaultShedAt()
	if len(got) != len(want) {
		t.Errorf("DefaultShedAt() = %v", got)
	}
	for p, f := range want {
		if got[p] != f {
			t.Errorf("DefaultShedAt()[%v] = %v, want %v", p, got[p], f)
		}
	}
	got[overload.Normal] = 0.1 // a copy: the next call is unchanged
	if overload.DefaultShedAt()[overload.Normal] != 0.8 {
		t.Error("DefaultShedAt returns shared state")
	}
	if overload.DefaultHysteresis != 0.1 || overload.DefaultHold != 5*time.Second ||
		overload.DefaultRetryAfterMax != 3*time.Second || overload.DefaultBackoff != 0.9 ||
		overload.DefaultTolerance != 1.5 || overload.DefaultShortWindow != 10 || overload.DefaultLongWindow != 500 ||
		overload.MaxCapacity != 1<<20 {
		t.Error("a documented default moved; update docs/overload.md and the package documentation")
	}

	// Unset fields take the defaults: the thresholds at 64 are those of
	// the defaults, MaxQueue is MaxInFlight, RetryAfter reaches 3.
	s, _, _ := newShedder(t, overload.Config{MaxInFlight: 64, Rand: func() float64 { return 0.999 }})
	for p, n := range map[overload.Priority]int{overload.Sheddable: 32, overload.Normal: 51, overload.High: 57, overload.Critical: 64} {
		if got := s.Threshold(p); got != n {
			t.Errorf("default Threshold(%v) at 64 = %d, want %d", p, got, n)
		}
	}
	if got := s.RetryAfter(); got != 3 {
		t.Errorf("default RetryAfter with rand 0.999 = %d, want 3", got)
	}
	// A partial ShedAt keeps the defaults of the others.
	s, _, _ = newShedder(t, overload.Config{MaxInFlight: 64, ShedAt: map[overload.Priority]float64{overload.Normal: 0.6}})
	for p, n := range map[overload.Priority]int{overload.Sheddable: 32, overload.Normal: 38, overload.High: 57, overload.Critical: 64} {
		if got := s.Threshold(p); got != n {
			t.Errorf("Threshold(%v) with normal 0.6 = %d, want %d", p, got, n)
		}
	}
}
