package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// The targets of the paced client.
const (
	targetRefusedPct = 1.0
	targetGoodputPct = 95.0
)

// clientsFigures are one run's figures in the JSON line; a nil number
// could not be measured and prints as null.
type clientsFigures struct {
	Client string `json:"client"`
	// Sent: the requests that reached the server; Served: those answered
	// 200 without a refusal; Refused: those answered 429 or RATE_LIMITED,
	// and RefusedPct their share of Sent.
	Sent       int64    `json:"sent"`
	Served     int64    `json:"served"`
	Refused    int64    `json:"refused"`
	RefusedPct *float64 `json:"refused_pct"`
	// Abandoned: neither, their client gone (the end of the run); Other:
	// the rest.
	Abandoned int64 `json:"abandoned"`
	Other     int64 `json:"other"`
	// PointsServed: what the admitted operations were debited; Allowed:
	// the burst and the refill over the run; GoodputPct the first ÷ the
	// second, in percent.
	PointsServed int64    `json:"points_served"`
	Allowed      float64  `json:"allowed"`
	GoodputPct   *float64 `json:"goodput_pct"`
	// EarlySends: requests that arrived before the last Retry-After their
	// client was given ran out.
	EarlySends int64 `json:"early_sends"`
	// EarlyRetries: the early sends that were a resend of the refused
	// operation itself, before its own Retry-After ran out.
	EarlyRetries    int64 `json:"early_retries"`
	MutationRetries int64 `json:"mutation_retries"`
	QueryRetries    int64 `json:"query_retries"`
	// At the clients: operations started, served, given up on a refusal,
	// failed.
	Operations int64 `json:"operations"`
	Done       int64 `json:"done"`
	GaveUp     int64 `json:"gave_up"`
	Failed     int64 `json:"failed"`
}

func (r *clientsRun) figures() clientsFigures {
	allowed := r.allowed()
	return clientsFigures{
		Client:          r.kind,
		Sent:            r.sent,
		Served:          r.served,
		Refused:         r.refused,
		RefusedPct:      pct(r.refused, r.sent),
		Abandoned:       r.abandoned,
		Other:           r.other,
		PointsServed:    r.points,
		Allowed:         math.Round(allowed*1000) / 1000,
		GoodputPct:      number(100*float64(r.points)/allowed, allowed > 0),
		EarlySends:      r.early,
		EarlyRetries:    r.earlyRetries,
		MutationRetries: r.mutationRetries,
		QueryRetries:    r.queryRetries,
		Operations:      r.issued,
		Done:            r.done,
		GaveUp:          r.gaveUp,
		Failed:          r.failed,
	}
}

// clientsSummary is the JSON of the scenario's last line.
type clientsSummary struct {
	Clients      int             `json:"clients"`
	DurationS    float64         `json:"duration_s"`
	Burst        int64           `json:"burst"`
	RatePerS     int64           `json:"rate_per_s"`
	DemandFactor int             `json:"demand_factor"`
	Naive        *clientsFigures `json:"naive"`
	Paced        *clientsFigures `json:"paced"`
}

// runClients runs every client kind in turn and prints the table and the
// JSON line.
func runClients(ctx context.Context, o options, stdout, stderr io.Writer) error {
	kinds := clientKinds()
	if len(kinds) == 0 {
		return errNoClientKinds
	}
	var runs []*clientsRun
	for _, k := range kinds {
		fmt.Fprintf(stderr, "bench: clients: %s, %d clients, %v\n", k.name, o.clients.clients, o.clients.duration)
		r, err := runClientsOnce(ctx, o.clients, k)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	return writeClients(stdout, o.clients, runs)
}

// writeClients prints the header, the figures side by side, the targets
// for the paced client, and the JSON line last.
func writeClients(out io.Writer, s clientsSpec, runs []*clientsRun) error {
	fmt.Fprintf(out, "costguard bench, clients: %s\n", goInfo())
	fmt.Fprintln(out, "Server: the example schema behind the limiter in this process, on a loopback port, budgets in memory; one plan")
	fmt.Fprintf(out, "(burst %d points, refill %d points/s: RateLimit-Policy q=%d;w=%d) granted by one API key that the %d clients share,\n",
		clientsBurst, clientsRate, clientsBurst, clientsBurst/clientsRate, s.clients)
	fmt.Fprintf(out, "each with its own http.Client. Together they demand %d× the refill (%d points/s) for %v:\n", clientsDemand, clientsDemand*clientsRate, s.duration)
	var mix []string
	for _, op := range clientOps {
		mix = append(mix, fmt.Sprintf("%d%% %s (%d points)", op.weight, op.name, op.price))
	}
	fmt.Fprintln(out, strings.Join(mix, ", ")+".")
	fmt.Fprintln(out, "naive: plain http.Transport, a refused operation (query or mutation) resent at once until served. paced: the")
	fmt.Fprintln(out, "pacing transport (package client) over a plain http.Transport; a refusal it hands back is given up.")
	fmt.Fprintf(out, "Measured at the server, by a handler in front of the limiter; early: arrived before the client's last Retry-After\n")
	fmt.Fprintf(out, "ran out (counted from when the refusal left the handler, %v tolerance); goodput: points debited to served\n", earlyTolerance)
	fmt.Fprintln(out, "operations (the limiter's Observer, after refunds) ÷ (burst + refill × the run's length).")
	fmt.Fprintln(out)

	figs := make([]clientsFigures, len(runs))
	for i, r := range runs {
		figs[i] = r.figures()
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "figure\t")
	for _, f := range figs {
		fmt.Fprintf(tw, "%s\t", f.Client)
	}
	fmt.Fprintln(tw, "target (paced)\t")
	paced := pacedFigures(figs)
	row := func(name string, target string, v func(clientsFigures) string) {
		fmt.Fprintf(tw, "%s\t", name)
		for _, f := range figs {
			fmt.Fprintf(tw, "%s\t", v(f))
		}
		fmt.Fprintf(tw, "%s\t\n", target)
	}
	count := func(n int64) string { return thousands(float64(n)) }
	target := func(goal string, met func(clientsFigures) bool) string {
		if paced == nil {
			return goal
		}
		return goal + " " + verdict(met(*paced))
	}
	row("sent (at the server)", "", func(f clientsFigures) string { return count(f.Sent) })
	row("served", "", func(f clientsFigures) string { return count(f.Served) })
	row("refused", "", func(f clientsFigures) string { return count(f.Refused) })
	row("other (abandoned at the end)", "", func(f clientsFigures) string {
		return fmt.Sprintf("%s (%s)", count(f.Other+f.Abandoned), count(f.Abandoned))
	})
	row("refused % of sent", target(fmt.Sprintf("≤ %.0f", targetRefusedPct), func(f clientsFigures) bool {
		return f.RefusedPct != nil && *f.RefusedPct <= targetRefusedPct
	}), func(f clientsFigures) string { return fmtNum(f.RefusedPct) })
	row("points served", "", func(f clientsFigures) string { return count(f.PointsServed) })
	row("budget allowed", "", func(f clientsFigures) string { return count(int64(f.Allowed)) })
	row("goodput %", target(fmt.Sprintf("≥ %.0f", targetGoodputPct), func(f clientsFigures) bool {
		return f.GoodputPct != nil && *f.GoodputPct >= targetGoodputPct
	}), func(f clientsFigures) string { return fmtNum(f.GoodputPct) })
	row("early sends", target("0", func(f clientsFigures) bool { return f.EarlySends == 0 }), func(f clientsFigures) string { return count(f.EarlySends) })
	row("… resends of the refused operation", "", func(f clientsFigures) string { return count(f.EarlyRetries) })
	row("mutation retries", target("0", func(f clientsFigures) bool { return f.MutationRetries == 0 }), func(f clientsFigures) string { return count(f.MutationRetries) })
	row("query retries", "", func(f clientsFigures) string { return count(f.QueryRetries) })
	row("operations (clients)", "", func(f clientsFigures) string { return count(f.Operations) })
	row("… served", "", func(f clientsFigures) string { return count(f.Done) })
	row("… given up", "", func(f clientsFigures) string { return count(f.GaveUp) })
	row("… failed", "", func(f clientsFigures) string { return count(f.Failed) })
	tw.Flush()
	for _, r := range runs {
		if r.firstErr != nil {
			fmt.Fprintf(out, "note: %s: %d failures, the first: %v\n", r.kind, r.failed, r.firstErr)
		}
	}
	if paced == nil {
		fmt.Fprintln(out, "note: paced: not run (no pacing transport in this build)")
	}

	sum := clientsSummary{
		Clients: s.clients, DurationS: s.duration.Seconds(),
		Burst: clientsBurst, RatePerS: clientsRate, DemandFactor: clientsDemand,
	}
	for i := range figs {
		switch figs[i].Client {
		case naiveClient.name:
			sum.Naive = &figs[i]
		case pacedName:
			sum.Paced = &figs[i]
		}
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return fmt.Errorf("bench: clients summary: %w", err)
	}
	line := strings.NewReplacer(`":`, `": `, `,"`, `, "`).Replace(string(b))
	_, err = fmt.Fprintln(out, line)
	return err
}

// pacedName names the run of the pacing transport.
const pacedName = "paced"

// pacedFigures is the paced run's figures, nil when it did not run.
func pacedFigures(figs []clientsFigures) *clientsFigures {
	for i := range figs {
		if figs[i].Client == pacedName {
			return &figs[i]
		}
	}
	return nil
}
