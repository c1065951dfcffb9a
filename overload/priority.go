package overload

import (
	"errors"
	"fmt"
	"strconv"
)

// Priority is the lane a request runs in. When the process is busy, the
// lowest priority is refused first: Sheddable, then Normal, then High;
// Critical may use the whole capacity.
//
// Priorities are never compared by their numeric value: what each one may
// use is a row of the Shedder's table (Config.ShedAt). The zero value is
// Normal, so a request no lane names runs as normal traffic.
type Priority uint8

// The priorities. Their names (String, ParsePriority) are the ones used in
// configuration: "critical", "high", "normal", "sheddable".
const (
	// Normal is ordinary traffic, and the zero value.
	Normal Priority = iota
	// Sheddable is traffic the process gives up first: prefetches,
	// analytics, background refreshes.
	Sheddable
	// High is traffic kept until the process is nearly full.
	High
	// Critical may use all of the capacity and, when its lane sets a
	// queue, wait for a free slot instead of being refused.
	Critical
)

// numPriorities sizes the tables indexed by Priority.
const numPriorities = 4

// ErrInvalidPriority: a Priority value or name that is none of the four.
var ErrInvalidPriority = errors.New("overload: invalid priority")

// Priorities returns the four priorities in the order they are shed:
// Sheddable, Normal, High, Critical.
func Priorities() []Priority {
	return []Priority{Sheddable, Normal, High, Critical}
}

// String returns the priority's configuration name, or "Priority(n)" for a
// value that is none of the four.
func (p Priority) String() string {
	switch p {
	case Critical:
		return "critical"
	case High:
		return "high"
	case Normal:
		return "normal"
	case Sheddable:
		return "sheddable"
	}
	return "Priority(" + strconv.Itoa(int(p)) + ")"
}

// valid reports whether p is one of the four priorities.
func (p Priority) valid() bool {
	switch p {
	case Critical, High, Normal, Sheddable:
		return true
	}
	return false
}

// ParsePriority returns the priority named s, exactly as in configuration
// ("critical", "high", "normal", "sheddable"). Anything else fails with an
// error wrapping ErrInvalidPriority.
func ParsePriority(s string) (Priority, error) {
	for _, p := range Priorities() {
		if s == p.String() {
			return p, nil
		}
	}
	return Normal, fmt.Errorf("%w %q: want critical, high, normal or sheddable", ErrInvalidPriority, s)
}

// MarshalText returns the priority's name; it fails for a value that is
// none of the four.
func (p Priority) MarshalText() ([]byte, error) {
	if !p.valid() {
		return nil, fmt.Errorf("%w: %d", ErrInvalidPriority, uint8(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText parses a name with ParsePriority, so a configuration
// decoder fills a Priority, or the keys of Config.ShedAt, from the names.
func (p *Priority) UnmarshalText(b []byte) error {
	v, err := ParsePriority(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
