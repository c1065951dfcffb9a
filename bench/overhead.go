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
	handlerCostguard
	numHandlers
)

var handlerNames = [numHandlers]string{"bare", "gqlgen-limit", "costguard"}

// overheadLimiterConfig is the limiter the costguard column measures: the
// in-memory store, one anonymous plan whose budget never runs out, with a
// daily quota and a per-field limit configured but never refusing (as the
// issue asks), every other setting (refunds, the cost report, the GraphQL
// limits) its default.
func overheadLimiterConfig() middleware.Config {
	return middleware.Config{
		Plans: map[string]budget.Plan{
			"anon": {Burst: 1_000_000_000_000, Rate: 1_000_000_000_000, Per: time.Second,
				Quota: &budget.Quota{Limit: 1_000_000_000_000_000, Per: 24 * time.Hour}},
		},
		FieldLimits: map[string]budget.FieldLimit{
			"Mutation.createIssue": {Limit: 3, Per: time.Minute},
			"Repository.issues":    {Limit: 1_000_000_000, Per: time.Second},
		},
		AnonymousPlan: "anon",
		Logger:        slog.New(slog.DiscardHandler),
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

// overheadHandlers builds the three handlers; close releases the limiter.
func overheadHandlers() (hs [numHandlers]http.Handler, close func() error, err error) {
	hs[handlerBare] = newGraphQLServer()
	peer := newGraphQLServer()
	peer.Use(extension.FixedComplexityLimit(gqlgenLimit))
	hs[handlerGqlgenLimit] = peer
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

func writeOverhead(out io.Writer, rows []overheadResult, opts options, notes *[]string) {
	fmt.Fprintln(out)
	fmt.Fprintf(out, "End-to-end overhead (example schema, ServeHTTP on httptest recorders, one request at a time): each handler %v per query as %d interleaved rounds, µs/request the median of the rounds; overhead vs bare the median of the per-round ratios (lowest–highest).\n",
		opts.duration, opts.rounds)
	fmt.Fprintf(out, "bare = gqlgen; gqlgen-limit = gqlgen + extension.FixedComplexityLimit(%d); costguard = gqlgen behind the limiter (memory store, a budget that never runs out, a quota and two field limits that never refuse).\n", gqlgenLimit)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "query\thandler\tµs/request\tallocs/request\tB/request\toverhead vs bare")
	for _, row := range rows {
		for i, name := range handlerNames {
			first := ""
			if i == 0 {
				first = row.q.name
			}
			us, over := "n/a", "-"
			if i < len(row.rounds) {
				if m := row.rounds[i].median(); !math.IsNaN(m) {
					us = fmt.Sprintf("%.1f", m/1e3)
				}
				if i != handlerBare {
					if med, lo, hi := row.overheadPct(i); !math.IsNaN(med) {
						over = fmt.Sprintf("%+.1f%% (%+.1f%% to %+.1f%%)", med, lo, hi)
					}
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%s\t%s\n", first, name, us, row.allocs[i], thousands(row.bytes[i]), over)
			if row.errs[i] != nil {
				*notes = append(*notes, fmt.Sprintf("overhead %s: %s failed: %v", row.q.name, name, strings.TrimSpace(row.errs[i].Error())))
			}
		}
	}
	tw.Flush()
}

// overheadOf is costguard's median overhead in percent on the named
// query, NaN when not measured.
func overheadOf(rows []overheadResult, name string) float64 {
	for _, row := range rows {
		if row.q.name == name && row.rounds != nil {
			med, _, _ := row.overheadPct(handlerCostguard)
			return med
		}
	}
	return math.NaN()
}
