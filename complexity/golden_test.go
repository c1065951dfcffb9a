package complexity_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/costguard/costguard/complexity"
)

var update = flag.Bool("update", false, "rewrite the expected JSON files in ../testdata/cost")

// goldenDir holds the cases: NAME.graphql is the query, whose leading
// "# key: value" comment lines say which schemas (under schemas/), variables,
// operation and options to use; NAME.json is the expected report or errors
// document, what `cost -json` prints (which adds "operation": null to the
// report of an anonymous operation): the report with its breakdown, priced
// by Explain.
const goldenDir = "../testdata/cost"

type goldenCase struct {
	name      string
	schemas   []string
	query     string
	variables map[string]any
	operation string
	options   caseOptions
}

// caseOptions mirrors the Analyzer options in JSON form.
type caseOptions struct {
	DefaultListSize   *int     `json:"defaultListSize,omitempty"`
	MutationBaseCost  *float64 `json:"mutationBaseCost,omitempty"`
	MaxDepth          int      `json:"maxDepth,omitempty"`
	MaxBreadth        int      `json:"maxBreadth,omitempty"`
	MaxNodes          int64    `json:"maxNodes,omitempty"`
	MaxCost           float64  `json:"maxCost,omitempty"`
	MaxAliases        int      `json:"maxAliases,omitempty"`
	MaxRootFields     int      `json:"maxRootFields,omitempty"`
	FirstLast         *bool    `json:"firstLast,omitempty"`
	Connections       *bool    `json:"connections,omitempty"`
	CountArguments    *bool    `json:"countArguments,omitempty"`
	KeyLists          *bool    `json:"keyLists,omitempty"`
	MutationLists     *bool    `json:"mutationLists,omitempty"`
	FreeIntrospection *bool    `json:"freeIntrospection,omitempty"`
	IntrospectionCost *float64 `json:"introspectionCost,omitempty"`
	SubtreeDiscounts  *bool    `json:"subtreeDiscounts,omitempty"`
	NullsCharged      *bool    `json:"nullArgumentsCharged,omitempty"`
	// BreakdownLimit caps the breakdown, as the CLI's -breakdown-limit
	// does: 0 prices the totals only.
	BreakdownLimit *int `json:"breakdownLimit,omitempty"`
}

func (o caseOptions) list() []complexity.Option {
	var opts []complexity.Option
	if o.DefaultListSize != nil {
		opts = append(opts, complexity.WithDefaultListSize(*o.DefaultListSize))
	}
	if o.MutationBaseCost != nil {
		opts = append(opts, complexity.WithMutationBaseCost(*o.MutationBaseCost))
	}
	opts = append(opts,
		complexity.WithMaxDepth(o.MaxDepth),
		complexity.WithMaxBreadth(o.MaxBreadth),
		complexity.WithMaxNodes(o.MaxNodes),
		complexity.WithMaxCost(o.MaxCost),
		complexity.WithMaxAliases(o.MaxAliases),
		complexity.WithMaxRootFields(o.MaxRootFields),
	)
	if o.FirstLast != nil {
		opts = append(opts, complexity.WithFirstLastConvention(*o.FirstLast))
	}
	if o.Connections != nil {
		opts = append(opts, complexity.WithConnectionConvention(*o.Connections))
	}
	if o.CountArguments != nil {
		opts = append(opts, complexity.WithCountArgumentConvention(*o.CountArguments))
	}
	if o.KeyLists != nil {
		opts = append(opts, complexity.WithKeyListConvention(*o.KeyLists))
	}
	if o.MutationLists != nil {
		opts = append(opts, complexity.WithMutationListConvention(*o.MutationLists))
	}
	if o.FreeIntrospection != nil {
		opts = append(opts, complexity.WithFreeIntrospection(*o.FreeIntrospection))
	}
	if o.IntrospectionCost != nil {
		opts = append(opts, complexity.WithIntrospectionCost(*o.IntrospectionCost))
	}
	if o.SubtreeDiscounts != nil {
		opts = append(opts, complexity.WithSubtreeDiscounts(*o.SubtreeDiscounts))
	}
	if o.NullsCharged != nil {
		opts = append(opts, complexity.WithNullArgumentsCharged(*o.NullsCharged))
	}
	if o.BreakdownLimit != nil {
		opts = append(opts, complexity.WithBreakdownLimit(*o.BreakdownLimit))
	}
	return opts
}

func goldenNames(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(goldenDir, "*.graphql"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".graphql"))
	}
	sort.Strings(names)
	return names
}

func loadCase(t testing.TB, name string) goldenCase {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(goldenDir, name+".graphql"))
	if err != nil {
		t.Fatal(err)
	}
	c := goldenCase{name: name, query: string(src)}
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "#") {
			break
		}
		key, val, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "schema":
			c.schemas = strings.Fields(val)
		case "operation":
			c.operation = val
		case "variables":
			d := json.NewDecoder(strings.NewReader(val))
			d.UseNumber()
			if err := d.Decode(&c.variables); err != nil {
				t.Fatalf("%s: variables: %v", name, err)
			}
		case "options":
			d := json.NewDecoder(strings.NewReader(val))
			d.DisallowUnknownFields()
			if err := d.Decode(&c.options); err != nil {
				t.Fatalf("%s: options: %v", name, err)
			}
		}
	}
	if len(c.schemas) == 0 {
		t.Fatalf("%s: no '# schema:' line", name)
	}
	return c
}

func (c goldenCase) schema(t testing.TB) *ast.Schema {
	t.Helper()
	var sources []*ast.Source
	for _, s := range c.schemas {
		b, err := os.ReadFile(filepath.Join(goldenDir, "schemas", s))
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, &ast.Source{Name: s, Input: string(b)})
	}
	schema, err := complexity.LoadSchema(sources...)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	return schema
}

// prepare parses, validates and coerces the case the way a server (and the
// cost CLI) does before pricing.
func (c goldenCase) prepare(t testing.TB, schema *ast.Schema) (*ast.QueryDocument, *ast.OperationDefinition, map[string]any) {
	t.Helper()
	doc, err := parser.ParseQuery(&ast.Source{Name: c.name, Input: c.query})
	if err != nil {
		t.Fatalf("%s: parse: %v", c.name, err)
	}
	if errs := validator.Validate(schema, doc); len(errs) > 0 {
		t.Fatalf("%s: validate: %v", c.name, errs)
	}
	op := doc.Operations.ForName(c.operation)
	if op == nil {
		t.Fatalf("%s: no operation %q", c.name, c.operation)
	}
	vars, err := validator.VariableValues(schema, op, c.variables)
	if err != nil {
		t.Fatalf("%s: variables: %v", c.name, err)
	}
	return doc, op, vars
}

func (c goldenCase) run(t testing.TB) (*complexity.Report, error) {
	t.Helper()
	schema := c.schema(t)
	a, err := complexity.New(schema, c.options.list()...)
	if err != nil {
		t.Fatalf("%s: New: %v", c.name, err)
	}
	doc, op, vars := c.prepare(t, schema)
	if c.options.BreakdownLimit != nil && *c.options.BreakdownLimit == 0 {
		return a.AnalyzeOperation(doc, op, vars)
	}
	return a.Explain(doc, op, vars)
}

// errorsDoc is the JSON document printed for a rejected operation.
type errorsDoc struct {
	Errors []*complexity.Error `json:"errors"`
	*complexity.Totals
}

func render(t testing.TB, r *complexity.Report, err error) []byte {
	t.Helper()
	var v any = r
	if err != nil {
		var ce *complexity.Error
		if !errors.As(err, &ce) {
			t.Fatalf("unexpected error type %T: %v", err, err)
		}
		v = errorsDoc{Errors: []*complexity.Error{ce}, Totals: ce.Totals}
	}
	b, merr := json.MarshalIndent(v, "", "  ")
	if merr != nil {
		t.Fatal(merr)
	}
	return append(b, '\n')
}

func TestGolden(t *testing.T) {
	names := goldenNames(t)
	if len(names) < 40 {
		t.Errorf("only %d golden cases; the suite promises at least 40", len(names))
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			c := loadCase(t, name)
			r, err := c.run(t)
			got := render(t, r, err)
			path := filepath.Join(goldenDir, name+".json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, rerr := os.ReadFile(path)
			if rerr != nil {
				t.Fatalf("%v (run with -update to create it)", rerr)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("report differs from %s (run with -update and review the diff)\n--- got\n%s\n--- want\n%s", path, got, want)
			}
		})
	}
}
