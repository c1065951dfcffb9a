//go:build !race

package keycache_test

// raceEnabled is false without -race.
const raceEnabled = false
