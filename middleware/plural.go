package middleware

import "strconv"

// seconds spells a whole number of seconds for a message: "1 second",
// "2 seconds".
func seconds(n int64) string {
	if n == 1 {
		return "1 second"
	}
	return strconv.FormatInt(n, 10) + " seconds"
}
