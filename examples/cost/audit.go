package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/costguard/costguard/complexity"
)

const auditUsageLine = "usage: cost audit -schema FILE [-schema FILE ...] [analyzer flags] [-plans FILE] [-plan NAME=PLAN ...]\n" +
	"            [-max-cost N] [-baseline FILE] [-json] FILE|GLOB|DIR|- ...\n"

// auditFlags are the flags of cost audit: the analyzer's (without its
// cost limit and breakdown), and the audit's own.
type auditFlags struct {
	flags
	threshold float64 // -max-cost: the most a document may cost at worst
	baseline  string
	plansFile string
	plans     planFlags
	inputs    []string
}

func parseAuditFlags(args []string, stderr io.Writer) (*auditFlags, error) {
	f := &auditFlags{}
	fs := flag.NewFlagSet("cost audit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.analyzerFlags(fs)
	fs.Float64Var(&f.threshold, "max-cost", 0, "exit 1 when a document's worst case exceeds `N` points or is unbounded (0: no limit)")
	fs.StringVar(&f.baseline, "baseline", "", "a previous -json output `FILE`: exit 1 when a document's worst case rose")
	fs.StringVar(&f.plansFile, "plans", "", "YAML `FILE` whose plans: map names plans {burst, rate, per}, as the example server's configuration does")
	fs.Var(&f.plans, "plan", "a plan `NAME={burst: B, rate: R, per: D}` (repeat for several)")
	fs.BoolVar(&f.json, "json", false, "print one JSON object per document and operation (JSON lines)")
	usage, err := parseOrUsage(fs, args, stderr, "cost audit", auditUsageLine)
	if err != nil {
		return nil, err
	}
	f.inputs = fs.Args()
	var problem string
	switch {
	case len(f.schemas) == 0:
		problem = "-schema is required"
	case len(f.inputs) == 0:
		problem = "no documents: name files, globs, directories or manifests"
	case f.negative() || !finite(f.threshold):
		problem = "-default-list-size, -mutation-base-cost, -introspection-cost and the -max-* limits must be finite and not negative"
	}
	if problem != "" {
		fmt.Fprintf(stderr, "cost audit: %s\n", problem)
		usage()
		return nil, errors.New(problem)
	}
	return f, nil
}

// auditResult is the worst case of one operation of one document, or why
// it has none; -json prints it as one line.
type auditResult struct {
	Document  string           `json:"document"`
	Operation *string          `json:"operation"`
	MaxCost   *complexity.Cost `json:"maxCost"`
	// Points is MaxCost rounded up to whole points, what a budget debits.
	Points     *int64          `json:"points"`
	Unbounded  []string        `json:"unbounded"`
	Error      *string         `json:"error"`
	Conditions map[string]bool `json:"conditions,omitempty"`
	Bounds     []string        `json:"bounds,omitempty"`
	Plans      []planFit       `json:"plans,omitempty"`
}

func runAudit(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	f, err := parseAuditFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	plans, err := f.loadPlans()
	if err != nil {
		fmt.Fprintf(stderr, "cost audit: %v\n", err)
		return exitUsage
	}
	var baseline map[auditKey]auditResult
	if f.baseline != "" {
		if baseline, err = readBaseline(f.baseline); err != nil {
			fmt.Fprintf(stderr, "cost audit: %v\n", err)
			return exitUsage
		}
	}
	docs, err := collectDocuments(f.inputs, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "cost audit: %v\n", err)
		return exitUsage
	}
	schema, fails := readSchema(f.schemas)
	if fails != nil {
		return output{stdout: stdout, stderr: stderr}.fail(nil, fails...)
	}
	f.maxCost, f.breakdownLimit = 0, 0 // the audit's -max-cost is a threshold, not a refusal
	analyzer, err := complexity.New(schema, f.options()...)
	if err != nil {
		return output{stdout: stdout, stderr: stderr}.fail(nil, failure{Code: codeInvalidSchema, Message: err.Error()})
	}
	byDoc := auditAll(analyzer, docs)
	nameEntries(docs, byDoc)
	results := slices.Concat(byDoc...)
	for i := range results {
		results[i].Plans = fits(results[i].Points, plans)
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				fmt.Fprintf(stderr, "cost audit: %v\n", err)
				return exitRejected
			}
		}
	} else {
		printAudit(stdout, results, plans)
	}
	return verdict(stderr, results, f.threshold, baseline)
}

// auditAll prices every document, on as many goroutines as there are
// processors, and returns each one's results, in the documents' order.
func auditAll(a *complexity.Analyzer, docs []auditDocument) [][]auditResult {
	out := make([][]auditResult, len(docs))
	workers := min(runtime.GOMAXPROCS(0), len(docs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				out[i] = auditDocumentOps(a, docs[i])
			}
		})
	}
	for i := range docs {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// auditDocumentOps prices each operation of one document at its worst.
func auditDocumentOps(a *complexity.Analyzer, d auditDocument) []auditResult {
	fail := func(msg string) []auditResult {
		msg = strings.TrimSpace(msg) // gqlparser ends its lists with a newline
		return []auditResult{{Document: d.name, Unbounded: []string{}, Error: &msg}}
	}
	if d.err != nil {
		return fail(codeUnreadable + ": " + d.err.Error())
	}
	doc, err := parser.ParseQuery(&ast.Source{Name: d.name, Input: d.body})
	if err != nil {
		return fail(codeParseFailed + ": " + err.Error())
	}
	if errs := validator.Validate(a.Schema(), doc); len(errs) > 0 {
		return fail(codeValidationFailed + ": " + errs.Error())
	}
	if len(doc.Operations) == 0 {
		return fail(codeValidationFailed + ": the document has no operation")
	}
	results := make([]auditResult, 0, len(doc.Operations))
	for _, op := range doc.Operations {
		r := auditResult{Document: d.name, Unbounded: []string{}}
		if op.Name != "" {
			name := op.Name
			r.Operation = &name
		}
		wc, err := a.WorstCase(doc, op)
		var ce *complexity.Error
		switch {
		case errors.As(err, &ce):
			msg := ce.Code + ": " + ce.Message
			r.Error = &msg
		case err != nil:
			msg := codeValidationFailed + ": " + err.Error()
			r.Error = &msg
		default:
			r.Conditions, r.Bounds, r.Unbounded = wc.Conditions, wc.Bounds, wc.Unbounded
			if len(wc.Unbounded) == 0 {
				cost, points := wc.Report.Cost, wc.Report.Points
				r.MaxCost, r.Points = &cost, &points
			}
		}
		results = append(results, r)
	}
	return results
}

// printAudit writes the text report: one row per document and operation,
// a column per plan, then what leaves a document unbounded or failed it.
func printAudit(w io.Writer, results []auditResult, plans []namedPlan) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "DOCUMENT\tOPERATION\tWORST CASE")
	for _, p := range plans {
		fmt.Fprintf(tw, "\t%s", strings.ToUpper(p.name))
	}
	fmt.Fprintln(tw)
	for _, r := range results {
		worst := "unbounded"
		switch {
		case r.Error != nil:
			worst = "error"
		case r.MaxCost != nil:
			worst = r.MaxCost.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s", r.Document, operationName(r.Operation), worst)
		for _, p := range r.Plans {
			fmt.Fprintf(tw, "\t%s", p.describe())
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	for _, r := range results {
		where := r.Document + " " + operationName(r.Operation)
		if r.Error != nil {
			fmt.Fprintf(w, "%s: %s\n", where, *r.Error)
		}
		for _, u := range r.Unbounded {
			fmt.Fprintf(w, "%s: unbounded: %s\n", where, u)
		}
	}
}

func operationName(name *string) string {
	if name == nil {
		return "(anonymous)"
	}
	return *name
}

// verdict reports on stderr each document that fails the audit, and
// returns the exit status: 1 when a document could not be priced,
// exceeds the threshold (when there is one) or is unbounded under it, or
// rose above its baseline.
func verdict(stderr io.Writer, results []auditResult, threshold float64, baseline map[auditKey]auditResult) int {
	failed := 0
	for _, r := range results {
		where := r.Document + " " + operationName(r.Operation)
		var why string
		switch {
		case r.Error != nil:
			why = "could not be priced: " + *r.Error
		case threshold > 0 && r.MaxCost == nil:
			why = fmt.Sprintf("unbounded (%s)", strings.Join(r.Unbounded, "; "))
		case threshold > 0 && r.MaxCost.Float64() > threshold:
			why = fmt.Sprintf("worst case %s exceeds -max-cost %v", r.MaxCost, threshold)
		}
		if rose := roseFrom(baseline, r); rose != "" {
			why = strings.TrimPrefix(why+"; "+rose, "; ")
		}
		if why != "" {
			fmt.Fprintf(stderr, "cost audit: %s: %s\n", where, why)
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "cost audit: %d of %d operations fail the audit\n", failed, len(results))
		return exitRejected
	}
	return exitOK
}
