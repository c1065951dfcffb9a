//go:build race

package keycache_test

// raceEnabled is true under -race, which makes every lookup several times
// slower: the tests that fill the cache use fewer keys.
const raceEnabled = true
