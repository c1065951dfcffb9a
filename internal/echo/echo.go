// Package echo cuts client input down to what an error message may quote:
// a message that repeats a megabyte of a request back is an amplifier.
package echo

import "unicode/utf8"

// MaxBytes is how much of a client's value a message quotes.
const MaxBytes = 64

// Cut returns s, or its first MaxBytes bytes (never splitting a UTF-8
// character) followed by "…".
func Cut(s string) string {
	if len(s) <= MaxBytes {
		return s
	}
	cut := MaxBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
