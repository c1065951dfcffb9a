//go:build !race

package challenge_test

// raceEnabled is false without -race: allocation counts are exact.
const raceEnabled = false
