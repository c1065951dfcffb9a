package middleware

import "strconv"

// inSeconds spells a whole number of seconds for a message: "1 second",
// "2 seconds".
func inSeconds(n int64) string { return plural(n, "second", "seconds") }

// plural spells a count for a message, one thing or many: plural(1, "time",
// "times") is "1 time", plural(2, "time", "times") "2 times".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatInt(n, 10) + " " + many
}
