package main

// Measuring calls that run in this process (the pricing and overhead
// groups): one caller, each contender timed in turn for a short run, the
// rounds interleaved (A, B, C, A, B, C, …) so drift in the machine's load
// hits every contender alike; per contender the median of its rounds, and
// per pair of contenders the median of their per-round ratios.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// call is one measured operation; an error stops the contender's runs.
type call func() error

// roundsOf is what interleaveCalls measured of one contender: the ns per
// call of each round (NaN where it did not run), and the first error.
type roundsOf struct {
	ns  []float64
	err error
}

// median is the median of the contender's rounds, NaN if none ran.
func (r roundsOf) median() float64 { return medianOf(r.ns) }

// interleaveCalls runs every non-nil contender for d/rounds per round, in
// the same order each round, after a collection so that one contender's
// garbage is not collected in another's run. A nil contender is left out
// (its rounds are NaN).
func interleaveCalls(ctx context.Context, cs []call, d time.Duration, rounds int) ([]roundsOf, error) {
	out := make([]roundsOf, len(cs))
	for i := range out {
		out[i].ns = make([]float64, rounds)
		for r := range out[i].ns {
			out[i].ns[r] = math.NaN()
		}
	}
	per := d / time.Duration(rounds)
	for r := range rounds {
		for i, c := range cs {
			if c == nil || out[i].err != nil {
				continue
			}
			if err := ctx.Err(); err != nil {
				return out, fmt.Errorf("bench: interrupted: %w", err)
			}
			runtime.GC()
			ns, err := timeCalls(ctx, c, per)
			if err != nil {
				out[i].err = err
				continue
			}
			out[i].ns[r] = ns
		}
	}
	return out, nil
}

// timeCalls calls c for about d (at least once) and returns the ns per
// call. The clock is read once per batch, and batches grow until one takes
// a tenth of d, so reading it costs nothing measurable.
func timeCalls(ctx context.Context, c call, d time.Duration) (float64, error) {
	var calls int64
	batch := int64(1)
	start := time.Now()
	var elapsed time.Duration
	for {
		b0 := time.Now()
		for range batch {
			if err := c(); err != nil {
				return 0, err
			}
		}
		calls += batch
		took := time.Since(b0)
		elapsed = time.Since(start)
		if elapsed >= d || ctx.Err() != nil {
			break
		}
		if took < d/10 && batch < 1<<30 {
			batch *= 2
		}
	}
	return float64(elapsed.Nanoseconds()) / float64(calls), nil
}

// allocsPerCall returns the heap allocations and bytes of one call of c,
// averaged over n calls after one warm-up call (as testing.AllocsPerRun
// does). Nothing else allocates meanwhile in this process but the
// runtime, so the counts are the call's own to well under one.
func allocsPerCall(c call, n int) (allocs, bytes float64, err error) {
	if err := c(); err != nil {
		return 0, 0, err
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		if err := c(); err != nil {
			return 0, 0, err
		}
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(n), float64(after.TotalAlloc-before.TotalAlloc) / float64(n), nil
}

// ratioRounds is a ÷ b round by round: the median, the lowest and the
// highest; NaN when no round has both.
func ratioRounds(a, b roundsOf) (med, lo, hi float64) {
	var rs []float64
	for i := range a.ns {
		if i < len(b.ns) && a.ns[i] > 0 && b.ns[i] > 0 {
			rs = append(rs, a.ns[i]/b.ns[i])
		}
	}
	if len(rs) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	return medianOf(rs), slices.Min(rs), slices.Max(rs)
}

// medianOf is the median of the values that are not NaN, NaN if none.
func medianOf(vs []float64) float64 {
	s := make([]float64, 0, len(vs))
	for _, v := range vs {
		if !math.IsNaN(v) {
			s = append(s, v)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// fmtNs formats ns per call: "812ns", "12.3µs", "1.25ms"; "n/a" for NaN.
func fmtNs(ns float64) string {
	switch {
	case math.IsNaN(ns) || ns <= 0:
		return "n/a"
	case ns < 10_000:
		return fmt.Sprintf("%.0fns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.1fµs", ns/1e3)
	}
	return fmt.Sprintf("%.2fms", ns/1e6)
}

// fmtRatioRange is "1.23× (1.10–1.40)", or "n/a".
func fmtRatioRange(med, lo, hi float64) string {
	if math.IsNaN(med) {
		return "n/a"
	}
	return fmt.Sprintf("%s (%s–%s)", fmtRatio(med), fmtRatio(lo), fmtRatio(hi))
}

// inProcessGroups are the groups that run in this process alone, without
// Redis, with their own tables and JSON line.
var inProcessGroups = []string{"pricing", "overhead"}

// inEnv is what the in-process groups share.
type inEnv struct {
	opts options
	log  io.Writer
}

func (e *inEnv) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "bench: "+format+"\n", args...)
}

// inReport collects the in-process groups' results.
type inReport struct {
	pricing  *pricingResults // nil unless the group ran
	overhead []overheadResult
}

// inSummary is the JSON object of the in-process groups' last line; a nil
// field could not be measured (or its group did not run) and prints null.
// The pricing ratios are the worst over the queries (the median of each
// query's rounds); the overheads are costguard's over bare gqlgen.
type inSummary struct {
	DefaultsVsGqlgen *float64 `json:"pricing_defaults_vs_gqlgen_max"` // complexity.New(schema), the library's defaults
	ScratchVsGqlgen  *float64 `json:"pricing_scratch_vs_gqlgen_max"`
	PlanVsGqlgen     *float64 `json:"pricing_plan_vs_gqlgen_max"`
	OverheadReadme   *float64 `json:"overhead_readme_pct"`
	OverheadOne      *float64 `json:"overhead_one_field_pct"`
	// costguard's added time over bare ÷ diy's (time: medians of the
	// rounds; instructions: -instructions, GOGC=off), and its allocations
	// per request − diy's.
	VsDIYOne         *float64 `json:"overhead_vs_diy_one_field"`
	VsDIYReadme      *float64 `json:"overhead_vs_diy_readme"`
	VsDIYOneIns      *float64 `json:"overhead_vs_diy_one_field_instructions"`
	VsDIYReadmeIns   *float64 `json:"overhead_vs_diy_readme_instructions"`
	AllocsOverDIYOne *float64 `json:"allocs_over_diy_one_field"`
	AllocsOverDIYRd  *float64 `json:"allocs_over_diy_readme"`
}

func (r *inReport) summary() inSummary {
	finite := func(v float64) *float64 { return number(v, !math.IsNaN(v)) }
	return inSummary{
		DefaultsVsGqlgen: finite(r.pricing.worstRatio(pricerDefaults, pricerGqlgen)),
		ScratchVsGqlgen:  finite(r.pricing.worstRatio(pricerScratch, pricerGqlgen)),
		PlanVsGqlgen:     finite(r.pricing.worstRatio(pricerPlan, pricerGqlgen)),
		OverheadReadme:   finite(overheadOf(r.overhead, "readme")),
		OverheadOne:      finite(overheadOf(r.overhead, "one-field")),
		VsDIYOne:         finite(vsDIYOf(r.overhead, "one-field", false)),
		VsDIYReadme:      finite(vsDIYOf(r.overhead, "readme", false)),
		VsDIYOneIns:      finite(vsDIYOf(r.overhead, "one-field", true)),
		VsDIYReadmeIns:   finite(vsDIYOf(r.overhead, "readme", true)),
		AllocsOverDIYOne: finite(allocsOverDIYOf(r.overhead, "one-field")),
		AllocsOverDIYRd:  finite(allocsOverDIYOf(r.overhead, "readme")),
	}
}

// runInProcess runs the selected in-process groups and prints their tables,
// notes, and the JSON summary as the last line.
func runInProcess(ctx context.Context, o options, stdout, stderr io.Writer) error {
	e := &inEnv{opts: o, log: stderr}
	r := &inReport{}
	if o.cpuProfile != "" {
		stop, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.only["pricing"] {
		if err := e.pricingWorkloads(ctx, r); err != nil {
			return err
		}
	}
	if o.only["overhead"] {
		if err := e.overheadWorkloads(ctx, r); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "costguard bench: %s; in-process groups, no Redis\n", goInfo())
	var notes []string
	if r.pricing != nil {
		r.pricing.write(stdout, o, &notes)
	}
	if len(r.overhead) > 0 {
		writeOverhead(stdout, r.overhead, o, &notes)
	}
	if len(notes) > 0 {
		fmt.Fprintln(stdout)
		for _, n := range notes {
			fmt.Fprintln(stdout, "note:", n)
		}
	}
	b, err := json.Marshal(r.summary())
	if err != nil {
		return fmt.Errorf("bench: summary: %w", err)
	}
	line := strings.NewReplacer(`":`, `": `, `,"`, `, "`).Replace(string(b))
	_, err = fmt.Fprintln(stdout, line)
	return err
}

// startCPUProfile writes a CPU profile of the run to path; stop ends it.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: -cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: -cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
