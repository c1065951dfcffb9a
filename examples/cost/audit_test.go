package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// auditSDL prices users at 1 each, its list by first (or 10 without),
// and Book and Film after the GAP-61 worked example.
const auditSDL = `
interface Media { title: String @cost(weight: "2") }
type Book implements Media @cost(weight: "0") { title: String @cost(weight: "2") pageCount: Int @cost(weight: "4") }
type Film implements Media @cost(weight: "0") { title: String @cost(weight: "2") duration: Int @cost(weight: "9") }
type User { id: ID! name: String friends(first: Int): [User!]! }
type Query { featured: Media @cost(weight: "1") users(first: Int): [User!]! me: User }
`

// writeFiles writes name → content under a new directory and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// auditLines decodes -json output: one object per line.
func auditLines(t *testing.T, stdout string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		for _, key := range []string{"document", "operation", "maxCost", "unbounded", "error"} {
			if _, ok := v[key]; !ok {
				t.Fatalf("line %s lacks %q", line, key)
			}
		}
		out = append(out, v)
	}
	return out
}

func apolloManifest(t *testing.T, bodies map[string]string) string {
	t.Helper()
	type op struct {
		ID   string `json:"id"`
		Name string `json:"name"`
		Type string `json:"type"`
		Body string `json:"body"`
	}
	m := struct {
		Format     string `json:"format"`
		Version    int    `json:"version"`
		Operations []op   `json:"operations"`
	}{Format: "apollo-persisted-query-manifest", Version: 1}
	for name, body := range bodies {
		sum := sha256.Sum256([]byte(body))
		m.Operations = append(m.Operations, op{ID: hex.EncodeToString(sum[:]), Name: name, Type: "query", Body: body})
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAuditEveryInputForm(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"schema.graphql": auditSDL,
		// Two operations in one file: one result each.
		"ops/two.graphql": `query Featured($film: Boolean!) { featured { ... on Media { title } ... on Book { title pageCount } ... on Film @include(if: $film) { duration } } }
query Users($n: Int) { users(first: $n) { id } }`,
		"ops/nested/me.gql": `{ me { name } }`,
		"ops/ignored.txt":   `not GraphQL`,
		"apollo.json": apolloManifest(t, map[string]string{
			"Friends": `query Friends($n: Int!) { me { friends(first: $n) { id } } }`,
		}),
		"relay.json":  `{"a1b2": "query RelayUsers { users(first: 3) { name } }", "c3d4": "{ me { id } }"}`,
		"bad.graphql": `{ nope }`,
	})
	r := runCost(t, "", "audit", "-schema", filepath.Join(dir, "schema.graphql"), "-max-breadth", "50", "-json",
		filepath.Join(dir, "ops"), filepath.Join(dir, "*.json"), filepath.Join(dir, "bad.graphql"))
	if r.code != 1 || !strings.Contains(r.stderr, "bad.graphql (anonymous): could not be priced") {
		t.Errorf("exit %d, stderr %q; want 1 for the invalid document", r.code, r.stderr)
	}
	got := map[string]map[string]any{}
	for _, v := range auditLines(t, r.stdout) {
		doc := strings.TrimPrefix(filepath.ToSlash(v["document"].(string)), filepath.ToSlash(dir)+"/")
		op, _ := v["operation"].(string)
		got[doc+" "+op] = v
	}
	want := map[string]any{
		"ops/nested/me.gql ":               float64(1),
		"ops/two.graphql Featured":         float64(12), // GAP-61's precise sound answer
		"ops/two.graphql Users":            float64(50), // $n at the maximum breadth
		"apollo.json#Friends Friends":      float64(51), // named after its operation
		"relay.json#RelayUsers RelayUsers": float64(3),
		"relay.json#c3d4 ":                 float64(1), // anonymous: named by its id
		"bad.graphql ":                     nil,
	}
	if len(got) != len(want) {
		t.Errorf("got %d results, want %d: %v", len(got), len(want), r.stdout)
	}
	for key, cost := range want {
		v, ok := got[key]
		if !ok {
			t.Errorf("no result for %s in\n%s", key, r.stdout)
			continue
		}
		if v["maxCost"] != cost {
			t.Errorf("%s: maxCost %v, want %v", key, v["maxCost"], cost)
		}
	}
	if e, _ := got["bad.graphql "]["error"].(string); !strings.HasPrefix(e, "GRAPHQL_VALIDATION_FAILED: ") {
		t.Errorf("the invalid document's error: %q", e)
	}
	if c := got["ops/two.graphql Featured"]["conditions"]; !reflect.DeepEqual(c, map[string]any{"film": true}) {
		t.Errorf("conditions %v; want the branch that selects duration", c)
	}
	if b := got["ops/two.graphql Users"]["bounds"]; !reflect.DeepEqual(b, []any{"$n ≤ 50 (max breadth)"}) {
		t.Errorf("bounds %v; want the maximum breadth named", b)
	}
}

func TestAuditUnboundedAndMaxCost(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"schema.graphql": auditSDL,
		"cheap.graphql":  `{ users(first: 5) { id } }`,
		"open.graphql":   `query Open($n: Int!) { users(first: $n) { id } }`,
	})
	schema := filepath.Join(dir, "schema.graphql")
	cheap, open := filepath.Join(dir, "cheap.graphql"), filepath.Join(dir, "open.graphql")

	r := runCost(t, "", "audit", "-schema", schema, "-json", cheap, open)
	lines := auditLines(t, r.stdout)
	if r.code != 0 || len(lines) != 2 {
		t.Fatalf("without -max-cost an unbounded document is reported, not failed: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if lines[1]["maxCost"] != nil || !reflect.DeepEqual(lines[1]["unbounded"], []any{"$n (argument first at users: no maximum breadth)"}) {
		t.Errorf("unbounded document: %v", lines[1])
	}
	if !reflect.DeepEqual(lines[0]["unbounded"], []any{}) || lines[0]["error"] != nil {
		t.Errorf("bounded document: %v", lines[0])
	}

	r = runCost(t, "", "audit", "-schema", schema, "-max-cost", "100", cheap, open)
	if r.code != 1 || !strings.Contains(r.stderr, "open.graphql Open: unbounded ($n") || strings.Contains(r.stderr, "cheap.graphql") {
		t.Errorf("-max-cost with an unbounded document: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCost(t, "", "audit", "-schema", schema, "-max-cost", "100", "-max-breadth", "20", cheap, open)
	if r.code != 0 {
		t.Errorf("within -max-cost: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCost(t, "", "audit", "-schema", schema, "-max-cost", "19", "-max-breadth", "20", cheap, open)
	if r.code != 1 || !strings.Contains(r.stderr, "worst case 20 exceeds -max-cost 19") {
		t.Errorf("above -max-cost: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestAuditBaseline(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"schema.graphql": auditSDL,
		"q.graphql":      `query Q { users(first: 5) { id } }`,
	})
	schema, q := filepath.Join(dir, "schema.graphql"), filepath.Join(dir, "q.graphql")
	base := filepath.Join(dir, "baseline.jsonl")
	r := runCost(t, "", "audit", "-schema", schema, "-json", q)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if err := os.WriteFile(base, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		query, stderr string
		code          int
	}{
		{`query Q { users(first: 5) { id } }`, "", 0},
		{`query Q { users(first: 4) { id } }`, "", 0}, // cheaper
		{`query Q { users(first: 6) { id } }`, "q.graphql Q: worst case rose from 5 to 6", 1},
		{`query Q($n: Int!) { users(first: $n) { id } }`, "q.graphql Q: worst case rose from 5 to unbounded", 1},
		{`query Renamed { users(first: 50) { id } }`, "", 0}, // not in the baseline
	}
	for _, tc := range cases {
		if err := os.WriteFile(q, []byte(tc.query), 0o644); err != nil {
			t.Fatal(err)
		}
		r := runCost(t, "", "audit", "-schema", schema, "-baseline", base, q)
		if r.code != tc.code || tc.stderr != "" && !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("%s: exit %d, stderr %q; want %d, %q", tc.query, r.code, r.stderr, tc.code, tc.stderr)
		}
	}
	if err := os.WriteFile(base, []byte("not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCost(t, "", "audit", "-schema", schema, "-baseline", base, q); r.code != 2 || !strings.Contains(r.stderr, "baseline.jsonl:1: not a line of cost audit -json") {
		t.Errorf("a bad baseline: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestAuditPlans(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"schema.graphql": auditSDL,
		"q.graphql":      `query Q { users(first: 600) { id } }`,
		// The example server's configuration, read for its plans alone.
		"costguard.yaml": "listen: :8080\nplans:\n  free: {burst: 5000, rate: 5000, per: 1h}\n  anon: {burst: 500, rate: 500, per: 1h}\ngraphql: {max_depth: 15}\n",
	})
	schema, q := filepath.Join(dir, "schema.graphql"), filepath.Join(dir, "q.graphql")
	r := runCost(t, "", "audit", "-schema", schema, "-plans", filepath.Join(dir, "costguard.yaml"),
		"-plan", "burst={burst: 1000, rate: 100, per: 1m}", "-json", q)
	lines := auditLines(t, r.stdout)
	if r.code != 0 || len(lines) != 1 {
		t.Fatalf("exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	want := []any{
		map[string]any{"plan": "anon", "fits": false, "perPeriod": float64(0), "period": "1h"},
		map[string]any{"plan": "free", "fits": true, "perPeriod": float64(8), "period": "1h"},
		map[string]any{"plan": "burst", "fits": true, "perPeriod": float64(0), "period": "1m"},
	}
	if !reflect.DeepEqual(lines[0]["plans"], want) {
		t.Errorf("plans %v\nwant %v", lines[0]["plans"], want)
	}
	r = runCost(t, "", "audit", "-schema", schema, "-plans", filepath.Join(dir, "costguard.yaml"), q)
	if r.code != 0 || !strings.Contains(r.stdout, "over the burst") || !strings.Contains(r.stdout, "fits, 8 per 1h") {
		t.Errorf("text report: exit %d\n%s", r.code, r.stdout)
	}
}

func TestAuditWrongUsageExitsTwo(t *testing.T) {
	dir := writeFiles(t, map[string]string{"schema.graphql": auditSDL, "q.graphql": `{ me { id } }`})
	schema, q := filepath.Join(dir, "schema.graphql"), filepath.Join(dir, "q.graphql")
	tests := map[string][]string{
		"no schema":                {"audit", q},
		"no documents":             {"audit", "-schema", schema},
		"a glob of nothing":        {"audit", "-schema", schema, filepath.Join(dir, "*.gql")},
		"a missing file":           {"audit", "-schema", schema, filepath.Join(dir, "missing.graphql")},
		"a plan without =":         {"audit", "-schema", schema, "-plan", "free", q},
		"a plan of nothing":        {"audit", "-schema", schema, "-plan", "free={burst: 0, rate: 1, per: 1h}", q},
		"negative max cost":        {"audit", "-schema", schema, "-max-cost", "-1", q},
		"a flag of the other form": {"audit", "-schema", schema, "-query", q},
	}
	for name, args := range tests {
		t.Run(name, func(t *testing.T) {
			r := runCost(t, "", args...)
			if r.code != 2 || r.stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
		})
	}
	if r := runCost(t, "", "audit", "-h"); r.code != 0 || !strings.Contains(r.stderr, "usage: cost audit") || !strings.Contains(r.stderr, "-baseline") {
		t.Errorf("-h: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestAuditThousandDocuments audits a corpus of 1,000 documents of the
// example API (500 files, 500 in an Apollo manifest) and reports the wall
// time of the command.
func TestAuditThousandDocuments(t *testing.T) {
	templates := []string{
		`query Q%[1]d($login: String!, $n: Int, $withIssues: Boolean!) { user(login: $login) { login name repos(first: $n) { name issues(first: %[2]d) @include(if: $withIssues) { title bodyHTML } topics } } }`,
		`query Q%[1]d($ids: [ID!]!) { nodes(ids: $ids) { id ... on User { login recentIssues(limit: %[2]d) { title } } ... on Repository { name owner { login } } } }`,
		`query Q%[1]d($q: String!, $n: Int!, $full: Boolean!) { search(query: $q, first: $n) { ... on User { login followers(first: %[2]d) { totalCount nodes { login } } } ... on Repository { name ...R%[1]d } ... on Issue { title body @include(if: $full) bodyHTML @include(if: $full) } } } fragment R%[1]d on Repository { issues(last: %[2]d) { title } topics }`,
		`mutation M%[1]d($repo: String!, $title: String!) { createIssue(repo: $repo, title: $title) { id title } rateLimit { remaining } }`,
		`query Q%[1]d($login: String!, $a: Boolean!, $b: Boolean!, $c: Boolean!) { user(login: $login) { recommendations { name owner { repos(first: %[2]d) { name } } } followers(first: 10) @skip(if: $a) { nodes { login recentIssues { title } } } repos(last: 3) @include(if: $b) { issues(first: 5) @include(if: $c) { bodyHTML } } } }`,
	}
	files := map[string]string{}
	manifest := map[string]string{}
	for i := range 1000 {
		body := fmt.Sprintf(templates[i%len(templates)], i, 1+i%50)
		if i%2 == 0 {
			files[fmt.Sprintf("ops/op%04d.graphql", i)] = body
		} else {
			manifest[fmt.Sprintf("Op%d", i)] = body
		}
	}
	files["manifest.json"] = apolloManifest(t, manifest)
	dir := writeFiles(t, files)
	start := time.Now()
	r := runCost(t, "", "audit", "-schema", "../../graph/schema.graphqls", "-max-breadth", "100", "-json",
		filepath.Join(dir, "ops"), filepath.Join(dir, "manifest.json"))
	elapsed := time.Since(start)
	lines := auditLines(t, r.stdout)
	if r.code != 0 || len(lines) != 1000 {
		t.Fatalf("exit %d, %d results; stderr %q", r.code, len(lines), r.stderr)
	}
	for _, v := range lines {
		if v["maxCost"] == nil {
			t.Fatalf("not priced: %v", v)
		}
	}
	t.Logf("cost audit of 1,000 documents: %v wall time", elapsed)
}

// TestAuditInProcess runs the audit in the test's process, so that the
// race detector sees its workers price documents side by side.
func TestAuditInProcess(t *testing.T) {
	files := map[string]string{"schema.graphql": auditSDL}
	for i := range 40 {
		files[fmt.Sprintf("q%02d.graphql", i)] = fmt.Sprintf(`query Q%d($n: Int, $f: Boolean!) { users(first: $n) { id friends(first: %d) @include(if: $f) { name } } }`, i, i)
	}
	dir := writeFiles(t, files)
	var stdout, stderr strings.Builder
	code := run([]string{"audit", "-schema", filepath.Join(dir, "schema.graphql"), "-max-breadth", "50", "-json", filepath.Join(dir, "q*.graphql")},
		strings.NewReader(""), &stdout, &stderr)
	lines := auditLines(t, stdout.String())
	if code != 0 || len(lines) != 40 {
		t.Fatalf("exit %d, %d results, stderr %q", code, len(lines), stderr.String())
	}
	for i, v := range lines {
		// 50 users, each with i friends: 50 × (1 + i).
		if want := float64(50 * (1 + i)); v["operation"] != fmt.Sprintf("Q%d", i) || v["maxCost"] != want {
			t.Errorf("result %d: %v; want Q%d at %v, in the documents' order", i, v, i, want)
		}
	}
}

// TestAuditTrustedDocuments audits the trusted-documents manifests a
// server loads: the example server's own (Apollo's format) against its
// schema and plans, and a flat object of hash to document keyed as
// GraphQL over HTTP's documentId ("sha256:<hex>") or by the bare hex, as
// GraphQL Codegen's client preset writes it.
func TestAuditTrustedDocuments(t *testing.T) {
	const schema, plans = "../../graph/schema.graphqls", "../server/costguard.yaml"
	r := runCost(t, "", "audit", "-schema", schema, "-max-breadth", "100", "-plans", plans, "-json", "../server/trusted-documents.json")
	lines := auditLines(t, r.stdout)
	if r.code != 0 || len(lines) != 3 {
		t.Fatalf("exit %d, %d results; stderr %q", r.code, len(lines), r.stderr)
	}
	// Repos: 100 repositories (first: $n at the maximum breadth), each 1
	// + 5 issues: 600, and the user 1.
	for i, want := range []struct {
		op      string
		maxCost float64
		anon    bool
	}{{"User", 1, true}, {"Repos", 601, false}, {"CreateIssue", 11, true}} {
		v := lines[i]
		if v["operation"] != want.op || v["maxCost"] != want.maxCost {
			t.Errorf("result %d: %v; want %s at %v", i, v, want.op, want.maxCost)
			continue
		}
		anon := v["plans"].([]any)[0].(map[string]any)
		if anon["plan"] != "anon" || anon["fits"] != want.anon {
			t.Errorf("%s on the anon plan: %v; want fits %v", want.op, anon, want.anon)
		}
	}

	users := `query Users($login: String!) { user(login: $login) { repos(first: 7) { name } } }`
	me := `{ rateLimit { remaining } }`
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	flat, err := json.Marshal(map[string]string{"sha256:" + hash(users): users, hash(me): me})
	if err != nil {
		t.Fatal(err)
	}
	dir := writeFiles(t, map[string]string{"trusted.json": string(flat)})
	r = runCost(t, "", "audit", "-schema", schema, "-json", filepath.Join(dir, "trusted.json"))
	got := map[string]any{}
	for _, v := range auditLines(t, r.stdout) {
		got[filepath.Base(v["document"].(string))] = v["maxCost"]
	}
	want := map[string]any{"trusted.json#Users": float64(8), "trusted.json#" + hash(me): float64(0)}
	if r.code != 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("flat manifest: exit %d, %v; want %v (stderr %q)", r.code, got, want, r.stderr)
	}
}
