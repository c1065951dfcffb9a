package complexity

import (
	"fmt"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
)

// The cost model's rules (see the package doc), each written once: here,
// with the values they read in values.go (argCost, size) and the list-size
// conventions New resolves in schema.go. The walk (priceGroups,
// priceField, priceChildren) applies them to the fields it collects; a
// plan's evaluation (planEval) to the fields its compiler collected,
// reading again only what the variables change. Both call them in the
// same order, so they price alike to the last saturation.

// price is what a selection set, or one field of it, costs for one object
// of its parent: cost (a set's includes its type's weight), the levels it
// nests below the parent (depth) and the objects its lists return (nodes).
type price struct {
	cost  Cost
	depth int
	nodes int64
}

// declared is the size a field declares, if any (see declaredSize).
type declared struct {
	size int64
	ok   bool
	// assumption: the size is @listSize(assumedSize:) or WithAssumedSizes,
	// not a slicing argument's.
	assumption bool
}

// declaredSize is the size field f of fi declares: its largest slicing
// argument (checked by slicingSize), else its @listSize assumedSize; with
// several @listSize, the largest of theirs.
func (w *walker) declaredSize(f *ast.Field, fi *fieldInfo) (declared, error) {
	if fi.slicing != nil || fi.rules != nil {
		return w.slicedSize(f, fi)
	}
	return fi.assumed, nil // most fields, inlined into the walk
}

func (w *walker) slicedSize(f *ast.Field, fi *fieldInfo) (declared, error) {
	if fi.rules == nil {
		return w.ruleSize(f, fi, &fi.listSizeRule)
	}
	var d declared
	for i := range fi.rules {
		rd, err := w.ruleSize(f, fi, &fi.rules[i])
		if err != nil {
			return declared{}, err
		}
		if rd.ok && (!d.ok || rd.size > d.size) {
			d = rd
		}
	}
	return d, nil
}

// ruleSize is the size one rule r of field fi declares for f.
func (w *walker) ruleSize(f *ast.Field, fi *fieldInfo, r *listSizeRule) (declared, error) {
	sliced, hasSliced, err := w.slicingSize(f, fi, r)
	if hasSliced && err == nil && w.open != nil {
		sliced = w.openFallback(f, fi, r, sliced) // a worst case: a value left open may be null
	}
	if err != nil || hasSliced {
		return declared{size: sliced, ok: hasSliced}, err
	}
	return r.assumed, nil
}

// ownCost is what field f of fi costs whatever it returns: fieldWeight +
// argCost, clamped at 0 unless WithSubtreeDiscounts lets a negative own
// cost discount what the field returns (addField clamps the whole).
func (w *walker) ownCost(f *ast.Field, fi *fieldInfo) (Cost, error) {
	if fi.argsFree { // most fields: inlined
		return w.a.clampOwn(fi.weight), nil
	}
	return w.weightAndArgs(f, fi)
}

func (w *walker) weightAndArgs(f *ast.Field, fi *fieldInfo) (Cost, error) {
	c, err := w.argCost(f, fi)
	if err != nil {
		return 0, err
	}
	return w.a.clampOwn(addCost(fi.weight, c)), nil
}

// clampOwn is a field's own cost as addField adds it: at least 0, unless
// subtree discounts are on.
func (a *Analyzer) clampOwn(own Cost) Cost {
	if a.cfg.subtreeDiscounts {
		return own
	}
	return clampZero(own)
}

// sizeArgs and costArgs are the arguments declaredSize and ownCost read,
// for a plan's compiler to tell whether they read a variable.
func (fi *fieldInfo) sizeArgs() []*inputInfo { return fi.slicingArgs }

func (fi *fieldInfo) costArgs() []*inputInfo {
	if fi.argsFree {
		return nil
	}
	return fi.args
}

// slicingSize checks every slicing argument of rule r that f gives
// (coerced, within MaxBreadth) and returns the largest; hasSize is false
// when none gives a size. A negative one (an app's "all") asks for every
// item: it counts as fi's assumedSize, the field's declared maximum, and
// is refused without one. A rule that requires exactly one slicing
// argument refuses any other count.
func (w *walker) slicingSize(f *ast.Field, fi *fieldInfo, r *listSizeRule) (size int64, hasSize bool, err error) {
	given := 0
	for _, s := range r.slicing {
		var v value
		var ok bool
		if len(s.path) == 1 { // most: an argument itself
			v, ok = w.given(f, s.path[0])
		} else {
			var bad *invalidValue
			if v, ok, bad = w.slicerValue(f, s); bad != nil {
				return 0, false, w.invalidArgument(f, fi.name, s.path[0].name, bad)
			}
		}
		if !ok {
			continue
		}
		given++
		n, isList, ok, bad := w.size(v, s.path[len(s.path)-1])
		if bad != nil {
			return 0, false, w.invalidArgument(f, fi.name, s.name, bad)
		}
		if !ok {
			continue
		}
		asked := n
		if n < 0 {
			if !fi.assumed.ok {
				return 0, false, w.breadthError(f, fmt.Sprintf("field %s: %s asks for every item (a negative size) and the field declares no maximum (@listSize assumedSize)", fi.name, describeSize(s.name, n, isList)), n)
			}
			n = fi.assumed.size
		}
		if mb := w.a.cfg.maxBreadth; mb > 0 && n > mb {
			return 0, false, w.breadthError(f, fmt.Sprintf("field %s: %s exceeds the maximum of %d", fi.name, describeAsked(s.name, asked, n, isList), mb), n)
		}
		if !hasSize || n > size {
			size, hasSize = n, true
		}
	}
	if r.requireOne && given != 1 {
		return 0, false, w.slicingRequiredError(f, fi.name, r, given)
	}
	return size, hasSize, nil
}

// listSize is n, what the price of field fi's value is multiplied by, and
// the sizes its children inherit. sz is what its parent hands down, d the
// field's own size (declaredSize).
func (a *Analyzer) listSize(fi *fieldInfo, sz sizes, d declared) (n int64, children sizes) {
	var handed int64
	var hasHanded bool
	inherit := noSizes
	if sz.spec != nil { // most fields have nothing handed down
		handed, hasHanded, inherit = sz.lookup(fi.name)
	}
	n = 1
	if fi.list {
		// A size handed down by the parent wins; a declared size counts
		// unless it is meant for sizedFields; else the default.
		switch {
		case hasHanded:
			n = handed
		case d.ok && len(fi.sized) == 0:
			n = d.size
		default:
			n = a.cfg.defaultListSize
		}
	}
	if len(fi.sized) > 0 && d.ok {
		return n, sizes{spec: fi, size: d.size}
	}
	return n, inherit
}

// addField prices a field of fi and adds it to set, its set's price. The
// field costs own (ownCost, itself at least 0 unless subtree discounts are
// on) plus n times each item's price, the type's weight for a leaf, its
// selection's (children) for a composite field, never below 0; then as in
// says, for an introspection field (in is zero for any other). It returns
// the field's price, and whether the field is the set's deepest so far.
func (a *Analyzer) addField(set *price, fi *fieldInfo, own Cost, n int64, children price, in introspected) (f price, deepest bool) {
	if !fi.ret.composite {
		f = price{cost: clampZero(addCost(own, mulCost(fi.ret.weight, n))), depth: fieldDepth(0)}
	} else {
		// Each object a list returns is a node; a single object is not.
		var perObject int64
		if fi.list {
			perObject = 1
		}
		f = price{
			cost:  clampZero(addCost(own, mulCost(children.cost, n))),
			depth: fieldDepth(children.depth),
			nodes: mulCount(n, addCount(perObject, children.nodes)),
		}
	}
	f.cost = in.price(a, f.cost)
	set.cost = addCost(set.cost, f.cost)
	set.nodes = addCount(set.nodes, f.nodes)
	return f, deepen(&set.depth, f.depth)
}

// fieldDepth is the levels a field reaches below its parent: its own and
// those of its deepest child (0 for a leaf).
func fieldDepth(children int) int { return 1 + children }

// exceedsDepth reports whether fields at absolute depth depth, reaching
// levels levels below their parent (1: the fields alone), pass the
// maximum depth.
func (w *walker) exceedsDepth(depth, levels int) bool {
	return levels > 0 && depth+levels-1 > w.maxDepth
}

// deepen raises *depth, a set's, to d, a field's or a member's, when d is
// deeper, and reports whether it was: a set is as deep as its deepest
// field or member, the first on a tie.
func deepen(depth *int, d int) bool {
	if d > *depth {
		*depth = d
		return true
	}
	return false
}

// memberWeight is the weight of one object of member t of abstract type
// ret: t's own, else a weight declared on ret, else t's default.
func memberWeight(ret, t *typeInfo) Cost {
	if !t.hasWeight && ret.hasWeight {
		return ret.weight
	}
	return t.weight
}

// memberFold prices an interface or union from its possible types, each
// priced on its own: as the costliest (the first on a tie), with the
// depth, nodes and field counts of the largest of each, which may come
// from other members.
type memberFold struct {
	price
	counts *setCounts
	owned  bool // counts is the fold's own copy (see maxCounts)
}

// add folds in member i, priced p with counts, and reports whether it is
// the costliest and the deepest so far.
func (m *memberFold) add(i int, p price, counts *setCounts) (costliest, deepest bool) {
	if i == 0 || p.cost > m.cost {
		m.cost, costliest = p.cost, true
	}
	deepest = deepen(&m.depth, p.depth)
	m.nodes = max(m.nodes, p.nodes)
	m.counts, m.owned = maxCounts(m.counts, m.owned, counts)
	return costliest, deepest
}

// introspected is how an introspection field is priced: free, it costs
// nothing of its own; pays, it adds WithIntrospectionCost.
type introspected struct{ free, pays bool }

// introspect reports whether field name of type t, at depth, is an
// introspection field (__typename, __schema, __type, or a field of an
// introspection type, whose names start with "__"), and how it is priced.
// seen says whether the operation selected __schema or __type before, in
// the walk's order; introspect sets it. A free field is still walked: it
// counts toward depth and nodes and is held to the limits like any other.
func (a *Analyzer) introspect(t *typeInfo, name string, depth int, seen *bool) (in introspected, ok bool) {
	if !t.reserved && !strings.HasPrefix(name, "__") {
		return in, false
	}
	root := introspectionRoot(name)
	in.free = a.cfg.freeIntrospection && (name == "__typename" || root || t.reserved)
	if root {
		// Each response key selecting __schema or __type pays the
		// introspection cost, free introspection or not, except the
		// operation's first at the root: a tool's schema fetch (one
		// __schema) does not pay it, a document that repeats it under
		// aliases or in a list does.
		in.pays = *seen || depth > 1
		*seen = true
	}
	return in, true
}

// introspectionRoot reports whether name is one of the fields that enter
// the introspection types, __schema and __type.
func introspectionRoot(name string) bool {
	return name == "__schema" || name == "__type"
}

// price is the cost of an introspection field that would otherwise cost
// cost.
func (in introspected) price(a *Analyzer, cost Cost) Cost {
	if in.free {
		cost = 0
	}
	if in.pays {
		cost = addCost(cost, a.cfg.introspectionCost)
	}
	return cost
}

// totals are op's totals from its root selection's price and base, held
// to the node and cost limits.
func (a *Analyzer) totals(op *ast.OperationDefinition, base Cost, root price) (Totals, error) {
	t := Totals{Cost: addCost(base, root.cost), Depth: root.depth, Nodes: root.nodes}
	return t, a.checkTotals(op, t)
}

// checkTotals holds an operation's totals to the node and cost limits.
func (a *Analyzer) checkTotals(op *ast.OperationDefinition, totals Totals) error {
	if a.cfg.maxNodes > 0 && totals.Nodes > a.cfg.maxNodes {
		t := totals
		return &Error{
			Code:      CodeMaxNodesExceeded,
			Message:   fmt.Sprintf("operation %s may return %d nodes, which exceeds the maximum of %d", opName(op), t.Nodes, a.cfg.maxNodes),
			Locations: locationsOf(op.Position),
			Value:     float64(t.Nodes),
			Limit:     float64(a.cfg.maxNodes),
			Totals:    &t,
		}
	}
	if a.cfg.hasMaxCost && totals.Cost > a.cfg.maxCost {
		t := totals
		return &Error{
			Code:      CodeMaxCostExceeded,
			Message:   fmt.Sprintf("operation %s costs %s, which exceeds the maximum of %s", opName(op), t.Cost, a.cfg.maxCost),
			Locations: locationsOf(op.Position),
			Value:     t.Cost.Float64(),
			Limit:     a.cfg.maxCost.Float64(),
			Totals:    &t,
		}
	}
	return nil
}

// report is op's Report for its totals, without a breakdown; counts are
// the root selection's (WithCountedFields).
func (a *Analyzer) report(op *ast.OperationDefinition, totals Totals, introspection bool, counts *setCounts) *Report {
	r := &Report{
		Operation:     op.Name,
		OperationType: string(op.Operation),
		Introspection: introspection,
		Totals:        totals,
		Points:        totals.Cost.Points(),
		Fields:        []FieldCost{},
	}
	if r.OperationType == "" {
		r.OperationType = string(ast.Query)
	}
	if a.counting != nil {
		r.FieldCounts = a.counting.fieldCounts(counts)
	}
	return r
}
