package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/costguard/costguard/internal/testenv"
)

// TestMain lets the test binary serve as the split-budget workers that
// the end-to-end test's bench starts by re-executing itself.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		if err := runMain(os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestHistogramBuckets(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	values := []uint64{0, 1, 31, 32, 33, 63, 64, 65, 1000, 1 << 40, 1<<63 - 1, 1<<64 - 1}
	for range 10_000 {
		values = append(values, r.Uint64()>>r.IntN(64))
	}
	for _, v := range values {
		b := bucketOf(v)
		if b < 0 || b >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d, outside [0, %d)", v, b, histBuckets)
		}
		if lo := bucketLow(b); lo > v {
			t.Fatalf("bucketOf(%d) = %d starts at %d, above the value", v, b, lo)
		}
		if b+1 < histBuckets {
			if hi := bucketLow(b + 1); hi <= v {
				t.Fatalf("bucketOf(%d) = %d, but the next bucket starts at %d", v, b, hi)
			}
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var h histogram
	samples := make([]time.Duration, 100_000)
	for i := range samples {
		// Log-normal-ish latencies from 10µs to about 50ms.
		samples[i] = time.Duration(10_000 * (1 + r.ExpFloat64()*r.ExpFloat64()*50))
		h.record(samples[i])
	}
	slices.Sort(samples)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
		want := samples[max(0, int(q*float64(len(samples)))-1)]
		got := h.quantile(q)
		if diff := float64(got-want) / float64(want); diff < -0.02 || diff > 0.02 {
			t.Errorf("q%.3f = %v, want %v ± 2%%", q, got, want)
		}
	}
	var empty histogram
	if q := empty.quantile(0.5); q != 0 {
		t.Errorf("empty histogram: %v", q)
	}
	var small histogram
	small.record(-time.Second) // clamped to 0
	small.record(7)
	if got := small.quantile(1); got != 7 {
		t.Errorf("max of {0, 7ns} = %v", got)
	}
}

func TestParseScriptCalls(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=1200,usec=3400,usec_per_call=2.83,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=3,usec=40,usec_per_call=13.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hset:calls=999,usec=40,usec_per_call=0.04,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_fcall_ro:calls=5,usec=40,usec_per_call=8,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=77,usec=40,usec_per_call=0.5,rejected_calls=0,failed_calls=0\r\n"
	n, err := parseScriptCalls(info)
	if err != nil || n != 1208 {
		t.Fatalf("parseScriptCalls = %d, %v; want 1208 (scripts only)", n, err)
	}
	for _, bad := range []string{"cmdstat_evalsha\r\n", "cmdstat_evalsha:usec=3\r\n", "cmdstat_eval:calls=x,usec=1\r\n"} {
		if _, err := parseScriptCalls(bad); err == nil {
			t.Errorf("parseScriptCalls(%q) accepted a malformed line", bad)
		}
	}
}

func TestFormatting(t *testing.T) {
	cases := []struct{ got, want string }{
		{thousands(0), "0"},
		{thousands(999.4), "999"},
		{thousands(1000), "1,000"},
		{thousands(1234567.8), "1,234,568"},
		{thousands(-1234), "-1,234"},
		{fmtRatio(0), "-"},
		{fmtRatio(1.234), "1.23×"},
		{fmtRatio(241.6), "242×"},
		{fmtRatio(0.0001), "1/10,000"},
		{fmtLatency(0), "-"},
		{fmtLatency(1500), "1.5µs"},
		{fmtLatency(81 * time.Microsecond), "81µs"},
		{fmtLatency(3240 * time.Microsecond), "3.24ms"},
		{fmtPerDecision(-1), "-"},
		{fmtPerDecision(0), "0.0000"},
		{fmtPerDecision(0.25), "0.2500"},
		{fmtPerDecision(0.0000213), "2.1e-05"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestSummaryLine pins the JSON contract of the last line: key names, key
// order, spacing, ratios as ours ÷ theirs, null for what was not measured.
func TestSummaryLine(t *testing.T) {
	sec := func(decisions int64) tally {
		return tally{decisions: decisions, elapsed: time.Second, scripts: -1, trips: -1}
	}
	ours64 := sec(30_000)
	ours64.scripts = 7_500
	rep := &report{
		env: &env{opts: options{duration: time.Second, rounds: 1, keys: 10}, addr: "127.0.0.1:1", started: true},
		redis: []comparison{
			{callers: 1, ours: sec(12_000), peer: sec(12_000)},
			{callers: maxCallers, ours: ours64, peer: sec(15_000)},
			{callers: maxCallers, bot: true, ours: sec(3_000_000), peer: sec(15_000)},
		},
		memory: []comparison{
			{callers: 1, ours: sec(6_000_000), peer: sec(5_000_000)},
			{callers: maxCallers, ours: sec(1), peer: sec(2)},
		},
		split:    []splitResult{{kind: splitKind{exact: true}, decisions: 5, admitted: 5, span: time.Second}},
		ceilings: []ceiling{{callers: 1, calls: 10, keys: 10, t: sec(24_000)}},
		cluster:  &comparison{callers: maxCallers, ours: sec(60_000), peer: ours64},
		callgrind: &callgrindResults{redisVersion: "7.0.15", keys: 1000, rows: []callgrindComparison{{
			callers: 1, decisions: 10,
			ours: callgrindTally{name: "costguard", decisions: 10, instructions: 500_000, scripts: 10},
			peer: callgrindTally{name: "redis_rate", err: errors.New("boom")},
		}}},
	}
	var out bytes.Buffer
	if err := rep.write(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	want := `{"admitted_speedup_64": 2, "bot_speedup": 200, "round_trips_per_decision_64": 0.25, "memory_vs_xtime": 1.2, "split_overshoot_pct": null, ` +
		`"admitted_speedup_1": 1, "admitted_speedup_8": null, "p99_ratio_1": null, "p99_ratio_8": null, "p99_ratio_64": null, ` +
		`"redis_ceiling_1": 24000, "redis_ceiling_8": null, "redis_ceiling_64": null, "ceiling_fraction_1": 0.5, "ceiling_fraction_8": null, "ceiling_fraction_64": null, ` +
		`"cluster_vs_single_64": 2}`
	if last := lines[len(lines)-1]; last != want {
		t.Fatalf("last line\n%s\nwant\n%s", last, want)
	}
	rows := map[string]bool{}
	for _, l := range lines {
		rows[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, row := range []string{"1 costguard 50,000 1.0000", "redis_rate - -", "ours ÷ theirs - -", "note: callgrind, 1 caller: redis_rate not measured: boom"} {
		if !rows[row] {
			t.Errorf("report lacks the line %q:\n%s", row, out.String())
		}
	}

	rep.split = append(rep.split, splitResult{kind: splitKind{name: "split"}, decisions: 100, admitted: 1133, span: time.Second})
	rep.redis = rep.redis[:1] // nothing at 64 callers, no bot
	s := rep.summary()
	if s.AdmittedSpeedup64 != nil || s.BotSpeedup != nil || s.RoundTrips64 != nil {
		t.Errorf("unmeasured values not null: %+v", s)
	}
	if s.SplitOvershootPct == nil || *s.SplitOvershootPct != 3 { // 1133 admitted of 100 + 1000
		t.Errorf("split overshoot %v, want 3", s.SplitOvershootPct)
	}
}

func TestParseFlags(t *testing.T) {
	cases := []struct {
		args []string
		msg  string // empty: valid
	}{
		{nil, ""},
		{[]string{"-redis", "127.0.0.1:6379", "-duration", "5s"}, ""},
		{[]string{"-duration", "0s"}, "-duration must be positive"},
		{[]string{"-rounds", "0"}, "-rounds must be at least 1"},
		{[]string{"-duration", "50ms", "-rounds", "10"}, "under 10ms per run"},
		{[]string{"-keys", "0"}, "-keys must be at least 1"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-only", "callgrind"}, ""},
		{[]string{"-only", "redis,callgrind"}, ""},
		{[]string{"-only", "redis,cachegrind"}, `unknown workload group "cachegrind"`},
		{[]string{"-only", "pricing"}, ""},
		{[]string{"-only", "pricing,overhead", "-github-schema", "schema.graphql"}, ""},
		{[]string{"-only", "overhead,memory"}, "run them apart from the Redis groups"},
	}
	for _, c := range cases {
		_, err := parseFlags(c.args, new(bytes.Buffer))
		if c.msg == "" && err != nil || c.msg != "" && (err == nil || !strings.Contains(err.Error(), c.msg)) {
			t.Errorf("parseFlags(%q) = %v; want %q", c.args, err, c.msg)
		}
	}
	o, _ := parseFlags(nil, new(bytes.Buffer))
	if o.duration != 5*time.Second || o.rounds != 5 || o.keys != 10_000 || o.redisAddr != "" {
		t.Errorf("defaults %+v", o)
	}
	if want := map[string]bool{"redis": true, "memory": true, "split": true}; !maps.Equal(o.only, want) {
		t.Errorf("default -only %v, want %v (callgrind is opt-in)", o.only, want)
	}
	if o, _ := parseFlags([]string{"-only", "redis, callgrind"}, new(bytes.Buffer)); !maps.Equal(o.only, map[string]bool{"redis": true, "callgrind": true}) {
		t.Errorf("-only redis,callgrind: %v", o.only)
	}
}

// startTestRedis starts a throwaway server for the test, or skips when
// redis-server is not installed.
func startTestRedis(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Missing(t, "redis-server missing: a Redis test")
	}
	srv, err := startRedis(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// TestDeleteKeysOnlyOwn checks the clean-up touches this run's keys and
// nothing else, not even keys that merely share the prefix's beginning.
func TestDeleteKeysOnlyOwn(t *testing.T) {
	srv := startTestRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer rdb.Close()
	ctx := context.Background()
	prefix, err := randomPrefix()
	if err != nil {
		t.Fatal(err)
	}
	others := []string{"other", prefix, prefix + "x:1", "rate:" + prefix, "rate:other:" + prefix + ":1", "x" + prefix + ":1"}
	var own []string
	for i := range 1234 {
		own = append(own, fmt.Sprintf("%s:{user:%d}:token_bucket", prefix, i), fmt.Sprintf("rate:%s:user:%d", prefix, i))
	}
	for _, k := range append(slices.Clone(others), own...) {
		if err := rdb.Set(ctx, k, "1", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := deleteKeys(ctx, rdb, prefix)
	if err != nil || n != len(own) {
		t.Fatalf("deleteKeys = %d, %v; want %d", n, err, len(own))
	}
	left, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	slices.Sort(others)
	if !slices.Equal(left, others) {
		t.Fatalf("keys left %q, want %q", left, others)
	}
}

// TestEndToEnd runs the whole bench, briefly, against a Redis it is given
// (as with -redis): it must leave that Redis as it found it and end with
// the JSON line.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole benchmark")
	}
	srv := startTestRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "someone-else", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := runMain([]string{"-redis", srv.addr, "-duration", "100ms", "-rounds", "2", "-keys", "50"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	var s map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, stdout.String())
	}
	for _, k := range []string{"admitted_speedup_64", "bot_speedup", "round_trips_per_decision_64", "memory_vs_xtime", "split_overshoot_pct"} {
		if _, ok := s[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, lines[len(lines)-1])
		}
	}
	if s["memory_vs_xtime"] == nil || s["admitted_speedup_64"] == nil || s["redis_ceiling_64"] == nil || s["ceiling_fraction_1"] == nil || s["cluster_vs_single_64"] == nil {
		t.Errorf("measured values missing: %s\n%s", lines[len(lines)-1], stdout.String())
	}
	for _, h := range []string{"Redis", "Redis ceiling", "Redis Cluster", "Memory", "Shared budget", "redisstore (exact)"} {
		if !strings.Contains(stdout.String(), h) {
			t.Errorf("table lacks %q:\n%s", h, stdout.String())
		}
	}
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{"someone-else"}) {
		t.Fatalf("the bench left keys behind or removed others: %q", keys)
	}
}

func TestWorstWindow(t *testing.T) {
	// splitLimit refills 1 token per 1 ms slot on top of a burst of 100.
	cases := []struct {
		name     string
		perSlot  []int64
		excess   float64
		duration time.Duration
	}{
		{"nothing recorded", nil, 0, 0},
		{"burst then the rate: exact", []int64{100, 1, 1, 1}, -1, time.Millisecond},
		{"idle then the burst", []int64{0, 0, 0, 100}, -1, time.Millisecond},
		{"28 tokens too many over 4 ms", []int64{100, 1, 1, 30}, 28, 4 * time.Millisecond},
		{"a late burst on top of the rate (ties: the longest)", []int64{1, 1, 1, 1, 1, 110}, 9, 6 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := splitResult{slot: time.Millisecond, perSlot: c.perSlot}
			excess, d := r.worstWindow()
			if excess < c.excess-1e-9 || excess > c.excess+1e-9 || d != c.duration {
				t.Fatalf("worstWindow = %v tokens in %v, want %v in %v", excess, d, c.excess, c.duration)
			}
		})
	}
	r := splitResult{span: 2 * time.Second, admitted: 2121}
	if a, o := r.allowed(), r.overshootPct(); a != 2100 || o < 0.99999 || o > 1.00001 {
		t.Fatalf("allowed %v, overshoot %v%%; want 2100 and 1%%", a, o)
	}
}

func TestParseDumpInstructions(t *testing.T) {
	const header = "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 21254\ncmd:  redis-server --port 1\npart: 1\n\n" +
		"desc: I1 cache: \ndesc: Timerange: Basic block 0 - 1588663\ndesc: Trigger: dump\n\npositions: line\n"
	const body = "ob=(6) /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2\nfl=(70) strcmp-sse2.S\nfn=(2780) strcmp\n131 5\n+1 5\ncalls=1 0x4\n"
	cases := []struct {
		name, dump string
		want       int64
		msg        string // empty: valid
	}{
		{"a dump on request: summary 0, the count on totals", header + "events: Ir\nsummary: 0\n\n" + body + "\ntotals: 4086082\n", 4086082, ""},
		{"summary only", header + "events: Ir\nsummary: 1234\n" + body, 1234, ""},
		{"cache simulation: Ir among other events", header + "events: Dr Dw Ir I1mr\n" + body + "totals: 10 20 300 4\n", 300, ""},
		{"trailing zeros left out", header + "events: Dr Ir\n" + body + "totals: 10\n", 0, ""},
		{"two parts", header + "events: Ir\n" + body + "totals: 100\npart: 2\nevents: Ir\n" + body + "totals: 23\n", 123, ""},
		{"CRLF and extra blanks", strings.ReplaceAll(header+"events:  Ir \n"+body+"totals:   77  \n", "\n", "\r\n"), 77, ""},
		{"no count", header + "events: Ir\n" + body, 0, "no totals: or summary: line"},
		{"no Ir", header + "events: Dr Dw\n" + body + "totals: 1 2\n", 0, "no Ir among the events"},
		{"totals before events", header + body + "totals: 5\n", 0, "before any events"},
		{"malformed count", header + "events: Ir\n" + body + "totals: 12x\n", 0, "malformed totals"},
		{"negative count", header + "events: Ir\nsummary: -3\n", 0, "malformed summary"},
		{"empty file", "", 0, "no totals: or summary: line"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseDumpInstructions(strings.NewReader(c.dump))
			if c.msg == "" && (err != nil || got != c.want) {
				t.Fatalf("got %d, %v; want %d", got, err, c.want)
			}
			if c.msg != "" && (err == nil || !strings.Contains(err.Error(), c.msg)) {
				t.Fatalf("got %d, %v; want an error with %q", got, err, c.msg)
			}
		})
	}
}

func TestNewestDump(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := newestDump(dir); err == nil {
		t.Fatal("newestDump found a dump in an empty directory")
	}
	// The final dump (no suffix), FIFOs and stray names are not dumps;
	// numbers compare as numbers.
	for _, name := range []string{"callgrind.out", "callgrind.out.2", "callgrind.out.10", "callgrind.out.9", "callgrind.out.x", "vgdb-from-vgdb-to-1"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path, n, err := newestDump(dir)
	if err != nil || n != 10 || filepath.Base(path) != "callgrind.out.10" {
		t.Fatalf("newestDump = %q, %d, %v; want callgrind.out.10", path, n, err)
	}
}

func TestCallgrindToolsMissing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "valgrind"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	err := runMain([]string{"-only", "callgrind"}, new(bytes.Buffer), new(bytes.Buffer))
	if err == nil || !strings.Contains(err.Error(), "callgrind_control") || !strings.Contains(err.Error(), "apt-get install -y valgrind") {
		t.Fatalf("runMain with no callgrind_control: %v", err)
	}
}

// TestCallgrindEndToEnd runs the callgrind group, briefly: one small step
// at 1 caller. It needs valgrind, which CI machines lack, so it skips
// without it even under CI=true.
func TestCallgrindEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server under valgrind")
	}
	if _, err := findCallgrindTools(); err != nil {
		t.Skipf("callgrind group not testable here: %v", err)
	}
	prefix, err := randomPrefix()
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	e := &env{opts: options{duration: time.Second, rounds: 1, keys: 10}, prefix: prefix, log: &lockedWriter{w: &log}, started: true}
	rep := &report{env: e}
	if err := e.measureCallgrind(context.Background(), rep, []callgrindStep{{callers: 1, perCaller: 200}}); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if rep.callgrind == nil || len(rep.callgrind.rows) != 1 || rep.callgrind.redisVersion == "" {
		t.Fatalf("results %+v", rep.callgrind)
	}
	row := rep.callgrind.rows[0]
	for _, tl := range []callgrindTally{row.ours, row.peer} {
		// Both limiters make one script call per decision at 1 caller; a
		// decision costs Redis thousands of instructions at the least.
		if tl.err != nil || tl.decisions != 200 || tl.scripts != 200 || tl.perDecision(tl.instructions) < 1000 {
			t.Errorf("%s: %+v", tl.name, tl)
		}
	}
	var out bytes.Buffer
	if err := rep.write(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	want := `{"admitted_speedup_64": null, "bot_speedup": null, "round_trips_per_decision_64": null, "memory_vs_xtime": null, "split_overshoot_pct": null, ` +
		`"admitted_speedup_1": null, "admitted_speedup_8": null, "p99_ratio_1": null, "p99_ratio_8": null, "p99_ratio_64": null, ` +
		`"redis_ceiling_1": null, "redis_ceiling_8": null, "redis_ceiling_64": null, "ceiling_fraction_1": null, "ceiling_fraction_8": null, "ceiling_fraction_64": null, ` +
		`"cluster_vs_single_64": null}`
	if !strings.Contains(out.String(), "Redis CPU per decision") || lines[len(lines)-1] != want {
		t.Fatalf("report:\n%s", out.String())
	}
}

// TestOverloadScenario runs the overload scenario briefly, at a small
// capacity, against the example server built and started as a subprocess,
// and checks its JSON line: every key of the contract and sane values. It
// is a long test: go build of the example server and two runs of the
// scenario take 10 to 25 s.
func TestOverloadScenario(t *testing.T) {
	testenv.Long(t)
	if _, err := exec.LookPath("go"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the overload scenario builds ./examples/server, and there is no go command: %v", err)
		}
		t.Skipf("the overload scenario builds ./examples/server, and there is no go command: %v", err)
	}
	var stdout, stderr bytes.Buffer
	args := []string{"-only", "overload", "-capacity", "4", "-latency", "50ms", "-duration", "1s", "-outage", "300ms", "-recovery", "700ms"}
	if err := runMain(args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	var top map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &top); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, stdout.String())
	}
	off, ok := top["lanes_off"].(map[string]any)
	if !ok {
		t.Fatalf("no lanes_off object: %s", lines[len(lines)-1])
	}
	keys := []string{"critical_success_pct", "sheddable_shed_pct", "max_in_flight_observed", "capacity", "p99_admitted_ms", "recovery_peak_over_capacity"}
	for name, figs := range map[string]map[string]any{"lanes on": top, "lanes off": off} {
		for _, k := range keys {
			if _, ok := figs[k]; !ok {
				t.Errorf("%s: JSON lacks %q", name, k)
			}
		}
		for _, k := range []string{"critical_success_pct", "sheddable_shed_pct"} {
			if v, ok := figs[k].(float64); !ok || v < 0 || v > 100 {
				t.Errorf("%s: %s = %v, want a percentage", name, k, figs[k])
			}
		}
		if figs["capacity"] != 4.0 {
			t.Errorf("%s: capacity %v, want 4", name, figs["capacity"])
		}
		if v, ok := figs["p99_admitted_ms"].(float64); !ok || v < 50 {
			t.Errorf("%s: p99_admitted_ms = %v, want at least the 50ms the resolvers take", name, figs["p99_admitted_ms"])
		}
		if v, ok := figs["recovery_peak_over_capacity"].(float64); !ok || v <= 0 {
			t.Errorf("%s: recovery_peak_over_capacity = %v, want a positive ratio", name, figs["recovery_peak_over_capacity"])
		}
		// The server's own high-water mark: the shedder never admits more
		// than its capacity.
		if v, ok := figs["max_in_flight_observed"].(float64); !ok || v < 1 || v > 4 {
			t.Errorf("%s: max_in_flight_observed = %v, want between 1 and the capacity, 4", name, figs["max_in_flight_observed"])
		}
		if v, ok := figs["max_in_flight_client_bound"].(float64); !ok || v < figs["max_in_flight_observed"].(float64) {
			t.Errorf("%s: max_in_flight_client_bound = %v, want at least the server's peak", name, figs["max_in_flight_client_bound"])
		}
		if figs["server"] != "example-server" {
			t.Errorf("%s: server %v, want example-server", name, figs["server"])
		}
	}
	for _, h := range []string{"examples/server process", "checkout", "authenticated", "anonymous", "recovery peak"} {
		if !strings.Contains(stdout.String(), h) {
			t.Errorf("table lacks %q:\n%s", h, stdout.String())
		}
	}
}

func TestOverloadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-only", "overload,redis"},
		{"-only", "overload", "-capacity", "1"},
		{"-only", "overload", "-outage", "0s"},
		{"-only", "overload", "-queue", "-1s"},
		{"-only", "overload", "-duration", "10m"}, // more checkouts than the seeded repositories hold
	} {
		if _, err := parseFlags(args, new(bytes.Buffer)); err == nil {
			t.Errorf("parseFlags(%q) accepted it", args)
		}
	}
}

func TestMaxOverlap(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name  string
		spans []span
		want  int64
	}{
		{"none", nil, 0},
		{"one", []span{{at(0), at(10)}}, 1},
		{"touching ends do not overlap", []span{{at(0), at(10)}, {at(10), at(20)}}, 1},
		{"nested", []span{{at(0), at(100)}, {at(10), at(20)}, {at(15), at(30)}}, 3},
		{"apart", []span{{at(0), at(10)}, {at(5), at(12)}, {at(50), at(60)}}, 2},
	} {
		if got := maxOverlap(tc.spans); got != tc.want {
			t.Errorf("%s: maxOverlap = %d, want %d", tc.name, got, tc.want)
		}
	}
	// The last 10 ms of each: the long span no longer covers the short ones.
	if got := maxOverlap(lastOf([]span{{at(0), at(100)}, {at(10), at(20)}, {at(5), at(25)}}, 10*time.Millisecond)); got != 2 {
		t.Errorf("maxOverlap(lastOf) = %d, want 2", got)
	}
}

func TestParseAdmitted(t *testing.T) {
	text := `# HELP costguard_decisions_total Rate-limit decisions.
# TYPE costguard_decisions_total counter
costguard_decisions_total{kind="graphql",lane="checkout",outcome="admitted",plan="member"} 12
costguard_decisions_total{kind="graphql",lane="anonymous",outcome="admitted",plan="anon"} 3
costguard_decisions_total{kind="graphql",lane="anonymous",outcome="shed",plan="anon"} 40
costguard_charged_points_total{plan="anon"} 99
`
	if n, err := parseAdmitted(strings.NewReader(text)); err != nil || n != 15 {
		t.Errorf("parseAdmitted = %d, %v; want 15", n, err)
	}
	if _, err := parseAdmitted(strings.NewReader("go_goroutines 7\n")); err == nil {
		t.Error("parseAdmitted accepted a page without costguard_decisions_total")
	}
}

func TestPeakAdmittedRate(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int, n int64) admittedSample {
		return admittedSample{at: t0.Add(time.Duration(ms) * time.Millisecond), admitted: n}
	}
	// 20 admitted in the 10 ms after a late scrape would be 2,000/s; over
	// samples at least 200 ms apart the peak is 100/s.
	samples := []admittedSample{at(0, 0), at(200, 20), at(210, 40), at(400, 40), at(600, 60), at(900, 60)}
	got, ok := peakAdmittedRate(samples, t0, t0.Add(time.Second), 200*time.Millisecond)
	if !ok || got != 100 {
		t.Errorf("peakAdmittedRate = %v, %v; want 100/s", got, ok)
	}
	if _, ok := peakAdmittedRate(samples, t0.Add(800*time.Millisecond), t0.Add(time.Second), 200*time.Millisecond); ok {
		t.Error("peakAdmittedRate found a pair in a span with one sample")
	}
}

// parseGauge reads an unlabelled gauge's sample and nothing that merely
// starts like it.
func TestParseGauge(t *testing.T) {
	const text = "# HELP costguard_requests_in_flight_peak x\ncostguard_requests_in_flight_peak_other 9\ncostguard_requests_in_flight_peak 7\n"
	if v, err := parseGauge(strings.NewReader(text), peakMetric); err != nil || v != 7 {
		t.Errorf("parseGauge = %v, %v; want 7", v, err)
	}
	if _, err := parseGauge(strings.NewReader("other 1\n"), peakMetric); err == nil {
		t.Error("a missing gauge is not an error")
	}
}

// TestInProcessEndToEnd runs the in-process groups briefly: without
// -github-schema the pricing group says it is skipped, and the overhead
// group measures every handler on every query.
func TestInProcessEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the in-process benchmark")
	}
	var stdout, stderr bytes.Buffer
	err := runMain([]string{"-only", "pricing,overhead", "-duration", "60ms", "-rounds", "3"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "Pricing: skipped: no -github-schema given") || !strings.Contains(stderr.String(), "no -github-schema given") {
		t.Errorf("the skipped pricing group is not reported:\n%s\n%s", out, stderr.String())
	}
	for _, h := range []string{"End-to-end overhead", "one-field", "readme", "gqlgen-limit", "diy", "costguard", "costguard ÷ diy"} {
		if !strings.Contains(out, h) {
			t.Errorf("table lacks %q:\n%s", h, out)
		}
	}
	if strings.Contains(out, "note:") {
		t.Errorf("a handler failed:\n%s", out)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var s map[string]*float64
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, out)
	}
	for k, measured := range map[string]bool{"pricing_defaults_vs_gqlgen_max": false, "pricing_scratch_vs_gqlgen_max": false, "pricing_plan_vs_gqlgen_max": false, "overhead_readme_pct": true, "overhead_one_field_pct": true,
		"allocs_over_diy_one_field": true, "allocs_over_diy_readme": true,
		"overhead_vs_diy_one_field_instructions": false, "overhead_vs_diy_readme_instructions": false} {
		v, ok := s[k]
		if !ok || (v != nil) != measured {
			t.Errorf("JSON %q: present %v, value %v; want measured %v: %s", k, ok, v, measured, lines[len(lines)-1])
		}
	}
	// In runs this short diy's added time can come out at zero or below,
	// which makes the ratio null: only its presence is checked.
	for _, k := range []string{"overhead_vs_diy_one_field", "overhead_vs_diy_readme"} {
		if _, ok := s[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, lines[len(lines)-1])
		}
	}
}

// TestOverheadChild runs what -instructions runs under callgrind, without
// it: a child serving one handler's requests; and refuses -instructions
// without the overhead group.
func TestOverheadChild(t *testing.T) {
	var stdout bytes.Buffer
	if err := runMain([]string{"-overhead-child", "readme/diy", "-overhead-requests", "3"}, &stdout, new(bytes.Buffer)); err != nil || stdout.String() != "served 4\n" {
		t.Errorf("child: %v, %q", err, stdout.String())
	}
	if err := runMain([]string{"-overhead-child", "readme/nope"}, new(bytes.Buffer), new(bytes.Buffer)); err == nil {
		t.Error("a child of an unknown handler ran")
	}
	if err := runMain([]string{"-only", "pricing", "-instructions"}, new(bytes.Buffer), new(bytes.Buffer)); err == nil || !strings.Contains(err.Error(), "-only overhead") {
		t.Errorf("-instructions without the overhead group: %v", err)
	}
}

// TestVsDIY pins how costguard's added time is set against diy's: the
// medians of the per-round differences over bare, divided; by
// instructions, the differences of the counts.
func TestVsDIY(t *testing.T) {
	nan := math.NaN()
	row := overheadResult{rounds: make([]roundsOf, numHandlers)}
	row.rounds[handlerBare].ns = []float64{100, 200, 100, nan}
	row.rounds[handlerGqlgenLimit].ns = []float64{101, 201, 101, nan}
	row.rounds[handlerDIY].ns = []float64{110, 204, 106, 999}
	row.rounds[handlerCostguard].ns = []float64{103, 212, 109, 999}
	// costguard adds 3, 12, 9 (median 9); diy 10, 4, 6 (median 6).
	if got := row.vsDIY(); got != 1.5 {
		t.Errorf("vsDIY = %v, want 1.5", got)
	}
	if got := row.instructionsVsDIY(); !math.IsNaN(got) {
		t.Errorf("instructionsVsDIY with nothing counted = %v, want NaN", got)
	}
	row.instructions = [numHandlers]float64{1000, 1001, 1200, 1100}
	if got := row.instructionsVsDIY(); got != 0.5 {
		t.Errorf("instructionsVsDIY = %v, want 0.5", got)
	}
	row.rounds[handlerDIY].ns = []float64{100, 200, 90, nan}
	if got := row.vsDIY(); !math.IsNaN(got) {
		t.Errorf("vsDIY when diy adds nothing = %v, want NaN", got)
	}
}

// TestDIY checks the hand-made stack: a 200 with the three X-RateLimit-*
// headers, a 429 once a client's bucket is empty, and a map of client
// limiters that stays within its bound however many addresses come.
func TestDIY(t *testing.T) {
	const clients = 8
	body := []byte(`{"query":"{ user(login: \"octocat\") { login } }"}`)
	gql := newGraphQLServer()
	gql.Use(extension.FixedComplexityLimit(gqlgenLimit))
	d, err := newDIY(gql, clients)
	if err != nil {
		t.Fatal(err)
	}
	post := func(addr string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/graphql", bytes.NewReader(body))
		r.RemoteAddr = addr
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		return w
	}
	w := post("203.0.113.7:40000")
	if w.Code != http.StatusOK || !bytes.HasPrefix(w.Body.Bytes(), []byte(`{"data":`)) {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if got := w.Header().Get("X-RateLimit-Limit"); got != strconv.Itoa(diyBurst) {
		t.Errorf("X-RateLimit-Limit = %q, want %d", got, diyBurst)
	}
	if n, err := strconv.ParseInt(w.Header().Get("X-RateLimit-Remaining"), 10, 64); err != nil || n < diyBurst-2 || n >= diyBurst {
		t.Errorf("X-RateLimit-Remaining = %q, want just under the burst", w.Header().Get("X-RateLimit-Remaining"))
	}
	if n, err := strconv.ParseInt(w.Header().Get("X-RateLimit-Reset"), 10, 64); err != nil || n < time.Now().Unix() || n > time.Now().Unix()+2 {
		t.Errorf("X-RateLimit-Reset = %q, want a Unix time within a second or two", w.Header().Get("X-RateLimit-Reset"))
	}
	for i := range 100 {
		if w := post(fmt.Sprintf("198.51.100.%d:1234", i)); w.Code != http.StatusOK {
			t.Fatalf("client %d: status %d", i, w.Code)
		}
		if n := d.clients.Len(); n > clients {
			t.Fatalf("after %d clients the map holds %d limiters, more than its bound %d", i+1, n, clients)
		}
	}
	if n := d.clients.Len(); n != clients {
		t.Errorf("the map holds %d limiters, want %d (full)", n, clients)
	}

	// A small bucket refuses the request after its burst, still with the
	// headers.
	d.limit, d.burst = rate.Every(time.Hour), 2
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		w := post("192.0.2.1:1")
		if w.Code != want || w.Header().Get("X-RateLimit-Remaining") == "" {
			t.Errorf("request %d: status %d, remaining %q; want %d with the headers", i+1, w.Code, w.Header().Get("X-RateLimit-Remaining"), want)
		}
	}
}

func TestRatioRounds(t *testing.T) {
	nan := math.NaN()
	a := roundsOf{ns: []float64{200, 300, nan, 100}}
	b := roundsOf{ns: []float64{100, 100, 100, 100}}
	if med, lo, hi := ratioRounds(a, b); med != 2 || lo != 1 || hi != 3 {
		t.Errorf("ratioRounds = %v, %v, %v; want 2, 1, 3 (the NaN round left out)", med, lo, hi)
	}
	if med, _, _ := ratioRounds(a, roundsOf{ns: []float64{nan, nan, nan, nan}}); !math.IsNaN(med) {
		t.Errorf("ratio against a contender that never ran = %v, want NaN", med)
	}
	if m := medianOf([]float64{nan, 3, 1, 2, 10}); m != 2.5 {
		t.Errorf("medianOf = %v, want 2.5", m)
	}
	if s := fmtRatioRange(nan, nan, nan); s != "n/a" {
		t.Errorf("fmtRatioRange(NaN) = %q", s)
	}
}

// BenchmarkOverhead serves the overhead group's queries through its four
// handlers (bare gqlgen, gqlgen's FixedComplexityLimit, the hand-made diy
// stack, the limiter with overheadLimiterConfig), one request per
// iteration. It is what the
// callgrind recipe of BENCHMARKS.md ("End-to-end overhead") counts:
//
//	go test -c -o overhead.test . && GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 \
//	  valgrind --tool=callgrind --callgrind-out-file=/dev/null ./overhead.test \
//	  -test.run '^$' -test.bench 'Overhead/one-field/costguard$' -test.benchtime 3000x
//
// run at 3,000 and 6,000 iterations; the difference over 3,000 is the
// instructions of one request. The collector's share of them depends on
// how many collections fall in the run, so the counts wander by several
// percent: 20,000 and 40,000 iterations steady them, and GOGC=off counts
// the request's own instructions alone (the collector's share then follows
// the bytes the request allocates, which -benchmem reports).
func BenchmarkOverhead(b *testing.B) {
	hs, closeLim, err := overheadHandlers()
	if err != nil {
		b.Fatal(err)
	}
	defer closeLim()
	for _, q := range overheadQueries {
		body, err := json.Marshal(map[string]string{"query": q.query})
		if err != nil {
			b.Fatal(err)
		}
		for i, h := range hs {
			b.Run(q.name+"/"+handlerNames[i], func(b *testing.B) {
				serve := serveCall(h, body)
				b.ReportAllocs()
				for b.Loop() {
					if err := serve(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
