package complexity

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
)

// maxWorstCaseConditions is the most @skip/@include variables WorstCase
// prices every assignment of: 2^10 walks of one operation at most.
const maxWorstCaseConditions = 10

// WorstCase is the highest price an operation can take over every value
// of its variables (see Analyzer.WorstCase).
type WorstCase struct {
	// Report is the costliest assignment's price. When Unbounded is not
	// empty it is no bound: each value nothing bounds was priced at a
	// placeholder (the default list size, or one element).
	Report *Report `json:"report"`
	// Conditions are the @skip/@include variable values Report was
	// priced with.
	Conditions map[string]bool `json:"conditions"`
	// Bounds names each variable read as a list size and what bounds it,
	// once per variable and bound, e.g. "$first ≤ 100 (max breadth)".
	Bounds []string `json:"bounds"`
	// Unbounded names each variable whose value nothing bounds, where it
	// is read: a slicing argument without a maximum breadth, a list or a
	// recursive input object priced per element. Empty when Report is a
	// bound.
	Unbounded []string `json:"unbounded"`
}

// WorstCase prices op, an operation of doc, without variables: the most
// it can cost for any of their values. Each assignment of true and false
// to the variables @skip and @include read is priced (at most 10 of them;
// more is an ErrInvalidDocument), with every other variable left open:
//
//   - a slicing argument's value (a variable, or a variable inside an
//     input object) is taken at the maximum breadth (WithMaxBreadth); a
//     nullable one also at the size the list takes without it (its
//     @listSize assumedSize or the default list size), the larger of the
//     two; with no maximum breadth it is unbounded;
//   - an argument's cost (argCost) takes each scalar at its weight (0 if
//     the weight is negative and the value may be null) and each input
//     object with all its fields; a list that costs anything per element
//     is taken at the maximum breadth when it is a slicing argument, else
//     unbounded, as is an input object that nests itself.
//
// A refusal under some assignment (a limit, a missing slicing argument)
// is returned as the error, its message naming the assignment. The bound
// assumes a larger list never costs less, which holds unless a negative
// @cost makes a list's items cost less than nothing.
//
// It walks the operation once per assignment, up to 1,024 times: it is
// for auditing documents ahead of time, not for a request's path.
func (a *Analyzer) WorstCase(doc *ast.QueryDocument, op *ast.OperationDefinition) (*WorstCase, error) {
	if op == nil {
		return nil, fmt.Errorf("%w: nil operation", ErrInvalidDocument)
	}
	conds, _ := conditionVariables(doc, op)
	if len(conds) > maxWorstCaseConditions {
		return nil, fmt.Errorf("%w: operation %s reads %d @skip/@include variables; the worst case prices at most %d", ErrInvalidDocument, opName(op), len(conds), maxWorstCaseConditions)
	}
	rec := &openRecorder{}
	vars := make(map[string]any, len(op.VariableDefinitions))
	for _, def := range op.VariableDefinitions {
		vars[def.Variable] = openValue{rec: rec, path: "$" + def.Variable, nonNull: def.Type != nil && def.Type.NonNull}
	}
	wc := &WorstCase{}
	for idx := range 1 << len(conds) {
		for i, c := range conds {
			vars[c.name] = idx&(1<<i) != 0
		}
		r, err := a.analyzeOpen(doc, op, vars, rec)
		if err != nil {
			return nil, withAssignment(err, vars, conds)
		}
		if wc.Report == nil || r.Cost > wc.Report.Cost {
			wc.Report = r
			wc.Conditions = make(map[string]bool, len(conds))
			for _, c := range conds {
				wc.Conditions[c.name] = vars[c.name].(bool)
			}
		}
	}
	wc.Bounds, wc.Unbounded = rec.bounds, rec.unbounded
	if wc.Bounds == nil {
		wc.Bounds = []string{}
	}
	if wc.Unbounded == nil {
		wc.Unbounded = []string{}
	}
	return wc, nil
}

// analyzeOpen prices op as AnalyzeOperation does, with the open values
// of rec among vars.
func (a *Analyzer) analyzeOpen(doc *ast.QueryDocument, op *ast.OperationDefinition, vars map[string]any, rec *openRecorder) (*Report, error) {
	w := a.acquire(doc, op, vars)
	w.open = rec
	defer func() {
		w.open = nil
		a.release(w)
	}()
	w.counting = a.counting != nil
	w.chunked = true
	_, _, totals, err := w.run()
	if err != nil {
		return nil, err
	}
	return a.report(op, totals, w.introspection, w.counts), nil
}

// withAssignment names the condition values under which err happened.
func withAssignment(err error, vars map[string]any, conds []condVar) error {
	if len(conds) == 0 {
		return err
	}
	parts := make([]string, len(conds))
	for i, c := range conds {
		parts[i] = fmt.Sprintf("$%s=%t", c.name, vars[c.name])
	}
	with := "with " + strings.Join(parts, ", ") + ": "
	var e *Error
	if errors.As(err, &e) {
		e2 := *e
		e2.Message = with + e.Message
		return &e2
	}
	return fmt.Errorf("%s%w", with, err)
}

// openValue stands, among the variables of a worst-case walk, for a value
// the request has not given: the walk reads it at its bound where it
// sizes a list (openSize) and at its highest cost where it is priced
// (openCost). path names it: "$filter", "$filter.per_page".
type openValue struct {
	rec     *openRecorder
	path    string
	nonNull bool
}

// openRecorder collects what a worst-case walk took at a bound, and what
// nothing bounds, each once.
type openRecorder struct {
	bounds    []string
	unbounded []string
	// slicing holds every slicing argument of the schema, built when an
	// open list is first priced (see slicingArgument).
	slicing map[*inputInfo]bool
}

// slicingArgument reports whether in is a slicing argument of some field:
// then the maximum breadth bounds its length.
func (r *openRecorder) slicingArgument(c *compiled, in *inputInfo) bool {
	if r.slicing == nil {
		r.slicing = map[*inputInfo]bool{}
		for _, t := range c.types {
			for _, fi := range t.fields {
				for _, s := range fi.slicing {
					r.slicing[s.path[len(s.path)-1]] = true
				}
			}
		}
	}
	return r.slicing[in]
}

func (r *openRecorder) bound(s string) {
	if !slices.Contains(r.bounds, s) {
		r.bounds = append(r.bounds, s)
	}
}

func (r *openRecorder) open(s string) {
	if !slices.Contains(r.unbounded, s) {
		r.unbounded = append(r.unbounded, s)
	}
}

// asOpen reports whether v stands for an open value.
func asOpen(v value) (openValue, bool) {
	if !v.isRaw {
		return openValue{}, false
	}
	o, ok := v.raw.(openValue)
	return o, ok
}

// field is input field name of an open input object: open too.
func (o openValue) field(name string) value {
	return value{raw: openValue{rec: o.rec, path: o.path + "." + name}, isRaw: true}
}

// openSize is the size an open slicing value of argument in reads as: the
// maximum breadth, or, with none, unbounded (priced at the default list
// size meanwhile). An input object sizes nothing (ok false), as in size.
func (w *walker) openSize(o openValue, in *inputInfo) (n int64, isList, ok bool) {
	isList = in.typ.Elem != nil
	if !isList && in.named != nil && in.named.def.Kind == ast.InputObject {
		return 0, false, false
	}
	where := fmt.Sprintf("argument %s at %s", in.name, strings.Join(w.path, "."))
	if mb := w.a.cfg.maxBreadth; mb > 0 {
		o.rec.bound(fmt.Sprintf("%s ≤ %d (max breadth)", o.path, mb))
		return mb, isList, true
	}
	o.rec.open(fmt.Sprintf("%s (%s: no maximum breadth)", o.path, where))
	return w.a.cfg.defaultListSize, isList, true
}

// openFallback is the worst size of field f of fi, whose slicing
// arguments under rule r gave sliced, when each of them may also be null:
// then the list takes the rule's assumedSize or the default list size, if
// larger.
func (w *walker) openFallback(f *ast.Field, fi *fieldInfo, r *listSizeRule, sliced int64) int64 {
	if r.requireOne {
		return sliced // all null is refused
	}
	var nullable []string
	for _, s := range r.slicing {
		v, ok, _ := w.slicerValue(f, s)
		if !ok {
			continue
		}
		o, open := asOpen(v)
		if !open || o.nonNull {
			return sliced // always sliced by this one
		}
		nullable = append(nullable, o.path)
	}
	size, source := w.a.cfg.defaultListSize, "default list size"
	if r.assumed.ok {
		size, source = r.assumed.size, "@listSize(assumedSize)"
	}
	if size <= sliced {
		return sliced
	}
	w.open.bound(fmt.Sprintf("%s null: %s sized %d (%s)", strings.Join(nullable, ", "), fi.coord, size, source))
	return size
}

// openCost is the most an open value of type t, for argument or input
// field own, can add to argCost. visiting holds the input types it is
// inside, so that a recursive one ends.
func (w *walker) openCost(o openValue, t *ast.Type, own *inputInfo, visiting []string) Cost {
	where := func(why string) string {
		return fmt.Sprintf("%s (argument at %s: %s)", o.path, strings.Join(w.path, "."), why)
	}
	if t.Elem != nil {
		c := w.openCost(o, t.Elem, own, visiting)
		if c <= 0 {
			return 0
		}
		// A slicing argument's length is held to the maximum breadth.
		if mb := w.a.cfg.maxBreadth; mb > 0 && t == own.typ && o.rec.slicingArgument(w.c, own) {
			o.rec.bound(fmt.Sprintf("%s ≤ %d elements (max breadth)", o.path, mb))
			return mulCost(c, mb)
		}
		o.rec.open(where("a list priced per element"))
		return c
	}
	ti := w.c.types[t.NamedType]
	c := own.weightIn(ti)
	if ti != nil && ti.def.Kind == ast.InputObject {
		if slices.Contains(visiting, ti.name) {
			if c > 0 {
				o.rec.open(where("input " + ti.name + " nests itself"))
			}
			return clampZero(c)
		}
		visiting = append(visiting, ti.name)
		for _, in := range ti.inputFields {
			c = addCost(c, w.openCost(o.field(in.name).raw.(openValue), in.typ, in, visiting))
		}
	}
	if !t.NonNull && !o.nonNull {
		c = clampZero(c) // null costs nothing
	}
	return c
}
