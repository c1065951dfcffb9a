package main

// The overhead group (-only overhead): what the limiter adds to a request,
// end to end in this process. The example schema (package graph) is served
// by three handlers built as examples/server builds its GraphQL handler
// (gqlgen's handler.New, the POST transport, a query cache so documents are
// parsed and validated once):
//
//   - bare: gqlgen alone, the baseline;
//   - gqlgen-limit: gqlgen with its own extension.FixedComplexityLimit, the
//     peer a gqlgen user reaches for first;
//   - diy: what a gqlgen user writes by hand instead (diy.go): gqlgen's
//     complexity limit, an x/time/rate limiter per client address in a
//     bounded map, and the three X-RateLimit-* headers;
//   - costguard: the limiter of overheadLimiterConfig in front of gqlgen
//     (Limiter.Handler: the Extension and the wrapper).
//
// Each request is a fresh httptest request answered into a fresh
// httptest.ResponseRecorder by ServeHTTP, one at a time; the overhead of a
// handler is its µs per request over bare's, round by round.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/middleware"
)

// overheadQuery is one request body of the overhead group.
type overheadQuery struct {
	name  string
	query string
}

var overheadQueries = []overheadQuery{
	// One root field and one scalar under it: the smallest request that
	// reaches a resolver, where a fixed cost per request shows most.
	{"one-field", `{ user(login: "octocat") { login } }`},
	// The README's "Try it" query (61 points).
	{"readme", `{ user(login: "octocat") { repos(first: 10) { issues(first: 5) { title } } } }`},
}

// The columns, by their index in handlers.
const (
	handlerBare = iota
	handlerGqlgenLimit
	handlerDIY
	handlerCostguard
	numHandlers
)

var handlerNames = [numHandlers]string{"bare", "gqlgen-limit", "diy", "costguard"}

// overheadLimiterConfig is the limiter the costguard column measures: the
// in-memory store, one anonymous plan whose budget never runs out, with a
// daily quota and a per-field limit configured but never refusing (as the
// issue asks), every other setting (refunds, the cost report, the GraphQL
// limits) its default.
func overheadLimiterConfig() (middleware.Dependencies, middleware.Policy) {
	return middleware.Dependencies{Logger: slog.New(slog.DiscardHandler)}, middleware.Policy{
		Plans: map[string]budget.Plan{
			"anon": {Burst: 1_000_000_000_000, Rate: 1_000_000_000_000, Per: time.Second,
				Quota: &budget.Quota{Limit: 1_000_000_000_000_000, Per: 24 * time.Hour}},
		},
		FieldLimits: map[string]budget.FieldLimit{
			"Mutation.createIssue": {Limit: 3, Per: time.Minute},
			"Repository.issues":    {Limit: 1_000_000_000, Per: time.Second},
		},
		AnonymousPlan: "anon",
	}
}

// gqlgenLimit is the peer's complexity limit: far above any query here, so
// it only measures, as the limiter's budget does.
const gqlgenLimit = 1_000_000

// newGraphQLServer is gqlgen serving the example schema, as examples/server
// sets it up for POST requests.
func newGraphQLServer() *handler.Server {
	srv := handler.New(graph.NewResolver().Schema())
	srv.AddTransport(transport.POST{})
	srv.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	return srv
}

// overheadHandlers builds the four handlers; close releases the limiter.
func overheadHandlers() (hs [numHandlers]http.Handler, close func() error, err error) {
	hs[handlerBare] = newGraphQLServer()
	peer := newGraphQLServer()
	peer.Use(extension.FixedComplexityLimit(gqlgenLimit))
	hs[handlerGqlgenLimit] = peer
	diyGQL := newGraphQLServer()
	diyGQL.Use(extension.FixedComplexityLimit(gqlgenLimit))
	diy, err := newDIY(diyGQL, diyClients)
	if err != nil {
		return hs, nil, fmt.Errorf("bench: overhead: %w", err)
	}
	hs[handlerDIY] = diy
	lim, err := middleware.New(overheadLimiterConfig())
	if err != nil {
		return hs, nil, fmt.Errorf("bench: overhead: %w", err)
	}
	hs[handlerCostguard] = lim.Handler(newGraphQLServer())
	return hs, lim.Close, nil
}

// serveCall is one POST /graphql of body through h, checked: a 200 whose
// body holds data and no errors.
func serveCall(h http.Handler, body []byte) call {
	return func() error {
		r := httptest.NewRequest(http.MethodPost, "/graphql", bytes.NewReader(body))
		r.RemoteAddr = "203.0.113.7:40000"
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || !bytes.HasPrefix(w.Body.Bytes(), []byte(`{"data":`)) {
			return fmt.Errorf("status %d: %s", w.Code, w.Body)
		}
		return nil
	}
}

// overheadResult is one query's row group.
type overheadResult struct {
	q      overheadQuery
	rounds []roundsOf
	allocs [numHandlers]float64
	bytes  [numHandlers]float64
	errs   [numHandlers]error
	// instructions per request under callgrind (0: not counted), and why
	// a handler's were not.
	instructions [numHandlers]float64
	insErrs      [numHandlers]error
}

func (e *inEnv) overheadWorkloads(ctx context.Context, r *inReport) error {
	hs, closeLim, err := overheadHandlers()
	if err != nil {
		return err
	}
	defer closeLim()
	for _, q := range overheadQueries {
		body, err := json.Marshal(map[string]string{"query": q.query})
		if err != nil {
			return fmt.Errorf("bench: overhead: %w", err)
		}
		row := overheadResult{q: q}
		calls := make([]call, numHandlers)
		for i, h := range hs {
			c := serveCall(h, body)
			row.allocs[i], row.bytes[i], err = allocsPerCall(c, 200)
			if err != nil {
				row.errs[i] = err
				continue
			}
			calls[i] = c
		}
		e.logf("overhead %s: %d rounds of %v per handler", q.name, e.opts.rounds, e.opts.duration/time.Duration(e.opts.rounds))
		row.rounds, err = interleaveCalls(ctx, calls, e.opts.duration, e.opts.rounds)
		for i := range row.rounds {
			if row.errs[i] == nil {
				row.errs[i] = row.rounds[i].err
			}
		}
		if err == nil && e.opts.instructions {
			err = e.countOverhead(ctx, &row)
		}
		r.overhead = append(r.overhead, row)
		if err != nil {
			return err
		}
	}
	return nil
}

// overheadPct is handler i's time over bare's, in percent, round by round:
// the median, the lowest and the highest.
func (row overheadResult) overheadPct(i int) (med, lo, hi float64) {
	med, lo, hi = ratioRounds(row.rounds[i], row.rounds[handlerBare])
	return 100 * (med - 1), 100 * (lo - 1), 100 * (hi - 1)
}

// addedNs is handler i's ns per request over bare's, round by round (NaN
// where either did not run).
func (row overheadResult) addedNs(i int) []float64 {
	out := make([]float64, len(row.rounds[i].ns))
	for r := range out {
		out[r] = math.NaN()
		if r < len(row.rounds[handlerBare].ns) {
			out[r] = row.rounds[i].ns[r] - row.rounds[handlerBare].ns[r]
		}
	}
	return out
}

// vsDIY is costguard's added time ÷ diy's: the median over the rounds of
// each one's ns per request over bare's in the same round, divided. (A
// ratio per round would divide by diy's small and noisy difference.) NaN
// when either is missing or diy adds nothing.
func (row overheadResult) vsDIY() float64 {
	if len(row.rounds) <= handlerCostguard {
		return math.NaN()
	}
	ours, theirs := medianOf(row.addedNs(handlerCostguard)), medianOf(row.addedNs(handlerDIY))
	if math.IsNaN(ours) || math.IsNaN(theirs) || theirs <= 0 {
		return math.NaN()
	}
	return ours / theirs
}

// instructionsVsDIY is the same ratio from the instructions per request
// counted under callgrind, NaN when not counted.
func (row overheadResult) instructionsVsDIY() float64 {
	bare, diy, ours := row.instructions[handlerBare], row.instructions[handlerDIY], row.instructions[handlerCostguard]
	if bare <= 0 || diy <= bare || ours <= 0 {
		return math.NaN()
	}
	return (ours - bare) / (diy - bare)
}

func writeOverhead(out io.Writer, rows []overheadResult, opts options, notes *[]string) {
	fmt.Fprintln(out)
	fmt.Fprintf(out, "End-to-end overhead (example schema, ServeHTTP on httptest recorders, one request at a time): each handler %v per query as %d interleaved rounds, µs/request the median of the rounds; added µs the median over the rounds of the handler's time − bare's (lowest–highest); overhead vs bare the median of the per-round ratios (lowest–highest).\n",
		opts.duration, opts.rounds)
	fmt.Fprintf(out, "bare = gqlgen; gqlgen-limit = gqlgen + extension.FixedComplexityLimit(%d); diy = gqlgen-limit + an x/time/rate limiter per client address (LRU of %d) + X-RateLimit-Limit/Remaining/Reset; costguard = gqlgen behind the limiter (memory store, a budget that never runs out, a quota and two field limits that never refuse).\n", gqlgenLimit, diyClients)
	if opts.instructions {
		fmt.Fprintf(out, "instructions/request: callgrind, GOGC=off, GOMAXPROCS=1, (instructions of %d requests − of %d) ÷ %d.\n", 2*overheadCountRequests, overheadCountRequests, overheadCountRequests)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "query\thandler\tµs/request\tadded µs\tallocs/request\tB/request\tinstructions/request\toverhead vs bare")
	for _, row := range rows {
		for i, name := range handlerNames {
			first := ""
			if i == 0 {
				first = row.q.name
			}
			us, added, over, ins := "n/a", "-", "-", "-"
			if i < len(row.rounds) {
				if m := row.rounds[i].median(); !math.IsNaN(m) {
					us = fmt.Sprintf("%.1f", m/1e3)
				}
				if i != handlerBare {
					if med, lo, hi := row.overheadPct(i); !math.IsNaN(med) {
						over = fmt.Sprintf("%+.1f%% (%+.1f%% to %+.1f%%)", med, lo, hi)
					}
					if a := row.addedNs(i); !math.IsNaN(medianOf(a)) {
						added = fmt.Sprintf("%+.2f (%+.2f to %+.2f)", medianOf(a)/1e3, minOf(a)/1e3, maxOf(a)/1e3)
					}
				}
			}
			if row.instructions[i] > 0 {
				ins = thousands(row.instructions[i])
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\n", first, name, us, added, row.allocs[i], thousands(row.bytes[i]), ins, over)
			if row.errs[i] != nil {
				*notes = append(*notes, fmt.Sprintf("overhead %s: %s failed: %v", row.q.name, name, strings.TrimSpace(row.errs[i].Error())))
			}
			if row.insErrs[i] != nil {
				*notes = append(*notes, fmt.Sprintf("overhead %s: %s instructions not counted: %v", row.q.name, name, strings.TrimSpace(row.insErrs[i].Error())))
			}
		}
		fmt.Fprintf(tw, "\tcostguard ÷ diy\t\t%s\t%+.1f\t\t%s\t\n", fmtVsDIY(row.vsDIY()), row.allocs[handlerCostguard]-row.allocs[handlerDIY], fmtVsDIY(row.instructionsVsDIY()))
	}
	tw.Flush()
}

// fmtVsDIY is a costguard ÷ diy ratio, "n/a" when not measured.
func fmtVsDIY(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", v)
}

// minOf and maxOf are the lowest and highest values that are not NaN.
func minOf(vs []float64) float64 {
	m := math.Inf(1)
	for _, v := range vs {
		if v < m {
			m = v
		}
	}
	return m
}

func maxOf(vs []float64) float64 {
	m := math.Inf(-1)
	for _, v := range vs {
		if v > m {
			m = v
		}
	}
	return m
}

// overheadRow is the named query's row, nil when not measured.
func overheadRow(rows []overheadResult, name string) *overheadResult {
	for i := range rows {
		if rows[i].q.name == name && rows[i].rounds != nil {
			return &rows[i]
		}
	}
	return nil
}

// overheadOf is costguard's median overhead in percent on the named
// query, NaN when not measured.
func overheadOf(rows []overheadResult, name string) float64 {
	if row := overheadRow(rows, name); row != nil {
		med, _, _ := row.overheadPct(handlerCostguard)
		return med
	}
	return math.NaN()
}

// vsDIYOf is costguard's added time ÷ diy's on the named query (by time,
// or by instructions), NaN when not measured.
func vsDIYOf(rows []overheadResult, name string, instructions bool) float64 {
	row := overheadRow(rows, name)
	switch {
	case row == nil:
		return math.NaN()
	case instructions:
		return row.instructionsVsDIY()
	}
	return row.vsDIY()
}

// allocsOverDIYOf is costguard's allocations per request − diy's on the
// named query, NaN when not measured.
func allocsOverDIYOf(rows []overheadResult, name string) float64 {
	row := overheadRow(rows, name)
	if row == nil || row.errs[handlerCostguard] != nil || row.errs[handlerDIY] != nil {
		return math.NaN()
	}
	return row.allocs[handlerCostguard] - row.allocs[handlerDIY]
}
