package redisstore

import (
	"strconv"
	"strings"
	"testing"

	"github.com/costguard/costguard/limiter"
)

// TestLuaConstants pins the constants the scripts copy from package limiter.
func TestLuaConstants(t *testing.T) {
	if want := "local MAX_NOW = " + strconv.FormatInt(limiter.MaxNow, 10) + "\n"; !strings.Contains(commonLua, want) {
		t.Errorf("common.lua does not declare %q", strings.TrimSpace(want))
	}
	if maxArg != limiter.MaxSafeInteger+1 {
		t.Errorf("maxArg = %d, want 2^53", int64(maxArg))
	}
}

// TestScriptsDocumentKeysAndArgv: every script opens with its KEYS and ARGV.
func TestScriptsDocumentKeysAndArgv(t *testing.T) {
	for name, src := range map[string]string{
		"bucket.lua": bucketLua, "fixed_window.lua": fixedWindowLua,
		"sliding_counter.lua": slidingCounterLua, "sliding_log.lua": slidingLogLua,
	} {
		header, _, _ := strings.Cut(src, "\nlocal ")
		for _, want := range []string{"-- KEYS[1]", "-- ARGV[1]", "-- Returns"} {
			if !strings.Contains(header, want) {
				t.Errorf("%s: header lacks %q", name, want)
			}
		}
	}
}
