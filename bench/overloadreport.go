package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// overloadServerDesc names the server under test in the header and the
// JSON.
const overloadServerDesc = "example-server"

// overloadFigures are the JSON of the scenario's last line: the figures of
// one run. A nil number could not be measured and prints as null.
type overloadFigures struct {
	Server string `json:"server"`
	// CriticalSuccessPct: checkout attempts sent in the loaded phase that
	// succeeded, in percent.
	CriticalSuccessPct *float64 `json:"critical_success_pct"`
	// SheddableShedPct: anonymous attempts sent in the loaded phase that
	// were shed, in percent.
	SheddableShedPct *float64 `json:"sheddable_shed_pct"`
	// MaxInFlightObserved: the most requests the server's load shedder
	// admitted at once over the run, read from its own high-water mark
	// (costguard_requests_in_flight_peak); the client bound below when
	// that could not be read.
	MaxInFlightObserved int64 `json:"max_in_flight_observed"`
	// MaxInFlightClientBound: the most successful attempts whose [sent,
	// answered] intervals at the client overlap, over the whole run: an
	// upper bound of the server's requests in flight (the server holds a
	// request for less than the client waits for it, and a queued
	// checkout waits outside the capacity).
	MaxInFlightClientBound int64 `json:"max_in_flight_client_bound"`
	// MaxInFlightObservedLoaded: the same over the attempts sent in the
	// loaded phase only, before the retry wave crowds the clients.
	MaxInFlightObservedLoaded int64 `json:"max_in_flight_observed_loaded"`
	// MaxInFlightEstimated: the same over the last latency of each
	// interval (all of it when shorter), where the server runs the
	// request's root field: an estimate, not a bound, off by the network
	// and the middleware's own time.
	MaxInFlightEstimated int64 `json:"max_in_flight_estimated"`
	Capacity             int   `json:"capacity"`
	// P99AdmittedMs: p99 latency of the successful attempts sent in the
	// loaded phase, every class together; UnloadedMs the p50 of the
	// unloaded probes.
	P99AdmittedMs *float64 `json:"p99_admitted_ms"`
	UnloadedMs    *float64 `json:"unloaded_ms"`
	// RecoveryPeakOverCapacity: the server's highest admission rate
	// after the outage, from its costguard_decisions_total{outcome=
	// "admitted"} read every window, over samples at least peakSpan
	// apart, ÷ (capacity ÷ latency).
	RecoveryPeakOverCapacity *float64 `json:"recovery_peak_over_capacity"`
	// RecoveryPeakAnsweredOverCapacity: the same from the clients'
	// successes answered per window; the answers bunch up when the
	// clients are short of CPU.
	RecoveryPeakAnsweredOverCapacity *float64 `json:"recovery_peak_answered_over_capacity"`
	// The time after the outage until the share of each class's attempts
	// sent in a window that succeed first reaches recoveredShare of that
	// share in the loaded phase; null: not within the recovery phase.
	CheckoutRecoveryMs      *float64 `json:"checkout_recovery_ms"`
	AuthenticatedRecoveryMs *float64 `json:"authenticated_recovery_ms"`
	AnonymousRecoveryMs     *float64 `json:"anonymous_recovery_ms"`
	// CheckoutRecoveredFirst: checkout recovered, no later than the other
	// classes that did.
	CheckoutRecoveredFirst bool `json:"checkout_recovered_first"`

	LanesOff *overloadFigures `json:"lanes_off,omitempty"`
}

// pct is 100 × n ÷ of, nil when of is 0.
func pct(n, of int64) *float64 { return number(100*float64(n)/float64(of), of > 0) }

func ms(d time.Duration) *float64 { return number(float64(d)/1e6, d > 0) }

// sent sums an outcome row.
func sent(row [numOutcomes]int64) int64 {
	var n int64
	for _, v := range row {
		n += v
	}
	return n
}

// recoveryWindows returns the index of the first window wholly after the
// outage and the index past the last whole window of the run.
func (s overloadSpec) recoveryWindows() (first, past int) {
	first = int((s.load + s.outage + window - 1) / window)
	past = int((s.load + s.outage + s.recovery) / window)
	return first, past
}

// recoveryTime is how long after the outage the attempts class c sends
// first succeed as often as before it: the first window whose attempts
// (sent in it, answered whenever) succeed in at least recoveredShare of
// the share that succeeded over the second half of the loaded phase; ok
// false when none did or there is no share to reach. By the window a
// client asked in, so that a checkout that waits in the critical queue
// counts when it was sent; a share rather than a count, so that a class
// that got little under load does not "recover" with the first few
// requests that slip through.
func (r *overloadRun) recoveryTime(s overloadSpec, c class) (time.Duration, bool) {
	loadEnd := int(s.load / window)
	from := loadEnd / 2
	if loadEnd-from < 1 {
		return 0, false
	}
	var ok, answered int64
	for k := from; k < loadEnd; k++ {
		ok, answered = ok+r.sentOK[c][k], answered+r.answered[c][k]
	}
	if ok == 0 || answered == 0 {
		return 0, false
	}
	ratio := float64(ok) / float64(answered)
	first, past := s.recoveryWindows()
	for k := first; k < past && k < len(r.sentOK[c]); k++ {
		if n := r.answered[c][k]; n > 0 && float64(r.sentOK[c][k])/float64(n) >= recoveredShare*ratio {
			return time.Duration(k-first+1) * window, true
		}
	}
	return 0, false
}

// peakSpan is the shortest interval between two /metrics samples the
// server's admission rate is measured over: 1 s, or half the recovery
// when shorter. Over a span T a server that never runs more than its
// capacity C, each request taking the latency L, admits at most C × (T/L
// + 1): the figure's slack above 1 is L ÷ T (0.1 with the defaults).
func (s overloadSpec) peakSpan() time.Duration { return min(time.Second, s.recovery/2) }

// serverRecoveryPeak is the server's highest admission rate after the
// outage, ÷ the capacity rate.
func (r *overloadRun) serverRecoveryPeak(s overloadSpec) (float64, bool) {
	from := r.start.Add(s.load + s.outage)
	peak, ok := peakAdmittedRate(r.admitted, from, from.Add(s.recovery), s.peakSpan())
	return peak / s.capacityRate(), ok
}

// recoveryPeak is the most successful attempts answered in one window
// after the outage, every class together, as a rate ÷ the capacity rate.
func (r *overloadRun) recoveryPeak(s overloadSpec) (float64, bool) {
	first, past := s.recoveryWindows()
	best, any := 0.0, false
	for k := first; k < past && k < len(r.ok[0]); k++ {
		var n int64
		for c := range numClasses {
			n += r.ok[c][k]
		}
		best, any = max(best, float64(n)/window.Seconds()/s.capacityRate()), true
	}
	return best, any
}

func (r *overloadRun) figures(s overloadSpec) overloadFigures {
	f := overloadFigures{
		Server:                 overloadServerDesc,
		CriticalSuccessPct:     pct(r.counts[loaded][checkout][succeeded], sent(r.counts[loaded][checkout])),
		SheddableShedPct:       pct(r.counts[loaded][anonymous][shedOut], sent(r.counts[loaded][anonymous])),
		MaxInFlightObserved:    r.serverPeak,
		MaxInFlightClientBound: maxOverlap(r.spans),
		MaxInFlightEstimated:   maxOverlap(lastOf(r.spans, s.latency)),
		MaxInFlightObservedLoaded: maxOverlap(slices.DeleteFunc(slices.Clone(r.spans), func(sp span) bool {
			return !sp.from.Before(r.start.Add(s.load))
		})),
		Capacity:      s.capacity,
		P99AdmittedMs: ms(r.latAll.quantile(0.99)),
		UnloadedMs:    ms(r.unloaded.quantile(0.5)),
	}
	if f.MaxInFlightObserved < 0 {
		f.MaxInFlightObserved = f.MaxInFlightClientBound
	}
	peak, ok := r.serverRecoveryPeak(s)
	f.RecoveryPeakOverCapacity = number(peak, ok)
	answered, ok := r.recoveryPeak(s)
	f.RecoveryPeakAnsweredOverCapacity = number(answered, ok)
	var rec [numClasses]*float64
	for c := range numClasses {
		if d, ok := r.recoveryTime(s, c); ok {
			rec[c] = ms(d)
		}
	}
	f.CheckoutRecoveryMs, f.AuthenticatedRecoveryMs, f.AnonymousRecoveryMs = rec[checkout], rec[authenticated], rec[anonymous]
	f.CheckoutRecoveredFirst = rec[checkout] != nil
	for _, other := range rec[checkout+1:] {
		if other != nil && f.CheckoutRecoveredFirst && *other < *rec[checkout] {
			f.CheckoutRecoveredFirst = false
		}
	}
	return f
}

// runOverload runs the scenario with lanes, then without, and prints the
// table and the JSON line.
func runOverload(ctx context.Context, o options, stdout, stderr io.Writer) (err error) {
	spec := o.overload
	dir, err := os.MkdirTemp("", "costguard-bench-overload-")
	if err != nil {
		return fmt.Errorf("bench: overload: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	fmt.Fprintln(stderr, "bench: overload: building ./examples/server")
	bin, err := buildExampleServer(ctx, dir)
	if err != nil {
		return err
	}
	var runs [2]*overloadRun
	for i, lanes := range []bool{true, false} {
		fmt.Fprintf(stderr, "bench: overload: lanes %s, %v loaded, %v outage, %v recovery\n", onOff(lanes), spec.load, spec.outage, spec.recovery)
		r, err := runOverloadOnce(ctx, spec, lanes, bin, dir)
		if err != nil {
			return err
		}
		if r.latAll.n == 0 {
			return errNoOverload
		}
		runs[i] = r
	}
	return writeOverload(stdout, spec, runs[0], runs[1])
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// writeOverload prints the header, one table row per run, class and phase,
// the figures side by side, and the JSON line last.
func writeOverload(out io.Writer, s overloadSpec, on, off *overloadRun) error {
	fmt.Fprintf(out, "costguard bench, overload: %s\n", goInfo())
	fmt.Fprintln(out, "Server under test: one examples/server process (go build), on a loopback port, budgets in memory; plans too large")
	fmt.Fprintln(out, "to refuse, no per-principal cap, no degradation: only the shedder refuses.")
	fmt.Fprintf(out, "Capacity %d in flight (overload.max_in_flight), demo_latency %v: %.0f requests/s. Offered %d× that, %.0f/s, for the whole run:\n",
		s.capacity, s.latency, s.capacityRate(), overloadFactor, overloadFactor*s.capacityRate())
	fmt.Fprintf(out, "10%% checkout (createIssue, %d API keys), 40%% authenticated queries (the same keys), 50%% anonymous queries (%d addresses\n", apiKeys, anonymousAddrs)
	fmt.Fprintln(out, "in X-Forwarded-For, from a trusted loopback proxy). Phases: loaded, outage, recovery:")
	fmt.Fprintf(out, "%v, %v, %v. The outage is emulated by the clients (the server has no backend switch): no attempt is sent while it\n", s.load, s.outage, s.recovery)
	fmt.Fprintln(out, "lasts; each one due then (arrival or retry) counts as \"outage\" and is held, and all are sent at once when it ends.")
	fmt.Fprintf(out, "Refused clients retry after Retry-After, %d attempts at most.\n", maxAttempts)
	fmt.Fprintf(out, "Lanes on: the server's default lanes, checkout critical (queue %v), authenticated normal, anonymous sheddable (pow\n", s.queue)
	fmt.Fprintln(out, "challenge, never solved); lanes off (lanes: []): every request normal.")

	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "lanes\tphase\tclass\tattempts\tretries\tsucceeded\tshed\t429\toutage 503\tother\tp50 ok\tp99 ok\t")
	for i, r := range []*overloadRun{on, off} {
		for p := range numPhases {
			for c := range numClasses {
				row := r.counts[p][c]
				n := sent(row)
				lanes, ph, retries := "", "", ""
				if c == 0 {
					ph, retries = phaseNames[p], fmt.Sprint(r.retries[p])
					if p == 0 {
						lanes = onOff(i == 0)
					}
				}
				p50, p99 := "", ""
				if p == loaded {
					p50, p99 = fmtLatency(r.lat[c].quantile(0.5)), fmtLatency(r.lat[c].quantile(0.99))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", lanes, ph, classNames[c], thousands(float64(n)), retries,
					fmtPct(row[succeeded], n), fmtPct(row[shedOut], n), fmtPct(row[limitedOut], n), fmtPct(row[outageOut], n), fmtPct(row[failedOut], n), p50, p99)
			}
		}
	}
	tw.Flush()

	fon, foff := on.figures(s), off.figures(s)
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tlanes on\tlanes off\tgoal (lanes on)\t")
	goal := func(name string, a, b *float64, g string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", name, fmtNum(a), fmtNum(b), g)
	}
	peakOn, peakOff := float64(fon.MaxInFlightObserved), float64(foff.MaxInFlightObserved)
	goal("checkout succeeded %", fon.CriticalSuccessPct, foff.CriticalSuccessPct, "≥ 99 "+verdict(fon.CriticalSuccessPct != nil && *fon.CriticalSuccessPct >= 99))
	goal("anonymous shed %", fon.SheddableShedPct, foff.SheddableShedPct, "")
	goal("max in flight (server peak)", &peakOn, &peakOff, fmt.Sprintf("≤ %d %s", s.capacity, verdict(fon.MaxInFlightObserved <= int64(s.capacity))))
	boundOn, boundOff := float64(fon.MaxInFlightClientBound), float64(foff.MaxInFlightClientBound)
	goal("max in flight (client bound)", &boundOn, &boundOff, "")
	loadedOn, loadedOff := float64(fon.MaxInFlightObservedLoaded), float64(foff.MaxInFlightObservedLoaded)
	goal("… sent in the loaded phase", &loadedOn, &loadedOff, "")
	estOn, estOff := float64(fon.MaxInFlightEstimated), float64(foff.MaxInFlightEstimated)
	goal("max in flight (estimate)", &estOn, &estOff, "")
	goal("unloaded p50 ms", fon.UnloadedMs, foff.UnloadedMs, "")
	goal("p99 admitted ms (loaded)", fon.P99AdmittedMs, foff.P99AdmittedMs, "≤ 2 × unloaded p50 "+verdict(within2x(fon)))
	// The measurement's own slack (peakSpan): a server never above its
	// capacity reads at most 1 + L/T.
	slack := s.latency.Seconds() / s.peakSpan().Seconds()
	goal("recovery peak ÷ capacity", fon.RecoveryPeakOverCapacity, foff.RecoveryPeakOverCapacity,
		fmt.Sprintf("≤ 1 (+%.2f edge) %s", slack, verdict(fon.RecoveryPeakOverCapacity != nil && *fon.RecoveryPeakOverCapacity <= 1+slack)))
	goal("recovery peak, answered (client)", fon.RecoveryPeakAnsweredOverCapacity, foff.RecoveryPeakAnsweredOverCapacity, "")
	goal("checkout recovered after ms", fon.CheckoutRecoveryMs, foff.CheckoutRecoveryMs, "first "+verdict(fon.CheckoutRecoveredFirst))
	goal("authenticated recovered after ms", fon.AuthenticatedRecoveryMs, foff.AuthenticatedRecoveryMs, "")
	goal("anonymous recovered after ms", fon.AnonymousRecoveryMs, foff.AnonymousRecoveryMs, "")
	tw.Flush()
	fmt.Fprintln(out, "Max in flight (server peak): the server's own high-water mark of requests its shedder admitted at once")
	fmt.Fprintln(out, "(costguard_requests_in_flight_peak, read from /metrics when the run ends). The client bound: the most successful")
	fmt.Fprintln(out, "attempts whose [sent, answered] intervals overlap at the clients (a queued checkout waits outside the server's count).")
	fmt.Fprintln(out, "The estimate: the same over the last demo_latency of each interval, where the server runs the root field.")
	fmt.Fprintf(out, "Recovery peak: the server's admissions per second after the outage (its costguard_decisions_total, admitted, read from\n")
	fmt.Fprintf(out, "/metrics every %v; rates over samples ≥ %v apart) ÷ capacity: a server at exactly its capacity may show up to %.2f\n", window, s.peakSpan(), 1+s.latency.Seconds()/s.peakSpan().Seconds())
	fmt.Fprintf(out, "(a request admitted just before the span's end). \"Answered\": the clients' successes per %v window, ÷ capacity.\n", window)
	fmt.Fprintln(out, "The percentages and p99 cover attempts sent in the loaded phase. \"Recovered\": the first window")
	fmt.Fprintf(out, "after the outage whose attempts (by when they were sent) succeed in %.0f%% of the share that did in the loaded phase (- never).\n", 100*recoveredShare)
	for i, r := range []*overloadRun{on, off} {
		if r.firstErr != nil {
			fmt.Fprintf(out, "note: lanes %s: other failures, the first: %v\n", onOff(i == 0), r.firstErr)
		}
		if r.scrapeErr != nil {
			fmt.Fprintf(out, "note: lanes %s: a /metrics scrape failed, the first: %v\n", onOff(i == 0), r.scrapeErr)
		}
		if r.gaveUp > 0 {
			fmt.Fprintf(out, "note: lanes %s: %d requests refused on their last attempt, or whose retry fell after the run's end\n", onOff(i == 0), r.gaveUp)
		}
	}

	fon.LanesOff = &foff
	b, err := json.Marshal(fon)
	if err != nil {
		return fmt.Errorf("bench: overload summary: %w", err)
	}
	line := strings.NewReplacer(`":`, `": `, `,"`, `, "`).Replace(string(b))
	_, err = fmt.Fprintln(out, line)
	return err
}

func within2x(f overloadFigures) bool {
	return f.P99AdmittedMs != nil && f.UnloadedMs != nil && *f.P99AdmittedMs <= 2**f.UnloadedMs
}

func verdict(met bool) string {
	if met {
		return "(met)"
	}
	return "(MISSED)"
}

func fmtPct(n, of int64) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

func fmtNum(v *float64) string {
	if v == nil || math.IsNaN(*v) {
		return "-"
	}
	if *v == math.Trunc(*v) {
		return fmt.Sprintf("%.0f", *v)
	}
	return fmt.Sprintf("%.2f", *v)
}
