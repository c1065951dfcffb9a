package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// report collects every workload's results and prints them.
type report struct {
	env    *env
	redis  []comparison
	memory []comparison
	split  []splitResult
	// callgrind is set when that group ran.
	callgrind *callgrindResults
}

// summary is the JSON object of the last line. A nil field could not be
// measured and prints as null.
type summary struct {
	AdmittedSpeedup64 *float64 `json:"admitted_speedup_64"`
	BotSpeedup        *float64 `json:"bot_speedup"`
	RoundTrips64      *float64 `json:"round_trips_per_decision_64"`
	MemoryVsXTime     *float64 `json:"memory_vs_xtime"`
	SplitOvershootPct *float64 `json:"split_overshoot_pct"`
}

// number rounds v to 3 decimals for the JSON; nil unless v is a finite
// measured value (ok).
func number(v float64, ok bool) *float64 {
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	r := math.Round(v*1000) / 1000
	return &r
}

func (r *report) summary() summary {
	var s summary
	for _, c := range r.redis {
		switch {
		case c.bot:
			s.BotSpeedup = number(c.ratio(), c.ratio() > 0)
		case c.callers == maxCallers:
			s.AdmittedSpeedup64 = number(c.ratio(), c.ratio() > 0)
			spd := c.ours.perDecision(c.ours.scripts)
			s.RoundTrips64 = number(spd, spd >= 0)
		}
	}
	for _, c := range r.memory {
		if c.callers == 1 {
			s.MemoryVsXTime = number(c.ratio(), c.ratio() > 0)
		}
	}
	for _, sr := range r.split {
		if !sr.kind.exact {
			s.SplitOvershootPct = number(sr.overshootPct(), sr.allowed() > 0 && sr.decisions > 0)
		}
	}
	return s
}

// write prints the table, notes on anything that went wrong, and the JSON
// summary as the last line.
func (r *report) write(out io.Writer) error {
	e := r.env
	where := "given with -redis"
	if e.started {
		where = "started by the bench"
	}
	fmt.Fprintf(out, "costguard bench: %s; redis-server %s at %s (%s)\n", goInfo(), e.version, e.addr, where)
	fmt.Fprintf(out, "Every cell: %v per limiter, as %d interleaved rounds. costguard = %s; redis_rate = go-redis/redis_rate v10 AllowN.\n",
		e.opts.duration, e.opts.rounds, oursRedisName)
	var notes []string

	if len(r.redis) > 0 {
		r.writeRedis(out, &notes)
	}
	if len(r.memory) > 0 {
		r.writeMemory(out, &notes)
	}
	if len(r.split) > 0 {
		r.writeSplit(out, &notes)
	}
	if r.callgrind != nil {
		r.writeCallgrind(out, &notes)
	}
	if len(notes) > 0 {
		fmt.Fprintln(out)
		for _, n := range notes {
			fmt.Fprintln(out, "note:", n)
		}
	}
	b, err := json.Marshal(r.summary())
	if err != nil {
		return fmt.Errorf("bench: summary: %w", err)
	}
	// The contract's spacing: a space after each colon and comma.
	line := strings.NewReplacer(`":`, `": `, `,"`, `, "`).Replace(string(b))
	_, err = fmt.Fprintln(out, line)
	return err
}

func (r *report) writeRedis(out io.Writer, notes *[]string) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Redis\tcallers\tlimiter\tdecisions/s\tp50\tp99\tscripts/decision\ttrips/decision\tadmitted\terrors")
	for _, c := range r.redis {
		for i, t := range []tally{c.ours, c.peer} {
			name, first := c.oursName, c.workload
			if i == 1 {
				name, first = c.peerName, ""
			}
			callers := strconv.Itoa(c.callers)
			if i == 1 {
				callers = ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", first, callers, name, thousands(t.rate()),
				fmtLatency(t.lat.quantile(0.50)), fmtLatency(t.lat.quantile(0.99)),
				fmtPerDecision(t.perDecision(t.scripts)), fmtPerDecision(t.perDecision(t.trips)),
				fmtAdmitted(t, c.bot), t.errors)
			if c.bot && float64(t.admitted) > botAllowed(t) {
				*notes = append(*notes, fmt.Sprintf("scrape bot: %s admitted %d, more than the %.0f the budget allows", name, t.admitted, botAllowed(t)))
			}
			*notes = appendErrNote(*notes, c, name, t)
			if !c.bot && t.decisions > 0 && t.admitted != t.decisions {
				*notes = append(*notes, fmt.Sprintf("%s, %d callers: %s admitted %d of %d decisions; the workload expects all", c.workload, c.callers, name, t.admitted, t.decisions))
			}
		}
		fmt.Fprintf(tw, "\t\tours ÷ theirs\t%s\t%s\t%s\t\t\t\t\n", fmtRatio(c.ratio()),
			fmtRatio(ratioOf(c.ours.lat.quantile(0.50), c.peer.lat.quantile(0.50))),
			fmtRatio(ratioOf(c.ours.lat.quantile(0.99), c.peer.lat.quantile(0.99))))
	}
	tw.Flush()
}

func (r *report) writeMemory(out io.Writer, notes *[]string) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Memory\tcallers\tlimiter\tdecisions/s\tns/decision\terrors")
	for _, c := range r.memory {
		for i, t := range []tally{c.ours, c.peer} {
			name, first, callers := c.oursName, c.workload, strconv.Itoa(c.callers)
			if i == 1 {
				name, first, callers = c.peerName, "", ""
			}
			ns := "-"
			if t.rate() > 0 {
				ns = fmt.Sprintf("%.0f", 1e9/t.rate())
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", first, callers, name, thousands(t.rate()), ns, t.errors)
			*notes = appendErrNote(*notes, c, name, t)
		}
		fmt.Fprintf(tw, "\t\tours ÷ theirs\t%s\t\t\n", fmtRatio(c.ratio()))
	}
	tw.Flush()
}

func (r *report) writeSplit(out io.Writer, notes *[]string) {
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Shared budget: %d processes × %d callers on one fresh key, token bucket of %d + %d/s, %v\n",
		splitProcesses, splitCallers, splitLimit.Burst, splitLimit.Rate, r.env.opts.duration)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "store\tdecisions\tadmitted\tallowed\tovershoot\tworst window\tbound\terrors")
	for _, sr := range r.split {
		excess, length := sr.worstWindow()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%+.2f%%\t%+.0f tokens in %v\t%d\t%d\n", sr.kind.desc, thousands(float64(sr.decisions)),
			thousands(float64(sr.admitted)), sr.allowed(), sr.overshootPct(), excess, length, splitProcesses*sr.leaseSize, sr.errors)
		if sr.errors > 0 {
			*notes = append(*notes, fmt.Sprintf("shared budget, %s: %d errors, the first: %s", sr.kind.desc, sr.errors, sr.firstErr))
		}
	}
	tw.Flush()
	if !hasSplitBudget(r.split) {
		fmt.Fprintln(out, "split budget: not measured, this checkout has no split-budget store (limiter/splitbudget)")
	}
}

func hasSplitBudget(rs []splitResult) bool {
	for _, r := range rs {
		if !r.kind.exact {
			return true
		}
	}
	return false
}

func appendErrNote(notes []string, c comparison, name string, t tally) []string {
	if t.errors == 0 {
		return notes
	}
	return append(notes, fmt.Sprintf("%s, %d callers: %s had %d errors, the first: %v", c.workload, c.callers, name, t.errors, t.firstErr))
}

// ratioOf is a ÷ b for latencies, 0 when either is missing.
func ratioOf(a, b time.Duration) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func fmtRatio(v float64) string {
	switch {
	case v <= 0:
		return "-"
	case v < 0.01:
		return "1/" + thousands(1/v)
	case v >= 100:
		return fmt.Sprintf("%.0f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

func fmtLatency(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 10*time.Microsecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	default:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
}

func fmtPerDecision(v float64) string {
	switch {
	case v < 0:
		return "-"
	case v > 0 && v < 0.001:
		return fmt.Sprintf("%.1e", v)
	}
	return fmt.Sprintf("%.4f", v)
}

// fmtAdmitted is the share admitted, or for the bot the admissions and
// the most its budget allows over the rounds' span.
func fmtAdmitted(t tally, bot bool) string {
	if t.decisions == 0 {
		return "-"
	}
	if bot {
		return fmt.Sprintf("%d of ≤%.0f", t.admitted, botAllowed(t))
	}
	return fmt.Sprintf("%.2f%%", 100*float64(t.admitted)/float64(t.decisions))
}

// botAllowed is the most the bot's token bucket admits from the start of
// its first run to the end of its last: a full bucket, then the refill
// (it refills during the other contender's runs too).
func botAllowed(t tally) float64 {
	return float64(botLimit.Burst) + float64(botLimit.Rate)*t.to.Sub(t.from).Seconds()/botLimit.Period.Seconds()
}

// thousands formats v rounded to an integer with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
