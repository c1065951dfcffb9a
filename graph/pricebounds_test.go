package graph_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/graph"
)

// The differential test "price what executes": operations are
// executed by a real gqlgen server (POST transport, so variables are decoded
// and coerced exactly as in production), the analyzer prices the document,
// operation and coerced variables gqlgen hands to extensions, and what
// executed is held against the price:
//
//   - the objects the response returns through lists never exceed
//     Report.Nodes;
//   - every list a field returns (root, nested, under a union or interface
//     member, aliased) is no longer than the Multiplier the field was priced
//     at, and that Multiplier is at least the page size the resolver was
//     asked for (the smaller of first and last, the value of limit, the
//     number of ids, or the first of the connection that hands its size
//     down with sizedFields);
//   - every field that executed was priced (it has a line in Report.Fields),
//     no executed field is deeper than Report.Depth, and an operation priced
//     without a list of objects has 0 nodes;
//   - an operation the analyzer refuses runs no resolver;
//   - the example server's caps either refuse with a complexity code or
//     agree with the generous analyzer's totals.
//
// Operations gqlgen refuses (parse or validation errors, variables it cannot
// coerce) are skipped: they never reach pricing. The corpus keeps the
// inputs that found a bypass (an Int variable sent as a numeric string,
// priced at the default list size): files named issue9-*. Files
// named gen-nodes-* and gen-recent-issues-* run Query.nodes and
// User.recentIssues, lists sized by the length of ids and by limit, which
// carry no cost directive.

// Generous analyzer options: the default list size of the example server,
// caps that only keep fuzzed executions small, a breakdown that never
// truncates for a generated operation.
var generousOptions = []complexity.Option{
	complexity.WithDefaultListSize(complexity.DefaultListSize),
	complexity.WithMaxDepth(20),
	complexity.WithMaxNodes(10_000),
	complexity.WithBreakdownLimit(100_000),
}

// The example server's caps (its built-in graphql defaults, internal/serve/config.go).
var serverOptions = []complexity.Option{
	complexity.WithDefaultListSize(10),
	complexity.WithMaxDepth(10),
	complexity.WithMaxBreadth(100),
	complexity.WithMaxNodes(500_000),
	complexity.WithBreakdownLimit(0),
}

// boundsHarness prices with two analyzers built once per schema.
type boundsHarness struct {
	schema  *ast.Schema
	priced  *complexity.Analyzer // generous caps, full breakdown
	capped  *complexity.Analyzer // the example server's caps
	members []string             // every object type that belongs to an interface or union
}

func newBoundsHarness(tb testing.TB) *boundsHarness {
	tb.Helper()
	schema := graph.NewResolver().Schema().Schema()
	priced, err := complexity.New(schema, generousOptions...)
	if err != nil {
		tb.Fatal(err)
	}
	capped, err := complexity.New(schema, serverOptions...)
	if err != nil {
		tb.Fatal(err)
	}
	h := &boundsHarness{schema: schema, priced: priced, capped: capped}
	seen := map[string]bool{}
	for _, def := range schema.Types {
		if !def.IsAbstractType() {
			continue
		}
		for _, m := range schema.GetPossibleTypes(def) {
			if !seen[m.Name] {
				seen[m.Name] = true
				h.members = append(h.members, m.Name)
			}
		}
	}
	sort.Strings(h.members)
	return h
}

// executedField is one field gqlgen resolved.
type executedField struct {
	path      string // response keys joined by dots, no list indexes
	coord     string // "Type.field", the concrete parent type
	list      bool
	composite bool  // a field returning objects (or a list of them)
	length    int   // the list's length, when list
	requested int64 // the page size the resolver was asked for; -1 for none
}

// probe is a gqlgen extension and field middleware that prices each
// operation where the costguard middleware would (after validation, before
// any resolver) and records what executes.
type probe struct {
	h *boundsHarness

	mu       sync.Mutex
	seen     bool
	doc      *ast.QueryDocument
	op       *ast.OperationDefinition
	vars     map[string]any
	report   *complexity.Report
	refusal  error
	capRep   *complexity.Report
	capErr   error
	intro    map[string]bool // root response keys of __schema and __type
	executed []executedField
	panics   []string
}

var (
	_ graphql.HandlerExtension        = (*probe)(nil)
	_ graphql.OperationContextMutator = (*probe)(nil)
)

func (p *probe) ExtensionName() string                   { return "PriceBoundsProbe" }
func (p *probe) Validate(graphql.ExecutableSchema) error { return nil }
func (p *probe) MutateOperationContext(_ context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen, p.doc, p.op, p.vars = true, oc.Doc, oc.Operation, oc.Variables
	p.intro = map[string]bool{}
	introspectionKeys(oc.Operation.SelectionSet, p.intro)
	p.capRep, p.capErr = p.h.capped.AnalyzeOperation(oc.Doc, oc.Operation, oc.Variables)
	p.report, p.refusal = p.h.priced.AnalyzeOperation(oc.Doc, oc.Operation, oc.Variables)
	if p.refusal == nil {
		return nil
	}
	var cerr *complexity.Error
	if errors.As(p.refusal, &cerr) {
		return cerr.GQLError()
	}
	return gqlerror.Errorf("the operation cannot be priced")
}

// introspectionKeys adds the response keys of the root fields __schema and
// __type in ss to keys, through fragments, whatever @skip and @include say
// (gqlgen's CollectFields panics on a null condition).
func introspectionKeys(ss ast.SelectionSet, keys map[string]bool) {
	for _, sel := range ss {
		switch s := sel.(type) {
		case *ast.Field:
			if s.Name == "__schema" || s.Name == "__type" {
				keys[cmp.Or(s.Alias, s.Name)] = true
			}
		case *ast.InlineFragment:
			introspectionKeys(s.SelectionSet, keys)
		case *ast.FragmentSpread:
			if s.Definition != nil {
				introspectionKeys(s.Definition.SelectionSet, keys)
			}
		}
	}
}

func (p *probe) aroundField(ctx context.Context, next graphql.Resolver) (any, error) {
	res, err := next(ctx)
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil || fc.Field.Definition == nil {
		return res, err
	}
	typ := fc.Field.Definition.Type
	named := p.h.schema.Types[typ.Name()]
	e := executedField{
		path:      responsePath(fc.Path()),
		coord:     fc.Object + "." + fc.Field.Name,
		list:      typ.Elem != nil,
		composite: named != nil && (named.Kind == ast.Object || named.IsAbstractType()),
		requested: requestedSize(fc),
	}
	if v := reflect.ValueOf(res); e.list && v.Kind() == reflect.Slice {
		e.length = v.Len()
	}
	p.mu.Lock()
	p.executed = append(p.executed, e)
	p.mu.Unlock()
	return res, err
}

func responsePath(path ast.Path) string {
	var b strings.Builder
	for _, el := range path {
		if name, ok := el.(ast.PathName); ok {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(string(name))
		}
	}
	return b.String()
}

// requestedSize is the most items the example resolvers may return for
// this field, as they were called: what its own arguments ask for (see
// ownSlice), or for a field a parent names in @listSize(sizedFields:), the
// parent's. -1: unbounded.
func requestedSize(fc *graphql.FieldContext) int64 {
	if n := ownSlice(fc); n >= 0 {
		return n
	}
	for p := fc.Parent; p != nil; p = p.Parent {
		if p.Field.Field == nil || p.Field.Definition == nil {
			continue // a list index
		}
		if ls := p.Field.Definition.Directives.ForName("listSize"); ls != nil {
			if arg := ls.Arguments.ForName("sizedFields"); arg != nil && arg.Value != nil {
				for _, c := range arg.Value.Children {
					if c.Value.Raw == fc.Field.Name {
						return ownSlice(p)
					}
				}
			}
		}
		return -1
	}
	return -1
}

// ownSlice is the page size a field's own arguments ask for, as the
// example resolvers read them: the smaller of a non-null first and last
// (repos, issues, search and followers), the value of limit, its schema
// default when null (recentIssues), or the number of ids (nodes, one item
// per id). -1: none of these.
func ownSlice(fc *graphql.FieldContext) int64 {
	n := int64(-1)
	smaller := func(x int64) {
		if n < 0 || x < n {
			n = x
		}
	}
	for _, name := range []string{"first", "last", "limit"} {
		v, ok := fc.Args[name]
		if !ok {
			continue
		}
		switch t := v.(type) {
		case int:
			smaller(int64(t))
		case *int:
			if t != nil {
				smaller(int64(*t))
			} else if d := schemaDefault(fc, name); name == "limit" && d >= 0 {
				smaller(d)
			}
		}
	}
	if ids, ok := fc.Args["ids"].([]string); ok {
		smaller(int64(len(ids)))
	}
	return n
}

// schemaDefault is the Int default the schema declares for the argument
// name of fc's field; -1 when it has none.
func schemaDefault(fc *graphql.FieldContext, name string) int64 {
	arg := fc.Field.Definition.Arguments.ForName(name)
	if arg == nil || arg.DefaultValue == nil {
		return -1
	}
	d, err := strconv.ParseInt(arg.DefaultValue.Raw, 10, 64)
	if err != nil {
		return -1
	}
	return d
}

// boundsResult is what one execution showed.
type boundsResult struct {
	skipped  string   // why nothing was compared ("" when compared)
	panics   []string // resolver panics gqlgen recovered (not the analyzer's concern)
	failures []string // each a discrepancy between price and execution
	lists    int      // executed lists held against a priced size
	nodes    int64    // objects returned through lists
}

func (r *boundsResult) failf(format string, args ...any) {
	if msg := fmt.Sprintf(format, args...); !slices.Contains(r.failures, msg) {
		r.failures = append(r.failures, msg) // once, not once per list element
	}
}

// run executes query with variables (raw JSON text, "" for none) on a fresh
// resolver and compares the execution with its price.
func (h *boundsHarness) run(query, variables string) boundsResult {
	var res boundsResult
	body := map[string]json.RawMessage{}
	q, _ := json.Marshal(query)
	body["query"] = q
	if variables != "" {
		if !json.Valid([]byte(variables)) {
			res.skipped = "variables are not JSON"
			return res
		}
		body["variables"] = json.RawMessage(variables)
	}
	payload, err := json.Marshal(body)
	if err != nil {
		res.skipped = err.Error()
		return res
	}

	resolver := graph.NewResolver() // fresh data: mutations cannot grow a list across runs
	p := &probe{h: h}
	srv := handler.New(resolver.Schema())
	srv.AddTransport(transport.POST{})
	srv.Use(p)
	srv.AroundFields(p.aroundField)
	srv.SetRecoverFunc(func(_ context.Context, v any) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.panics = append(p.panics, fmt.Sprint(v))
		return fmt.Errorf("internal system error")
	})
	req := httptest.NewRequest(http.MethodPost, "/graphql", bytes.NewReader(payload))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)

	var resp struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message    string         `json:"message"`
			Extensions map[string]any `json:"extensions"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		res.failf("response is not JSON (%v): %s", err, rec.Body.String())
		return res
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.seen {
		res.skipped = "refused by gqlgen before pricing"
		return res
	}

	if p.refusal != nil {
		var cerr *complexity.Error
		if !errors.As(p.refusal, &cerr) {
			res.failf("a validated operation cannot be priced: %v", p.refusal)
		}
		if n := resolver.Calls(); n != 0 || len(p.executed) != 0 {
			res.failf("refused (%v) yet %d resolvers and %d fields ran", p.refusal, n, len(p.executed))
		}
		if d := bytes.TrimSpace(resp.Data); len(d) != 0 && string(d) != "null" {
			res.failf("refused (%v) yet data was returned: %s", p.refusal, d)
		}
		if cerr != nil && (len(resp.Errors) == 0 || resp.Errors[0].Extensions["code"] != cerr.Code) {
			res.failf("refused with %s but the response says %s", cerr.Code, rec.Body.String())
		}
		res.skipped = "refused by the analyzer: " + p.refusal.Error()
		return res
	}
	rep := p.report
	res.panics = p.panics

	// The example server's caps refuse with a code, or price the same.
	if p.capErr != nil {
		var cerr *complexity.Error
		if !errors.As(p.capErr, &cerr) {
			res.failf("the capped analyzer failed without a code: %v", p.capErr)
		}
	} else if p.capRep.Totals != rep.Totals {
		res.failf("capped analyzer totals %+v differ from %+v", p.capRep.Totals, rep.Totals)
	}

	// Objects returned through lists against Nodes.
	var data any
	dec := json.NewDecoder(bytes.NewReader(resp.Data))
	dec.UseNumber()
	if err := dec.Decode(&data); err != nil && len(bytes.TrimSpace(resp.Data)) != 0 {
		res.failf("data is not JSON: %v", err)
	}
	if root, ok := data.(map[string]any); ok {
		for k, v := range root {
			if !p.intro[k] {
				res.nodes += countListObjects(v, false)
			}
		}
	}
	if res.nodes > rep.Nodes {
		res.failf("the response holds %d objects in lists; priced at %d nodes", res.nodes, rep.Nodes)
	}
	// The actual cost, read from the response, pays for every object it
	// returned through lists (each weighs at least 1 in this schema),
	// however its interfaces and unions are written and aliased.
	if len(resp.Errors) == 0 {
		actual, err := h.priced.ActualCost(p.doc, p.op, p.vars, resp.Data)
		switch {
		case err != nil:
			res.failf("the response cannot be priced: %v", err)
		case actual < res.nodes:
			res.failf("actual cost %d is below the %d objects the response holds in lists", actual, res.nodes)
		case actual > rep.Points:
			res.failf("actual cost %d is above the price %d", actual, rep.Points)
		}
	}

	// The priced size of every field, at its path, under every member an
	// interface or union may resolve to.
	reports := []*complexity.Report{rep}
	for _, m := range h.members {
		op, abstract := specialize(h.schema, p.op, m)
		if !abstract {
			break
		}
		r, err := h.priced.AnalyzeOperation(p.doc, op, p.vars)
		if err != nil {
			res.failf("the operation restricted to %s cannot be priced: %v", m, err)
			continue
		}
		if r.Cost > rep.Cost || r.Nodes > rep.Nodes || r.Depth > rep.Depth {
			res.failf("the operation restricted to %s prices higher (%+v) than the whole (%+v)", m, r.Totals, rep.Totals)
		}
		reports = append(reports, r)
	}
	mult := map[string]int64{}
	truncated := false
	objectLists := 0
	for _, r := range reports {
		truncated = truncated || r.FieldsTruncated
		for _, fc := range r.Fields {
			k := fc.Path + "\x00" + fc.Field
			if old, ok := mult[k]; !ok || fc.Multiplier > old {
				mult[k] = fc.Multiplier
			}
			if d := h.fieldDef(fc.Field); d != nil && d.Type.Elem != nil && h.isComposite(d.Type.Name()) {
				objectLists++
			}
		}
	}
	if objectLists == 0 && !truncated && rep.Nodes != 0 {
		res.failf("no list of objects is priced, yet nodes = %d", rep.Nodes)
	}

	abstractAt := map[string]bool{}
	for _, e := range p.executed {
		if d := h.fieldDef(e.coord); d != nil && h.schema.Types[d.Type.Name()].IsAbstractType() {
			abstractAt[e.path] = true
		}
	}
	underAbstract := func(path string) bool {
		for i := strings.LastIndexByte(path, '.'); i > 0; i = strings.LastIndexByte(path[:i], '.') {
			if abstractAt[path[:i]] {
				return true
			}
		}
		return false
	}
	for _, e := range p.executed {
		root, _, _ := strings.Cut(e.path, ".")
		if p.intro[root] {
			continue
		}
		if depth := strings.Count(e.path, ".") + 1; depth > rep.Depth {
			res.failf("%s (%s) executed at depth %d; priced depth %d", e.path, e.coord, depth, rep.Depth)
		}
		n, priced := mult[e.path+"\x00"+e.coord]
		if !priced {
			// Under an abstract type only the costliest member is listed;
			// a member whose own selection costs nothing may lose the tie
			// in its restricted pricing too. A list of objects never
			// costs nothing unless it was priced at size 0.
			if !truncated && (!underAbstract(e.path) || (e.list && e.composite && e.length > 0)) {
				res.failf("%s (%s) executed (list length %d) but was not priced", e.path, e.coord, e.length)
			}
			continue
		}
		if !e.list {
			continue
		}
		res.lists++
		if int64(e.length) > n {
			res.failf("%s (%s) returned %d items; priced at %d", e.path, e.coord, e.length, n)
		}
		if e.requested >= 0 && e.requested > n {
			res.failf("%s (%s) executed with a page size of %d; priced at %d", e.path, e.coord, e.requested, n)
		}
	}
	return res
}

// countListObjects counts the objects in v that are elements of a list
// (at any depth), as GitHub's node limit does.
func countListObjects(v any, inList bool) int64 {
	var n int64
	switch t := v.(type) {
	case map[string]any:
		if inList {
			n++
		}
		for _, c := range t {
			n += countListObjects(c, false)
		}
	case []any:
		for _, c := range t {
			n += countListObjects(c, true)
		}
	}
	return n
}

func (h *boundsHarness) fieldDef(coord string) *ast.FieldDefinition {
	typ, field, ok := strings.Cut(coord, ".")
	if !ok || h.schema.Types[typ] == nil {
		return nil
	}
	return h.schema.Types[typ].Fields.ForName(field)
}

func (h *boundsHarness) isComposite(name string) bool {
	d := h.schema.Types[name]
	return d != nil && (d.Kind == ast.Object || d.IsAbstractType())
}

// specialize returns a copy of op in which the selection of every field of
// an interface or union type keeps only the fragments that apply to member:
// priced, that copy lists member's fields in the explain view, which for the
// whole operation names only the costliest member. abstract reports whether
// op has such a field at all.
func specialize(schema *ast.Schema, op *ast.OperationDefinition, member string) (out *ast.OperationDefinition, abstract bool) {
	sp := &specializer{schema: schema, member: member, frags: map[fragKey]*ast.FragmentDefinition{}}
	c := *op
	c.SelectionSet = sp.set(op.SelectionSet, false)
	return &c, sp.abstract
}

type fragKey struct {
	def    *ast.FragmentDefinition
	filter bool
}

type specializer struct {
	schema   *ast.Schema
	member   string
	frags    map[fragKey]*ast.FragmentDefinition // copies, so shared fragments are copied once
	abstract bool
}

func (sp *specializer) applies(cond string) bool {
	if cond == "" || cond == sp.member {
		return true
	}
	def := sp.schema.Types[cond]
	return def != nil && slices.ContainsFunc(sp.schema.GetPossibleTypes(def), func(d *ast.Definition) bool {
		return d.Name == sp.member
	})
}

// set copies ss; filter drops the fragments that do not apply to the
// member (ss is the selection of an abstract field).
func (sp *specializer) set(ss ast.SelectionSet, filter bool) ast.SelectionSet {
	out := make(ast.SelectionSet, 0, len(ss))
	for _, sel := range ss {
		switch s := sel.(type) {
		case *ast.Field:
			c := *s
			inner := false
			if s.Definition != nil {
				if d := sp.schema.Types[s.Definition.Type.Name()]; d != nil && d.IsAbstractType() {
					sp.abstract, inner = true, true
				}
			}
			c.SelectionSet = sp.set(s.SelectionSet, inner)
			out = append(out, &c)
		case *ast.InlineFragment:
			if filter && !sp.applies(s.TypeCondition) {
				continue
			}
			c := *s
			c.SelectionSet = sp.set(s.SelectionSet, filter)
			out = append(out, &c)
		case *ast.FragmentSpread:
			if s.Definition == nil || (filter && !sp.applies(s.Definition.TypeCondition)) {
				continue
			}
			k := fragKey{s.Definition, filter}
			def, ok := sp.frags[k]
			if !ok {
				d := *s.Definition
				def = &d
				sp.frags[k] = def
				def.SelectionSet = sp.set(s.Definition.SelectionSet, filter)
			}
			c := *s
			c.Definition = def
			out = append(out, &c)
		}
	}
	return out
}

// priceBoundsSeeds cover each feature the generator has, written out; the
// recipes in testdata/fuzz/FuzzPriceBoundsExecution cover generated ones.
var priceBoundsSeeds = []struct{ query, variables string }{
	{`{ user(login: "octocat") { repos(first: 100) { issues(first: 50) { title } } } }`, ``},
	{`{ user(login: "octocat") { repos { name topics issues(last: 2) { id } } } }`, ``},
	{`query($f: Int, $l: Int!) { user(login: "octocat") { a: repos(first: $f, last: $l) { owner { repos(first: 1) { name } } } b: repos(last: $l) { id } } }`, `{"f": 3, "l": 2}`},
	{`query($n: Int! = 2) { user(login: "octocat") { followers(first: $n) { totalCount nodes { login repos { name } } } } }`, `{}`},
	{`{ search(query: "", first: 25) { __typename ... on User { x: repos(first: 1) { name } } ... on Repository { x: issues(first: 3) { title } topics } ... on Issue { bodyHTML } } }`, ``},
	{`query($s: Boolean!) { node(id: "U_octocat") { ...N ... on Repository @skip(if: $s) { issues { id } } } } fragment N on Node { id ... on User { repos(last: 2) @include(if: true) { ...R } } } fragment R on Repository { name issues(first: 1) { title } }`, `{"s": false}`},
	{`query($f: Int) { search(query: "o", first: $f) { ... on Node { id } } }`, `{"f": null}`},
	{`{ user(login: "octocat") { repos(first: -1) { name } } }`, ``},
	{`query Q($f: Int = 3) { ... on Query { user(login: "alice") { repos(first: $f) { name } } } }`, `{}`},
	{`mutation { a: createIssue(repo: "hello-world", title: "Bug") { id title } b: createIssue(repo: "linguist", title: "Bug") { bodyHTML } }`, ``},
	{`query($f: Int) { user(login: "octocat") { repos(first: $f) { name } } }`, `{"f": 2}`},
	{`{ node(id: "R_hello-world") { ... on Repository { issues(first: 2) { id } } } }`, ``},
	// rateLimit weighs nothing; served without the limiter it is null (with
	// an error), and its dryRun changes nothing here.
	{`query($d: Boolean) { rateLimit(dryRun: $d) { limit cost remaining used resetAt nodeCount } user(login: "octocat") { repos(first: 2) { issues(first: 1) { title } } } }`, `{"d": true}`},
	{`mutation { rateLimit(dryRun: true) { cost } createIssue(repo: "linguist", title: "Bug") { id } }`, ``},
	// nodes is sized by the length of ids (a key list): one item per id,
	// null for an unknown one, duplicates kept; a single id is a list of
	// one, literal or sent; more than 100 ids the resolver refuses, as the
	// example server's breadth cap does.
	{`{ nodes(ids: ["U_octocat", "R_hello-world", "nope", "I_3", "U_octocat"]) { id ... on User { repos(first: 2) { name } } ... on Repository { issues(last: 1) { title } } } one: nodes(ids: "U_bob") { __typename } }`, ``},
	{`query($ids: [ID!]!) { nodes(ids: $ids) { ... on Issue { title } ... on User { recentIssues(limit: 1) { id } } } }`, `{"ids": ["I_1", "I_2", "I_3", "I_4", "I_5", "I_6", "I_7", "I_8", "I_9", "I_10", "I_11", "I_12", "I_13", "I_14", "U_alice", "nope"]}`},
	{`query($ids: [ID!]!) { nodes(ids: $ids) { id } }`, `{"ids": "R_linguist"}`},
	{`query($id: ID!, $ids: [ID!] = ["I_1", "I_2"]) { a: nodes(ids: [$id, "U_carol", $id]) { id } b: nodes(ids: $ids) { id } }`, `{"id": "U_bob"}`},
	{`query($ids: [ID!]!) { nodes(ids: $ids) { id } }`, `{"ids": [` + strings.Repeat(`"U_bob", `, 100) + `"U_bob"]}`},
	// recentIssues is sized by limit (a count-named argument): 5 when
	// absent, the resolver's 5 when null.
	{`{ user(login: "octocat") { recentIssues { title } all: recentIssues(limit: 25) { id } none: recentIssues(limit: 0) { id } } }`, ``},
	{`query($l: Int) { user(login: "octocat") { recentIssues(limit: $l) { id } null: recentIssues(limit: null) { id } } }`, `{"l": "+12"}`},
	{`query($l: Int = 7) { user(login: "alice") { recentIssues(limit: $l) { id } } }`, `{}`},
	{`{ user(login: "bob") { recentIssues(limit: -1) { id } } }`, ``},
}

func FuzzPriceBoundsExecution(f *testing.F) {
	for _, s := range priceBoundsSeeds {
		f.Add([]byte(nil), s.query, s.variables)
	}
	h := newBoundsHarness(f)
	f.Fuzz(func(t *testing.T, recipe []byte, query, variables string) {
		if len(recipe) > 512 || len(query) > 2048 || len(variables) > 1024 {
			return
		}
		if query == "" { // generated mode: the recipe writes both
			query, variables = generate(recipe)
		}
		res := h.run(query, variables)
		if len(res.failures) == 0 {
			return
		}
		msg := fmt.Sprintf("price and execution disagree\nquery:     %s\nvariables: %s\n%s",
			query, variables, strings.Join(res.failures, "\n"))
		t.Fatal(msg)
	})
}
