package complexity

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vektah/gqlparser/v2/ast"
)

// Analyzer prices operations against one schema. It is immutable after New
// and safe for concurrent use.
type Analyzer struct {
	cfg config
	c   *compiled
	// counting resolves WithCountedFields; nil without it.
	counting *counting
	// walkers recycles the scratch stacks of finished analyses, so pricing
	// a typical operation allocates little beyond its Report.
	walkers sync.Pool
	// readings recycles the scratch space of Plan.ActualCost, which reads
	// a response without walking the operation.
	readings sync.Pool
	// recording feeds WithListSizeRecorder; nil without it.
	recording *recording
}

// New compiles schema's @cost and @listSize directives and the options into
// an Analyzer. Malformed directives fail with ErrInvalidSchema, bad options
// with ErrInvalidOption.
func New(schema *ast.Schema, opts ...Option) (*Analyzer, error) {
	if schema == nil {
		return nil, fmt.Errorf("%w: nil schema", ErrInvalidSchema)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	c, err := compile(schema, &cfg)
	if err != nil {
		return nil, err
	}
	ct, err := compileCounted(c, cfg.counted)
	if err != nil {
		return nil, err
	}
	return &Analyzer{cfg: cfg, c: c, counting: ct, recording: newRecording(cfg.recorder, c)}, nil
}

// Schema returns the schema the Analyzer was built for.
func (a *Analyzer) Schema() *ast.Schema { return a.c.schema }

// Analyze prices the operation named operationName in doc (the only
// operation when the name is empty). doc must be parsed and validated
// against the Analyzer's schema; variables are the request's variables,
// ideally already coerced (validator.VariableValues).
//
// A rejected operation returns a nil Report and an *Error. Other errors
// wrap ErrInvalidDocument.
func (a *Analyzer) Analyze(doc *ast.QueryDocument, operationName string, variables map[string]any) (*Report, error) {
	if doc == nil {
		return nil, fmt.Errorf("%w: nil document", ErrInvalidDocument)
	}
	var op *ast.OperationDefinition
	switch {
	case operationName != "":
		op = doc.Operations.ForName(operationName)
		if op == nil {
			return nil, fmt.Errorf("%w: no operation named %q", ErrInvalidDocument, operationName)
		}
	case len(doc.Operations) == 1:
		op = doc.Operations[0]
	case len(doc.Operations) == 0:
		return nil, fmt.Errorf("%w: the document has no operation", ErrInvalidDocument)
	default:
		return nil, fmt.Errorf("%w: the document has %d operations; name one", ErrInvalidDocument, len(doc.Operations))
	}
	return a.AnalyzeOperation(doc, op, variables)
}

// AnalyzeOperation prices op, an operation of doc. It is the form gqlgen's
// OperationContext feeds directly: AnalyzeOperation(rc.Doc, rc.Operation,
// rc.Variables). doc is used to find fragments that a spread does not
// already point to; it may be nil for a validated operation.
//
// The Report carries no breakdown (Fields empty) unless the Analyzer was
// built with WithBreakdownLimit: Explain gives one on request.
func (a *Analyzer) AnalyzeOperation(doc *ast.QueryDocument, op *ast.OperationDefinition, variables map[string]any) (*Report, error) {
	return a.analyze(doc, op, variables, a.cfg.breakdownLimit)
}

// Explain is AnalyzeOperation with the breakdown on: the same walk, the
// same totals and the same errors, and Report.Fields listing every priced
// field, up to the Analyzer's WithBreakdownLimit, else
// DefaultBreakdownLimit, entries and WithBreakdownBytes bytes of paths
// (FieldsTruncated says when it stopped). It is the explain view's call,
// for a request that asks why it costs what it costs; pricing on the
// request path needs only AnalyzeOperation.
func (a *Analyzer) Explain(doc *ast.QueryDocument, op *ast.OperationDefinition, variables map[string]any) (*Report, error) {
	return a.analyze(doc, op, variables, a.explainLimit())
}

// explainLimit is the number of breakdown entries Explain lists.
func (a *Analyzer) explainLimit() int {
	if a.cfg.breakdownLimit > 0 {
		return a.cfg.breakdownLimit
	}
	return DefaultBreakdownLimit
}

// analyze prices op with a breakdown of up to limit entries (0: none).
func (a *Analyzer) analyze(doc *ast.QueryDocument, op *ast.OperationDefinition, variables map[string]any, limit int) (*Report, error) {
	if op == nil {
		return nil, fmt.Errorf("%w: nil operation", ErrInvalidDocument)
	}
	w := a.acquire(doc, op, variables)
	defer a.release(w)
	w.explain = limit > 0
	w.counting = a.counting != nil
	w.chunked = true // the priced tree is dropped once the report is built
	set, _, totals, err := w.run()
	if err != nil {
		return nil, err
	}
	r := a.report(op, totals, w.introspection, w.counts)
	if limit > 0 {
		r.Fields = w.breakdown(set.fields, min(int64(limit), set.lines), a.cfg.breakdownBytes, &r.FieldsTruncated)
	}
	return r, nil
}

// acquire takes a walker from the pool, set up to price op.
func (a *Analyzer) acquire(doc *ast.QueryDocument, op *ast.OperationDefinition, variables map[string]any) *walker {
	w, _ := a.walkers.Get().(*walker)
	if w == nil {
		w = &walker{groups: make([]fieldGroup, 0, 16), path: make([]string, 0, 16)}
	}
	w.a, w.c, w.doc, w.op, w.vars = a, a.c, doc, op, variables
	w.introspection, w.explain, w.plan, w.chunked, w.kept, w.counting, w.counts = false, false, false, false, false, false, nil
	w.maxDepth = AbsoluteMaxDepth
	if a.cfg.maxDepth > 0 && a.cfg.maxDepth < w.maxDepth {
		w.maxDepth = a.cfg.maxDepth
	}
	return w
}

// run prices w.op and holds it to every limit: the one walk behind
// AnalyzeOperation and ActualCost. It returns the root selection's priced
// set, the operation's base cost and its totals.
func (w *walker) run() (set pricedSet, base Cost, totals Totals, err error) {
	root, base, groups, err := w.rootFields()
	if err != nil {
		return set, 0, totals, err
	}
	if err := w.priceGroups(&set, root, nil, 0, groups, noSizes, 1, 0, false); err != nil {
		return set, 0, totals, err
	}
	if totals, err = w.a.totals(w.op, base, set.price); err != nil {
		return set, 0, totals, err
	}
	return set, base, totals, nil
}

// rootFields collects w.op's root fields, of type root, after the checks
// that read the document alone (aliases, root fields); base is the cost
// the operation starts from. The walk and a plan's compiler both start
// here.
func (w *walker) rootFields() (root *typeInfo, base Cost, groups []fieldGroup, err error) {
	a, op := w.a, w.op
	root, base = a.rootType(op)
	if root == nil {
		return nil, 0, nil, fmt.Errorf("%w: the schema has no %s type", ErrInvalidDocument, op.Operation)
	}
	if a.cfg.maxAliases > 0 {
		if err := w.checkAliases(); err != nil {
			return nil, 0, nil, err
		}
	}
	if groups, _, err = w.collect(root, nil, op.SelectionSet); err != nil {
		return nil, 0, nil, err
	}
	// Every response key counts, introspection and __typename included.
	if n := len(groups); a.cfg.maxRootFields > 0 && n > a.cfg.maxRootFields {
		return nil, 0, nil, &Error{
			Code:      CodeMaxRootFieldsExceeded,
			Message:   fmt.Sprintf("operation %s selects %d root fields, which exceeds the maximum of %d", opName(op), n, a.cfg.maxRootFields),
			Locations: locationsOf(op.Position),
			Value:     float64(n),
			Limit:     float64(a.cfg.maxRootFields),
		}
	}
	return root, base, groups, nil
}

// rootType is the type op's root fields belong to (nil if the schema has
// none) and the cost op starts from.
func (a *Analyzer) rootType(op *ast.OperationDefinition) (*typeInfo, Cost) {
	switch op.Operation {
	case ast.Mutation:
		return a.c.mutation, a.cfg.mutationBaseCost
	case ast.Subscription:
		return a.c.subscription, 0
	}
	return a.c.query, 0
}

// release returns w to the pool, dropping references into the finished
// analysis, and scratch space that grew unusually large.
func (a *Analyzer) release(w *walker) {
	w.doc, w.op, w.vars, w.refused, w.counts = nil, nil, nil, nil, nil
	w.memoCounts = nil
	if cap(w.groups) > 256 || cap(w.path) > 256 || len(w.visited) > 256 || len(w.fragments) > 256 || len(w.memo) > 256 || len(w.ids) > 256 ||
		!w.read.reset() || cap(w.paths) > maxPathRoom || cap(w.pathEnds) > 2*DefaultBreakdownLimit || cap(w.costChunk) > 4096 || cap(w.memberChunk) > 256 || cap(w.planFields) > 1024 || cap(w.planSets) > 1024 ||
		cap(w.classNames) > 1024 || cap(w.classTables) > 1024 || cap(w.classReps) > 1024 || cap(w.classIDs) > 4096 || cap(w.classMasks) > 1024 {
		return // let the garbage collector have it
	}
	all := w.groups[:cap(w.groups)]
	for i := range all {
		g := &all[i]
		more := g.more
		if cap(more) > maxMergeRoom {
			more = nil
		}
		clear(more[:cap(more)])
		*g = fieldGroup{more: more[:0]}
	}
	clear(w.path[:cap(w.path)])
	w.groups, w.path = w.groups[:0], w.path[:0]
	clear(w.memo)
	clear(w.ids)
	clear(w.classNames[:cap(w.classNames)])
	clear(w.classTables[:cap(w.classTables)])
	clear(w.classReps[:cap(w.classReps)])
	clear(w.classFrags[:cap(w.classFrags)])
	w.classConds, w.classMasks, w.classNames, w.classTables = w.classConds[:0], w.classMasks[:0], w.classNames[:0], w.classTables[:0]
	w.classReps, w.classIDs, w.classFrags = w.classReps[:0], w.classIDs[:0], w.classFrags[:0]
	clear(w.visitedFew[:cap(w.visitedFew)])
	w.visitedFew = w.visitedFew[:0]
	clear(w.visited)
	w.scope, w.spilled = 0, false
	w.fragments = nil // built for one document only
	clear(w.planFields)
	clear(w.planSets)
	clear(w.costChunk)
	clear(w.memberChunk)
	w.costChunk, w.memberChunk = w.costChunk[:0], w.memberChunk[:0]
	w.planFields, w.planSets = w.planFields[:0], w.planSets[:0]
	a.walkers.Put(w)
}

func opName(op *ast.OperationDefinition) string {
	if op.Name == "" {
		return "(anonymous)"
	}
	return op.Name
}

// walker holds the state of one analysis.
type walker struct {
	a        *Analyzer
	c        *compiled
	doc      *ast.QueryDocument
	op       *ast.OperationDefinition
	vars     map[string]any
	maxDepth int
	explain  bool // keep every priced field for the breakdown
	// plan keeps the priced tree for ActualCost: every field's set, and
	// each member's set under an interface or union.
	plan bool
	// chunked says the priced tree does not outlive the call, so its sets
	// and fields may come from the walker's chunks (see newFields), as
	// they do while planning.
	chunked bool
	// kept says the priced tree outlives the walker (a Plan keeps it for
	// ActualCost): its sets and fields are allocated on their own, not
	// from the walker's chunks, so it holds no more than it uses.
	kept bool
	// introspection is set once a __schema or __type field is priced.
	introspection bool
	memo          map[memoKey]*pricedSet
	ids           map[*ast.Field]uint32
	path          []string // response path of the field being priced, for errors
	// groups is a stack shared by the nested collections: each collection
	// appends above its callers' entries and releases them when its
	// selection is priced, so collecting allocates nothing per level.
	groups []fieldGroup
	// The fragments spread in the current scope (one CollectFields call):
	// the first few in visitedFew, scanned; past that all of them in
	// visited, stamped with the scope that last spread them, so a spread
	// costs at most fewFragments comparisons or one map lookup, and a new
	// scope forgets the old ones without clearing the map.
	visitedFew []string
	visited    map[string]uint64
	scope      uint64
	spilled    bool // the current scope's names are in visited
	// fragments indexes the document's fragments by name, built only if a
	// spread lacks its Definition (an unvalidated document).
	fragments map[string]*ast.FragmentDefinition
	// conds caches the types fragment conditions name (see condType); it
	// holds only the schema's types, so it outlives one analysis.
	conds [64]*typeInfo
	// The stacks of memberClasses: an abstract field's type conditions,
	// the fields each mask collects, and the members priced in full;
	// classFrags is the scan's fragments.
	classConds  []*typeInfo
	classMasks  []classMask
	classNames  []string
	classTables [][]*fieldInfo
	classReps   []classRep
	classIDs    []int32
	classFrags  []*ast.FragmentDefinition
	// refused is the first @skip/@include condition the executor would
	// fail on, found while collecting; see included.
	refused *Error
	// open collects what a worst-case walk (Analyzer.WorstCase) read of
	// the values it left open; nil in any other walk.
	open *openRecorder
	// planFields and planSets hold the priced tree while planning, reused
	// from one ActualCost to the next (see newFields).
	planFields []pricedField
	planSets   []pricedSet
	// costChunk and memberChunk hold the members of abstract sets while
	// the tree is chunked (see newMemberCosts).
	costChunk   []MemberCost
	memberChunk []memberSets
	// paths and pathEnds hold the breakdown's paths while it is built
	// (see breakdown).
	paths    []byte
	pathEnds []int
	// read is the scratch space for reading a response (see response).
	read reading

	// counting counts the fields of WithCountedFields: counts holds the
	// counts of the set priced last (nil unless counting), and memoCounts
	// those of each memoised set (see fields.go).
	counting   bool
	counts     *setCounts
	memoCounts map[*pricedSet]*setCounts
}

// sizes is the size a field hands down to some of its descendants: the
// paths in spec, relative to prefix, receive size.
type sizes struct {
	spec   *fieldInfo // whose sized paths apply; nil for none
	size   int64
	prefix string // the part of a path already matched, "" or "a.b."
}

var noSizes = sizes{}

// lookup returns the size handed to child field name, and the sizes its
// own children inherit through dotted paths.
func (s sizes) lookup(name string) (handed int64, ok bool, inherit sizes) {
	if s.spec == nil {
		return 0, false, noSizes
	}
	for _, p := range s.spec.sized {
		rest, found := strings.CutPrefix(p, s.prefix)
		if !found || !strings.HasPrefix(rest, name) {
			continue
		}
		switch tail := rest[len(name):]; {
		case tail == "":
			handed, ok = s.size, true
		case tail[0] == '.' && inherit.spec == nil:
			inherit = sizes{spec: s.spec, size: s.size, prefix: p[:len(s.prefix)+len(name)+1]}
		}
	}
	return handed, ok, inherit
}

// memoKey identifies a priced selection: which merged fields' selection
// sets, priced for which type, with which handed-down sizes. A fragment
// spread many times resolves to the same fields, so it is priced once per
// key however often the document reaches it.
type memoKey struct {
	field  *ast.Field // the group's only field, or nil when merged
	merged string     // ids of a merged group's fields
	typ    *typeInfo
	sizes  sizes
}

// pricedSet is the price of a selection set for one parent type, per
// object of its parent.
type pricedSet struct {
	price
	fields []pricedField // only when explaining
	lines  int64         // explain entries below, expanded (saturating)
	deep   pricedLink    // the field that reaches depth
	// members is set when the set is an abstract type's with several
	// members, only when explaining or planning. A pointer keeps the set in
	// its allocation size class off those paths.
	members *memberSets
}

// memberSets is what a set priced for an interface or union with several
// possible types keeps of each of them.
type memberSets struct {
	// costs is each member's cost, for the explain view.
	costs []MemberCost
	// sets is each member's priced set, in the order of the abstract
	// type's possible types, for ActualCost; typenames are the response
	// keys that select __typename in them.
	sets      []pricedSet
	typenames []typenameKey
}

// typenameKey is a response key selecting __typename in member sets[member].
type typenameKey struct {
	key    string
	member int
}

// pricedLink names the deepest field of a set, so a depth violation found
// on a memoised set can still point at a field.
type pricedLink struct {
	key   string
	field *ast.Field
	child *pricedSet // nil unless memoised or explaining
}

type pricedField struct {
	key   string // response key
	field *ast.Field
	info  *fieldInfo
	n     int64
	price
	// own is fieldWeight + argCost: what the field costs for its parent
	// whatever it returns.
	own Cost
	// fixed marks an introspection field (__typename, __schema, __type, or
	// a field of an introspection type): its actual cost is its cost.
	fixed bool
	// assumed marks a list sized by an assumption, while a
	// ListSizeRecorder records such lists' sizes.
	assumed  bool
	children *pricedSet // nil for leaves, and unless memoised, explaining or planning
}

// fieldGroup is the fields sharing one response key, merged as the
// executor merges them. Almost always a single field.
type fieldGroup struct {
	key    string
	first  *ast.Field
	more   []*ast.Field
	seen   map[*ast.Field]struct{} // built once the group grows large
	shared bool                    // some field came through a named fragment spread
}

func (g *fieldGroup) size() int { return 1 + len(g.more) }

func (g *fieldGroup) at(i int) *ast.Field {
	if i == 0 {
		return g.first
	}
	return g.more[i-1]
}

// add merges f unless the group already holds it: the same field reached
// again through a fragment spread under another merged field.
func (g *fieldGroup) add(f *ast.Field, viaSpread bool) {
	g.shared = g.shared || viaSpread
	if g.seen != nil {
		if _, dup := g.seen[f]; dup {
			return
		}
		g.seen[f] = struct{}{}
		g.more = append(g.more, f)
		return
	}
	if g.first == f || slices.Contains(g.more, f) {
		return
	}
	g.more = append(g.more, f)
	if len(g.more) > 16 {
		g.seen = make(map[*ast.Field]struct{}, 2*len(g.more))
		g.seen[g.first] = struct{}{}
		for _, x := range g.more {
			g.seen[x] = struct{}{}
		}
	}
}

// collection is the state of one collect call.
type collection struct {
	t     *typeInfo
	start int            // first group in w.groups
	index map[string]int // response key → group, once there are many
}

// collect gathers the fields selected on concrete type t, by the root
// selection (parent nil) or by the sub-selections of parent's fields, as
// the executor's CollectFields does: @skip/@include applied, fragments
// applied by type condition, fields grouped by response key in document
// order. The groups live on the w.groups stack; the caller releases them
// with w.groups = w.groups[:start]. A condition the executor would refuse
// (see included) fails the collection.
func (w *walker) collect(t *typeInfo, parent *fieldGroup, root ast.SelectionSet) (groups []fieldGroup, start int, err error) {
	c := collection{t: t, start: len(w.groups)}
	if parent == nil {
		w.newScope()
		err = w.collectSet(&c, root, false)
	} else {
		for i := range parent.size() {
			// Each field's selection is its own CollectFields call, with
			// its own set of visited fragments.
			w.newScope()
			if err = w.collectSet(&c, parent.at(i).SelectionSet, false); err != nil {
				break
			}
		}
	}
	if err == nil && w.refused != nil {
		err = w.refused
	}
	if err != nil {
		w.groups = w.groups[:c.start]
		return nil, c.start, err
	}
	return w.groups[c.start:], c.start, nil
}

func (w *walker) collectSet(c *collection, sel ast.SelectionSet, viaSpread bool) error {
	for _, s := range sel {
		switch s := s.(type) {
		case *ast.Field:
			if !w.included(s.Directives) {
				continue
			}
			key := s.Alias
			if key == "" {
				key = s.Name
			}
			if i := w.findGroup(c, key); i >= 0 {
				w.groups[i].add(s, viaSpread)
				continue
			}
			w.pushGroup(key, s, viaSpread)
			switch n := len(w.groups) - c.start; {
			case c.index != nil:
				c.index[key] = len(w.groups) - 1
			case n > 16:
				c.index = make(map[string]int, 2*n)
				for i := c.start; i < len(w.groups); i++ {
					c.index[w.groups[i].key] = i
				}
			}
		case *ast.FragmentSpread:
			if !w.included(s.Directives) || !w.visit(s.Name) {
				continue
			}
			def := w.fragment(s)
			if def == nil {
				return fmt.Errorf("%w: unknown fragment %q", ErrInvalidDocument, s.Name)
			}
			if !w.applies(c.t, def.TypeCondition) {
				continue
			}
			if err := w.collectSet(c, def.SelectionSet, true); err != nil {
				return err
			}
		case *ast.InlineFragment:
			if !w.included(s.Directives) || (s.TypeCondition != "" && !w.applies(c.t, s.TypeCondition)) {
				continue
			}
			if err := w.collectSet(c, s.SelectionSet, viaSpread); err != nil {
				return err
			}
		}
	}
	return nil
}

// pushGroup starts a group for response key key on the w.groups stack. A
// slot the stack reuses keeps the room its earlier group had for merged
// fields, so merging allocates only until the walker has warmed up.
func (w *walker) pushGroup(key string, f *ast.Field, viaSpread bool) {
	n := len(w.groups)
	if n == cap(w.groups) {
		w.groups = append(w.groups, fieldGroup{key: key, first: f, shared: viaSpread})
		return
	}
	w.groups = w.groups[:n+1]
	g := &w.groups[n]
	*g = fieldGroup{key: key, first: f, more: g.more[:0], shared: viaSpread}
}

// maxPathRoom bounds the breakdown paths' room a released walker keeps:
// a default breakdown of 1,000 entries with paths of up to 256 bytes.
const maxPathRoom = 256 * DefaultBreakdownLimit

// maxMergeRoom bounds the merge room a released walker keeps per slot.
const maxMergeRoom = 64

// fewFragments is how many fragment names a scope keeps in a slice before
// moving them to the map: most selections spread a handful, which a scan
// checks faster than hashing.
const fewFragments = 8

// newScope starts a CollectFields call with no fragment visited. Only one
// scope is live at a time: collect finishes before the collected fields'
// own selections are collected.
func (w *walker) newScope() {
	w.scope++
	w.visitedFew = w.visitedFew[:0]
	w.spilled = false
}

// visit marks fragment name as spread in the current scope, and reports
// whether it was not already.
func (w *walker) visit(name string) bool {
	if !w.spilled {
		if slices.Contains(w.visitedFew, name) {
			return false
		}
		if len(w.visitedFew) < fewFragments {
			w.visitedFew = append(w.visitedFew, name)
			return true
		}
		if w.visited == nil {
			w.visited = make(map[string]uint64)
		}
		for _, n := range w.visitedFew {
			w.visited[n] = w.scope
		}
		w.spilled = true
	}
	if w.visited[name] == w.scope {
		return false
	}
	w.visited[name] = w.scope
	return true
}

// fragment returns the definition s spreads (see spreadDefinition).
func (w *walker) fragment(s *ast.FragmentSpread) *ast.FragmentDefinition {
	return spreadDefinition(w.doc, s, &w.fragments)
}

// spreadDefinition returns the definition s spreads: the one the validator
// linked, else doc's fragment of that name, nil if there is none. *index
// caches doc's fragments by name, built on first use.
func spreadDefinition(doc *ast.QueryDocument, s *ast.FragmentSpread, index *map[string]*ast.FragmentDefinition) *ast.FragmentDefinition {
	if s.Definition != nil || doc == nil {
		return s.Definition
	}
	if *index == nil {
		*index = make(map[string]*ast.FragmentDefinition, len(doc.Fragments))
		for _, f := range doc.Fragments {
			if _, dup := (*index)[f.Name]; !dup {
				(*index)[f.Name] = f // the first wins, as in ForName
			}
		}
	}
	return (*index)[s.Name]
}

func (w *walker) findGroup(c *collection, key string) int {
	if c.index != nil {
		if i, ok := c.index[key]; ok {
			return i
		}
		return -1
	}
	for i := c.start; i < len(w.groups); i++ {
		if w.groups[i].key == key {
			return i
		}
	}
	return -1
}

// applies reports whether a fragment with type condition cond applies to
// concrete type t: cond names t, or an interface or union t belongs to.
func (w *walker) applies(t *typeInfo, cond string) bool {
	ct := w.condType(cond)
	return ct != nil && ct.has(t)
}

// condType is the schema's type named cond, nil if there is none. The
// types of the document's conditions are kept in a small table indexed by
// a cheap hash of the name: an abstract type's members are collected one
// after the other, each matching the same few conditions, so a lookup is
// a comparison with the name the slot holds, not a hash of the whole name
// in the schema's map.
func (w *walker) condType(cond string) *typeInfo {
	if cond == "" {
		return nil
	}
	slot := &w.conds[(uint(len(cond))*31^uint(cond[0])*7^uint(cond[len(cond)/2])*3^uint(cond[len(cond)-1]))%uint(len(w.conds))]
	if t := *slot; t != nil && t.name == cond {
		return t
	}
	t := w.c.types[cond]
	if t != nil {
		*slot = t
	}
	return t
}

// priceChildren prices the merged sub-selections of g, whose fields return
// ret, at absolute depth depth (the children's level). shared says the
// selection may be reached again (through a fragment spread or an abstract
// type with several members); only then is it memoised, and memo is the
// stored copy.
func (w *walker) priceChildren(set *pricedSet, g *fieldGroup, ret *typeInfo, sz sizes, depth int, shared bool) (memo *pricedSet, err error) {
	shared = shared || g.shared
	var key memoKey
	if shared {
		key = w.memoKey(g, ret, sz)
		if s, ok := w.memo[key]; ok {
			if w.exceedsDepth(depth, s.depth) {
				return nil, w.depthErrorIn(s, depth)
			}
			*set = *s
			if w.counting {
				w.counts = w.memoCounts[s]
			}
			return s, nil
		}
	}
	if ret.oneType() {
		if err := w.priceObject(set, ret, nil, 0, g, sz, depth, ret.weight, shared); err != nil {
			return nil, err
		}
	} else {
		var fold memberFold
		var deep pricedLink
		multi := len(ret.possible) > 1
		var members []MemberCost
		if multi && w.explain {
			members = w.newMemberCosts(len(ret.possible))
		}
		var sets []pricedSet
		if multi && w.plan {
			sets = w.newSets(len(ret.possible))
		}
		winner := 0
		// Only the fold is kept on the request path: members that price
		// alike are priced once (see memberClasses).
		var mc memberClasses
		byClass := multi && !w.explain && !w.plan && !w.counting
		if byClass {
			mc, byClass = w.startClasses(g)
		}
		for i, t := range ret.possible {
			var s pricedSet
			var err error
			if byClass {
				mask := w.maskOf(mc, t)
				var ok bool
				if s, ok = w.classOf(mc, t, ret, i, mask); !ok {
					err = w.priceClass(mc, &s, t, ret, i, mask, g, sz, depth)
				}
			} else {
				err = w.priceObject(&s, t, ret, i, g, sz, depth, memberWeight(ret, t), shared || multi)
			}
			if err != nil {
				if byClass {
					w.endClasses(mc)
				}
				return nil, err
			}
			costliest, deepest := fold.add(i, s.price, w.counts)
			if sets != nil {
				sets[i] = s
			}
			if costliest {
				*set, winner = s, i
			}
			if deepest {
				deep = s.deep
			}
			if members != nil {
				members = append(members, MemberCost{Type: t.name, Cost: s.cost})
			}
		}
		if byClass {
			w.endClasses(mc)
		}
		set.price, set.deep, w.counts = fold.price, deep, fold.counts
		if members != nil {
			members[winner].Winner = true
		}
		if members != nil || sets != nil {
			// Only these copies escape, and only here.
			set.members = w.newMemberSets()
			*set.members = memberSets{costs: members, sets: sets, typenames: typenameKeys(sets)}
		}
	}
	if shared {
		if w.memo == nil {
			w.memo = make(map[memoKey]*pricedSet)
		}
		memo = w.newSet()
		*memo = *set
		w.memo[key] = memo
		if w.counting {
			w.memoCount(memo)
		}
	}
	return memo, nil
}

// newFields returns room for n priced fields. While planning, or when the
// tree is chunked, fields come from one chunk kept by the walker: a chunk
// is never moved (the tree points into it), so one that is full is left to
// the tree and a chunk twice as large kept instead, until one call's tree
// fits in one chunk.
func (w *walker) newFields(n int) []pricedField {
	if w.kept || !w.plan && !w.chunked {
		return make([]pricedField, 0, n)
	}
	used := len(w.planFields)
	if used+n > cap(w.planFields) {
		w.planFields = make([]pricedField, 0, max(2*cap(w.planFields), n, 16))
		used = 0
	}
	w.planFields = w.planFields[:used+n]
	return w.planFields[used : used : used+n]
}

// newSets returns n zero priced sets, from the walker's chunk while
// planning or chunked (see newFields).
func (w *walker) newSets(n int) []pricedSet {
	if w.kept || !w.plan && !w.chunked {
		return make([]pricedSet, n)
	}
	used := len(w.planSets)
	if used+n > cap(w.planSets) {
		w.planSets = make([]pricedSet, 0, max(2*cap(w.planSets), n, 16))
		used = 0
	}
	w.planSets = w.planSets[:used+n]
	return w.planSets[used : used+n : used+n]
}

func (w *walker) newSet() *pricedSet { return &w.newSets(1)[0] }

// newMemberCosts returns room for n member costs, from the walker's chunk
// when the tree is chunked (see newFields): the breakdown copies them.
func (w *walker) newMemberCosts(n int) []MemberCost {
	if !w.chunked {
		return make([]MemberCost, 0, n)
	}
	used := len(w.costChunk)
	if used+n > cap(w.costChunk) {
		w.costChunk = make([]MemberCost, 0, max(2*cap(w.costChunk), n, 16))
		used = 0
	}
	w.costChunk = w.costChunk[:used+n]
	return w.costChunk[used : used : used+n]
}

// newMemberSets returns a zero memberSets, from the walker's chunk when
// the tree is chunked (see newFields).
func (w *walker) newMemberSets() *memberSets {
	if !w.chunked {
		return new(memberSets)
	}
	if len(w.memberChunk) == cap(w.memberChunk) {
		w.memberChunk = make([]memberSets, 0, max(2*cap(w.memberChunk), 8))
	}
	w.memberChunk = w.memberChunk[:len(w.memberChunk)+1]
	return &w.memberChunk[len(w.memberChunk)-1]
}

// typenameKeys lists the response keys selecting __typename in each of an
// abstract field's member sets, keeping only the keys no member selects
// another field under: a client can alias a String field of one member to
// "__typename" and write any member's name there, so a key is trusted to
// name the object's type only when every selection under it is the real
// __typename.
func typenameKeys(sets []pricedSet) []typenameKey {
	var keys []typenameKey
	for pass := 0; pass < 2; pass++ { // count, then fill: one allocation
		n := 0
		lastKey, lastOK := "", false // the last key decided: there is usually one, "__typename"
		for i := range sets {
			for _, pf := range sets[i].fields {
				if pf.field.Name != "__typename" {
					continue
				}
				if pf.key != lastKey || lastKey == "" {
					lastKey, lastOK = pf.key, namesTypeOnly(sets, pf.key)
				}
				if !lastOK {
					continue
				}
				if keys != nil {
					keys = append(keys, typenameKey{key: pf.key, member: i})
				}
				n++
			}
		}
		if n == 0 {
			return nil
		}
		if keys == nil {
			keys = make([]typenameKey, 0, n)
		}
	}
	return keys
}

// namesTypeOnly reports whether every selection under response key key,
// in every member set, is the real __typename.
func namesTypeOnly(sets []pricedSet, key string) bool {
	for i := range sets {
		for _, pf := range sets[i].fields {
			if pf.key == key && pf.field.Name != "__typename" {
				return false
			}
		}
	}
	return true
}

// memoKey is the key of g's merged selection priced for ret with sizes
// sz.
func (w *walker) memoKey(g *fieldGroup, ret *typeInfo, sz sizes) memoKey {
	key := memoKey{typ: ret, sizes: sz}
	if g.size() == 1 {
		key.field = g.first
	} else {
		key.merged = w.groupID(g)
	}
	return key
}

func (w *walker) groupID(g *fieldGroup) string {
	if w.ids == nil {
		w.ids = make(map[*ast.Field]uint32)
	}
	b := make([]byte, 0, 8*g.size())
	for i := range g.size() {
		f := g.at(i)
		id, ok := w.ids[f]
		if !ok {
			id = uint32(len(w.ids) + 1)
			w.ids[f] = id
		}
		b = strconv.AppendUint(b, uint64(id), 36)
		b = append(b, ',')
	}
	return string(b)
}

// priceObject prices the merged sub-selections of g for object type t,
// which is member i of abstract type via (via nil: t is the field's type).
func (w *walker) priceObject(set *pricedSet, t, via *typeInfo, i int, g *fieldGroup, sz sizes, depth int, weight Cost, shared bool) error {
	groups, start, err := w.collect(t, g, nil)
	if err != nil {
		return err
	}
	err = w.priceGroups(set, t, via, i, groups, sz, depth, weight, shared)
	w.groups = w.groups[:start]
	return err
}

// priceGroups prices collected fields of concrete type t (member member of
// abstract type via, when via is not nil) at absolute depth depth; the
// set's cost starts from weight (t's own, or 0 for the root).
func (w *walker) priceGroups(set *pricedSet, t, via *typeInfo, member int, groups []fieldGroup, sz sizes, depth int, weight Cost, shared bool) error {
	*set = pricedSet{price: price{cost: weight}}
	var counts *setCounts // only when counting
	if w.plan || w.explain {
		set.fields = w.newFields(len(groups))
	}
	for i := range groups {
		g := &groups[i]
		fi := w.c.fieldOf(t, via, member, g.first.Name)
		if fi == nil {
			return noField(t, g.first.Name)
		}
		w.path = append(w.path, g.key)
		var pf pricedField
		children, err := w.priceField(&pf, g, fi, sz, depth, shared)
		w.path = w.path[:len(w.path)-1]
		if err != nil {
			return err
		}
		in, fixed := w.a.introspect(t, g.first.Name, depth, &w.introspection)
		var deepest bool
		pf.price, deepest = w.a.addField(&set.price, fi, pf.own, pf.n, children, in)
		pf.fixed = fixed
		if deepest {
			set.deep = pricedLink{key: g.key, field: g.first, child: pf.children}
		}
		if w.counting {
			w.countField(&counts, fi, g.key, pf.n)
		}
		if w.explain || w.plan {
			set.fields = append(set.fields, pf)
			set.lines = addCount(set.lines, 1)
			if pf.children != nil {
				set.lines = addCount(set.lines, pf.children.lines)
			}
		}
	}
	w.counts = counts
	return nil
}

// priceField reads field g of fi, at absolute depth depth, into pf: its
// size, its own cost and its children, whose price it returns for
// addField.
func (w *walker) priceField(pf *pricedField, g *fieldGroup, fi *fieldInfo, sz sizes, depth int, shared bool) (price, error) {
	f := g.first
	if w.exceedsDepth(depth, 1) {
		return price{}, w.depthError(f, depth)
	}
	d, err := w.declaredSize(f, fi)
	if err != nil {
		return price{}, err
	}
	n, childSizes := w.a.listSize(fi, sz, d)
	own, err := w.ownCost(f, fi)
	if err != nil {
		return price{}, err
	}
	*pf = pricedField{key: g.key, field: f, info: fi, n: n, own: own}
	pf.assumed = w.a.recording != nil && w.a.sizeAssumed(fi, sz, d)
	if !fi.ret.composite {
		return price{}, nil
	}
	var children pricedSet
	memo, err := w.priceChildren(&children, g, fi.ret, childSizes, depth+1, shared)
	if err != nil {
		return price{}, err
	}
	switch {
	case memo != nil:
		pf.children = memo
	case w.explain || w.plan:
		pf.children = w.newSet()
		*pf.children = children
	}
	return children.price, nil
}

// slicingRequiredError is SLICING_ARGUMENT_REQUIRED for f, which gave
// given slicing arguments where exactly one is required.
func (w *walker) slicingRequiredError(f *ast.Field, field string, r *listSizeRule, given int) *Error {
	names := make([]string, len(r.slicing))
	for i, s := range r.slicing {
		names[i] = s.name
	}
	return &Error{
		Code:      CodeSlicingArgumentRequired,
		Message:   fmt.Sprintf("field %s: exactly one of the slicing arguments %s is required, %d given", field, strings.Join(names, ", "), given),
		Locations: locationsOf(f.Position),
		Path:      w.errPath(),
		Value:     float64(given),
		Limit:     1,
	}
}

func (w *walker) errPath() []string {
	return append([]string(nil), w.path...)
}

func (w *walker) breadthError(f *ast.Field, msg string, n int64) *Error {
	return &Error{
		Code:      CodeMaxBreadthExceeded,
		Message:   msg,
		Locations: locationsOf(f.Position),
		Path:      w.errPath(),
		Value:     float64(n),
		Limit:     float64(w.a.cfg.maxBreadth),
	}
}

func (w *walker) depthError(f *ast.Field, depth int) *Error {
	return &Error{
		Code:      CodeMaxDepthExceeded,
		Message:   fmt.Sprintf("field %s is at depth %d, which exceeds the maximum depth of %d", f.Name, depth, w.maxDepth),
		Locations: locationsOf(f.Position),
		Path:      w.errPath(),
		Value:     float64(depth),
		Limit:     float64(w.maxDepth),
	}
}

// depthErrorIn reports the first field of a memoised set, placed at
// absolute depth depth, that lies beyond the maximum depth. Memoised sets
// only contain memoised sets, so the chain of deepest fields is complete.
func (w *walker) depthErrorIn(s *pricedSet, depth int) *Error {
	saved := len(w.path)
	defer func() { w.path = w.path[:saved] }()
	for s != nil && s.deep.field != nil {
		w.path = append(w.path, s.deep.key)
		if w.exceedsDepth(depth, 1) {
			return w.depthError(s.deep.field, depth)
		}
		s, depth = s.deep.child, depth+1
	}
	// Unreachable for a set deeper than the limit; kept total for safety.
	return &Error{Code: CodeMaxDepthExceeded, Message: fmt.Sprintf("operation exceeds the maximum depth of %d", w.maxDepth), Limit: float64(w.maxDepth)}
}

// checkAliases counts aliased fields in the operation and the fragments it
// spreads (each fragment once), stopping as soon as the limit is passed.
func (w *walker) checkAliases() error {
	limit := w.a.cfg.maxAliases
	count := 0
	seen := map[string]bool{}
	var first *ast.Field
	var walk func(ast.SelectionSet, int) bool
	walk = func(sel ast.SelectionSet, depth int) bool {
		if w.exceedsDepth(depth, 1) {
			return true // the pricing walk reports the depth
		}
		for _, s := range sel {
			switch s := s.(type) {
			case *ast.Field:
				if s.Alias != "" && s.Alias != s.Name {
					count++
					if count > limit {
						first = s
						return false
					}
				}
				if !walk(s.SelectionSet, depth+1) {
					return false
				}
			case *ast.FragmentSpread:
				if seen[s.Name] {
					continue
				}
				seen[s.Name] = true
				if def := w.fragment(s); def != nil && !walk(def.SelectionSet, depth) {
					return false
				}
			case *ast.InlineFragment:
				if !walk(s.SelectionSet, depth) {
					return false
				}
			}
		}
		return true
	}
	if walk(w.op.SelectionSet, 1) {
		return nil
	}
	return &Error{
		Code:      CodeMaxAliasesExceeded,
		Message:   fmt.Sprintf("operation %s has more than the maximum of %d aliases (%s: %s is alias number %d)", opName(w.op), limit, first.Alias, first.Name, count),
		Locations: locationsOf(first.Position),
		Value:     float64(count),
		Limit:     float64(limit),
	}
}
