// Package seconds rounds durations to the whole seconds that headers
// state, in one place for the engine that computes a wait and the
// middleware that writes it.
package seconds

import "time"

// Ceil rounds d up to whole seconds, so that a stated wait is never
// earlier than the true one; negative durations count as 0.
func Ceil(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
