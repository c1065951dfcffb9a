package redisstore

import (
	"strconv"
	"strings"
	"testing"

	"github.com/costguard/costguard/limiter"
)

// TestLuaConstants pins the constants the script shares with the Go code.
func TestLuaConstants(t *testing.T) {
	if want := "local MAX_NOW = " + strconv.FormatInt(limiter.MaxNow, 10) + "\n"; !strings.Contains(commonLua, want) {
		t.Errorf("common.lua does not declare %q", strings.TrimSpace(want))
	}
	if maxArg != limiter.MaxSafeInteger+1 {
		t.Errorf("maxArg = %d, want 2^53", int64(maxArg))
	}
	// batch.lua reads argsPerKey ARGV entries and writes stride reply
	// values per key, both its STRIDE.
	if want := "local STRIDE = " + strconv.Itoa(stride) + "\n"; stride != argsPerKey || !strings.Contains(batchLua, want) {
		t.Errorf("batch.lua's STRIDE, stride %d and argsPerKey %d disagree", stride, argsPerKey)
	}
	// The algorithm values the script dispatches on.
	for a, want := range map[limiter.Algorithm]int{
		limiter.TokenBucket: 0, limiter.LeakyBucketPolicing: 1, limiter.LeakyBucketShaping: 2,
		limiter.FixedWindow: 3, limiter.SlidingLog: 4, limiter.SlidingCounter: 5,
	} {
		if int(a) != want {
			t.Errorf("%s = %d; batch.lua dispatches it as %d", a, a, want)
		}
	}
}

// TestScriptsDocumentTheirInterface: the entry point opens with its KEYS,
// ARGV and reply; each algorithm file with its parameters and what it
// writes.
func TestScriptsDocumentTheirInterface(t *testing.T) {
	check := func(name, src string, wants ...string) {
		header, _, _ := strings.Cut(src, "\nlocal ")
		for _, want := range wants {
			if !strings.Contains(header, want) {
				t.Errorf("%s: header lacks %q", name, want)
			}
		}
	}
	check("batch.lua", batchLua, "-- KEYS[i]", "-- ARGV[1]", "-- Returns")
	for name, src := range map[string]string{
		"bucket.lua": bucketLua, "fixed_window.lua": fixedWindowLua,
		"sliding_counter.lua": slidingCounterLua, "sliding_log.lua": slidingLogLua,
	} {
		check(name, src, "-- key ", "-- now ", "-- op ", "-- n ", "-- margin ", "-- Writes")
	}
	if scriptSource != commonLua+bucketLua+fixedWindowLua+slidingCounterLua+slidingLogLua+batchLua {
		t.Error("the script is not the concatenation docs/redis.md describes")
	}
}
