// Command cost prices a GraphQL operation against a schema and explains the
// price: the totals (cost, depth, nodes) and a tree of every field with its
// multiplier and cost. It is the complexity package on the command line.
//
//	go run ./examples/cost -schema FILE [-schema FILE ...] -query FILE|- \
//	    [-variables FILE] [-operation NAME] [-default-list-size N] \
//	    [-mutation-base-cost N] [-first-last-convention=false] \
//	    [-connection-convention=false] [-count-argument-convention=false] \
//	    [-key-list-convention=false] [-mutation-list-convention=false] \
//	    [-free-introspection=false] [-introspection-cost N] \
//	    [-subtree-discounts] [-null-arguments-charged] [-list-sizes FILE] \
//	    [-max-depth N] [-max-breadth N] [-max-nodes N] \
//	    [-max-cost N] [-max-aliases N] [-max-root-fields N] \
//	    [-breakdown-limit N] [-breakdown-bytes N] [-json]
//
// Every analyzer option has a flag, with the library's default, but for
// -breakdown-limit: the command explains the price, so it lists up to
// complexity.DefaultBreakdownLimit fields, as Analyzer.Explain does, where
// the library builds no breakdown unless asked; 0 prints the totals only.
//
// Schemas may use @cost and @listSize without declaring them, or declare them
// with weight: String! (IBM) or weight: Int! (Apollo federation).
//
// Two flags take a peer's rule where the models differ: -subtree-discounts
// lets a field's negative own cost (a negative argument or field weight)
// discount what the field returns, where by default only the field's own
// cost is clamped at 0; -null-arguments-charged charges an explicit null
// the weight of its place, where by default it costs nothing.
//
// Introspection is free, as in the library's default, unless
// -free-introspection=false prices it like any other field; -introspection-cost
// charges each __schema or __type selection on top. Either way it counts
// toward depth, nodes, aliases and root fields.
//
// With -json the report is one JSON object: complexity.Report's fields, and
// "operation" always, the operation's name or null for an anonymous one.
//
// Exit status: 0 with the report on stdout; 1 when the operation is rejected
// (a limit, a slicing-argument rule) or the schema, query or variables are
// invalid, with the errors on stderr, or with -json as
// {"errors": [{"code", "message", "locations"}], …totals when known} on
// stdout; 2 for wrong usage, with the usage text on stderr. A refused
// variable is named with the type expected and the value sent
// ("variable $n: 2.5 is not a valid Int").
//
// cost audit prices many documents at once, without variables, each
// operation at its worst case over every value of them
// (complexity.Analyzer.WorstCase):
//
//	go run ./examples/cost audit -schema FILE [-schema FILE ...] [analyzer flags] \
//	    [-plans FILE] [-plan NAME={burst: B, rate: R, per: D} ...] \
//	    [-max-cost N] [-baseline FILE] [-json] FILE|GLOB|DIR|- ...
//
// It reads GraphQL files, globs, directories (their .graphql and .gql
// files) and manifests (.json: Apollo's persisted query manifest, or an
// object of id to document as Relay and the trusted-documents manifest
// write it). It takes the analyzer flags above but -max-cost, which is the
// audit's threshold, and -breakdown-*. With -plans (the plans: map of a
// YAML file shaped like the example server's) or -plan it says whether
// each worst case fits each plan's burst and how many fit per period.
// -json prints one object per document and operation, one per line:
// "document", "operation", "maxCost" (null when unbounded), "points",
// "unbounded" (what leaves it open), "error", "conditions", "bounds",
// "plans". It exits 1 when a document cannot be priced, exceeds -max-cost
// or is unbounded under it, or rose above -baseline (a previous -json
// output); 2 for wrong usage.
//
// cost list-sizes reads what a server recorded of the lists it priced at
// an assumed size (its admin API's GET /admin/list-sizes, or files holding
// that answer, merged) and prints the sizes to assume, as a table and
// @listSize lines, or with -json as the map complexity.WithAssumedSizes
// takes:
//
//	go run ./examples/cost list-sizes [-admin URL [-token-file FILE]] \
//	    [-min-responses N] [-json] [FILE|- ...]
//
// It exits 1 when a source cannot be read or is not that answer, 2 for
// wrong usage.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/costguard/costguard/complexity"
)

// Exit statuses.
const (
	exitOK       = 0
	exitRejected = 1
	exitUsage    = 2
)

// Codes for input the command cannot price. Limit and slicing-argument codes
// come from the complexity package.
const (
	codeUnreadable       = "INPUT_UNREADABLE"
	codeInvalidSchema    = "INVALID_SCHEMA"
	codeParseFailed      = "GRAPHQL_PARSE_FAILED"
	codeValidationFailed = "GRAPHQL_VALIDATION_FAILED"
	codeInvalidVariables = "INVALID_VARIABLES"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

type flags struct {
	schemas           stringList
	query             string
	variables         string
	operation         string
	defaultListSize   int
	mutationBaseCost  float64
	firstLast         bool
	connections       bool
	countArguments    bool
	keyLists          bool
	mutationLists     bool
	freeIntrospection bool
	introspection     float64 // points per __schema or __type selection
	subtreeDiscounts  bool
	nullsCharged      bool
	listSizes         listSizesFile
	maxDepth          int
	maxBreadth        int
	maxNodes          int64
	maxCost           float64
	maxAliases        int
	maxRootFields     int
	breakdownLimit    int
	breakdownBytes    int64
	json              bool
}

// options are the analyzer options the flags ask for.
func (f *flags) options() []complexity.Option {
	return []complexity.Option{
		complexity.WithDefaultListSize(f.defaultListSize),
		complexity.WithMutationBaseCost(f.mutationBaseCost),
		complexity.WithFirstLastConvention(f.firstLast),
		complexity.WithConnectionConvention(f.connections),
		complexity.WithCountArgumentConvention(f.countArguments),
		complexity.WithKeyListConvention(f.keyLists),
		complexity.WithMutationListConvention(f.mutationLists),
		complexity.WithFreeIntrospection(f.freeIntrospection),
		complexity.WithIntrospectionCost(f.introspection),
		complexity.WithSubtreeDiscounts(f.subtreeDiscounts),
		complexity.WithNullArgumentsCharged(f.nullsCharged),
		complexity.WithAssumedSizes(f.listSizes.sizes),
		complexity.WithMaxDepth(f.maxDepth),
		complexity.WithMaxBreadth(f.maxBreadth),
		complexity.WithMaxNodes(f.maxNodes),
		complexity.WithMaxCost(f.maxCost),
		complexity.WithMaxAliases(f.maxAliases),
		complexity.WithMaxRootFields(f.maxRootFields),
		complexity.WithBreakdownLimit(f.breakdownLimit),
		complexity.WithBreakdownBytes(f.breakdownBytes),
	}
}

const usageLine = "usage: cost -schema FILE [-schema FILE ...] -query FILE|- [-variables FILE] [-operation NAME]\n" +
	"            [-default-list-size N] [-mutation-base-cost N] [-first-last-convention=false]\n" +
	"            [-connection-convention=false] [-count-argument-convention=false]\n" +
	"            [-key-list-convention=false] [-mutation-list-convention=false]\n" +
	"            [-free-introspection=false] [-introspection-cost N]\n" +
	"            [-subtree-discounts] [-null-arguments-charged] [-list-sizes FILE]\n" +
	"            [-max-depth N] [-max-breadth N] [-max-nodes N] [-max-cost N] [-max-aliases N]\n" +
	"            [-max-root-fields N] [-breakdown-limit N] [-breakdown-bytes N] [-json]\n" +
	"       cost audit -h   prices many documents without variables, at their worst case\n"

// parseFlags returns the flags, or a usage problem to report with exit 2.
func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("cost", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.analyzerFlags(fs)
	fs.StringVar(&f.query, "query", "", "operation document `FILE`, or - for stdin")
	fs.StringVar(&f.variables, "variables", "", "variables JSON `FILE`")
	fs.StringVar(&f.operation, "operation", "", "`NAME` of the operation to price (needed when the document has several)")
	fs.Float64Var(&f.maxCost, "max-cost", 0, "reject operations costing more than `N` points (0: no limit)")
	fs.IntVar(&f.breakdownLimit, "breakdown-limit", complexity.DefaultBreakdownLimit, "list at most `N` fields in the explain view (0: totals only, the library's default)")
	fs.Int64Var(&f.breakdownBytes, "breakdown-bytes", complexity.DefaultBreakdownBytes, "stop the explain view once its paths hold `N` bytes (0: no cap)")
	fs.BoolVar(&f.json, "json", false, "print one JSON object instead of the text report")
	usage, err := parseOrUsage(fs, args, stderr, "cost", usageLine)
	if err != nil {
		return nil, err
	}
	var problem string
	switch {
	case len(f.schemas) == 0:
		problem = "-schema is required"
	case f.query == "":
		problem = "-query is required"
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	case f.negative():
		problem = "-default-list-size, -mutation-base-cost, -introspection-cost, -breakdown-limit, -breakdown-bytes and the -max-* limits must be finite and not negative"
	}
	if problem != "" {
		fmt.Fprintf(stderr, "cost: %s\n", problem)
		usage()
		return nil, errors.New(problem)
	}
	return f, nil
}

// parseOrUsage parses args into fs; on a parse error (or -h) it prints the
// error and the usage text to stderr. The usage function it returns prints
// that text again, for a problem found after parsing.
func parseOrUsage(fs *flag.FlagSet, args []string, stderr io.Writer, command, line string) (usage func(), err error) {
	usage = func() {
		fmt.Fprint(stderr, line+"\n")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "%s: %v\n", command, err)
		}
		usage()
		return nil, err
	}
	return usage, nil
}

// analyzerFlags registers the flags both forms of the command take: the
// schema and the analyzer options but -max-cost and the breakdown's.
func (f *flags) analyzerFlags(fs *flag.FlagSet) {
	fs.Var(&f.schemas, "schema", "schema SDL `FILE` (repeat for several files)")
	fs.IntVar(&f.defaultListSize, "default-list-size", complexity.DefaultListSize, "`N` assumed for lists with no slicing argument or assumedSize")
	fs.Float64Var(&f.mutationBaseCost, "mutation-base-cost", complexity.DefaultMutationBaseCost, "`N` points every mutation costs before its fields")
	fs.BoolVar(&f.firstLast, "first-last-convention", true, "read first and last as slicing arguments on fields without @listSize (=false: off)")
	fs.BoolVar(&f.connections, "connection-convention", true, "let …Connection types hand their size to edges and nodes (=false: off)")
	fs.BoolVar(&f.countArguments, "count-argument-convention", true, "read Int arguments named like a count (limit, maxRepositories, batch_size…) as slicing arguments, and let a type with one list take its parent's size (=false: off)")
	fs.BoolVar(&f.keyLists, "key-list-convention", true, "size a list field by the length of its representations, ids or keys argument (=false: off)")
	fs.BoolVar(&f.mutationLists, "mutation-list-convention", true, "size what a mutation returns by the length of its list arguments (=false: off)")
	fs.BoolVar(&f.freeIntrospection, "free-introspection", true, "__typename, __schema, __type and the fields beneath them cost 0 (=false: priced like any field)")
	fs.BoolVar(&f.subtreeDiscounts, "subtree-discounts", false, "let a negative own cost (argument or field weights) discount what its field returns, not only the field itself")
	fs.BoolVar(&f.nullsCharged, "null-arguments-charged", false, "charge an explicit null the weight of its argument or input field (its @cost, else its type's weight)")
	fs.Var(&f.listSizes, "list-sizes", "JSON `FILE` of list field coordinate to assumed size (what cost list-sizes -json prints), as @listSize(assumedSize:) on each field")
	fs.IntVar(&f.maxDepth, "max-depth", 0, "reject operations deeper than `N` (0: no limit)")
	fs.IntVar(&f.maxBreadth, "max-breadth", 0, "reject slicing arguments above `N` (0: no limit)")
	fs.Int64Var(&f.maxNodes, "max-nodes", 0, "reject operations that may return more than `N` nodes (0: no limit)")
	fs.IntVar(&f.maxAliases, "max-aliases", 0, "reject operations with more than `N` aliased fields, introspection included (0: no limit)")
	fs.IntVar(&f.maxRootFields, "max-root-fields", 0, "reject operations selecting more than `N` root fields, __typename, __schema and __type included (0: no limit)")
	fs.Float64Var(&f.introspection, "introspection-cost", 0, "charge `N` points for each __schema or __type selection, per response key, on top of its fields")
}

// negative reports whether a number flag is negative, NaN or infinite.
func (f *flags) negative() bool {
	return f.defaultListSize < 0 || !finite(f.mutationBaseCost) || !finite(f.introspection) || f.breakdownLimit < 0 || f.breakdownBytes < 0 ||
		f.maxDepth < 0 || f.maxBreadth < 0 || f.maxNodes < 0 || !finite(f.maxCost) || f.maxAliases < 0 || f.maxRootFields < 0
}

// finite reports whether a points flag is a usable number: not negative,
// not NaN, not infinite.
func finite(points float64) bool {
	return points >= 0 && !math.IsInf(points, 1)
}

// failure is one entry of the errors document for input the command could
// not price. locations is always present, possibly empty.
type failure struct {
	Code      string                `json:"code"`
	Message   string                `json:"message"`
	Locations []complexity.Location `json:"locations"`
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "audit" {
		return runAudit(args[1:], stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "list-sizes" {
		return runListSizes(args[1:], stdin, stdout, stderr)
	}
	f, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	out := output{json: f.json, stdout: stdout, stderr: stderr}

	schema, fails := readSchema(f.schemas)
	if fails != nil {
		return out.fail(nil, fails...)
	}
	analyzer, err := complexity.New(schema, f.options()...)
	if err != nil {
		return out.fail(nil, failure{Code: codeInvalidSchema, Message: err.Error()})
	}

	name := f.query
	var query []byte
	if f.query == "-" {
		name = "stdin"
		query, err = io.ReadAll(stdin)
	} else {
		query, err = os.ReadFile(f.query)
	}
	if err != nil {
		return out.fail(nil, failure{Code: codeUnreadable, Message: err.Error()})
	}
	doc, err := parser.ParseQuery(&ast.Source{Name: name, Input: string(query)})
	if err != nil {
		return out.fail(nil, gqlFailures(codeParseFailed, err)...)
	}
	if errs := validator.Validate(schema, doc); len(errs) > 0 {
		return out.fail(nil, gqlFailures(codeValidationFailed, errs)...)
	}
	op, fail := selectOperation(doc, f.operation)
	if fail != nil {
		return out.fail(nil, *fail)
	}

	var raw map[string]any
	var rawJSON []byte
	if f.variables != "" {
		rawJSON, err = os.ReadFile(f.variables)
		if err != nil {
			return out.fail(nil, failure{Code: codeUnreadable, Message: err.Error()})
		}
		if raw, err = decodeVariables(rawJSON); err != nil {
			return out.fail(nil, failure{Code: codeInvalidVariables, Message: fmt.Sprintf("%s: not a JSON object: %v", f.variables, err)})
		}
	}
	vars, err := validator.VariableValues(schema, op, raw)
	if err != nil {
		return out.fail(nil, variableFailure(schema, op, rawJSON, err))
	}

	report, err := analyzer.AnalyzeOperation(doc, op, vars)
	var ce *complexity.Error
	switch {
	case errors.As(err, &ce):
		return out.fail(ce.Totals, rejection{Error: ce, Locations: append([]complexity.Location{}, ce.Locations...)})
	case err != nil:
		return out.fail(nil, failure{Code: codeValidationFailed, Message: err.Error()})
	}
	return out.report(report)
}

// readSchema loads the schema files, or says why it cannot.
func readSchema(paths []string) (*ast.Schema, []any) {
	var sources []*ast.Source
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, []any{failure{Code: codeUnreadable, Message: err.Error()}}
		}
		sources = append(sources, &ast.Source{Name: path, Input: string(b)})
	}
	schema, err := complexity.LoadSchema(sources...)
	if err != nil {
		return nil, gqlFailures(codeInvalidSchema, err)
	}
	return schema, nil
}

func selectOperation(doc *ast.QueryDocument, name string) (*ast.OperationDefinition, *failure) {
	if name != "" {
		if op := doc.Operations.ForName(name); op != nil {
			return op, nil
		}
		return nil, &failure{Code: codeValidationFailed, Message: fmt.Sprintf("no operation named %q", name)}
	}
	switch len(doc.Operations) {
	case 1:
		return doc.Operations[0], nil
	case 0:
		return nil, &failure{Code: codeValidationFailed, Message: "the document has no operation"}
	}
	return nil, &failure{Code: codeValidationFailed, Message: fmt.Sprintf("the document has %d operations; choose one with -operation", len(doc.Operations))}
}

// gqlFailures turns gqlparser errors (one or a list) into failures with
// their positions.
func gqlFailures(code string, err error) []any {
	var list gqlerror.List
	var one *gqlerror.Error
	switch {
	case errors.As(err, &list):
	case errors.As(err, &one):
		list = gqlerror.List{one}
	default:
		return []any{failure{Code: code, Message: err.Error(), Locations: []complexity.Location{}}}
	}
	out := make([]any, 0, len(list))
	for _, e := range list {
		fl := failure{Code: code, Message: e.Message, Locations: []complexity.Location{}}
		if len(e.Path) > 0 {
			fl.Message = e.Path.String() + ": " + fl.Message
		}
		for _, l := range e.Locations {
			fl.Locations = append(fl.Locations, complexity.Location{Line: l.Line, Column: l.Column})
		}
		out = append(out, fl)
	}
	return out
}

// rejection is a *complexity.Error whose locations are always printed.
type rejection struct {
	*complexity.Error
	Locations []complexity.Location `json:"locations"`
}

type output struct {
	json           bool
	stdout, stderr io.Writer
}

// fail prints the errors (failure or rejection values) and returns
// exit status 1.
func (o output) fail(totals *complexity.Totals, errs ...any) int {
	for i, e := range errs {
		if fl, ok := e.(failure); ok && fl.Locations == nil {
			fl.Locations = []complexity.Location{}
			errs[i] = fl
		}
	}
	if o.json {
		doc := struct {
			Errors []any `json:"errors"`
			*complexity.Totals
		}{errs, totals}
		o.writeJSON(doc)
		return exitRejected
	}
	for _, e := range errs {
		switch e := e.(type) {
		case rejection:
			fmt.Fprintf(o.stderr, "cost: %s: %s%s\n", e.Code, e.Message, at(e.Locations))
		case failure:
			fmt.Fprintf(o.stderr, "cost: %s: %s%s\n", e.Code, e.Message, at(e.Locations))
		}
	}
	if totals != nil {
		fmt.Fprintf(o.stderr, "cost: totals: cost %s, depth %d, nodes %d\n", totals.Cost, totals.Depth, totals.Nodes)
	}
	return exitRejected
}

func at(locs []complexity.Location) string {
	if len(locs) == 0 {
		return ""
	}
	return fmt.Sprintf(" (line %d, column %d)", locs[0].Line, locs[0].Column)
}

func (o output) writeJSON(v any) {
	enc := json.NewEncoder(o.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(o.stderr, "cost: %v\n", err)
	}
}

// jsonReport is a report as -json prints it: "operation" is always there,
// null for an anonymous operation, where complexity.Report omits it. (The
// shallower field hides the embedded Report's.)
type jsonReport struct {
	Operation *string `json:"operation"`
	*complexity.Report
}

func (o output) report(r *complexity.Report) int {
	if o.json {
		doc := jsonReport{Report: r}
		if r.Operation != "" {
			doc.Operation = &r.Operation
		}
		o.writeJSON(doc)
		return exitOK
	}
	name := r.Operation
	if name == "" {
		name = "(anonymous)"
	}
	fmt.Fprintf(o.stdout, "operation  %s %s\n", r.OperationType, name)
	fmt.Fprintf(o.stdout, "cost       %s (%d points)\n", r.Cost, r.Points)
	fmt.Fprintf(o.stdout, "depth      %d\n", r.Depth)
	fmt.Fprintf(o.stdout, "nodes      %d\n", r.Nodes)
	if len(r.Fields) == 0 {
		return exitOK // -breakdown-limit 0
	}
	fmt.Fprintln(o.stdout)
	tw := tabwriter.NewWriter(o.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIELD\tPRICED AS\t×N\tCOST")
	for _, fc := range r.Fields {
		key := fc.Path[strings.LastIndexByte(fc.Path, '.')+1:]
		fmt.Fprintf(tw, "%s%s\t%s\t%d\t%s\n", strings.Repeat("  ", fc.Depth-1), key, fc.Field, fc.Multiplier, fc.Cost)
		// An interface or union: each possible type and what one object
		// of it costs; the winner's fields follow.
		for _, m := range fc.Members {
			winner := ""
			if m.Winner {
				winner = " (winner)"
			}
			fmt.Fprintf(tw, "%s... on %s\t\t\t%s per object%s\n", strings.Repeat("  ", fc.Depth), m.Type, m.Cost, winner)
		}
	}
	tw.Flush()
	if r.FieldsTruncated {
		fmt.Fprintf(o.stdout, "… the breakdown stops after %d fields\n", len(r.Fields)) // -breakdown-limit or -breakdown-bytes
	}
	return exitOK
}
