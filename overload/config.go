package overload

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/costguard/costguard/limiter"
)

// Defaults for the zero fields of Config and Tuning. Each one is pinned by a
// test and by docs/overload.md.
const (
	// The fractions of capacity at or above which each lane is refused
	// (overload.shed_at). Critical always has 1: all of it.
	DefaultShedSheddable = 0.5
	DefaultShedNormal    = 0.8
	DefaultShedHigh      = 0.9

	// DefaultHysteresis: a feature switched off at load `at` comes back
	// only below at − 0.1.
	DefaultHysteresis = 0.1
	// DefaultHold: a feature switched off stays off at least this long.
	DefaultHold = 5 * time.Second
	// DefaultRetryAfterMax: shed requests are told to come back after 1, 2
	// or 3 seconds, drawn at random.
	DefaultRetryAfterMax = 3 * time.Second

	// Adaptive capacity (see Tuning).
	DefaultBackoff     = 0.9
	DefaultTolerance   = 1.5
	DefaultShortWindow = 10
	DefaultLongWindow  = 500

	// MaxCapacity bounds MaxInFlight (a Shedder allocates 12 bytes per
	// slot, so 12 MiB at most).
	MaxCapacity = 1 << 20
)

// ppm is one whole in the fixed-point fractions: ShedAt, Feature.At,
// Hysteresis and Backoff are kept as integer parts per million.
const ppm = 1_000_000

// ErrInvalidConfig wraps every Config validation error.
var ErrInvalidConfig = errors.New("overload: invalid config")

// DefaultShedAt returns a new map holding the default ShedAt: sheddable
// 0.5, normal 0.8, high 0.9, critical 1.
func DefaultShedAt() map[Priority]float64 {
	return map[Priority]float64{
		Sheddable: DefaultShedSheddable,
		Normal:    DefaultShedNormal,
		High:      DefaultShedHigh,
		Critical:  1,
	}
}

// Config configures a Shedder. Each field names the configuration key it
// stands for; MaxInFlight is the only one without a default.
type Config struct {
	// MaxInFlight is the process's capacity: how many requests may run at
	// once (overload.max_in_flight). Required, 1 to MaxCapacity. With
	// Adaptive it is the ceiling of the adaptive capacity.
	MaxInFlight int `yaml:"max_in_flight"`
	// ShedAt gives, for each priority, the fraction of capacity at or
	// above which a request of that priority is refused
	// (overload.shed_at). A priority left out has its default (see
	// DefaultShedAt); values lie in (0, 1] with sheddable ≤ normal ≤
	// high, and critical, when given, must be 1. The threshold of a
	// priority is ⌊ShedAt × capacity⌋ requests in flight, with ShedAt
	// rounded to a millionth; every priority must get at least one slot.
	ShedAt map[Priority]float64 `yaml:"shed_at"`
	// MaxQueue bounds the critical requests waiting for a slot at once;
	// one more is refused at once. Default MaxInFlight.
	MaxQueue int `yaml:"max_queue"`

	// Adaptive makes the capacity follow observed latency, between
	// Tuning.MinInFlight and MaxInFlight (overload.adaptive). See the
	// package documentation for the algorithm.
	Adaptive bool `yaml:"adaptive"`
	// Tuning tunes the adaptive capacity; it is ignored, and not
	// validated, unless Adaptive is set.
	Tuning Tuning `yaml:"-"`

	// Degradation lists the features to switch off as load rises, in the
	// order they go (the degradation list). Names are unique and not
	// empty; At lies in (0, 1], never decreases along the list, and is
	// above Hysteresis.
	Degradation []Feature `yaml:"-"`
	// Hysteresis: a feature switched off at load At comes back only when
	// load is below At − Hysteresis. Between 0 and 1; 0 means
	// DefaultHysteresis (0.1).
	Hysteresis float64 `yaml:"-"`
	// Hold: a feature switched off stays off at least this long, whatever
	// the load does. Default DefaultHold (5s).
	Hold time.Duration `yaml:"-"`

	// RetryAfterMax is the longest Retry-After given to a shed request
	// (see RetryAfter). At least one second; default
	// DefaultRetryAfterMax (3s).
	RetryAfterMax time.Duration `yaml:"-"`

	// Clock times the degradation hold. Default limiter.SystemClock{}.
	Clock limiter.Clock `yaml:"-"`
	// Timer starts the timer a queued critical request waits on. Default
	// time.NewTimer; tests inject one that fires on demand.
	Timer limiter.Timer `yaml:"-"`
	// Rand returns a number in [0, 1) for the Retry-After jitter. It must
	// be safe for concurrent use. Default math/rand/v2.Float64.
	Rand func() float64 `yaml:"-"`
}

// Tuning tunes the adaptive capacity. Its zero value is the defaults.
type Tuning struct {
	// MinInFlight is the floor of the adaptive capacity. Default
	// ⌈MaxInFlight / 10⌉, raised if needed to the smallest capacity at
	// which every priority gets a slot (2 with the default ShedAt). It may
	// not be lower than that, nor above MaxInFlight.
	MinInFlight int
	// Backoff multiplies the capacity on a sign of congestion (rounded
	// down, never below MinInFlight). Strictly between 0 and 1; default
	// DefaultBackoff (0.9).
	Backoff float64
	// Tolerance: congestion is a short-term average latency above
	// Tolerance × the long-term average. Above 1; default
	// DefaultTolerance (1.5).
	Tolerance float64
	// Target, when positive, is also congestion when the short-term
	// average latency exceeds it: an absolute ceiling, for a service with
	// a latency objective. Default 0: none.
	Target time.Duration
	// ShortWindow and LongWindow are the sample counts of the two moving
	// averages (each new latency moves one by 1/Window of the gap).
	// Defaults DefaultShortWindow (10) and DefaultLongWindow (500);
	// ShortWindow ≥ 1 and LongWindow > ShortWindow.
	ShortWindow int
	LongWindow  int
}

// Feature is one entry of the degradation list: a named feature switched
// off while load (in-flight ÷ capacity) is at or above At.
type Feature struct {
	Name string  `yaml:"name"`
	At   float64 `yaml:"at"`
}

// settings is a validated Config, with fractions turned to parts per
// million and defaults filled in.
type settings struct {
	max, min int64
	shed     [numPriorities]int64 // parts per million, indexed by Priority
	maxQueue int
	adaptive bool
	tuning   tuning
	features []feature
	hold     time.Duration
	retryMax time.Duration
}

// tuning is a validated Tuning.
type tuning struct {
	backoff     int64   // parts per million
	tolerance   float64 // a ratio of latencies
	target      float64 // nanoseconds; 0: none
	short, long int     // samples
}

// feature is a validated Feature: off at or above off ppm of capacity, back
// below on ppm (off − hysteresis).
type feature struct {
	name    string
	off, on int64
}

// Validate reports, as New would, whether c is usable: nil, or an error
// wrapping ErrInvalidConfig that names the field. A configuration loader
// may call it before building anything.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// invalid returns an error wrapping ErrInvalidConfig.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

// fraction turns f, known to lie in (0, 1], into parts per million,
// rounded to nearest.
func fraction(f float64) int64 { return int64(math.Round(f * ppm)) }

// unit reports whether f lies in (0, 1].
func unit(f float64) bool { return f > 0 && f <= 1 } // false for NaN

// slots is ⌊capacity × share / ppm⌋: the in-flight requests a priority
// with that share may reach. The one formula of every threshold.
func slots(capacity, share int64) int64 { return capacity * share / ppm }

// resolve validates c and fills in its defaults.
func (c Config) resolve() (settings, error) {
	var s settings
	if c.MaxInFlight < 1 || c.MaxInFlight > MaxCapacity {
		return s, invalid("MaxInFlight %d is not between 1 and %d", c.MaxInFlight, MaxCapacity)
	}
	s.max = int64(c.MaxInFlight)

	given := DefaultShedAt()
	for p, f := range c.ShedAt {
		if !p.valid() {
			return s, invalid("ShedAt has a key %v that is no priority", p)
		}
		if !unit(f) {
			return s, invalid("ShedAt[%v] %v is not in (0, 1]", p, f)
		}
		if p == Critical && f != 1 {
			return s, invalid("ShedAt[critical] %v: critical may always use the whole capacity (1)", f)
		}
		given[p] = f
	}
	order := Priorities()
	for i, p := range order {
		s.shed[p] = fraction(given[p])
		if i > 0 && given[order[i-1]] > given[p] {
			return s, invalid("ShedAt[%v] %v is above ShedAt[%v] %v: a lower priority must be shed first",
				order[i-1], given[order[i-1]], p, given[p])
		}
	}
	if err := s.everyLaneFits("MaxInFlight", s.max); err != nil {
		return s, err
	}

	switch {
	case c.MaxQueue < 0:
		return s, invalid("MaxQueue %d is negative", c.MaxQueue)
	case c.MaxQueue == 0:
		s.maxQueue = c.MaxInFlight
	default:
		s.maxQueue = c.MaxQueue
	}

	s.min = s.max
	if c.Adaptive {
		s.adaptive = true
		if err := s.resolveTuning(c.Tuning); err != nil {
			return s, err
		}
	}

	if err := s.resolveDegradation(c); err != nil {
		return s, err
	}

	switch {
	case c.RetryAfterMax == 0:
		s.retryMax = DefaultRetryAfterMax
	case c.RetryAfterMax < time.Second:
		return s, invalid("RetryAfterMax %v is below one second", c.RetryAfterMax)
	default:
		s.retryMax = c.RetryAfterMax
	}
	return s, nil
}

// smallestCapacity is the smallest capacity at which a priority with
// share gets one slot: ⌈ppm / share⌉.
func smallestCapacity(share int64) int64 { return (ppm + share - 1) / share }

// everyLaneFits fails when some priority would get no slot at capacity c
// (field names c in the message).
func (s *settings) everyLaneFits(field string, c int64) error {
	for _, p := range Priorities() {
		if slots(c, s.shed[p]) < 1 {
			return invalid("%s %d leaves priority %v no slot (⌊%v × %d⌋ = 0): it needs at least %d",
				field, c, p, float64(s.shed[p])/ppm, c, smallestCapacity(s.shed[p]))
		}
	}
	return nil
}

// resolveTuning validates t and sets s.min and s.tuning.
func (s *settings) resolveTuning(t Tuning) error {
	lanes := int64(1)
	for _, p := range Priorities() {
		lanes = max(lanes, smallestCapacity(s.shed[p]))
	}
	switch {
	case t.MinInFlight < 0:
		return invalid("Tuning.MinInFlight %d is negative", t.MinInFlight)
	case t.MinInFlight == 0:
		s.min = min(max((s.max+9)/10, lanes), s.max)
	case int64(t.MinInFlight) > s.max:
		return invalid("Tuning.MinInFlight %d is above MaxInFlight %d", t.MinInFlight, s.max)
	default:
		s.min = int64(t.MinInFlight)
		if err := s.everyLaneFits("Tuning.MinInFlight", s.min); err != nil {
			return err
		}
	}

	switch {
	case t.Backoff == 0:
		s.tuning.backoff = fraction(DefaultBackoff)
	case !(t.Backoff > 0 && t.Backoff < 1):
		return invalid("Tuning.Backoff %v is not strictly between 0 and 1", t.Backoff)
	default:
		s.tuning.backoff = fraction(t.Backoff)
		if s.tuning.backoff <= 0 || s.tuning.backoff >= ppm {
			return invalid("Tuning.Backoff %v rounds to %v in millionths", t.Backoff, float64(s.tuning.backoff)/ppm)
		}
	}

	switch {
	case t.Tolerance == 0:
		s.tuning.tolerance = DefaultTolerance
	case !(t.Tolerance > 1) || math.IsInf(t.Tolerance, 1):
		return invalid("Tuning.Tolerance %v is not a finite ratio above 1", t.Tolerance)
	default:
		s.tuning.tolerance = t.Tolerance
	}

	if t.Target < 0 {
		return invalid("Tuning.Target %v is negative", t.Target)
	}
	s.tuning.target = float64(t.Target)

	s.tuning.short, s.tuning.long = t.ShortWindow, t.LongWindow
	if s.tuning.short == 0 {
		s.tuning.short = DefaultShortWindow
	}
	if s.tuning.long == 0 {
		s.tuning.long = max(DefaultLongWindow, s.tuning.short+1)
	}
	if s.tuning.short < 1 || s.tuning.long <= s.tuning.short {
		return invalid("Tuning windows %d and %d: want ShortWindow ≥ 1 and LongWindow above it",
			s.tuning.short, s.tuning.long)
	}
	return nil
}

// resolveDegradation validates the degradation list, its hysteresis and
// hold.
func (s *settings) resolveDegradation(c Config) error {
	h := c.Hysteresis
	switch {
	case h == 0:
		h = DefaultHysteresis
	case !(h > 0 && h < 1):
		return invalid("Hysteresis %v is not strictly between 0 and 1", h)
	}
	switch {
	case c.Hold == 0:
		s.hold = DefaultHold
	case c.Hold < 0:
		return invalid("Hold %v is negative", c.Hold)
	default:
		s.hold = c.Hold
	}
	seen := make(map[string]bool, len(c.Degradation))
	for i, f := range c.Degradation {
		switch {
		case f.Name == "":
			return invalid("Degradation[%d] has no name", i)
		case seen[f.Name]:
			return invalid("Degradation[%d]: feature %q is listed twice", i, f.Name)
		case !unit(f.At):
			return invalid("Degradation[%d] %q: At %v is not in (0, 1]", i, f.Name, f.At)
		case i > 0 && f.At < c.Degradation[i-1].At:
			return invalid("Degradation[%d] %q: At %v is below the %v of %q before it: features go in list order",
				i, f.Name, f.At, c.Degradation[i-1].At, c.Degradation[i-1].Name)
		}
		seen[f.Name] = true
		off := fraction(f.At)
		on := off - fraction(h)
		if on <= 0 {
			return invalid("Degradation[%d] %q: At %v is not above Hysteresis %v, so it would never come back",
				i, f.Name, f.At, h)
		}
		s.features = append(s.features, feature{name: f.Name, off: off, on: on})
	}
	return nil
}
