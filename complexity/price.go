package complexity

import (
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
)

// The cost model's rules (see the package doc), each written once. The
// walk (priceGroups, priceField, priceChildren) applies them to the fields
// it collects; a plan's evaluation (planEval) to the fields its compiler
// collected, reading again only what the variables change. Both call the
// functions below in the same order, so they price alike to the last
// saturation.

// price is what a selection set, or one field of it, costs for one object
// of its parent: cost (a set's includes its type's weight), the levels it
// nests below the parent (depth) and the objects its lists return (nodes).
type price struct {
	cost  Cost
	depth int
	nodes int64
}

// declaredSize is the size field f of fi declares: its largest slicing
// argument (checked by slicingSize), else its @listSize assumedSize.
func (w *walker) declaredSize(f *ast.Field, fi *fieldInfo) (size int64, ok bool, err error) {
	if len(fi.slicing) > 0 {
		sliced, hasSliced, err := w.slicingSize(f, fi)
		if err != nil {
			return 0, false, err
		}
		if hasSliced {
			return sliced, true, nil
		}
	}
	return fi.assumed, fi.hasAssumed, nil
}

// ownCost is what field f of fi costs whatever it returns: fieldWeight +
// argCost.
func (w *walker) ownCost(f *ast.Field, fi *fieldInfo) (Cost, error) {
	if fi.argsFree {
		return fi.weight, nil
	}
	c, err := w.argCost(f, fi)
	if err != nil {
		return 0, err
	}
	return addCost(fi.weight, c), nil
}

// listSize is n, what the price of field fi's value is multiplied by, and
// the sizes its children inherit. sz is what its parent hands down,
// declared the field's own size (declaredSize).
func (a *Analyzer) listSize(fi *fieldInfo, sz sizes, declared int64, hasDeclared bool) (n int64, children sizes) {
	handed, hasHanded, inherit := sz.lookup(fi.name)
	n = 1
	if fi.list {
		// A size handed down by the parent wins; a declared size counts
		// unless it is meant for sizedFields; else the default.
		switch {
		case hasHanded:
			n = handed
		case hasDeclared && len(fi.sized) == 0:
			n = declared
		default:
			n = a.cfg.defaultListSize
		}
	}
	if len(fi.sized) > 0 && hasDeclared {
		return n, sizes{spec: fi, size: declared}
	}
	return n, inherit
}

// fieldPrice is the price of a field of fi: own (ownCost) plus n times
// each item's, the type's weight for a leaf, its selection's price
// (children) for a composite field; never below 0.
func fieldPrice(fi *fieldInfo, own Cost, n int64, children price) price {
	if !fi.ret.composite {
		return price{cost: clampZero(addCost(own, mulCost(fi.ret.weight, n))), depth: fieldDepth(0)}
	}
	// Each object a list returns is a node; a single object is not.
	var perObject int64
	if fi.list {
		perObject = 1
	}
	return price{
		cost:  clampZero(addCost(own, mulCost(children.cost, n))),
		depth: fieldDepth(children.depth),
		nodes: mulCount(n, addCount(perObject, children.nodes)),
	}
}

// fieldDepth is the levels a field reaches below its parent: its own and
// those of its deepest child (0 for a leaf).
func fieldDepth(children int) int { return 1 + children }

// add adds a field's price to its set's, and reports whether the field is
// the set's deepest so far (the first on a tie).
func (p *price) add(f price) (deepest bool) {
	p.cost = addCost(p.cost, f.cost)
	p.nodes = addCount(p.nodes, f.nodes)
	if f.depth > p.depth {
		p.depth = f.depth
		return true
	}
	return false
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
	if i == 0 || p.depth > m.depth {
		m.depth, deepest = p.depth, true
	}
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
