package main

// The pricing group (-only pricing): what it costs to price one parsed and
// validated operation on GitHub's public schema, with each pricer on the
// same *ast.OperationDefinition:
//
//   - defaults: complexity's (*Analyzer).AnalyzeOperation on an Analyzer
//     built with the library's defaults, complexity.New(schema): no
//     limits, totals only, as a user of the package prices;
//   - scratch: complexity's (*Analyzer).AnalyzeOperation with the limiter's
//     default options (limiterPricing: its limits checked, totals only, no
//     breakdown), as the limiter calls it on every request;
//   - breakdown: the same with the breakdown Explain computes (up to
//     1,000 FieldCost entries, complexity.DefaultBreakdownLimit), as the
//     explain view prices;
//   - plan: a plan compiled once per document and evaluated per call, when
//     the complexity package offers one (see pricers);
//   - gqlgen: github.com/99designs/gqlgen/complexity.Calculate with no
//     complexity functions (its default model), the peer.
//
// The schema is read from the file -github-schema names (GitHub's public
// schema as octokit/graphql-schema publishes it, less the second definition
// of the seven fields it defines twice, which gqlparser refuses; it is not
// in this repository). The queries are GitHub's documented
// examples (550, 22,060 and 305,100 nodes) and a fragment-heavy query of
// our own (bench/testdata/fragments.graphql).

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	gqlcomplexity "github.com/99designs/gqlgen/complexity"
	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/middleware"
)

// pricingQuery is one operation of the pricing group.
type pricingQuery struct {
	name string
	file string // relative to the repository root
	// nodes is the node count GitHub documents for it (0: none), checked
	// against the analyzer's Totals.Nodes.
	nodes int64
}

var pricingQueries = []pricingQuery{
	{"github-simple", "testdata/cost/github-simple.graphql", 550},
	{"github-complex", "testdata/cost/github-complex.graphql", 22_060},
	{"github-rate-limit", "bench/testdata/github-rate-limit.graphql", 305_100},
	{"fragments", "bench/testdata/fragments.graphql", 0},
}

// limiterPricing are the analyzer options the limiter prices with by
// default (middleware.Policy's GraphQL defaults): the limits checked while
// pricing, totals only.
func limiterPricing() []complexity.Option {
	_, def := middleware.Defaults()
	return []complexity.Option{
		complexity.WithMaxDepth(def.GraphQL.MaxDepth),
		complexity.WithMaxBreadth(def.GraphQL.MaxBreadth),
		complexity.WithMaxNodes(def.GraphQL.MaxNodes),
		complexity.WithMaxAliases(def.GraphQL.MaxAliases),
		complexity.WithMaxRootFields(def.GraphQL.MaxRootFields),
		complexity.WithIntrospectionCost(float64(def.GraphQL.IntrospectionCost)),
		complexity.WithBreakdownLimit(0),
	}
}

// pricer is one column of the pricing table. prepare does what the pricer
// does once per document (nothing from scratch; compiling, for a plan) and
// returns the call that is measured. A nil prepare is a pricer this build
// does not have: its column prints n/a.
type pricer struct {
	name    string
	prepare func(doc *ast.QueryDocument, op *ast.OperationDefinition) (call, error)
}

// The columns, by their index in pricers.
const (
	pricerDefaults = iota
	pricerScratch
	pricerBreakdown
	pricerPlan
	pricerGqlgen
)

// pricers are the contenders on schema: from scratch with the library's
// defaults (defaults) and with the limiter's (a), with the breakdown
// (explain), a plan compiled once and evaluated per call (what the
// middleware does for a document its query cache holds), and gqlgen's
// Calculate.
func pricers(defaults, a, explain *complexity.Analyzer, schema *ast.Schema) []pricer {
	es := gqlgenSchema{schema: schema}
	ctx := context.Background()
	fromScratch := func(a *complexity.Analyzer) func(*ast.QueryDocument, *ast.OperationDefinition) (call, error) {
		return func(doc *ast.QueryDocument, op *ast.OperationDefinition) (call, error) {
			return func() error {
				_, err := a.AnalyzeOperation(doc, op, nil)
				return err
			}, nil
		}
	}
	return []pricer{
		pricerDefaults:  {"defaults", fromScratch(defaults)},
		pricerScratch:   {"scratch", fromScratch(a)},
		pricerBreakdown: {"breakdown", fromScratch(explain)},
		pricerPlan: {"plan", func(doc *ast.QueryDocument, op *ast.OperationDefinition) (call, error) {
			p, err := a.Compile(doc, op)
			if err != nil {
				return nil, err
			}
			return func() error {
				_, err := p.Evaluate(nil)
				return err
			}, nil
		}},
		pricerGqlgen: {"gqlgen", func(_ *ast.QueryDocument, op *ast.OperationDefinition) (call, error) {
			return func() error {
				gqlcomplexity.Calculate(ctx, es, op, nil)
				return nil
			}, nil
		}},
	}
}

// gqlgenSchema is the least graphql.ExecutableSchema gqlgen's Calculate
// accepts: the schema, and no complexity function for any field.
type gqlgenSchema struct{ schema *ast.Schema }

var _ graphql.ExecutableSchema = gqlgenSchema{}

func (s gqlgenSchema) Schema() *ast.Schema { return s.schema }

func (gqlgenSchema) Complexity(context.Context, string, string, int, map[string]any) (int, bool) {
	return 0, false
}

func (gqlgenSchema) Exec(context.Context) graphql.ResponseHandler { return nil }

// pricingResult is one query's row group.
type pricingResult struct {
	q      pricingQuery
	nodes  int64 // the analyzer's Totals.Nodes
	points int64 // the analyzer's price
	gqlgen int   // gqlgen's complexity
	rounds []roundsOf
	allocs []float64 // per pricer, NaN when not measured
	bytes  []float64
	errs   []error
}

// pricingResults is the pricing group's outcome.
type pricingResults struct {
	schemaFile string
	types      int
	names      []string // the pricers' names, by column
	skipped    string   // why the group did not run
	rows       []pricingResult
}

// allocRuns is how many calls the allocation counts average over.
const allocRuns = 20

func (e *inEnv) pricingWorkloads(ctx context.Context, r *inReport) error {
	res := &pricingResults{schemaFile: e.opts.githubSchema}
	r.pricing = res
	if e.opts.githubSchema == "" {
		res.skipped = "no -github-schema given: the pricing group needs GitHub's public schema (the SDL octokit/graphql-schema publishes as schema.graphql, with the second definition of each field it defines twice dropped) and skips without one"
		fmt.Fprintln(e.log, "bench: pricing:", res.skipped)
		return nil
	}
	sdl, err := os.ReadFile(e.opts.githubSchema)
	if err != nil {
		return fmt.Errorf("bench: pricing: %w", err)
	}
	schema, err := complexity.LoadSchema(&ast.Source{Name: filepath.Base(e.opts.githubSchema), Input: string(sdl)})
	if err != nil {
		return fmt.Errorf("bench: pricing: %s: %w", e.opts.githubSchema, err)
	}
	res.types = len(schema.Types)
	defaults, err := complexity.New(schema)
	if err != nil {
		return fmt.Errorf("bench: pricing: %w", err)
	}
	a, err := complexity.New(schema, limiterPricing()...)
	if err != nil {
		return fmt.Errorf("bench: pricing: %w", err)
	}
	explain, err := complexity.New(schema, append(limiterPricing(), complexity.WithBreakdownLimit(complexity.DefaultBreakdownLimit))...)
	if err != nil {
		return fmt.Errorf("bench: pricing: %w", err)
	}
	root, err := repoRoot(ctx)
	if err != nil {
		return fmt.Errorf("bench: pricing: %w", err)
	}
	ps := pricers(defaults, a, explain, schema)
	res.names = make([]string, len(ps))
	for i, p := range ps {
		res.names[i] = p.name
	}
	for _, q := range pricingQueries {
		row, err := measurePricing(ctx, e, schema, a, ps, root, q)
		if err != nil {
			return err
		}
		res.rows = append(res.rows, row)
	}
	return nil
}

func measurePricing(ctx context.Context, e *inEnv, schema *ast.Schema, a *complexity.Analyzer, ps []pricer, root string, q pricingQuery) (pricingResult, error) {
	row := pricingResult{q: q, allocs: nans(len(ps)), bytes: nans(len(ps)), errs: make([]error, len(ps))}
	src, err := os.ReadFile(filepath.Join(root, q.file))
	if err != nil {
		return row, fmt.Errorf("bench: pricing: %w", err)
	}
	doc, errs := gqlparser.LoadQuery(schema, string(src))
	if len(errs) > 0 {
		return row, fmt.Errorf("bench: pricing: %s: %w", q.file, errs)
	}
	op := doc.Operations[0]
	rep, err := a.AnalyzeOperation(doc, op, nil)
	if err != nil {
		return row, fmt.Errorf("bench: pricing: %s: %w", q.file, err)
	}
	row.nodes, row.points = rep.Totals.Nodes, rep.Points
	row.gqlgen = gqlcomplexity.Calculate(ctx, gqlgenSchema{schema: schema}, op, nil)

	calls := make([]call, len(ps))
	for i, p := range ps {
		if p.prepare == nil {
			continue
		}
		c, err := p.prepare(doc, op)
		if err == nil {
			row.allocs[i], row.bytes[i], err = allocsPerCall(c, allocRuns)
		}
		if err != nil {
			row.errs[i] = err
			continue
		}
		calls[i] = c
	}
	e.logf("pricing %s: %d rounds of %v per pricer", q.name, e.opts.rounds, e.opts.duration/time.Duration(e.opts.rounds))
	row.rounds, err = interleaveCalls(ctx, calls, e.opts.duration, e.opts.rounds)
	for i := range row.rounds {
		if row.errs[i] == nil {
			row.errs[i] = row.rounds[i].err
		}
	}
	return row, err
}

func nans(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// ratio is pricer a ÷ pricer b on this query, round by round.
func (row pricingResult) ratio(a, b int) (med, lo, hi float64) {
	if row.rounds == nil {
		return math.NaN(), math.NaN(), math.NaN()
	}
	return ratioRounds(row.rounds[a], row.rounds[b])
}

// worstRatio is the largest median a ÷ b over the queries, NaN unless
// every query has one.
func (res *pricingResults) worstRatio(a, b int) float64 {
	if res == nil || len(res.rows) == 0 {
		return math.NaN()
	}
	worst := math.Inf(-1)
	for _, row := range res.rows {
		med, _, _ := row.ratio(a, b)
		if math.IsNaN(med) {
			return math.NaN()
		}
		worst = max(worst, med)
	}
	return worst
}

func (res *pricingResults) write(out io.Writer, opts options, notes *[]string) {
	fmt.Fprintln(out)
	if res.skipped != "" {
		fmt.Fprintln(out, "Pricing: skipped:", res.skipped)
		return
	}
	fmt.Fprintf(out, "Pricing on GitHub's schema (%s, %d types): each pricer %v per query as %d interleaved rounds, ns/op the median of the rounds; allocations averaged over %d calls.\n",
		filepath.Base(res.schemaFile), res.types, opts.duration, opts.rounds, allocRuns)
	fmt.Fprintln(out, "defaults = AnalyzeOperation on complexity.New(schema), the library's defaults (no limits, totals only); scratch = AnalyzeOperation with the limiter's default limits (totals only); breakdown = the same with Explain's breakdown (the explain view); plan = Compile once, Evaluate per call; gqlgen = gqlgen's complexity.Calculate, default model.")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "query\tnodes\tpoints\tgqlgen complexity\tpricer\tns/op\tallocs/op\tB/op")
	for _, row := range res.rows {
		for i, name := range res.names {
			var first [4]string
			if i == 0 {
				first = [4]string{row.q.name, thousands(float64(row.nodes)), thousands(float64(row.points)), thousands(float64(row.gqlgen))}
			}
			ns, allocs, bytes := "n/a", "n/a", "n/a"
			if i < len(row.rounds) {
				ns = fmtNs(row.rounds[i].median())
			}
			if !math.IsNaN(row.allocs[i]) {
				allocs, bytes = fmt.Sprintf("%.1f", row.allocs[i]), thousands(row.bytes[i])
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", first[0], first[1], first[2], first[3], name, ns, allocs, bytes)
			if row.errs[i] != nil {
				*notes = append(*notes, fmt.Sprintf("pricing %s: %s failed: %v", row.q.name, name, row.errs[i]))
			}
		}
		for _, pr := range []struct {
			label string
			a, b  int
		}{
			{"defaults ÷ gqlgen", pricerDefaults, pricerGqlgen},
			{"scratch ÷ gqlgen", pricerScratch, pricerGqlgen},
			{"breakdown ÷ gqlgen", pricerBreakdown, pricerGqlgen},
			{"plan ÷ gqlgen", pricerPlan, pricerGqlgen},
			{"scratch ÷ plan", pricerScratch, pricerPlan},
		} {
			fmt.Fprintf(tw, "\t\t\t\t%s\t%s\t\t\n", pr.label, fmtRatioRange(row.ratio(pr.a, pr.b)))
		}
		if row.q.nodes > 0 && row.nodes != row.q.nodes {
			*notes = append(*notes, fmt.Sprintf("pricing %s: the analyzer counts %d nodes, GitHub documents %d", row.q.name, row.nodes, row.q.nodes))
		}
	}
	tw.Flush()
	fmt.Fprintf(out, "worst median over the queries: defaults ÷ gqlgen %s, scratch ÷ gqlgen %s\n",
		fmtRatio(res.worstRatio(pricerDefaults, pricerGqlgen)), fmtRatio(res.worstRatio(pricerScratch, pricerGqlgen)))
}
