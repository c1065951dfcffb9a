package complexity

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/vektah/gqlparser/v2/ast"
)

// MaxPlanConditions is the most variables a Plan compiles @skip/@include
// conditions for: one sub-plan per assignment of true and false, so at
// most 2^MaxPlanConditions sub-plans. An operation whose conditions read
// more variables is priced from scratch by Evaluate.
const MaxPlanConditions = 4

// Plan is the price of one operation of one document, compiled by
// Analyzer.Compile for repeated pricing: Evaluate gives, for any variables,
// exactly what AnalyzeOperation gives. A Plan is safe for
// concurrent use. It keeps the document and the operation it was compiled
// from (Evaluate may price them from scratch), so it belongs next to them
// in a query cache.
type Plan struct {
	a   *Analyzer
	doc *ast.QueryDocument
	op  *ast.OperationDefinition
	// conds are the variables @skip and @include read, in document order;
	// bit i of an index into subs is conds[i]'s value. Nil when there are
	// too many (see MaxPlanConditions): then subs is empty.
	conds []condVar
	subs  []subPlan
	size  int64
	// actualBudget is the most bytes a sub-plan's priced tree for
	// ActualCost may retain (see actualTree): Size charges it per
	// sub-plan, so a larger tree is not kept.
	actualBudget int64
}

// condVar is a variable read as a @skip/@include condition, and the first
// if argument that reads it.
type condVar struct {
	name string
	arg  *ast.Argument
}

// subPlan is the price under one assignment of the condition variables:
// a constant result, a compiled tree to evaluate, or neither (priced from
// scratch).
type subPlan struct {
	once     sync.Once // compiles it on first use (Plan.sub)
	constant bool
	report   *Report
	err      error
	root     *planSet // compiled: the root selection
	base     Cost
	intro    bool       // the operation selects __schema or __type
	slots    int        // memoised sets, see planSet.slot
	pool     *sync.Pool // *planEval
	bytes    int64      // what it retains, for Plan.Size
	// shapeBytes is what the compiled tree of the collected fields takes,
	// kept or not: the measure of the priced tree ActualCost keeps.
	shapeBytes int64
	// actual is the priced tree of a constant sub-plan, built by the
	// first ActualCost that needs it (nil if it exceeded the budget).
	actualOnce sync.Once
	actual     *actualTree
}

// planSet is a selection set compiled for one concrete type, or for an
// interface or union (members set, one set per possible type). Its shape
// (the fields collected, merged and typed) is fixed by the document and
// the conditions; what varies with the variables are sizes and argument
// costs, which Evaluate prices with the walk's rules (price.go).
type planSet struct {
	weight  Cost
	fields  []planField
	members []*planSet
	depth   int   // levels below the parent (fieldDepth), for the depth limit
	slot    int32 // index of its memo entry when reached more than once, else -1
}

// planField is one response key of a planSet.
type planField struct {
	key   string
	field *ast.Field
	fi    *fieldInfo
	// own is fieldWeight + argCost, and declared the size the field
	// declares, when they read no variable; dynOwn and dynSlice mark those
	// recomputed from the request's variables.
	own      Cost
	declared declared
	dynOwn   bool
	dynSlice bool
	intro    introspected // zero unless an introspection field
	counted  []int        // coordinates the field counts toward
	children *planSet
}

// errFallback stops an evaluation that meets a value the compiled plan
// does not price (a refusal to report, a condition that is not a
// Boolean): Evaluate then prices from scratch.
var errFallback = errors.New("complexity: price from scratch")

// Compile prepares op, an operation of doc, for repeated pricing (see
// Plan). It fails only for a nil operation; an operation AnalyzeOperation
// refuses compiles to a Plan that refuses it the same way.
//
// What a Plan holds depends on what the price reads of the variables:
//
//   - nothing: the Report (or the error) is computed once, and Evaluate
//     returns it;
//   - @skip/@include conditions only: one constant result per assignment
//     of the condition variables (at most MaxPlanConditions of them);
//   - slicing arguments (@listSize slicingArguments or a convention's,
//     including sizes handed down to other fields) and arguments priced by
//     argCost: a compiled tree of the collected fields per assignment,
//     which Evaluate prices with the request's values without walking the
//     document again.
//
// Evaluate prices from scratch (AnalyzeOperation) when the conditions read
// more than MaxPlanConditions variables, when a condition's value is not a
// Boolean, when a value is refused (a breadth, a negative size, a value
// that does not coerce, a missing required slicing argument), when the
// operation fails a document limit (depth, root fields) after reading a
// variable, and when a breakdown (WithBreakdownLimit above 0) is asked of
// an operation whose price reads variables. Plan.Explain always prices
// from scratch.
func (a *Analyzer) Compile(doc *ast.QueryDocument, op *ast.OperationDefinition) (*Plan, error) {
	if op == nil {
		return nil, fmt.Errorf("%w: nil operation", ErrInvalidDocument)
	}
	p := &Plan{a: a, doc: doc, op: op}
	p.size = int64(unsafe.Sizeof(*p))
	conds, ok := conditionVariables(doc, op)
	if !ok {
		return p, nil // every evaluation from scratch
	}
	p.conds = conds
	p.subs = make([]subPlan, 1<<len(conds))
	p.size += int64(len(conds))*int64(unsafe.Sizeof(condVar{})) + int64(len(p.subs))*int64(unsafe.Sizeof(subPlan{}))
	// The sub-plans are compiled when a request first needs them, so that
	// a new document costs one compilation, not one per assignment of its
	// conditions (up to 2^MaxPlanConditions) before anything is charged.
	// Size charges every sub-plan as much as the first.
	s := p.sub(0)
	p.size += s.bytes * int64(len(p.subs))
	if s.constant && s.err == nil || len(p.subs) > 1 {
		// Room for ActualCost's priced tree of each sub-plan that may be
		// constant; a plan whose only sub-plan is not needs none.
		p.actualBudget = actualTreeBudget(s.shapeBytes)
		p.size += p.actualBudget * int64(len(p.subs))
	}
	return p, nil
}

// sub returns sub-plan idx, compiling it on first use.
func (p *Plan) sub(idx int) *subPlan {
	s := &p.subs[idx]
	s.once.Do(func() {
		s.bytes = p.a.compileSub(s, p.doc, p.op, p.conditionValues(idx))
	})
	return s
}

// conditionValues is the variables of sub-plan idx: its condition values
// alone.
func (p *Plan) conditionValues(idx int) map[string]any {
	if len(p.conds) == 0 {
		return nil
	}
	vars := make(map[string]any, len(p.conds))
	for i, c := range p.conds {
		vars[c.name] = idx&(1<<i) != 0
	}
	return vars
}

// Size is the approximate number of bytes the Plan retains of its own (not
// counting the document it prices), for a cache bounded by bytes.
func (p *Plan) Size() int64 { return p.size }

// Evaluate prices the plan's operation with variables: it returns exactly
// what AnalyzeOperation(doc, op, variables) returns, the same Report values
// or the same error.
//
// The result is read-only: where the price reads no variable, every
// evaluation returns the plan's own *Report (or *Error), without
// allocating, so a caller must not modify it or anything it points to
// (copy it first: r2 := *r).
func (p *Plan) Evaluate(variables map[string]any) (*Report, error) {
	idx, ok := p.assignment(variables)
	if !ok {
		return p.a.AnalyzeOperation(p.doc, p.op, variables)
	}
	s := p.sub(idx)
	switch {
	case s.constant:
		return s.report, s.err
	case s.root == nil:
		return p.a.AnalyzeOperation(p.doc, p.op, variables)
	}
	r, err := p.evaluate(s, variables)
	if errors.Is(err, errFallback) {
		return p.a.AnalyzeOperation(p.doc, p.op, variables)
	}
	return r, err
}

// Explain is Analyzer.Explain for the plan's operation: the same Report
// as Evaluate, with the breakdown. It prices from scratch, as Evaluate
// does whenever a breakdown is asked of a price that reads variables.
func (p *Plan) Explain(variables map[string]any) (*Report, error) {
	return p.a.Explain(p.doc, p.op, variables)
}

// assignment returns the index of the sub-plan for the condition values
// variables give, read as the walk reads them; ok is false when the
// operation is priced from scratch (too many conditions, or a value the
// walk refuses).
func (p *Plan) assignment(variables map[string]any) (idx int, ok bool) {
	if len(p.subs) == 0 {
		return 0, false
	}
	for i := range p.conds {
		b, bad := condition(variables, p.op, p.conds[i].arg)
		if bad != nil {
			return 0, false
		}
		if b {
			idx |= 1 << i
		}
	}
	return idx, true
}

// conditionVariables lists the variables read as @skip/@include conditions
// in op and the fragments it spreads; ok is false when there are more
// than MaxPlanConditions.
func conditionVariables(doc *ast.QueryDocument, op *ast.OperationDefinition) (conds []condVar, ok bool) {
	seenFrag := map[string]bool{}
	var fragments map[string]*ast.FragmentDefinition
	add := func(dirs ast.DirectiveList) {
		for _, d := range dirs {
			a := conditionArgument(d)
			if a == nil || a.Value == nil || a.Value.Kind != ast.Variable {
				continue
			}
			name := a.Value.Raw
			if !slices.ContainsFunc(conds, func(c condVar) bool { return c.name == name }) {
				conds = append(conds, condVar{name: name, arg: a})
			}
		}
	}
	var walk func(ast.SelectionSet)
	walk = func(sel ast.SelectionSet) {
		for _, s := range sel {
			switch s := s.(type) {
			case *ast.Field:
				add(s.Directives)
				walk(s.SelectionSet)
			case *ast.InlineFragment:
				add(s.Directives)
				walk(s.SelectionSet)
			case *ast.FragmentSpread:
				add(s.Directives)
				if seenFrag[s.Name] {
					continue
				}
				seenFrag[s.Name] = true
				if def := spreadDefinition(doc, s, &fragments); def != nil {
					walk(def.SelectionSet)
				}
			}
		}
	}
	walk(op.SelectionSet)
	return conds, len(conds) <= MaxPlanConditions
}

// compileSub fills s, the sub-plan for the condition values in vars, and
// returns the bytes it retains.
func (a *Analyzer) compileSub(s *subPlan, doc *ast.QueryDocument, op *ast.OperationDefinition, vars map[string]any) int64 {
	c := planCompiler{a: a}
	root, err := c.compile(doc, op, vars)
	s.shapeBytes = c.bytes
	switch {
	case err == nil && c.dynamic:
		s.root, s.base, s.intro, s.slots = root, c.base, c.intro, c.slots
		s.pool = &sync.Pool{}
		return c.bytes
	case err != nil && c.dynamic:
		// A refusal, or a document limit met after a variable was read:
		// which error comes first depends on the variables.
		return 0
	}
	// Nothing read of the variables but the conditions, up to the result
	// or the first refusal: it is the same for any variables.
	s.constant = true
	s.report, s.err = a.AnalyzeOperation(doc, op, vars)
	return resultSize(s.report, s.err)
}

// resultSize approximates the bytes a stored result retains.
func resultSize(r *Report, err error) int64 {
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			n := int64(unsafe.Sizeof(*e)) + int64(len(e.Message))
			for _, p := range e.Path {
				n += 16 + int64(len(p))
			}
			return n + 64
		}
		return int64(len(err.Error())) + 64
	}
	n := int64(unsafe.Sizeof(*r))
	for _, f := range r.Fields {
		n += int64(unsafe.Sizeof(f)) + int64(len(f.Path)) + int64(len(f.Members))*int64(unsafe.Sizeof(MemberCost{}))
	}
	for _, f := range r.FieldCounts {
		n += int64(unsafe.Sizeof(f)) + 16*int64(len(f.Path))
	}
	return n
}

// planCompiler walks an operation once, under fixed conditions, into
// planSets: the walker collects the fields (fragments, merging, type
// conditions) exactly as it does for pricing.
type planCompiler struct {
	a       *Analyzer
	w       *walker
	memo    map[memoKey]*planSet // by shape: sizes are left out of the key
	dynamic bool                 // some value priced reads a variable
	base    Cost
	intro   bool
	slots   int
	bytes   int64
}

// errPlanDepth aborts a compilation beyond the maximum depth.
var errPlanDepth = errors.New("complexity: plan exceeds the maximum depth")

func (c *planCompiler) compile(doc *ast.QueryDocument, op *ast.OperationDefinition, vars map[string]any) (*planSet, error) {
	a := c.a
	w := a.acquire(doc, op, vars)
	defer a.release(w)
	c.w = w
	root, base, groups, err := w.rootFields()
	if err != nil {
		return nil, err
	}
	c.base = base
	return c.groups(root, nil, 0, groups, 1, 0)
}

// groups compiles the collected fields of concrete type t (member member
// of abstract type via, when via is not nil) at absolute depth depth, as
// priceGroups prices them.
func (c *planCompiler) groups(t, via *typeInfo, member int, groups []fieldGroup, depth int, weight Cost) (*planSet, error) {
	w := c.w
	set := &planSet{weight: weight, fields: make([]planField, 0, len(groups)), slot: -1}
	c.bytes += int64(unsafe.Sizeof(*set)) + int64(len(groups))*int64(unsafe.Sizeof(planField{}))
	for i := range groups {
		g := &groups[i]
		fi := w.c.fieldOf(t, via, member, g.first.Name)
		if fi == nil {
			return nil, noField(t, g.first.Name)
		}
		if w.exceedsDepth(depth, 1) {
			return nil, errPlanDepth
		}
		pf := planField{key: g.key, field: g.first, fi: fi}
		if err := c.values(&pf); err != nil {
			return nil, err
		}
		below := 0
		if fi.ret.composite {
			ch, err := c.children(g, fi.ret, depth+1)
			if err != nil {
				return nil, err
			}
			pf.children, below = ch, ch.depth
		}
		deepen(&set.depth, fieldDepth(below))
		pf.intro, _ = w.a.introspect(t, g.first.Name, depth, &c.intro)
		if c.a.counting != nil {
			pf.counted = c.a.counting.byField[fi]
		}
		set.fields = append(set.fields, pf)
	}
	return set, nil
}

// values compiles what pf's price reads of its arguments: its declared
// size and its own cost, each computed now when it reads no variable.
func (c *planCompiler) values(pf *planField) error {
	w, f, fi := c.w, pf.field, pf.fi
	var err error
	if readsVariables(f, fi.sizeArgs()) {
		pf.dynSlice, c.dynamic = true, true
	} else if pf.declared, err = w.declaredSize(f, fi); err != nil {
		return err
	}
	if readsVariables(f, fi.costArgs()) {
		pf.dynOwn, c.dynamic = true, true
	} else if pf.own, err = w.ownCost(f, fi); err != nil {
		return err
	}
	return nil
}

// readsVariables reports whether any of the arguments ins, as f gives
// them, holds a variable.
func readsVariables(f *ast.Field, ins []*inputInfo) bool {
	for _, in := range ins {
		if a := f.Arguments.ForName(in.name); a != nil && hasVariable(a.Value) {
			return true
		}
	}
	return false
}

func hasVariable(v *ast.Value) bool {
	if v == nil {
		return false
	}
	if v.Kind == ast.Variable {
		return true
	}
	for _, ch := range v.Children {
		if hasVariable(ch.Value) {
			return true
		}
	}
	return false
}

// children compiles the merged sub-selections of g for ret at absolute
// depth depth, once per shape: a selection reached again is shared.
func (c *planCompiler) children(g *fieldGroup, ret *typeInfo, depth int) (*planSet, error) {
	w := c.w
	key := w.memoKey(g, ret, noSizes) // by shape: sizes are evaluated
	if s, ok := c.memo[key]; ok {
		if w.exceedsDepth(depth, s.depth) {
			return nil, errPlanDepth
		}
		if s.slot < 0 {
			s.slot = int32(c.slots)
			c.slots++
		}
		return s, nil
	}
	var set *planSet
	if ret.oneType() {
		s, err := c.object(ret, nil, 0, g, depth, ret.weight)
		if err != nil {
			return nil, err
		}
		set = s
	} else {
		set = &planSet{slot: -1, members: make([]*planSet, len(ret.possible))}
		c.bytes += int64(unsafe.Sizeof(*set)) + 8*int64(len(ret.possible))
		for i, t := range ret.possible {
			m, err := c.object(t, ret, i, g, depth, memberWeight(ret, t))
			if err != nil {
				return nil, err
			}
			set.members[i] = m
			deepen(&set.depth, m.depth)
		}
	}
	if c.memo == nil {
		c.memo = make(map[memoKey]*planSet)
	}
	c.memo[key] = set
	return set, nil
}

// object compiles the merged sub-selections of g for object type t, member
// member of abstract type via (via nil: t is the field's type).
func (c *planCompiler) object(t, via *typeInfo, member int, g *fieldGroup, depth int, weight Cost) (*planSet, error) {
	w := c.w
	groups, start, err := w.collect(t, g, nil)
	if err != nil {
		return nil, err
	}
	set, err := c.groups(t, via, member, groups, depth, weight)
	w.groups = w.groups[:start]
	return set, err
}

// planEval is the scratch space of one evaluation: the memoised sets'
// values, by slot, and by (set, sizes) when sizes are handed down. Its
// walker only reads values (declaredSize, ownCost): it collects nothing,
// so it needs none of the pooled walkers' stacks.
type planEval struct {
	w     walker
	slots []planMemo
	sized map[planSizedKey]planValue
}

type planMemo struct {
	done bool
	sz   sizes
	v    planValue
}

type planSizedKey struct {
	set *planSet
	sz  sizes
}

// planValue is a set's price per parent object, and its field counts.
type planValue struct {
	price
	counts *setCounts
}

// evaluate prices sub-plan s with variables, as run prices the operation.
func (p *Plan) evaluate(s *subPlan, variables map[string]any) (*Report, error) {
	a := p.a
	if a.cfg.breakdownLimit > 0 {
		return nil, errFallback // the breakdown is the walker's
	}
	e, _ := s.pool.Get().(*planEval)
	if e == nil {
		e = &planEval{slots: make([]planMemo, s.slots)}
	}
	e.w.a, e.w.c, e.w.doc, e.w.op, e.w.vars = a, a.c, p.doc, p.op, variables
	v, err := e.set(s.root, noSizes)
	e.w.doc, e.w.op, e.w.vars, e.w.path = nil, nil, nil, e.w.path[:0]
	clear(e.slots)
	if e.sized != nil {
		clear(e.sized)
	}
	s.pool.Put(e)
	if err != nil {
		return nil, err
	}
	totals, err := a.totals(p.op, s.base, v.price)
	if err != nil {
		return nil, err
	}
	return a.report(p.op, totals, s.intro, v.counts), nil
}

// set prices a compiled set for sizes sz, as priceChildren does.
func (e *planEval) set(s *planSet, sz sizes) (planValue, error) {
	if s.slot >= 0 {
		m := &e.slots[s.slot]
		switch {
		case !m.done:
		case m.sz == sz:
			return m.v, nil
		default:
			if v, ok := e.sized[planSizedKey{s, sz}]; ok {
				return v, nil
			}
		}
	}
	var v planValue
	if s.members == nil {
		var err error
		if v, err = e.object(s, sz); err != nil {
			return v, err
		}
	} else {
		var fold memberFold
		for i, m := range s.members {
			mv, err := e.object(m, sz)
			if err != nil {
				return v, err
			}
			fold.add(i, mv.price, mv.counts)
		}
		v = planValue{price: fold.price, counts: fold.counts}
	}
	if s.slot >= 0 {
		m := &e.slots[s.slot]
		if !m.done {
			m.done, m.sz, m.v = true, sz, v
		} else {
			if e.sized == nil {
				e.sized = make(map[planSizedKey]planValue)
			}
			e.sized[planSizedKey{s, sz}] = v
		}
	}
	return v, nil
}

// object prices the fields of a compiled object set, as priceGroups and
// priceField do.
func (e *planEval) object(s *planSet, sz sizes) (planValue, error) {
	w := &e.w
	a := w.a
	v := planValue{price: price{cost: s.weight}}
	for i := range s.fields {
		pf := &s.fields[i]
		fi := pf.fi
		d, own := pf.declared, pf.own
		var err error
		if pf.dynSlice {
			if d, err = w.declaredSize(pf.field, fi); err != nil {
				return v, errFallback
			}
		}
		n, childSizes := a.listSize(fi, sz, d)
		if pf.dynOwn {
			if own, err = w.ownCost(pf.field, fi); err != nil {
				return v, errFallback
			}
		}
		var children planValue
		if pf.children != nil {
			if children, err = e.set(pf.children, childSizes); err != nil {
				return v, err
			}
		}
		a.addField(&v.price, fi, own, n, children.price, pf.intro)
		if a.counting != nil {
			a.counting.field(&v.counts, pf.counted, pf.key, n, children.counts)
		}
	}
	return v, nil
}
