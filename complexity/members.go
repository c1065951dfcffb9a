package complexity

import (
	"slices"

	"github.com/vektah/gqlparser/v2/ast"
)

// Pricing an interface or union prices its selection once per possible
// type: GitHub's nodes(ids:) has 249. On the request path (no breakdown,
// no plan, no counted fields) only the fold of their prices is kept, and
// most members price alike: the selection collects the same fields for
// every member no type condition of it names, and those fields have the
// same pricing rules. memberClasses prices one member of each class and
// hands its price to the others, so the walk does per member what deciding
// its class takes (a bit test per type condition, a lookup per collected
// field) rather than a collection and a walk.
//
// Two members are of one class when
//   - the same type conditions of the selection apply to both (their mask:
//     the collection is then the same fields, in the same order), and
//   - they have the same weight (memberWeight) and are both or neither
//     introspection types, and
//   - each collected field has the same pricing class on both (see
//     fieldClassKey): the same weight, type, list nesting and assumed
//     size, and no argument or sized path that could tell them apart (a
//     member collecting such a field is walked on its own).
//
// The members are still folded in order, so ties, the deepest field and
// the first error are those of the member-by-member walk.

// loneClass is the class of a field no other field prices alike.
const loneClass = -1

// maxClassReps bounds the members walked in full an abstract field keeps
// for the others to match, so matching a member costs at most that many
// comparisons however many classes its members fall in; past it, members
// of a new class are walked and not kept.
const maxClassReps = 32

// maxClassConds bounds the type conditions a mask tracks; a selection
// with more is priced member by member.
const maxClassConds = 64

// maxClassScan bounds the selections scanned for type conditions, and
// maxClassFragments the distinct fragments, so the scan stays cheap beside
// the collections it saves.
const (
	maxClassScan      = 512
	maxClassFragments = 32
)

// memberClasses is the state of one abstract field's classes, as offsets
// into the walker's class stacks (classes nest: a member's walk may price
// another abstract field).
type memberClasses struct {
	conds, masks, names, reps, ids int // where this field's entries start
}

// classMask is the fields a mask collects: w.classNames[start:end], and
// in w.classTables[start:end] the abstract type's table of each one's
// members (memberFields), nil for a field it does not declare.
type classMask struct {
	mask       uint64
	start, end int
}

// classRep is a member priced in full, whose price its class shares.
type classRep struct {
	mask       uint64
	weight     Cost
	reserved   bool
	start, end int // its fields' classes, w.classIDs[start:end]
	set        pricedSet
}

// startClasses gathers the type conditions of g's selection, or returns
// false when the selection is not priced by class: too many type
// conditions or fragments to scan, or a spread the document does not
// define (the walk reports it).
func (w *walker) startClasses(g *fieldGroup) (memberClasses, bool) {
	mc := memberClasses{conds: len(w.classConds), masks: len(w.classMasks), names: len(w.classNames), reps: len(w.classReps), ids: len(w.classIDs)}
	budget, frags := maxClassScan, w.classFrags[:0]
	for i := range g.size() {
		if !w.scanConds(mc, g.at(i).SelectionSet, &budget, &frags) {
			w.endClasses(mc)
			w.classFrags = frags[:0]
			return mc, false
		}
	}
	w.classFrags = frags[:0]
	return mc, true
}

// scanConds adds the type conditions reachable from sel without entering
// a field, as the collection reaches them, to the field's conditions.
func (w *walker) scanConds(mc memberClasses, sel ast.SelectionSet, budget *int, frags *[]*ast.FragmentDefinition) bool {
	for _, s := range sel {
		if *budget--; *budget < 0 {
			return false
		}
		switch s := s.(type) {
		case *ast.InlineFragment:
			if s.TypeCondition != "" && !w.addCond(mc, s.TypeCondition) {
				return false
			}
			if !w.scanConds(mc, s.SelectionSet, budget, frags) {
				return false
			}
		case *ast.FragmentSpread:
			def := w.fragment(s)
			if def == nil {
				return false
			}
			if slices.Contains(*frags, def) {
				continue
			}
			if len(*frags) == maxClassFragments {
				return false
			}
			*frags = append(*frags, def)
			if !w.addCond(mc, def.TypeCondition) || !w.scanConds(mc, def.SelectionSet, budget, frags) {
				return false
			}
		}
	}
	return true
}

// addCond adds the type named cond to the field's conditions; a name
// the schema lacks never applies, so it is left out.
func (w *walker) addCond(mc memberClasses, cond string) bool {
	ct := w.condType(cond)
	if ct == nil || slices.Contains(w.classConds[mc.conds:], ct) {
		return true
	}
	if len(w.classConds)-mc.conds == maxClassConds {
		return false
	}
	w.classConds = append(w.classConds, ct)
	return true
}

// endClasses drops the field's entries from the class stacks.
func (w *walker) endClasses(mc memberClasses) {
	clear(w.classReps[mc.reps:])
	w.classConds, w.classMasks, w.classNames = w.classConds[:mc.conds], w.classMasks[:mc.masks], w.classNames[:mc.names]
	w.classTables = w.classTables[:mc.names]
	w.classReps, w.classIDs = w.classReps[:mc.reps], w.classIDs[:mc.ids]
}

// maskOf is which of the field's conditions apply to t, bit k for
// condition k.
func (w *walker) maskOf(mc memberClasses, t *typeInfo) uint64 {
	var mask uint64
	for k, ct := range w.classConds[mc.conds:] {
		if ct.has(t) {
			mask |= 1 << k
		}
	}
	return mask
}

// classOf looks for the member priced in full whose class member i of
// ret, t, is of. It returns its set, or false when t is the first of its
// class (price it with priceClass).
func (w *walker) classOf(mc memberClasses, t, ret *typeInfo, i int, mask uint64) (pricedSet, bool) {
	m := -1
	for k := mc.masks; k < len(w.classMasks); k++ {
		if w.classMasks[k].mask == mask {
			m = k
			break
		}
	}
	if m < 0 {
		return pricedSet{}, false
	}
	weight := memberWeight(ret, t)
	start, end := w.classMasks[m].start, w.classMasks[m].end
	ids := len(w.classIDs)
	for k, name := range w.classNames[start:end] {
		var fi *fieldInfo
		if table := w.classTables[start+k]; table != nil {
			fi = table[i]
		}
		if fi == nil {
			fi = w.c.fieldOf(t, ret, i, name)
		}
		if fi == nil || fi.class == loneClass {
			w.classIDs = w.classIDs[:ids]
			return pricedSet{}, false // walked on its own; a missing field, the walk reports
		}
		w.classIDs = append(w.classIDs, fi.class)
	}
	mine := w.classIDs[ids:]
	found := -1
	for k := mc.reps; k < len(w.classReps); k++ {
		r := &w.classReps[k]
		if r.mask == mask && r.weight == weight && r.reserved == t.reserved && slices.Equal(w.classIDs[r.start:r.end], mine) {
			found = k
			break
		}
	}
	w.classIDs = w.classIDs[:ids]
	if found < 0 {
		return pricedSet{}, false
	}
	return w.classReps[found].set, true
}

// priceClass prices member i of ret, t, in full, as priceObject does, and
// keeps its price for the members of its class.
func (w *walker) priceClass(mc memberClasses, set *pricedSet, t, ret *typeInfo, i int, mask uint64, g *fieldGroup, sz sizes, depth int) error {
	groups, start, err := w.collect(t, g, nil)
	if err != nil {
		return err
	}
	weight := memberWeight(ret, t)
	err = w.priceGroups(set, t, ret, i, groups, sz, depth, weight, true)
	if err == nil {
		known := false
		for k := mc.masks; k < len(w.classMasks); k++ {
			known = known || w.classMasks[k].mask == mask
		}
		if !known {
			m := classMask{mask: mask, start: len(w.classNames)}
			for k := range groups {
				name := groups[k].first.Name
				w.classNames = append(w.classNames, name)
				w.classTables = append(w.classTables, ret.memberFields[name])
			}
			m.end = len(w.classNames)
			w.classMasks = append(w.classMasks, m)
		}
		if len(w.classReps)-mc.reps < maxClassReps {
			r := classRep{mask: mask, weight: weight, reserved: t.reserved, start: len(w.classIDs), set: *set}
			lone := false
			for k := range groups {
				// priceGroups found every field.
				class := w.c.fieldOf(t, ret, i, groups[k].first.Name).class
				lone = lone || class == loneClass
				w.classIDs = append(w.classIDs, class)
			}
			r.end = len(w.classIDs)
			if lone {
				w.classIDs = w.classIDs[:r.start] // no member can match it
			} else {
				w.classReps = append(w.classReps, r)
			}
		}
	}
	w.groups = w.groups[:start]
	return err
}

// has reports whether a fragment on ct applies to t: ct is t, or an
// interface or union t belongs to.
func (ct *typeInfo) has(t *typeInfo) bool {
	return ct == t || ct.members != nil && t.id/64 < len(ct.members) && ct.members[t.id/64]&(1<<(t.id%64)) != 0
}

// fieldClassKey is what the pricing rules of a field come to when it
// reads no argument: two fields with the same key price alike wherever
// the walk meets them (the same weight, type, list nesting and assumed
// size). A field that reads arguments (one that can cost or size
// anything) or hands its size down (a sized path) is loneClass: a member
// collecting it is walked on its own.
type fieldClassKey struct {
	weight    Cost
	ret       *typeInfo
	list      bool
	listDepth int
	assumed   declared
}

// classifyFields gives every field of the compiled schema its class.
func (c *compiled) classifyFields() {
	classes := map[fieldClassKey]int32{}
	next := int32(0) // loneClass is below every other class
	classify := func(fi *fieldInfo) {
		if !fi.argsFree || fi.slicing != nil || fi.requireOne || len(fi.sized) > 0 {
			fi.class = loneClass
			return
		}
		k := fieldClassKey{weight: fi.weight, ret: fi.ret, list: fi.list, listDepth: fi.listDepth, assumed: fi.assumed}
		id, ok := classes[k]
		if !ok {
			id, next = next, next+1
			classes[k] = id
		}
		fi.class = id
	}
	for _, ti := range c.types {
		for _, fi := range ti.fields {
			classify(fi)
		}
	}
	classify(c.typename)
}
