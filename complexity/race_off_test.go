//go:build !race

package complexity_test

// raceEnabled is false without -race: allocation counts are exact.
const raceEnabled = false
