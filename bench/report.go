package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
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
	// ceilings are Redis's own ceilings for the store's script calls, one
	// per all-admitted workload, in callerCounts order.
	ceilings []ceiling
	// cluster is the store on a Cluster (ours) against one server (peer).
	cluster *comparison
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
	// The Redis path's goals: decisions/s and p99 ours ÷ redis_rate's at 1,
	// 8 and 64 callers (the 64-caller speedup is admitted_speedup_64).
	AdmittedSpeedup1 *float64 `json:"admitted_speedup_1"`
	AdmittedSpeedup8 *float64 `json:"admitted_speedup_8"`
	P99Ratio1        *float64 `json:"p99_ratio_1"`
	P99Ratio8        *float64 `json:"p99_ratio_8"`
	P99Ratio64       *float64 `json:"p99_ratio_64"`
	// Redis's own ceiling for the store's recorded script calls of each
	// workload (decisions/s), and the store's decisions/s ÷ it.
	RedisCeiling1     *float64 `json:"redis_ceiling_1"`
	RedisCeiling8     *float64 `json:"redis_ceiling_8"`
	RedisCeiling64    *float64 `json:"redis_ceiling_64"`
	CeilingFraction1  *float64 `json:"ceiling_fraction_1"`
	CeilingFraction8  *float64 `json:"ceiling_fraction_8"`
	CeilingFraction64 *float64 `json:"ceiling_fraction_64"`
	// The store on a 3-master Cluster ÷ on one server, 64 callers.
	ClusterVsSingle64 *float64 `json:"cluster_vs_single_64"`
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
			s.P99Ratio64 = p99Ratio(c)
		case c.callers == 1:
			s.AdmittedSpeedup1 = number(c.ratio(), c.ratio() > 0)
			s.P99Ratio1 = p99Ratio(c)
		case c.callers == 8:
			s.AdmittedSpeedup8 = number(c.ratio(), c.ratio() > 0)
			s.P99Ratio8 = p99Ratio(c)
		}
	}
	for _, cl := range r.ceilings {
		rate, frac := cl.t.rate(), r.ceilingFraction(cl)
		switch cl.callers {
		case 1:
			s.RedisCeiling1, s.CeilingFraction1 = number(rate, rate > 0), number(frac, frac > 0)
		case 8:
			s.RedisCeiling8, s.CeilingFraction8 = number(rate, rate > 0), number(frac, frac > 0)
		case maxCallers:
			s.RedisCeiling64, s.CeilingFraction64 = number(rate, rate > 0), number(frac, frac > 0)
		}
	}
	if c := r.cluster; c != nil {
		s.ClusterVsSingle64 = number(c.ratio(), c.ratio() > 0)
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
	if len(r.ceilings) > 0 {
		r.writeCeilings(out, &notes)
	}
	if r.cluster != nil {
		r.writeCluster(out, &notes)
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
	fmt.Fprintln(tw, "Redis\tcallers\tlimiter\tdecisions/s\tper round\tp50\tp99\tscripts/decision\ttrips/decision\tadmitted\terrors")
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", first, callers, name, thousands(t.rate()), roundsText(t),
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
		fmt.Fprintf(tw, "\t\tours ÷ theirs\t%s\t\t%s\t%s\t\t\t\t\n", fmtRatio(c.ratio()),
			fmtRatio(ratioOf(c.ours.lat.quantile(0.50), c.peer.lat.quantile(0.50))),
			fmtRatio(ratioOf(c.ours.lat.quantile(0.99), c.peer.lat.quantile(0.99))))
	}
	tw.Flush()
}

// p99Ratio is ours ÷ theirs at p99, nil when either is missing.
func p99Ratio(c comparison) *float64 {
	if c.ours.lat == nil || c.peer.lat == nil {
		return nil
	}
	v := ratioOf(c.ours.lat.quantile(0.99), c.peer.lat.quantile(0.99))
	return number(v, v > 0)
}

// ceilingFraction is the store's decisions/s in cl's workload ÷ cl's.
func (r *report) ceilingFraction(cl ceiling) float64 {
	for _, c := range r.redis {
		if !c.bot && c.callers == cl.callers && cl.t.rate() > 0 {
			return c.ours.rate() / cl.t.rate()
		}
	}
	return 0
}

// roundsText is a tally's per-round decisions/s: median and range.
func roundsText(t tally) string {
	if len(t.rounds) == 0 {
		return "-"
	}
	v := slices.Sorted(slices.Values(t.rounds))
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return fmt.Sprintf("%s (%s–%s)", thousands(med), thousands(v[0]), thousands(v[len(v)-1]))
}

// writeCeilings prints Redis's own ceiling for each workload's recorded
// script calls next to the store's figure.
func (r *report) writeCeilings(out io.Writer, notes *[]string) {
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Redis ceiling: the store's script calls of each all-admitted workload, recorded as sent, replayed back to back")
	fmt.Fprintf(out, "(%d pipelines of %d calls in flight, no limiter); decisions/s per round as median (range).\n", ceilingWorkers, ceilingDepth)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "callers\tcalls recorded\tkeys/call\tceiling decisions/s\tper round\tcostguard decisions/s\tper round\tfraction of ceiling\terrors")
	for _, cl := range r.ceilings {
		ours := tally{}
		for _, c := range r.redis {
			if !c.bot && c.callers == cl.callers {
				ours = c.ours
			}
		}
		fmt.Fprintf(tw, "%d\t%d\t%.1f\t%s\t%s\t%s\t%s\t%s\t%d\n", cl.callers, cl.calls, cl.keysPerCall(),
			thousands(cl.t.rate()), roundsText(cl.t), thousands(ours.rate()), roundsText(ours),
			fmtRatio(r.ceilingFraction(cl)), cl.t.errors)
		if cl.t.errors > 0 {
			*notes = append(*notes, fmt.Sprintf("ceiling, %d callers: %d script calls failed, the first: %v", cl.callers, cl.t.errors, cl.t.firstErr))
		}
	}
	tw.Flush()
}

// writeCluster prints the store on a Cluster against one server.
func (r *report) writeCluster(out io.Writer, notes *[]string) {
	c := r.cluster
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Redis Cluster\tcallers\tdeployment\tdecisions/s\tper round\tp50\tp99\tscripts/decision\ttrips/decision\terrors")
	for i, t := range []tally{c.ours, c.peer} {
		name, first, callers := c.oursName, c.workload, strconv.Itoa(c.callers)
		if i == 1 {
			name, first, callers = c.peerName, "", ""
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", first, callers, name, thousands(t.rate()), roundsText(t),
			fmtLatency(t.lat.quantile(0.50)), fmtLatency(t.lat.quantile(0.99)),
			fmtPerDecision(t.perDecision(t.scripts)), fmtPerDecision(t.perDecision(t.trips)), t.errors)
		*notes = appendErrNote(*notes, *c, name, t)
	}
	fmt.Fprintf(tw, "\t\tCluster ÷ one server\t%s\t\t\t\t\t\t\n", fmtRatio(c.ratio()))
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
