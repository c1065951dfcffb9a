package overload

import (
	"math"
	"time"
)

// RetryAfter returns a Retry-After, in whole seconds, for a shed request:
// an integer drawn uniformly from 1 to hi, where hi is longest rounded up
// to whole seconds (at least 1). rand returns a number in [0, 1); the draw
// is 1 + ⌊rand() × hi⌋, kept within [1, hi] whatever rand returns. It is
// never below one second, and with longest of a second or less it is
// always 1 and rand is not called.
//
// A shed request has no exact time to wait, unlike a rate-limited one: the
// jitter only spreads the clients' return so they do not come back as one
// wave.
func RetryAfter(longest time.Duration, rand func() float64) int64 {
	hi := int64(longest / time.Second)
	if longest%time.Second != 0 {
		hi++
	}
	if hi <= 1 {
		return 1
	}
	switch r := rand(); {
	case !(r > 0): // also NaN
		return 1
	case r >= 1:
		return hi
	default:
		return min(1+int64(math.Floor(r*float64(hi))), hi)
	}
}
