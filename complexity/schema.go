package complexity

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

// directiveSDL declares the IBM cost directives. The weight is a String
// (the IBM form); schemas may instead declare weight: Int! (Apollo's
// federation form), and Analyzer reads either. @listSize is repeatable:
// several on one field size it by the largest.
const directiveSDL = `directive @cost(weight: String!) on ARGUMENT_DEFINITION | ENUM | FIELD_DEFINITION | INPUT_FIELD_DEFINITION | OBJECT | SCALAR

directive @listSize(assumedSize: Int, slicingArguments: [String!], sizedFields: [String!], requireOneSlicingArgument: Boolean = true) repeatable on FIELD_DEFINITION
`

// linkDeclarations declare @link (https://specs.apollo.dev/link/v1.0)
// and its types, by name, for schemas that use it without declaring it,
// as subgraph schemas do.
var linkDeclarations = [...]struct{ name, sdl string }{
	{"link", "directive @link(url: String!, as: String, import: [link__Import], for: link__Purpose) repeatable on SCHEMA"},
	{"link__Import", "scalar link__Import"},
	{"link__Purpose", "enum link__Purpose { SECURITY EXECUTION }"},
}

// DirectiveDefinitions returns the SDL declaring @cost and @listSize, for
// schemas that use the directives without declaring them.
func DirectiveDefinitions() string { return directiveSDL }

// LoadSchema parses and validates SDL sources into a schema, first adding
// the declarations the sources use without declaring: @cost and
// @listSize, under their own names and under those the sources' @link
// directives give them (an import renamed, @cost__listSize,
// @federation__cost), and @link itself. Sources may declare the cost
// directives in either form (weight: String! or weight: Int!). A @link
// this library cannot read the cost directives of is refused with
// ErrInvalidSchema.
func LoadSchema(sources ...*ast.Source) (*ast.Schema, error) {
	declared := map[string]bool{}
	var links ast.DirectiveList
	for _, src := range sources {
		doc, err := parser.ParseSchema(src)
		if err != nil {
			return nil, fmt.Errorf("complexity: load schema: %w", err)
		}
		for _, d := range doc.Directives {
			declared[d.Name] = true
		}
		for _, d := range doc.Definitions {
			declared[d.Name] = true
		}
		for _, sd := range append(slices.Clip(doc.Schema), doc.SchemaExtension...) {
			links = append(links, sd.Directives...)
		}
	}
	names, err := readLinks(links)
	if err != nil {
		return nil, err // ErrInvalidSchema, already prefixed
	}
	var b strings.Builder
	for _, spec := range []string{"cost", "listSize"} {
		for _, name := range names.names(spec) {
			if !declared[name] {
				b.WriteString(strings.Replace(directiveLine(spec), "@"+spec+"(", "@"+name+"(", 1))
			}
		}
	}
	if links.ForName("link") != nil && !declared["link"] {
		for _, d := range linkDeclarations {
			if !declared[d.name] {
				b.WriteString(d.sdl + "\n")
			}
		}
	}
	all := slices.Clone(sources)
	if b.Len() > 0 {
		all = append(all, &ast.Source{Name: "cost-directives.graphql", Input: b.String(), BuiltIn: true})
	}
	s, err := gqlparser.LoadSchema(all...)
	if err != nil {
		return nil, fmt.Errorf("complexity: load schema: %w", err)
	}
	return s, nil
}

// directiveLine returns the one-line declaration of the named directive.
func directiveLine(name string) string {
	for line := range strings.SplitSeq(directiveSDL, "\n") {
		if strings.HasPrefix(line, "directive @"+name+"(") {
			return line + "\n"
		}
	}
	return ""
}

// compiled is a schema with every weight and list-size rule resolved, built
// once by New so Analyze only looks things up.
type compiled struct {
	schema                        *ast.Schema
	types                         map[string]*typeInfo
	query, mutation, subscription *typeInfo
	typename                      *fieldInfo // the implicit __typename field
	chargeNulls                   bool       // WithNullArgumentsCharged
	names                         directiveNames
	lists                         int32 // the list fields, numbered by fieldInfo.slot
}

type typeInfo struct {
	def       *ast.Definition
	name      string
	weight    Cost
	hasWeight bool // weight came from @cost
	composite bool // object, interface or union
	abstract  bool // interface or union
	// scalar says how the executor coerces values of a built-in scalar
	// type; notBuiltin for every other type.
	scalar builtin
	// possible lists the object types an abstract type may resolve to,
	// sorted by name so ties between equally priced types break the same
	// way whatever the schema's declaration order.
	possible []*typeInfo
	// within holds the names of the interfaces and unions an object type
	// belongs to.
	within map[string]bool
	// id numbers the type within its schema (0 to len(types)−1), and
	// members is, for an interface or union, the set of ids of the object
	// types whose within names it: fragment type conditions are matched by
	// a bit test (see applies) rather than a lookup in each member's map.
	id      int
	members []uint64
	// memberFields holds, for each field an interface declares, that
	// field of each of its possible types, in the order of possible: the
	// fields of member i, looked up in one table that stays in the cache
	// while every member is priced, rather than in each member's own.
	memberFields map[string][]*fieldInfo
	// reserved says the name starts with "__": an introspection type.
	reserved    bool
	fields      map[string]*fieldInfo
	inputFields []*inputInfo // input objects only
}

type fieldInfo struct {
	name   string
	coord  string // "Type.field"
	weight Cost
	ret    *typeInfo
	list   bool
	// listDepth is how many lists the type nests: 0 for T, 1 for [T],
	// 2 for [[T]]…
	listDepth int
	// class numbers the field's pricing rules (see classifyFields).
	class    int32
	args     []*inputInfo
	argsFree bool // no argument can ever cost anything
	// listSizeRule holds the slicing arguments that size the list (the
	// ones @listSize names, or the conventions', see listSizeConventions;
	// nil if none), whether one is required and @listSize(assumedSize:).
	// For a field with several @listSize it is their union (every slicing
	// argument, required if any requires one, the largest assumed size)
	// and rules holds each.
	listSizeRule
	rules []listSizeRule
	// slicingArgs are the arguments the slicing arguments read (a path's
	// first segment), for a plan's compiler.
	slicingArgs []*inputInfo
	// slot is a list field's number among the schema's lists.
	slot int32
	// sized are the paths of child fields that receive this field's size:
	// @listSize(sizedFields:), or by convention a …Connection's edges and
	// nodes, a wrapper's one list, a mutation payload's lists.
	sized []string
}

// inputInfo is an argument or an input object field.
type inputInfo struct {
	name      string
	typ       *ast.Type
	def       *ast.Value // schema default, nil if none
	named     *typeInfo  // the named type inside typ (nil if unknown)
	weight    Cost       // own @cost
	hasWeight bool
	// byDefault is what the argument or input field costs when no value
	// is given for it: its default's cost, computed once by New (see
	// priceDefaults).
	byDefault defaultCost
}

// defaultCost is what an argument or input field costs by its schema
// default.
type defaultCost struct {
	state defaultState
	cost  Cost // when state is defaultPriced
}

type defaultState uint8

const (
	// defaultUnpriced: not priced yet; New prices every default.
	defaultUnpriced defaultState = iota
	// defaultPricing: being priced; reaching it again means the default
	// fills itself in without end.
	defaultPricing
	// defaultPriceEachTime: the default is priced when used, which
	// reports the error of a default the executor would refuse.
	defaultPriceEachTime
	// defaultFree: no default, or one that costs nothing.
	defaultFree
	// defaultPriced: the default costs cost.
	defaultPriced
)

func compile(s *ast.Schema, cfg *config) (*compiled, error) {
	names, err := readLinks(s.SchemaDirectives)
	if err != nil {
		return nil, err
	}
	c := &compiled{schema: s, types: make(map[string]*typeInfo, len(s.Types)), chargeNulls: cfg.chargeNulls, names: names}
	for name, def := range s.Types {
		ti := &typeInfo{def: def, name: name, id: len(c.types), reserved: strings.HasPrefix(name, "__")}
		if def.Kind == ast.Scalar {
			ti.scalar = builtinScalar(name)
		}
		switch def.Kind {
		case ast.Object, ast.InputObject:
			ti.weight, ti.composite = CostScale, def.Kind == ast.Object
		case ast.Interface, ast.Union:
			ti.weight, ti.composite, ti.abstract = CostScale, true, true
		}
		w, ok, err := c.costDirective(def.Directives, "type "+name)
		if err != nil {
			return nil, err
		}
		if ok {
			ti.weight, ti.hasWeight = w, true
		}
		if err := c.unreadOnEnumValues(def); err != nil {
			return nil, err
		}
		c.types[name] = ti
	}
	for _, ti := range c.types {
		if ti.abstract {
			for _, p := range s.PossibleTypes[ti.name] {
				if pt := c.types[p.Name]; pt != nil && p.Kind == ast.Object {
					ti.possible = append(ti.possible, pt)
				}
			}
			slices.SortFunc(ti.possible, func(a, b *typeInfo) int { return strings.Compare(a.name, b.name) })
			ti.possible = slices.CompactFunc(ti.possible, func(a, b *typeInfo) bool { return a == b })
		}
		if ti.def.Kind == ast.Object {
			ti.within = map[string]bool{}
			for _, sup := range s.Implements[ti.name] {
				ti.within[sup.Name] = true
			}
			for _, iface := range ti.def.Interfaces {
				ti.within[iface] = true
			}
		}
	}
	for _, ti := range c.types {
		for name := range ti.within {
			if sup := c.types[name]; sup != nil {
				if sup.members == nil {
					sup.members = make([]uint64, (len(c.types)+63)/64)
				}
				sup.members[ti.id/64] |= 1 << (ti.id % 64)
			}
		}
	}
	// Input objects first: slicing arguments are paths into them.
	for _, ti := range c.types {
		if ti.def.Kind == ast.InputObject {
			var err error
			if ti.inputFields, err = c.compileInputs(ti.def.Fields, "input "+ti.name); err != nil {
				return nil, err
			}
		}
	}
	for _, ti := range c.types {
		if ti.def.Kind == ast.Object || ti.def.Kind == ast.Interface {
			if err := c.compileFields(ti, cfg); err != nil {
				return nil, err
			}
		}
	}
	// Every list field's slicing arguments are now known, so the non-list
	// fields that hand their size down to lists can be resolved.
	for _, ti := range c.types {
		if ti.def.Kind != ast.Object && ti.def.Kind != ast.Interface {
			continue
		}
		for _, fd := range ti.def.Fields {
			if len(c.listSizes(fd.Directives)) == 0 {
				c.handDownConventions(ti.fields[fd.Name], cfg, c.isMutation(ti))
			}
		}
	}
	for _, ti := range c.types {
		if !ti.abstract || len(ti.def.Fields) == 0 || len(ti.possible) == 0 {
			continue
		}
		ti.memberFields = make(map[string][]*fieldInfo, len(ti.def.Fields))
		for _, fd := range ti.def.Fields {
			fs := make([]*fieldInfo, len(ti.possible))
			for i, pt := range ti.possible {
				fs[i] = pt.fields[fd.Name]
			}
			ti.memberFields[fd.Name] = fs
		}
	}
	if s.Query != nil {
		c.query = c.types[s.Query.Name]
	}
	if s.Mutation != nil {
		c.mutation = c.types[s.Mutation.Name]
	}
	if s.Subscription != nil {
		c.subscription = c.types[s.Subscription.Name]
	}
	c.typename = &fieldInfo{name: "__typename", coord: "__typename", ret: c.types["String"], argsFree: true}
	if c.typename.ret == nil {
		c.typename.ret = &typeInfo{name: "String"}
	}
	if err := c.prepareListSizes(cfg); err != nil {
		return nil, err
	}
	c.classifyFields()
	if err := c.priceDefaults(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *compiled) compileInputs(defs ast.FieldList, where string) ([]*inputInfo, error) {
	out := make([]*inputInfo, 0, len(defs))
	for _, d := range defs {
		in := &inputInfo{name: d.Name, typ: d.Type, def: d.DefaultValue, named: c.types[d.Type.Name()]}
		w, ok, err := c.costDirective(d.Directives, where+"."+d.Name)
		if err != nil {
			return nil, err
		}
		in.weight, in.hasWeight = w, ok
		out = append(out, in)
	}
	return out, nil
}

func (c *compiled) compileFields(ti *typeInfo, cfg *config) error {
	ti.fields = make(map[string]*fieldInfo, len(ti.def.Fields))
	for _, fd := range ti.def.Fields {
		coord := ti.name + "." + fd.Name
		fi := &fieldInfo{name: fd.Name, coord: coord, list: isList(fd.Type), argsFree: true}
		for t := fd.Type; t != nil && t.Elem != nil; t = t.Elem {
			fi.listDepth++
		}
		fi.ret = c.types[fd.Type.Name()]
		if fi.ret == nil {
			return fmt.Errorf("%w: field %s: unknown type %s", ErrInvalidSchema, coord, fd.Type.Name())
		}
		w, ok, err := c.costDirective(fd.Directives, "field "+coord)
		if err != nil {
			return err
		}
		if ok {
			fi.weight = w
		}
		for _, ad := range fd.Arguments {
			in := &inputInfo{name: ad.Name, typ: ad.Type, def: ad.DefaultValue, named: c.types[ad.Type.Name()]}
			w, ok, err := c.costDirective(ad.Directives, "argument "+coord+"("+ad.Name+":)")
			if err != nil {
				return err
			}
			in.weight, in.hasWeight = w, ok
			fi.args = append(fi.args, in)
			if !c.argAlwaysFree(in) {
				fi.argsFree = false
			}
		}
		if err := c.compileListSize(fi, fd, cfg, c.isMutation(ti)); err != nil {
			return err
		}
		ti.fields[fd.Name] = fi
	}
	return nil
}

// argAlwaysFree reports whether an argument costs 0 whatever its value: a
// scalar or enum (or list of them) without any weight.
func (c *compiled) argAlwaysFree(in *inputInfo) bool {
	if in.hasWeight && in.weight != 0 {
		return false
	}
	t := c.types[in.typ.Name()]
	return t != nil && t.def.Kind != ast.InputObject && t.weight == 0
}

// compileListSize resolves how field fi is sized: by its @listSize
// directive when it has one, else by the naming conventions. A directive
// replaces the conventions entirely, so a schema can opt a first/last field
// or a …Connection out of them.
func (c *compiled) compileListSize(fi *fieldInfo, fd *ast.FieldDefinition, cfg *config, onMutation bool) error {
	if ds := c.listSizes(fd.Directives); len(ds) > 0 {
		return c.listSizeDirectives(fi, ds)
	}
	listSizeConventions(fi, cfg, onMutation)
	return nil
}

// listSizeConventions applies the defaults for a field without @listSize,
// each unless turned off, in two steps. First, here, for every field:
//
//   - first and last are slicing arguments;
//   - on a list field, so are a count-named argument (countArgument), a
//     key list (keyList) and, on the mutation root, every list-typed
//     argument;
//   - a …Connection type hands the field's size to its edges and nodes.
//
// Then, once every list field is compiled, handDownConventions lets a
// non-list field hand its size down to the lists of what it returns. None
// of these arguments is ever required. With them GitHub's schema, a
// federation subgraph's _entities and Hasura's tables price with no
// directive. First, last and count-named arguments are also looked for
// inside input-object arguments (see conventionSlicers).
func listSizeConventions(fi *fieldInfo, cfg *config, onMutation bool) {
	fi.setSlicing(conventionSlicers(fi.args, cfg, fi.list, fi.list, fi.list && onMutation))
	if cfg.connections && isConnection(fi.ret) {
		for _, name := range []string{"edges", "nodes"} {
			if fi.ret.def.Fields.ForName(name) != nil {
				fi.sized = append(fi.sized, name)
			}
		}
	}
}

// handDownConventions resolves, for field fi without @listSize, the lists
// of the object or interface it returns that receive its size, and the
// arguments that give that size:
//
//   - a …Connection's edges and nodes (listSizeConventions set them);
//   - on the mutation root, when fi has list-typed arguments
//     (WithMutationListConvention): each list field of the payload that
//     has no slicing arguments of its own;
//   - else, when fi has first, last or a count-named argument
//     (WithCountArgumentConvention): the returned type's list field, if
//     it has exactly one and that one has no slicing arguments of its own.
//
// A field that hands its size down is sized by first and last, its
// count-named arguments and, on the mutation root, its list-typed
// arguments; one that does not keeps first and last only.
func (c *compiled) handDownConventions(fi *fieldInfo, cfg *config, onMutation bool) {
	ret := fi.ret
	if fi.list || ret.def.Kind != ast.Object && ret.def.Kind != ast.Interface {
		return
	}
	rows := func(a *inputInfo) bool { return cfg.rows(a, onMutation) }
	switch {
	case len(fi.sized) > 0: // a …Connection
	case slices.ContainsFunc(fi.args, rows):
		for _, fd := range ret.def.Fields {
			if isList(fd.Type) && c.unsliced(ret, fd.Name) {
				fi.sized = append(fi.sized, fd.Name)
			}
		}
	case cfg.countArguments && !isConnection(ret) && len(conventionSlicers(fi.args, cfg, true, false, false)) > 0:
		if name, ok := onlyList(ret); ok && c.unsliced(ret, name) {
			fi.sized = []string{name}
		}
	}
	if len(fi.sized) == 0 {
		return
	}
	fi.setSlicing(conventionSlicers(fi.args, cfg, true, false, onMutation))
}

// pages reports whether a is first or last and that convention is on.
func (cfg *config) pages(a *inputInfo) bool {
	return cfg.firstLast && (a.name == "first" || a.name == "last")
}

// counts reports whether a is count-named and that convention is on.
func (cfg *config) counts(a *inputInfo) bool {
	return cfg.countArguments && countArgument(a)
}

// keys reports whether a is a key list and that convention is on.
func (cfg *config) keys(a *inputInfo) bool {
	return cfg.keyLists && keyList(a)
}

// rows reports whether a is a list-typed argument of a mutation root
// field and that convention is on.
func (cfg *config) rows(a *inputInfo, onMutation bool) bool {
	return cfg.mutationLists && onMutation && isList(a.typ)
}

// onlyList returns the name of t's list field when t has exactly one.
func onlyList(t *typeInfo) (string, bool) {
	name := ""
	for _, fd := range t.def.Fields {
		if isList(fd.Type) {
			if name != "" {
				return "", false
			}
			name = fd.Name
		}
	}
	return name, name != ""
}

// unsliced reports whether field name of t has no slicing arguments, on
// t and, for an interface, on each of its possible types (whose own
// definitions price it).
func (c *compiled) unsliced(t *typeInfo, name string) bool {
	if f := t.fields[name]; f != nil && len(f.slicing) > 0 {
		return false
	}
	for _, p := range t.possible {
		if f := p.fields[name]; f != nil && len(f.slicing) > 0 {
			return false
		}
	}
	return true
}

// countArgument reports whether argument a is count-named (see
// WithCountArgumentConvention): an Int, or a custom scalar whose name
// contains "Int", named like a count.
func countArgument(a *inputInfo) bool {
	if !countTyped(a) {
		return false
	}
	switch name := conventionName(a.name); name {
	case "limit", "count", "top", "take", "size", "batchsize", "pagesize", "perpage":
		return true
	default:
		return strings.HasPrefix(name, "max")
	}
}

// countTyped reports whether a has a count's type: Int, or a custom
// scalar whose name contains "Int", not a list.
func countTyped(a *inputInfo) bool {
	return !isList(a.typ) && a.named != nil && a.named.def.Kind == ast.Scalar && strings.Contains(a.named.name, "Int")
}

// keyList reports whether argument a is a key list (see
// WithKeyListConvention): a list named representations, ids or keys.
func keyList(a *inputInfo) bool {
	if !isList(a.typ) {
		return false
	}
	switch conventionName(a.name) {
	case "representations", "ids", "keys":
		return true
	}
	return false
}

// conventionName is an argument's name as the conventions compare it:
// lowercased, underscores removed (max_results is maxresults).
func conventionName(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "_", ""))
}

// isConnection reports whether t is for the Connection convention: a
// composite type named …Connection.
func isConnection(t *typeInfo) bool {
	return t.composite && strings.HasSuffix(t.name, "Connection")
}

// isMutation reports whether t is the schema's mutation root type.
func (c *compiled) isMutation(t *typeInfo) bool {
	return c.schema.Mutation != nil && c.schema.Mutation.Name == t.name
}

// requireOneDefault is requireOneSlicingArgument's default for d: true,
// as the spec declares it, unless the schema's own declaration of d's
// directive gives another.
func (c *compiled) requireOneDefault(d *ast.Directive) bool {
	def := d.Definition
	if def == nil {
		def = c.schema.Directives[d.Name]
	}
	if def != nil {
		if a := def.Arguments.ForName("requireOneSlicingArgument"); a != nil && a.DefaultValue != nil {
			return a.DefaultValue.Raw == "true"
		}
	}
	return true
}

func typeName(t *typeInfo) string {
	if t == nil {
		return "?"
	}
	return t.name
}

func stringList(v *ast.Value, where string) ([]string, error) {
	switch v.Kind {
	case ast.NullValue:
		return nil, nil
	case ast.StringValue, ast.BlockValue:
		return []string{v.Raw}, nil // input coercion: a single value is a list of one
	case ast.ListValue:
		out := make([]string, 0, len(v.Children))
		for _, ch := range v.Children {
			if ch.Value.Kind != ast.StringValue && ch.Value.Kind != ast.BlockValue {
				return nil, fmt.Errorf("%w: %s: %s is not a String", ErrInvalidSchema, where, ch.Value.String())
			}
			out = append(out, ch.Value.Raw)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %s: %s is not a list of String", ErrInvalidSchema, where, v.String())
}

// costDirective reads the weight of the @cost directives among dirs, under
// any name the schema gives @cost (see directiveNames), in either declared
// form: weight: "2.5" (IBM, String) or weight: 2 (Apollo, Int). Several
// (@cost beside @federation__cost) weigh the largest, as federation
// composes them. An argument other than weight is refused: the weight
// alone would misprice a directive meant to be read with it.
func (c *compiled) costDirective(dirs ast.DirectiveList, where string) (w Cost, ok bool, err error) {
	for _, d := range dirs {
		if !c.names.isCost(d.Name) {
			continue
		}
		dw, err := readCost(d, where)
		if err != nil {
			return 0, false, err
		}
		if !ok || dw > w {
			w, ok = dw, true
		}
	}
	return w, ok, nil
}

// unreadOnEnumValues refuses @cost on the values of enum def (a schema
// may declare it there; the spec weighs the enum type, not its values):
// a weight read nowhere would price nothing without a word.
func (c *compiled) unreadOnEnumValues(def *ast.Definition) error {
	for _, ev := range def.EnumValues {
		for _, d := range ev.Directives {
			if c.names.isCost(d.Name) {
				return fmt.Errorf("%w: enum value %s.%s: @%s is read on the enum type, not on its values", ErrInvalidSchema, def.Name, ev.Name, d.Name)
			}
		}
	}
	return nil
}

func readCost(d *ast.Directive, where string) (Cost, error) {
	for _, a := range d.Arguments {
		if a.Name != "weight" {
			return 0, fmt.Errorf("%w: %s: @%s has an argument %s, which this library does not read", ErrInvalidSchema, where, d.Name, a.Name)
		}
	}
	a := d.Arguments.ForName("weight")
	if a == nil || a.Value == nil {
		return 0, fmt.Errorf("%w: %s: @%s has no weight", ErrInvalidSchema, where, d.Name)
	}
	switch a.Value.Kind {
	case ast.StringValue, ast.BlockValue, ast.IntValue, ast.FloatValue:
		w, problem := parseCost(a.Value.Raw)
		if problem != "" {
			return 0, fmt.Errorf("%w: %s: @%s weight %q %s", ErrInvalidSchema, where, d.Name, a.Value.Raw, problem)
		}
		return w, nil
	}
	return 0, fmt.Errorf("%w: %s: @%s weight %s is not a number", ErrInvalidSchema, where, d.Name, a.Value.String())
}

func isList(t *ast.Type) bool { return t != nil && t.Elem != nil }

// oneType reports whether a value of t is priced as t itself: an object
// type, or an interface or union no object type implements. Otherwise
// each possible type is priced (see memberFold).
func (t *typeInfo) oneType() bool { return !t.abstract || len(t.possible) == 0 }

// fieldOf is field name of concrete type t, member member of abstract type
// via when via is not nil; __typename on any type; nil if there is none
// (see noField).
func (c *compiled) fieldOf(t, via *typeInfo, member int, name string) *fieldInfo {
	fi := t.field(via, member, name)
	if fi == nil && name == "__typename" {
		fi = c.typename
	}
	return fi
}

// noField is the error for field name, which type t does not have.
func noField(t *typeInfo, name string) error {
	return fmt.Errorf("%w: type %s has no field %q", ErrInvalidDocument, t.name, name)
}

// field returns t's field name; t is member i of abstract type via, or via
// is nil.
func (t *typeInfo) field(via *typeInfo, i int, name string) *fieldInfo {
	if via != nil {
		if fs, ok := via.memberFields[name]; ok {
			return fs[i]
		}
	}
	return t.fields[name]
}
