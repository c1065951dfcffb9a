package complexity

import "unsafe"

// ActualCost prices the plan's operation once it has run with variables
// and returned data, the response's "data" member as raw JSON: it returns
// exactly what Analyzer.ActualCost(doc, op, variables, data) returns, the
// same cost or the same error.
//
// A middleware that priced the request through the plan should settle it
// through the plan too: where the price reads no variable but @skip/@include
// conditions (a constant sub-plan, see Compile), the priced tree the
// response is read against is built once, by the first call that needs
// it, and kept, so a call only reads data. Otherwise, or when the tree
// would retain more than Size charged for it, the operation is priced
// from scratch first, as Analyzer.ActualCost does.
func (p *Plan) ActualCost(variables map[string]any, data []byte) (int64, error) {
	idx, ok := p.assignment(variables)
	if !ok {
		return p.a.ActualCost(p.doc, p.op, variables, data)
	}
	s := p.sub(idx)
	if !s.constant || s.err != nil {
		// A refused operation is never settled: its error comes from the
		// walk that finds it.
		return p.a.ActualCost(p.doc, p.op, variables, data)
	}
	t := p.actualTree(idx, s)
	if t == nil {
		return p.a.ActualCost(p.doc, p.op, variables, data)
	}
	rd, _ := p.a.readings.Get().(*reading)
	if rd == nil {
		rd = new(reading)
	}
	r := response{b: data, s: rd, names: t.names, rec: p.a.recording}
	points, err := r.data(&t.root, t.base)
	if rd.reset() {
		p.a.readings.Put(rd)
	}
	return points, err
}

// actualTree is a constant sub-plan's priced tree, as ActualCost's walk
// builds it: what the response is read against.
type actualTree struct {
	root pricedSet
	base Cost
	// names is set when every response key in the tree is plain (see
	// plainKey): checked once here rather than on each read.
	names bool
}

// actualTreeBudget is the most a sub-plan's priced tree may retain, from
// the size of its compiled shape: a priced field or set takes about what
// a compiled one does, and an abstract type's members a little more; the
// rest is slack. Only a walk that prices one selection under several
// handed-down sizes builds more, and then the tree is not kept.
func actualTreeBudget(shapeBytes int64) int64 {
	return 2*shapeBytes + 1024
}

// actualTree returns sub-plan idx's priced tree, built on first use; nil
// when it exceeds the plan's budget (ActualCost then walks from scratch).
// s must be constant and without error: the tree is the same for any
// variables.
func (p *Plan) actualTree(idx int, s *subPlan) *actualTree {
	s.actualOnce.Do(func() {
		a := p.a
		w := a.acquire(p.doc, p.op, p.conditionValues(idx))
		defer a.release(w)
		w.plan, w.kept = true, true
		set, base, _, err := w.run()
		if err != nil {
			return // unreachable: the sub-plan priced without error
		}
		t := &actualTree{root: set, base: base}
		var bytes int64
		if bytes, t.names = t.measure(); bytes <= p.actualBudget {
			s.actual = t
		}
	})
	return s.actual
}

// bytes approximates what t retains: its sets, fields and members, each
// shared one once.
func (t *actualTree) bytes() int64 {
	n, _ := t.measure()
	return n
}

// measure returns t's bytes and whether all its response keys are plain.
func (t *actualTree) measure() (n int64, names bool) {
	n, names = int64(unsafe.Sizeof(*t)), true
	seenSets := map[*pricedSet]bool{}
	seenFields := map[*pricedField]bool{}
	seenMembers := map[*memberSets]bool{}
	var set func(s *pricedSet)
	set = func(s *pricedSet) {
		if f := s.fields[:cap(s.fields)]; len(f) > 0 && !seenFields[&f[0]] {
			seenFields[&f[0]] = true
			n += int64(len(f)) * int64(unsafe.Sizeof(pricedField{}))
			for i := range s.fields {
				names = names && plain(s.fields[i].key)
				if ch := s.fields[i].children; ch != nil && !seenSets[ch] {
					seenSets[ch] = true
					n += int64(unsafe.Sizeof(*ch))
					set(ch)
				}
			}
		}
		if m := s.members; m != nil && !seenMembers[m] {
			seenMembers[m] = true
			n += int64(unsafe.Sizeof(*m)) + int64(cap(m.sets))*int64(unsafe.Sizeof(pricedSet{})) +
				int64(cap(m.typenames))*int64(unsafe.Sizeof(typenameKey{}))
			for i := range m.sets {
				set(&m.sets[i])
			}
		}
	}
	set(&t.root)
	return n, names
}
