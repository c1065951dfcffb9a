package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// binary is the cost command built once for all tests: they run it the way
// scripts do.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cost-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "cost")
	if runtime.GOOS == "windows" {
		binary += ".exe"
	}
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the cost command:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const casesDir = "../../testdata/cost"

func schemaPath(name string) string { return filepath.Join(casesDir, "schemas", name) }

type result struct {
	stdout, stderr string
	code           int
}

func runCost(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, s)
	}
	return v
}

// seedText is the text report of the seed example, as README.md shows it.
const seedText = `operation  query (anonymous)
cost       5101 (5101 points)
depth      4
nodes      5100

FIELD        PRICED AS    ×N   COST
user         Query.user   1    5101
  repos      User.repos   100  5100
    issues   Repo.issues  50   50
      title  Issue.title  1    0
`

func TestTextReport(t *testing.T) {
	r := runCost(t, "", "-schema", schemaPath("plain.graphql"), "-query", filepath.Join(casesDir, "seed.graphql"))
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if r.stdout != seedText {
		t.Errorf("text report:\n%s\nwant:\n%s", r.stdout, seedText)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), seedText) {
		t.Error("README.md no longer shows the seed example's text report as the CLI prints it")
	}
	// The document it shows is the one the CLI priced.
	seed, err := os.ReadFile(filepath.Join(casesDir, "seed.graphql"))
	if err != nil {
		t.Fatal(err)
	}
	query := string(seed[strings.LastIndex(strings.TrimRight(string(seed), "\n"), "\n")+1:])
	if !strings.Contains(string(readme), "```graphql\n"+query+"```") {
		t.Errorf("README.md no longer shows the seed example's document as seed.graphql holds it: %q", query)
	}
	// Each tree line carries the coordinate, multiplier and cost.
	if !hasLine(r.stdout, "repos", "User.repos", "100", "5100") {
		t.Errorf("no line 'repos User.repos 100 5100' in:\n%s", r.stdout)
	}
}

func hasLine(out string, fields ...string) bool {
	for line := range strings.SplitSeq(out, "\n") {
		if reflect.DeepEqual(strings.Fields(line), fields) {
			return true
		}
	}
	return false
}

// TestGoldenCasesThroughTheCLI runs every golden case and compares -json
// output with the expected file: the CLI has a flag for every option a case
// uses, and prints exactly the library's report, with "operation" always
// present (null for an anonymous operation, which the library's JSON omits).
func TestGoldenCasesThroughTheCLI(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(casesDir, "*.graphql"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	if len(paths) < 40 {
		t.Errorf("only %d golden cases; the suite promises at least 40", len(paths))
	}
	for _, doc := range []string{"../../docs/cost-model.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%d golden cases", len(paths)); !strings.Contains(string(b), want) {
			t.Errorf("%s does not say %q", doc, want)
		}
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".graphql")
		args := caseArgs(t, p)
		t.Run(name, func(t *testing.T) {
			r := runCost(t, "", append(args, "-json")...)
			want, err := os.ReadFile(filepath.Join(casesDir, name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			got, exp := decode(t, r.stdout), decode(t, string(want))
			if _, rejected := exp["errors"]; !rejected {
				if _, named := exp["operation"]; !named {
					exp["operation"] = nil
				}
			}
			if !reflect.DeepEqual(got, exp) {
				t.Errorf("CLI output differs from %s.json\n--- got\n%s\n--- want\n%s", name, r.stdout, want)
			}
			wantCode := 0
			if _, rejected := exp["errors"]; rejected {
				wantCode = 1
			}
			if r.code != wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, wantCode, r.stderr)
			}
		})
	}
}

// flagFor names the CLI flag of each option a golden case header may set
// (the JSON names of complexity/golden_test.go's caseOptions).
var flagFor = map[string]string{
	"defaultListSize": "-default-list-size", "mutationBaseCost": "-mutation-base-cost",
	"firstLast": "-first-last-convention", "connections": "-connection-convention",
	"countArguments": "-count-argument-convention", "keyLists": "-key-list-convention",
	"mutationLists": "-mutation-list-convention", "freeIntrospection": "-free-introspection",
	"introspectionCost": "-introspection-cost", "breakdownLimit": "-breakdown-limit",
	"subtreeDiscounts": "-subtree-discounts", "nullArgumentsCharged": "-null-arguments-charged",
	"maxDepth": "-max-depth", "maxBreadth": "-max-breadth", "maxNodes": "-max-nodes", "maxCost": "-max-cost",
	"maxAliases": "-max-aliases", "maxRootFields": "-max-root-fields",
}

// caseArgs turns a golden case header into CLI arguments. A case with an
// option the CLI has no flag for fails the test.
func caseArgs(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	args := []string{"-query", path}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "#") {
			break
		}
		key, val, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":")
		val = strings.TrimSpace(val)
		switch key {
		case "schema":
			for _, s := range strings.Fields(val) {
				args = append(args, "-schema", schemaPath(s))
			}
		case "operation":
			args = append(args, "-operation", val)
		case "variables":
			vf := filepath.Join(t.TempDir(), "variables.json")
			if err := os.WriteFile(vf, []byte(val), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append(args, "-variables", vf)
		case "options":
			var opts map[string]json.RawMessage
			if err := json.Unmarshal([]byte(val), &opts); err != nil {
				t.Fatalf("%s: options: %v", path, err)
			}
			for k, v := range opts {
				fl, ok := flagFor[k]
				if !ok {
					t.Fatalf("%s: option %q has no CLI flag", path, k)
				}
				// -flag=value works for numbers and for the boolean flags.
				args = append(args, fl+"="+string(v))
			}
		}
	}
	return args
}

func TestRejectionsExitOneWithErrorsJSON(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := schemaPath("plain.graphql")
	seed := filepath.Join(casesDir, "seed.graphql")
	tests := []struct {
		name string
		args []string
		code string
		line int // expected first location line, 0 for none
	}{
		{"max cost", []string{"-schema", plain, "-query", seed, "-max-cost", "5000"}, "MAX_COST_EXCEEDED", 3},
		{"max depth", []string{"-schema", plain, "-query", seed, "-max-depth", "3"}, "MAX_DEPTH_EXCEEDED", 3},
		{"max nodes", []string{"-schema", plain, "-query", seed, "-max-nodes", "100"}, "MAX_NODES_EXCEEDED", 3},
		{"max breadth", []string{"-schema", plain, "-query", seed, "-max-breadth", "99"}, "MAX_BREADTH_EXCEEDED", 3},
		{"slicing argument", []string{"-schema", schemaPath("weights.graphql"), "-query", write("items.graphql", "{ items { name } }")}, "SLICING_ARGUMENT_REQUIRED", 1},
		{"invalid schema", []string{"-schema", write("bad.graphql", "type Query { a: Nope }"), "-query", seed}, "INVALID_SCHEMA", 1},
		{"invalid weight", []string{"-schema", write("weight.graphql", `type Query { a: Int @cost(weight: "x") }`), "-query", seed}, "INVALID_SCHEMA", 0},
		{"unreadable schema", []string{"-schema", filepath.Join(dir, "missing.graphql"), "-query", seed}, "INPUT_UNREADABLE", 0},
		{"parse error", []string{"-schema", plain, "-query", write("parse.graphql", "{ user { ")}, "GRAPHQL_PARSE_FAILED", 1},
		{"validation error", []string{"-schema", plain, "-query", write("invalid.graphql", "\n{ nope }")}, "GRAPHQL_VALIDATION_FAILED", 2},
		{"unknown operation", []string{"-schema", plain, "-query", seed, "-operation", "Nope"}, "GRAPHQL_VALIDATION_FAILED", 0},
		{"two operations", []string{"-schema", plain, "-query", write("two.graphql", "query A { user { name } } query B { user { name } }")}, "GRAPHQL_VALIDATION_FAILED", 0},
		{"variables not JSON", []string{"-schema", plain, "-query", filepath.Join(casesDir, "seed-variables.graphql"), "-variables", write("v.json", "{")}, "INVALID_VARIABLES", 0},
		{"variables wrong type", []string{"-schema", plain, "-query", filepath.Join(casesDir, "seed-variables.graphql"), "-variables", write("w.json", `{"repos": "many"}`)}, "INVALID_VARIABLES", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCost(t, "", append(tt.args, "-json")...)
			if r.code != 1 {
				t.Fatalf("exit %d, want 1; stdout %s stderr %s", r.code, r.stdout, r.stderr)
			}
			doc := decode(t, r.stdout)
			errs, _ := doc["errors"].([]any)
			if len(errs) == 0 {
				t.Fatalf("no errors in %s", r.stdout)
			}
			e := errs[0].(map[string]any)
			locs, hasLocs := e["locations"].([]any)
			if e["code"] != tt.code || e["message"] == "" || !hasLocs {
				t.Fatalf("error = %v, want code %s with a message and locations", e, tt.code)
			}
			if tt.line > 0 && (len(locs) == 0 || locs[0].(map[string]any)["line"] != float64(tt.line)) {
				t.Errorf("locations = %v, want line %d", locs, tt.line)
			}
			// Text mode: same status, the error on stderr, nothing on stdout.
			rt := runCost(t, "", tt.args...)
			if rt.code != 1 || rt.stdout != "" || !strings.Contains(rt.stderr, tt.code) {
				t.Errorf("text mode: exit %d, stdout %q, stderr %q", rt.code, rt.stdout, rt.stderr)
			}
		})
	}
	// Totals ride along when they are known.
	r := runCost(t, "", "-schema", plain, "-query", seed, "-max-cost", "5000", "-json")
	if doc := decode(t, r.stdout); doc["cost"] != float64(5101) || doc["nodes"] != float64(5100) || doc["depth"] != float64(4) {
		t.Errorf("totals missing from %s", r.stdout)
	}
}

func TestWrongUsageExitsTwo(t *testing.T) {
	plain := schemaPath("plain.graphql")
	seed := filepath.Join(casesDir, "seed.graphql")
	tests := map[string][]string{
		"no arguments":       nil,
		"no query":           {"-schema", plain},
		"no schema":          {"-query", seed},
		"unknown flag":       {"-schema", plain, "-query", seed, "-max-widgets", "3"},
		"positional":         {"-schema", plain, "-query", seed, "extra"},
		"negative max depth": {"-schema", plain, "-query", seed, "-max-depth", "-1"},
		"not a number":       {"-schema", plain, "-query", seed, "-max-cost", "lots"},
		"negative list size": {"-schema", plain, "-query", seed, "-default-list-size", "-5"},
		"negative aliases":   {"-schema", plain, "-query", seed, "-max-aliases", "-1"},
		"negative roots":     {"-schema", plain, "-query", seed, "-max-root-fields", "-1"},
		"negative intro":     {"-schema", plain, "-query", seed, "-introspection-cost", "-0.5"},
		"negative mutation":  {"-schema", plain, "-query", seed, "-mutation-base-cost", "-1"},
		"NaN cost":           {"-schema", plain, "-query", seed, "-max-cost", "NaN"},
		"infinite base":      {"-schema", plain, "-query", seed, "-mutation-base-cost", "+Inf"},
		"negative breakdown": {"-schema", plain, "-query", seed, "-breakdown-limit", "-1"},
		"negative bytes":     {"-schema", plain, "-query", seed, "-breakdown-bytes", "-1"},
		"bool with a value":  {"-schema", plain, "-query", seed, "-free-introspection", "no"},
	}
	for name, args := range tests {
		t.Run(name, func(t *testing.T) {
			r := runCost(t, "", args...)
			if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "usage: cost -schema FILE") {
				t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
		})
	}
	r := runCost(t, "", "-h")
	for _, fl := range flagFor {
		if r.code != 0 || !strings.Contains(r.stderr, fl) {
			t.Fatalf("-h: exit %d, stderr lacks %s: %q", r.code, fl, r.stderr)
		}
	}
}

// Introspection is free by default and counts toward the limits; the flag
// charges each __schema or __type response key after the first.
func TestIntrospectionFlags(t *testing.T) {
	plain := schemaPath("plain.graphql")
	q := "{ a: __schema { queryType { name } } b: __schema { queryType { name } } __typename }"
	tests := []struct {
		name string
		args []string
		cost float64
		code string
	}{
		{"free by default", nil, 0, ""},
		{"charged per key after the first", []string{"-introspection-cost", "50"}, 50, ""},
		{"aliases count", []string{"-max-aliases", "1"}, 0, "MAX_ALIASES_EXCEEDED"},
		{"root fields count", []string{"-max-root-fields", "2"}, 0, "MAX_ROOT_FIELDS_EXCEEDED"},
		{"depth counts", []string{"-max-depth", "2"}, 0, "MAX_DEPTH_EXCEEDED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCost(t, q, append([]string{"-schema", plain, "-query", "-", "-json"}, tt.args...)...)
			doc := decode(t, r.stdout)
			if tt.code != "" {
				errs, _ := doc["errors"].([]any)
				if r.code != 1 || len(errs) != 1 || errs[0].(map[string]any)["code"] != tt.code {
					t.Fatalf("exit %d: %s", r.code, r.stdout)
				}
				return
			}
			if r.code != 0 || doc["cost"] != tt.cost || doc["introspection"] != true {
				t.Fatalf("exit %d: %s", r.code, r.stdout)
			}
		})
	}
}

func TestQueryFromStdin(t *testing.T) {
	r := runCost(t, "{ user { repos(first: 100) { issues(first: 50) { title } } } }",
		"-schema", schemaPath("plain.graphql"), "-query", "-", "-json")
	if doc := decode(t, r.stdout); r.code != 0 || doc["cost"] != float64(5101) {
		t.Fatalf("exit %d: %s", r.code, r.stdout)
	}
}

func TestRepeatedSchemaAndDirectiveForms(t *testing.T) {
	books := filepath.Join(casesDir, "books-book.graphql")
	tests := []struct {
		name    string
		schemas []string
		query   string
		cost    float64
	}{
		{"undeclared directives", []string{"books.graphql"}, books, 4},
		{"a second -schema extends the first", []string{"books.graphql", "books-address5.graphql"}, books, 8},
		{"declared weight: String!", []string{"weights.graphql"}, filepath.Join(casesDir, "weights-fractional.graphql"), 2},
		{"declared weight: Int!", []string{"federation.graphql"}, filepath.Join(casesDir, "federation-int-weights.graphql"), 18},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"-query", tt.query, "-json"}
			for _, s := range tt.schemas {
				args = append(args, "-schema", schemaPath(s))
			}
			r := runCost(t, "", args...)
			if doc := decode(t, r.stdout); r.code != 0 || doc["cost"] != tt.cost {
				t.Fatalf("exit %d, cost %v, want %v; stderr %s", r.code, doc["cost"], tt.cost, r.stderr)
			}
		})
	}
}

func TestJSONReportShape(t *testing.T) {
	r := runCost(t, "", "-schema", schemaPath("plain.graphql"), "-query", filepath.Join(casesDir, "seed.graphql"),
		"-default-list-size", "3", "-json")
	doc := decode(t, r.stdout)
	for _, key := range []string{"operation", "operationType", "cost", "depth", "nodes", "points", "fields"} {
		if _, ok := doc[key]; !ok {
			t.Errorf("report lacks %q: %s", key, r.stdout)
		}
	}
	fields := doc["fields"].([]any)
	first := fields[1].(map[string]any)
	if first["path"] != "user.repos" || first["multiplier"] != float64(100) || first["cost"] != float64(5100) {
		t.Errorf("fields[1] = %v", first)
	}
}

// -json always carries "operation", for scripts that read it: the name of a
// named operation, null for an anonymous one, however short the breakdown.
func TestJSONOperationAlwaysPresent(t *testing.T) {
	for _, tt := range []struct {
		query string
		want  any
	}{
		{`{ user { name } }`, nil},
		{`query { user { name } }`, nil},
		{`query Named { user { name } }`, "Named"},
		{`query A { user { name } } query B { users(first: 2) { name } }`, "B"},
	} {
		for _, limit := range []string{"0", "10"} {
			args := []string{"-schema", schemaPath("plain.graphql"), "-query", "-", "-breakdown-limit", limit, "-json"}
			if tt.want == "B" {
				args = append(args, "-operation", "B")
			}
			r := runCost(t, tt.query, args...)
			if r.code != 0 {
				t.Fatalf("%s: exit %d, stderr %s", tt.query, r.code, r.stderr)
			}
			got, ok := decode(t, r.stdout)["operation"]
			if !ok || got != tt.want {
				t.Errorf("%s, -breakdown-limit %s: operation = %#v (present %v), want %#v:\n%s",
					tt.query, limit, got, ok, tt.want, r.stdout)
			}
			if !strings.HasPrefix(r.stdout, "{\n  \"operation\": ") {
				t.Errorf("%s: operation is not the first key, as in the library's report:\n%s", tt.query, r.stdout)
			}
		}
	}
}

// An Int variable sent as a JSON string, through the CLI on the example
// server's schema: {"f":"100"} prices as the number the resolver receives
// (10101; at the default list size it would be 111), and -max-breadth
// refuses "1000000" as it refuses 1000000.
func TestStringIntVariablePricesAsTheNumber(t *testing.T) {
	dir := t.TempDir()
	query := filepath.Join(dir, "q.graphql")
	if err := os.WriteFile(query, []byte(`query($f:Int){ user(login:"octocat") { repos(first:$f) { issues(first:$f) { title } } } }`), 0o600); err != nil {
		t.Fatal(err)
	}
	schema := filepath.Join("..", "..", "graph", "schema.graphqls")
	price := func(vars string, extra ...string) result {
		t.Helper()
		vf := filepath.Join(dir, "vars.json")
		if err := os.WriteFile(vf, []byte(vars), 0o600); err != nil {
			t.Fatal(err)
		}
		return runCost(t, "", append([]string{"-schema", schema, "-query", query, "-variables", vf, "-json"}, extra...)...)
	}
	for _, vars := range []string{`{"f":100}`, `{"f":"100"}`} {
		if r := price(vars); r.code != 0 || decode(t, r.stdout)["cost"] != float64(10101) {
			t.Errorf("%s: exit %d, %s%s; want cost 10101", vars, r.code, r.stdout, r.stderr)
		}
	}
	num, str := price(`{"f":1000000}`), price(`{"f":"1000000"}`)
	if num.code != 0 || num.stdout != str.stdout {
		t.Errorf("a string prices differently from its number:\n%s\n%s", num.stdout, str.stdout)
	}
	for vars, want := range map[string]string{
		`{"f":"1000000"}`: "first=1000000 exceeds the maximum of 100",
		`{"f":"-5"}`:      "first=-5 asks for every item",
	} {
		r := price(vars, "-max-breadth", "100")
		errs, _ := decode(t, r.stdout)["errors"].([]any)
		if r.code != 1 || len(errs) != 1 {
			t.Fatalf("%s: exit %d, %s", vars, r.code, r.stdout)
		}
		if e := errs[0].(map[string]any); e["code"] != "MAX_BREADTH_EXCEEDED" || !strings.Contains(e["message"].(string), want) {
			t.Errorf("%s: error %v, want MAX_BREADTH_EXCEEDED: %s", vars, e, want)
		}
	}
}

// -breakdown-limit caps the explain view; the totals do not change.
func TestBreakdownLimitFlag(t *testing.T) {
	args := []string{"-schema", schemaPath("plain.graphql"), "-query", filepath.Join(casesDir, "seed.graphql")}
	for limit, want := range map[string]int{"0": 0, "2": 2, "1000": 4} {
		r := runCost(t, "", append(args, "-json", "-breakdown-limit", limit)...)
		doc := decode(t, r.stdout)
		fields, _ := doc["fields"].([]any)
		if r.code != 0 || doc["cost"] != float64(5101) || len(fields) != want || (doc["fieldsTruncated"] == true) != (want == 2) {
			t.Errorf("-breakdown-limit %s: exit %d, %d fields, want %d: %s", limit, r.code, len(fields), want, r.stdout)
		}
	}
	r := runCost(t, "", append(args, "-breakdown-limit", "2")...)
	if r.code != 0 || !strings.Contains(r.stdout, "… the breakdown stops after 2 fields\n") {
		t.Errorf("text view with -breakdown-limit 2:\n%s", r.stdout)
	}
	// 0 turns the breakdown off: the totals alone, no empty table.
	r = runCost(t, "", append(args, "-breakdown-limit", "0")...)
	if head, _, _ := strings.Cut(seedText, "\n\n"); r.code != 0 || r.stdout != head+"\n" {
		t.Errorf("text view with -breakdown-limit 0:\n%q", r.stdout)
	}
}

// -breakdown-bytes caps the bytes of the paths: the seed's are 4, 10, 17
// and 23 bytes long (54 together).
func TestBreakdownBytesFlag(t *testing.T) {
	args := []string{"-schema", schemaPath("plain.graphql"), "-query", filepath.Join(casesDir, "seed.graphql")}
	for bytes, want := range map[string]int{"0": 4, "31": 3, "53": 3, "54": 4, "1": 0} {
		r := runCost(t, "", append(args, "-json", "-breakdown-bytes", bytes)...)
		doc := decode(t, r.stdout)
		fields, _ := doc["fields"].([]any)
		if r.code != 0 || doc["cost"] != float64(5101) || len(fields) != want || (doc["fieldsTruncated"] == true) != (want < 4) {
			t.Errorf("-breakdown-bytes %s: exit %d, %d fields, want %d: %s", bytes, r.code, len(fields), want, r.stdout)
		}
	}
}

// unionText is the text report of the union-max golden case: the union's
// members with the cost of one object each, the winner marked, then the
// winner's fields.
const unionText = `operation  query (anonymous)
cost       32 (32 points)
depth      3
nodes      12

FIELD            PRICED AS     ×N  COST
search           Query.search  2   32
  ... on Author                    16 per object (winner)
  ... on Book                      3 per object
  name           Author.name   1   0
  books          Author.books  5   15
    title        Book.title    1   0
`

func TestAbstractMembersExplained(t *testing.T) {
	args := []string{"-schema", schemaPath("search.graphql"), "-query", filepath.Join(casesDir, "union-max.graphql")}
	r := runCost(t, "", args...)
	if r.code != 0 || r.stdout != unionText {
		t.Errorf("exit %d, text report:\n%s\nwant:\n%s", r.code, r.stdout, unionText)
	}
	page, err := os.ReadFile("../../docs/cost-model.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), unionText) {
		t.Error("docs/cost-model.md no longer shows the union-max text report as the CLI prints it")
	}
	doc := decode(t, runCost(t, "", append(args, "-json")...).stdout)
	search := doc["fields"].([]any)[0].(map[string]any)
	want := []any{
		map[string]any{"type": "Author", "cost": float64(16), "winner": true},
		map[string]any{"type": "Book", "cost": float64(3)},
	}
	if !reflect.DeepEqual(search["members"], want) {
		t.Errorf("members = %v, want %v", search["members"], want)
	}
}

// A refused variable is reported by name, with the type expected where it
// was refused and the value sent (cut to 64 bytes), not gqlparser's
// "cannot use value 0 as Int" for 2.5.
func TestWrongVariableNamesTheValueSent(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	schema := write("s.graphql", `type Query { f(n: Int, ids: [Int!], in: In): Int }
		input In { first: Int next: In name: String! }`)
	query := write("q.graphql", `query($n: Int, $ids: [Int!], $in: In, $r: Int!) { f(n: $n, ids: $ids, in: $in) a: f(n: $r) }`)
	long := strings.Repeat("x", 100)
	tests := []struct{ vars, want string }{
		{`{"r": 1, "n": 2.5}`, `variable $n: 2.5 is not a valid Int`},
		{`{"r": 1, "n": "abc"}`, `variable $n: "abc" is not a valid Int`},
		{`{"r": 1, "n": [1, 2]}`, `variable $n: [1,2] is not a valid Int`},
		{`{"r": 1, "ids": [1, 2, 3.5]}`, `variable $ids[2]: 3.5 is not a valid Int!`},
		{`{"r": 1, "ids": [1, null]}`, `variable $ids[1]: null is not a valid Int! (cannot be null)`},
		{`{"r": 1, "in": {"name": "a", "next": {"name": "b", "first": "x"}}}`, `variable $in.next.first: "x" is not a valid Int`},
		{`{"r": 1, "in": {"first": 1}}`, `variable $in.name: no value for String! (must be defined)`},
		{`{"r": 1, "in": {"name": "a", "bogus": true}}`, `variable $in.bogus: true (unknown field)`},
		{`{}`, `variable $r: no value for Int! (must be defined)`},
		{`{"r": null}`, `variable $r: null is not a valid Int! (cannot be null)`},
		{`{"r": 1, "n": "` + long + `"}`, `variable $n: "` + long[:63] + `… is not a valid Int`},
	}
	for _, tt := range tests {
		r := runCost(t, "", "-schema", schema, "-query", query, "-variables", write("v.json", tt.vars), "-json")
		errs, _ := decode(t, r.stdout)["errors"].([]any)
		if r.code != 1 || len(errs) != 1 {
			t.Fatalf("%s: exit %d: %s", tt.vars, r.code, r.stdout)
		}
		e := errs[0].(map[string]any)
		if e["code"] != "INVALID_VARIABLES" || e["message"] != tt.want {
			t.Errorf("%s: %s %q, want INVALID_VARIABLES %q", tt.vars, e["code"], e["message"], tt.want)
		}
		if locs, _ := e["locations"].([]any); len(locs) != 1 {
			t.Errorf("%s: locations %v, want the variable's definition", tt.vars, locs)
		}
	}
}
