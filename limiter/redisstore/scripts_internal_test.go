package redisstore

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/concurrency"
)

// TestLuaConstants pins the constants the script shares with the Go code.
func TestLuaConstants(t *testing.T) {
	if want := "local MAX_NOW = " + strconv.FormatInt(limiter.MaxNow, 10) + "\n"; !strings.Contains(commonLua, want) {
		t.Errorf("common.lua does not declare %q", strings.TrimSpace(want))
	}
	if maxArg != limiter.MaxSafeInteger+1 {
		t.Errorf("maxArg = %d, want 2^53", int64(maxArg))
	}
	// batch.lua reads one record per key, recordFields int64s, recordSize
	// bytes, and replies with one of the same layout per key.
	if replyFields != recordFields || replySize != recordSize {
		t.Errorf("reply records of %d fields, %d bytes; batch.lua packs them as RECORD, %d fields", replyFields, replySize, recordFields)
	}
	for _, want := range []string{
		"local RECORD = '<" + strings.Repeat("i8", recordFields) + "'\n",
		"local RECORD_SIZE = " + strconv.Itoa(recordSize) + "\n",
	} {
		if !strings.Contains(batchLua, want) {
			t.Errorf("batch.lua does not declare %q", strings.TrimSpace(want))
		}
		if !strings.Contains(multiLua, want) {
			t.Errorf("multi.lua does not declare %q", strings.TrimSpace(want))
		}
	}
	// DRY is multi.lua's own op, never sent from Go: any value but these two.
	if want := "local TAKE, REFUND, DRY = " + strconv.Itoa(recordTake) + ", " + strconv.Itoa(recordRefund) + ", 2\n"; !strings.Contains(commonLua, want) {
		t.Errorf("common.lua does not declare %q", strings.TrimSpace(want))
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

// TestLuaAlgorithmNames: bucket.lua names the one algorithm it singles out
// by its limiter value, never by a bare number or an order comparison.
func TestLuaAlgorithmNames(t *testing.T) {
	if want := "local SHAPING = " + strconv.Itoa(int(limiter.LeakyBucketShaping)) + "\n"; !strings.Contains(bucketLua, want) {
		t.Errorf("bucket.lua does not declare %q", strings.TrimSpace(want))
	}
	for _, src := range []string{commonLua, persistLua, bucketLua, fixedWindowLua, slidingCounterLua, slidingLogLua, batchLua, multiLua} {
		for _, bad := range []string{"alg <", "alg >", "alg == 0", "alg == 1", "alg == 2", "alg == 3", "alg == 4", "alg == 5"} {
			if strings.Contains(src, bad) {
				t.Errorf("a script compares %q: name the algorithm instead", bad)
			}
		}
	}
}

// TestScriptsDocumentTheirInterface: the entry point opens with its KEYS,
// ARGV and reply; each algorithm file with its parameters and what it
// returns.
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
	check("multi.lua", multiLua, "-- KEYS[i]", "-- ARGV[1]", "-- ARGV[2]", "-- ARGV[3]", "-- Returns")
	check("concurrency.lua", concurrencyLua, "-- KEYS[1]", "-- ARGV[1]  op: 'acquire', 'release' or 'refresh'",
		"-- ARGV[2]", "-- ARGV[3]", "-- ARGV[4]", "-- ARGV[5]", "-- ARGV[6]", "-- Returns")
	for name, src := range map[string]string{
		"bucket.lua": bucketLua, "fixed_window.lua": fixedWindowLua,
		"sliding_counter.lua": slidingCounterLua, "sliding_log.lua": slidingLogLua,
	} {
		check(name, src, "-- key ", "-- now ", "-- alg ", "-- op ", "-- n ", "-- margin ", "-- Returns")
		if !strings.Contains(src, "\nlocal function decide(key, now, alg, op, n, ") {
			t.Errorf("%s does not define decide with the parameters batch.lua passes", name)
		}
	}
}

// TestScriptPerFamily: each algorithm runs the script docs/redis.md
// describes, common.lua (+ persist.lua for the windows) + its family's file
// + batch.lua, and the families have distinct scripts.
func TestScriptPerFamily(t *testing.T) {
	for a, file := range map[limiter.Algorithm]string{
		limiter.TokenBucket: bucketLua, limiter.LeakyBucketPolicing: bucketLua, limiter.LeakyBucketShaping: bucketLua,
		limiter.FixedWindow: persistLua + fixedWindowLua, limiter.SlidingLog: persistLua + slidingLogLua, limiter.SlidingCounter: persistLua + slidingCounterLua,
	} {
		sc := scripts[a]
		if sc.source != commonLua+file+batchLua {
			t.Errorf("%s: the script is not common.lua + (persist.lua +) its file + batch.lua", a)
		}
		if sc.evalshaHead[1] != redis.NewScript(sc.source).Hash() || sc.evalHead[1] != sc.source {
			t.Errorf("%s: EVALSHA or EVAL does not name the script", a)
		}
	}
	seen := map[*luaScript]bool{}
	for _, sc := range scripts {
		seen[sc] = true
	}
	if len(seen) != 4 {
		t.Errorf("%d distinct scripts, want 4 (one per family)", len(seen))
	}
}

// TestMultiScript: TakeAll's script is common.lua, persist.lua, each
// family's file in a block of its own filing its decide, and multi.lua,
// which dispatches each limiter.Algorithm value to its family.
func TestMultiScript(t *testing.T) {
	src := multiScript.source
	if !strings.HasPrefix(src, commonLua+persistLua+"local DECIDE = {}\n") || !strings.HasSuffix(src, multiLua) {
		t.Error("the multi script is not common.lua, persist.lua, the families, multi.lua")
	}
	family := map[limiter.Algorithm]string{
		limiter.TokenBucket: "bucket", limiter.LeakyBucketPolicing: "bucket", limiter.LeakyBucketShaping: "bucket",
		limiter.FixedWindow: "fixed_window", limiter.SlidingLog: "sliding_log", limiter.SlidingCounter: "sliding_counter",
	}
	files := map[string]string{"bucket": bucketLua, "fixed_window": fixedWindowLua, "sliding_log": slidingLogLua, "sliding_counter": slidingCounterLua}
	for name, file := range files {
		if !strings.Contains(src, "do\n"+file+"\nDECIDE."+name+" = decide\nend\n") {
			t.Errorf("%s.lua is not in a block of its own filing DECIDE.%s", name, name)
		}
	}
	var by []string
	for a := limiter.TokenBucket; a <= limiter.SlidingCounter; a++ {
		by = append(by, "DECIDE."+family[a])
	}
	if want := "local BY_ALG = {" + strings.Join(by, ", ") + "}\n"; !strings.Contains(multiLua, want) {
		t.Errorf("multi.lua does not declare %q", strings.TrimSpace(want))
	}
	if multiScript.evalshaHead[1] != redis.NewScript(src).Hash() {
		t.Error("EVALSHA does not name the multi script")
	}
}

// TestConcurrencyScript: concurrency.lua runs after common.lua, whose
// now_us and cdiv it uses, and names the ops the Go code sends; the bounds
// its header states are the concurrency package's.
func TestConcurrencyScript(t *testing.T) {
	if concurrencyScript.Hash() != redis.NewScript(commonLua+concurrencyLua).Hash() {
		t.Errorf("the concurrency script is not common.lua + concurrency.lua")
	}
	for _, op := range []string{opAcquire, opRelease, opRefresh} {
		if !strings.Contains(concurrencyLua, "op == '"+op+"'") {
			t.Errorf("concurrency.lua does not handle op %q", op)
		}
	}
	if concurrency.MaxTTL != 24*time.Hour || concurrency.MaxLimit != 1<<16 {
		t.Errorf("MaxTTL %v, MaxLimit %d; concurrency.lua's header says a day and 2^16", concurrency.MaxTTL, concurrency.MaxLimit)
	}
	// Every score and expiry stays an exact Lua number: now ≤ MaxNow.
	if limiter.MaxNow+int64(concurrency.MaxTTL/time.Microsecond) > limiter.MaxSafeInteger {
		t.Errorf("MaxNow + MaxTTL passes 2^53")
	}
}
