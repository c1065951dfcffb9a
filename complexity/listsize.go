package complexity

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
)

// slicer is one slicing argument: an argument of the field, or an input
// field inside one. path[0] is the argument and each next element an
// input field of the one before's input-object type, as @listSize names
// it ("first", "filter.per_page", "input.pagination.first") or a
// convention finds it.
type slicer struct {
	path []*inputInfo
	name string // the dotted path, for messages
}

// listSizeRule is how one @listSize (or the conventions) sizes a field:
// its slicing arguments, whether exactly one is required, and its
// assumedSize.
type listSizeRule struct {
	slicing    []*slicer
	requireOne bool
	assumed    declared
}

// maxConventionDepth is how many input objects deep the conventions look
// for first, last and count-named input fields below an argument:
// filter.per_page is one, input.pagination.first two. A @listSize path
// may go deeper.
const maxConventionDepth = 2

// setSlicing sets fi's slicing arguments and the arguments they read.
func (fi *fieldInfo) setSlicing(slicing []*slicer) {
	fi.slicing, fi.slicingArgs = slicing, nil
	for _, s := range slicing {
		if !slices.Contains(fi.slicingArgs, s.path[0]) {
			fi.slicingArgs = append(fi.slicingArgs, s.path[0])
		}
	}
}

// conventionSlicers returns the slicing arguments the conventions find
// among args: first and last always; count-named ones when counted; key
// lists when keyed; list-typed ones when rowed (a mutation root field).
// First, last and count-named input fields count too inside input-object
// arguments (not lists of them), up to maxConventionDepth levels down, so
// findScenes(filter: {per_page: 40}) is sized like findScenes(per_page:
// 40). Input fields are held to more than arguments, since inputs carry
// far more fields: first and last must have a count's type (an input's
// first: String is a first name), and a count-named one must be named
// exactly like a count (max… prefixes, common in filters for other
// bounds, are not read).
func conventionSlicers(args []*inputInfo, cfg *config, counted, keyed, rowed bool) []*slicer {
	var out []*slicer
	for _, a := range args {
		if cfg.pages(a) || counted && cfg.counts(a) || keyed && cfg.keys(a) || rowed && cfg.mutationLists && isList(a.typ) {
			out = append(out, &slicer{path: []*inputInfo{a}, name: a.name})
		}
	}
	if cfg.firstLast || counted && cfg.countArguments {
		for _, a := range args {
			out = nestedSlicers(out, []*inputInfo{a}, cfg, counted)
		}
	}
	return out
}

// nestedSlicers appends to out the first, last and (when counted)
// count-named input fields below path, whose last element is an argument
// or input field of an input-object type.
func nestedSlicers(out []*slicer, path []*inputInfo, cfg *config, counted bool) []*slicer {
	in := path[len(path)-1]
	if len(path) > maxConventionDepth || isList(in.typ) || in.named == nil || in.named.def.Kind != ast.InputObject {
		return out
	}
	for _, f := range in.named.inputFields {
		p := append(slices.Clip(path), f)
		if cfg.pages(f) && countTyped(f) || counted && cfg.countArguments && countArgument(f) && !strings.HasPrefix(conventionName(f.name), "max") {
			out = append(out, &slicer{path: p, name: pathName(p)})
			continue
		}
		out = nestedSlicers(out, p, cfg, counted)
	}
	return out
}

func pathName(path []*inputInfo) string {
	names := make([]string, len(path))
	for i, in := range path {
		names[i] = in.name
	}
	return strings.Join(names, ".")
}

// listSizes returns the @listSize directives among dirs, under any name
// the schema gives @listSize.
func (c *compiled) listSizes(dirs ast.DirectiveList) []*ast.Directive {
	var out []*ast.Directive
	for _, d := range dirs {
		if c.names.isListSize(d.Name) {
			out = append(out, d)
		}
	}
	return out
}

// listSizeDirectives reads field fi's @listSize directives ds. One sets
// fi's rule; several each keep their own (fi.rules), evaluated apart, the
// largest size winning, and fi's rule is their union: every slicing
// argument, required if any directive requires one, the largest
// assumedSize, and every sized path.
func (c *compiled) listSizeDirectives(fi *fieldInfo, ds []*ast.Directive) error {
	var slicing []*slicer
	for _, d := range ds {
		var r listSizeRule
		if err := c.listSizeDirective(fi, d, &r); err != nil {
			return err
		}
		if len(ds) == 1 {
			fi.listSizeRule = r
			fi.setSlicing(r.slicing)
			return nil
		}
		fi.rules = append(fi.rules, r)
		slicing = append(slicing, r.slicing...)
		fi.requireOne = fi.requireOne || r.requireOne
		if r.assumed.ok && (!fi.assumed.ok || r.assumed.size > fi.assumed.size) {
			fi.assumed = r.assumed
		}
	}
	fi.setSlicing(slicing)
	return nil
}

// listSizeDirective reads one @listSize directive d of field fi into r,
// and adds its sized paths to fi's, checking every argument now so that a
// malformed directive fails New rather than mispricing operations later.
func (c *compiled) listSizeDirective(fi *fieldInfo, d *ast.Directive, r *listSizeRule) error {
	where := "field " + fi.coord + ": @" + d.Name
	r.requireOne = c.requireOneDefault(d)
	for _, arg := range d.Arguments {
		v := arg.Value
		var err error
		switch arg.Name {
		case "assumedSize":
			r.assumed, err = readAssumedSize(v, where)
		case "slicingArguments":
			r.slicing, err = readSlicingArguments(fi, v, where)
		case "sizedFields":
			err = c.readSizedFields(fi, v, where)
		case "requireOneSlicingArgument":
			err = readRequireOne(&r.requireOne, v, where)
		default:
			err = fmt.Errorf("%w: %s has an argument %s, which this library does not read", ErrInvalidSchema, where, arg.Name)
		}
		if err != nil {
			return err
		}
	}
	if len(r.slicing) == 0 {
		r.requireOne = false // nothing to require
	}
	return nil
}

func readAssumedSize(v *ast.Value, where string) (declared, error) {
	if v.Kind == ast.NullValue {
		return declared{}, nil
	}
	n, err := strconv.ParseInt(v.Raw, 10, 64)
	if v.Kind != ast.IntValue || err != nil || n < 0 {
		return declared{}, fmt.Errorf("%w: %s assumedSize %q is not a non-negative integer", ErrInvalidSchema, where, v.Raw)
	}
	return declared{size: n, ok: true}, nil
}

// readRequireOne reads requireOneSlicingArgument; null keeps the default.
func readRequireOne(require *bool, v *ast.Value, where string) error {
	switch v.Kind {
	case ast.BooleanValue:
		*require = v.Raw == "true"
	case ast.NullValue:
	default:
		return fmt.Errorf("%w: %s requireOneSlicingArgument %q is not a Boolean", ErrInvalidSchema, where, v.Raw)
	}
	return nil
}

// readSlicingArguments reads the slicing arguments of fi's @listSize:
// names of its arguments, or dotted paths into input-object arguments.
func readSlicingArguments(fi *fieldInfo, v *ast.Value, where string) ([]*slicer, error) {
	names, err := stringList(v, where+" slicingArguments")
	if err != nil {
		return nil, err
	}
	out := make([]*slicer, 0, len(names))
	for _, name := range names {
		path, err := slicingPath(fi, name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s slicingArguments names %q: %s", ErrInvalidSchema, where, name, err)
		}
		out = append(out, &slicer{path: path, name: name})
	}
	return out, nil
}

// slicingPath resolves a slicing argument's dotted name against fi: the
// first segment an argument, each next an input field of the input-object
// type before it (not a list of them: which element would size the
// list?), the last a value that can give a size (a number, or a list
// counted by its length).
func slicingPath(fi *fieldInfo, name string) ([]*inputInfo, error) {
	var path []*inputInfo
	for i, seg := range strings.Split(name, ".") {
		if i == 0 {
			j := slices.IndexFunc(fi.args, func(a *inputInfo) bool { return a.name == seg })
			if j < 0 {
				return nil, fmt.Errorf("%q is not an argument of the field", seg)
			}
			path = append(path, fi.args[j])
			continue
		}
		prev := path[len(path)-1]
		switch {
		case isList(prev.typ):
			return nil, fmt.Errorf("%q is a list, which a path cannot go through", prev.name)
		case prev.named == nil || prev.named.def.Kind != ast.InputObject:
			return nil, fmt.Errorf("%q is not an input object, so it has no field %q", prev.name, seg)
		}
		j := slices.IndexFunc(prev.named.inputFields, func(f *inputInfo) bool { return f.name == seg })
		if j < 0 {
			return nil, fmt.Errorf("input %s has no field %q", prev.named.name, seg)
		}
		path = append(path, prev.named.inputFields[j])
	}
	leaf := path[len(path)-1]
	if !isList(leaf.typ) && leaf.named != nil {
		switch k := leaf.named.def.Kind; {
		case k == ast.InputObject || k == ast.Enum || leaf.named.scalar == builtinBoolean:
			return nil, fmt.Errorf("%q is a %s, which cannot give a size", leaf.name, leaf.named.name)
		}
	}
	return path, nil
}

// readSizedFields reads sizedFields: dotted paths ("meta.tags") or Apollo
// Router's selection syntax ("results { page }", several fields in one
// string: "edges { node } nodes"), each leaf of a selection a sized path.
// Paths from several @listSize add up, each once.
func (c *compiled) readSizedFields(fi *fieldInfo, v *ast.Value, where string) error {
	specs, err := stringList(v, where+" sizedFields")
	if err != nil {
		return err
	}
	for _, spec := range specs {
		paths, err := sizedPaths(spec)
		if err != nil {
			return fmt.Errorf("%w: %s sizedFields %q: %s", ErrInvalidSchema, where, spec, err)
		}
		for _, p := range paths {
			if err := c.checkSizedPath(fi.ret, p); err != nil {
				return fmt.Errorf("%w: %s sizedFields %q: %s", ErrInvalidSchema, where, spec, err)
			}
			if !slices.Contains(fi.sized, p) {
				fi.sized = append(fi.sized, p)
			}
		}
	}
	return nil
}

// maxSizedNesting bounds the braces of one sizedFields selection.
const maxSizedNesting = 32

// sizedPaths reads one sizedFields entry as the dotted paths of its
// leaves: "items" is items, "meta.tags" is meta.tags, "results { page
// total }" is results.page and results.total. Commas are ignored, as in
// GraphQL; aliases, arguments, directives and fragments are refused.
func sizedPaths(spec string) ([]string, error) {
	var (
		out     []string
		prefix  []string // the enclosing paths, innermost last
		last    string   // the path just read, "" after a brace
		pending bool     // last is a leaf unless a brace follows
	)
	flush := func() {
		if pending {
			out = append(out, last)
			pending = false
		}
	}
	join := func(p string) string {
		if len(prefix) == 0 {
			return p
		}
		return prefix[len(prefix)-1] + "." + p
	}
	for i := 0; i < len(spec); {
		ch := spec[i]
		switch {
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == ',':
			i++
		case ch == '{':
			if !pending {
				return nil, fmt.Errorf("a brace at offset %d follows no field", i)
			}
			if len(prefix) == maxSizedNesting {
				return nil, fmt.Errorf("selections nest deeper than %d", maxSizedNesting)
			}
			prefix, pending = append(prefix, last), false
			i++
			if j := skipSpace(spec, i); j < len(spec) && spec[j] == '}' {
				return nil, fmt.Errorf("an empty selection at offset %d", i-1)
			}
		case ch == '}':
			if len(prefix) == 0 {
				return nil, fmt.Errorf("an unmatched brace at offset %d", i)
			}
			flush()
			prefix = prefix[:len(prefix)-1]
			i++
		case isNameStart(ch):
			flush()
			j := i
			for j < len(spec) && (isNameStart(spec[j]) || spec[j] >= '0' && spec[j] <= '9' || spec[j] == '.' && j+1 < len(spec) && isNameStart(spec[j+1])) {
				j++
			}
			last, pending = join(spec[i:j]), true
			i = j
		default:
			return nil, fmt.Errorf("%q at offset %d is not part of a field selection", ch, i)
		}
	}
	if len(prefix) > 0 {
		return nil, fmt.Errorf("a brace is not closed")
	}
	flush()
	if len(out) == 0 {
		return nil, fmt.Errorf("no field")
	}
	return out, nil
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == ',') {
		i++
	}
	return i
}

func isNameStart(ch byte) bool {
	return ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z'
}

// checkSizedPath checks that a dot-separated path of field names exists
// below t, so a typo in sizedFields fails at New rather than silently
// pricing the list at the default size.
func (c *compiled) checkSizedPath(t *typeInfo, path string) error {
	for seg := range strings.SplitSeq(path, ".") {
		if t == nil || !t.composite || t.def.Kind == ast.Union {
			return fmt.Errorf("%q has no fields", typeName(t))
		}
		fd := t.def.Fields.ForName(seg)
		if fd == nil {
			return fmt.Errorf("type %s has no field %q", t.name, seg)
		}
		t = c.types[fd.Type.Name()]
	}
	return nil
}
