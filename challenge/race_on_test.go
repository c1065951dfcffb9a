//go:build race

package challenge_test

// raceEnabled is true under -race, where sync.Pool drops a random share of
// Puts on purpose, so allocation counts that rely on the pool vary.
const raceEnabled = true
