package apicheck

import (
	"fmt"
	"go/types"
	"slices"
	"strconv"
	"strings"
)

// listing returns one line per exported name of pkg, in the form of Go's own
// api/go1.*.txt files, sorted:
//
//	pkg P, const N T               the constant's type (ideal-int if untyped)
//	pkg P, const N = V             and its value
//	pkg P, var N T
//	pkg P, func N(T1, ...T2) (R1, R2)
//	pkg P, type N struct           and for each exported field:
//	pkg P, type N struct, F T      or ", embedded T"
//	pkg P, type N interface { M1, M2 } (the method names)
//	pkg P, type N interface, M1(T) R
//	pkg P, type N = T              an alias
//	pkg P, type N U                any other type, with its underlying type
//	pkg P, method (*N) M(T) R      the method sets of N and *N
//
// Parameter names are left out, type parameters are numbered ($0, $1),
// aliases are resolved and byte, rune and interface{} are written uint8, int32
// and any: a line changes only when what a caller can write changes.
func listing(pkg *types.Package) []string {
	w := &writer{pkg: pkg}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		if obj := scope.Lookup(name); obj.Exported() {
			w.object(obj)
		}
	}
	slices.Sort(w.lines)
	return slices.Compact(w.lines)
}

type writer struct {
	pkg   *types.Package
	lines []string
}

func (w *writer) emit(format string, args ...any) {
	w.lines = append(w.lines, "pkg "+w.pkg.Path()+", "+fmt.Sprintf(format, args...))
}

func (w *writer) object(obj types.Object) {
	switch obj := obj.(type) {
	case *types.Const:
		w.emit("const %s %s", obj.Name(), w.typ(obj.Type()))
		if short, exact := obj.Val().String(), obj.Val().ExactString(); short == exact {
			w.emit("const %s = %s", obj.Name(), short)
		} else {
			w.emit("const %s = %s  // %s", obj.Name(), short, exact)
		}
	case *types.Var:
		w.emit("var %s %s", obj.Name(), w.typ(obj.Type()))
	case *types.Func:
		sig := obj.Type().(*types.Signature)
		w.emit("func %s%s%s", obj.Name(), w.typeParams(sig.TypeParams()), w.signature(sig))
	case *types.TypeName:
		w.typeName(obj)
	default:
		panic(fmt.Sprintf("unexpected object %v", obj))
	}
}

func (w *writer) typeName(obj *types.TypeName) {
	if alias, ok := obj.Type().(*types.Alias); ok {
		w.emit("type %s%s = %s", obj.Name(), w.typeParams(alias.TypeParams()), w.typ(types.Unalias(alias)))
		return
	}
	named := obj.Type().(*types.Named)
	decl := "type " + obj.Name() + w.typeParams(named.TypeParams())
	switch u := named.Underlying().(type) {
	case *types.Struct:
		w.emit("%s struct", decl)
		w.fields(decl, named, u, make(map[*types.Struct]bool))
	case *types.Interface:
		w.iface(decl, u)
		return // an interface's methods are listed by iface
	default:
		w.emit("%s %s", decl, w.typ(u))
	}

	// The method sets of N and *N, promoted methods included; a method of N
	// is listed once, with the value receiver.
	recv := obj.Name()
	if tparams := named.TypeParams(); tparams.Len() > 0 {
		names := make([]string, tparams.Len())
		for i := range names {
			names[i] = "$" + strconv.Itoa(i)
		}
		recv += "[" + strings.Join(names, ", ") + "]"
	}
	seen := make(map[string]bool)
	for _, t := range []types.Type{named, types.NewPointer(named)} {
		mset := types.NewMethodSet(t)
		for i := range mset.Len() {
			m := mset.At(i)
			if !m.Obj().Exported() || seen[m.Obj().Name()] {
				continue
			}
			seen[m.Obj().Name()] = true
			w.emit("method (%s) %s%s", recv, m.Obj().Name(), w.signature(m.Type().(*types.Signature)))
		}
		recv = "*" + recv
	}
}

// fields lists the exported fields of s, the struct type of named, with
// those it promotes from an unexported embedded struct: a caller writes n.F
// either way. An exported embedded type is listed as such, its fields under
// its own name.
func (w *writer) fields(decl string, named *types.Named, s *types.Struct, seen map[*types.Struct]bool) {
	if seen[s] {
		return
	}
	seen[s] = true
	for i := range s.NumFields() {
		f := s.Field(i)
		if !f.Exported() {
			if !f.Embedded() {
				continue
			}
			t := types.Unalias(f.Type())
			if p, ok := t.(*types.Pointer); ok {
				t = p.Elem()
			}
			if inner, ok := t.Underlying().(*types.Struct); ok {
				w.fields(decl, named, inner, seen)
			}
			continue
		}
		// A promoted field is listed only if a shallower one of the same
		// name does not hide it.
		if obj, _, _ := types.LookupFieldOrMethod(named, true, w.pkg, f.Name()); obj != f {
			continue
		}
		if f.Embedded() {
			w.emit("%s struct, embedded %s", decl, w.typ(f.Type()))
		} else {
			w.emit("%s struct, %s %s", decl, f.Name(), w.typ(f.Type()))
		}
	}
}

// iface lists an interface's exported methods, one line each. Like Go's
// listing it then records either that unexported methods exist (no type
// outside the package implements it, so a new method breaks nobody) or the
// full set of names, a line that changes with every added method: those
// break the implementations elsewhere.
func (w *writer) iface(decl string, it *types.Interface) {
	var names []string
	complete := true
	for i := range it.NumMethods() {
		m := it.Method(i)
		if !m.Exported() {
			complete = false
			continue
		}
		names = append(names, m.Name())
		w.emit("%s interface, %s%s", decl, m.Name(), w.signature(m.Type().(*types.Signature)))
	}
	if !it.IsMethodSet() {
		w.emit("%s %s", decl, w.typ(it))
	}
	switch {
	case !complete:
		w.emit("%s interface, unexported methods", decl)
	case it.IsMethodSet() && len(names) == 0:
		w.emit("%s interface {}", decl)
	case it.IsMethodSet():
		slices.Sort(names)
		w.emit("%s interface { %s }", decl, strings.Join(names, ", "))
	}
}

func (w *writer) typ(t types.Type) string {
	var b strings.Builder
	w.writeType(&b, t)
	return b.String()
}

func (w *writer) writeType(b *strings.Builder, t types.Type) {
	switch t := t.(type) {
	case *types.Alias:
		w.writeType(b, types.Unalias(t))
	case *types.Basic:
		b.WriteString(basicName(t))
	case *types.Array:
		fmt.Fprintf(b, "[%d]", t.Len())
		w.writeType(b, t.Elem())
	case *types.Slice:
		b.WriteString("[]")
		w.writeType(b, t.Elem())
	case *types.Pointer:
		b.WriteByte('*')
		w.writeType(b, t.Elem())
	case *types.Map:
		b.WriteString("map[")
		w.writeType(b, t.Key())
		b.WriteByte(']')
		w.writeType(b, t.Elem())
	case *types.Chan:
		parens := false
		switch t.Dir() {
		case types.SendRecv:
			b.WriteString("chan ")
			// chan (<-chan T), not the receive-only channel <-chan (chan T).
			c, ok := types.Unalias(t.Elem()).(*types.Chan)
			parens = ok && c.Dir() == types.RecvOnly
		case types.SendOnly:
			b.WriteString("chan<- ")
		case types.RecvOnly:
			b.WriteString("<-chan ")
		}
		if parens {
			b.WriteByte('(')
		}
		w.writeType(b, t.Elem())
		if parens {
			b.WriteByte(')')
		}
	case *types.Signature:
		b.WriteString("func")
		b.WriteString(w.signature(t))
	case *types.Struct:
		b.WriteString("struct{")
		for i := range t.NumFields() {
			if i > 0 {
				b.WriteString("; ")
			}
			f := t.Field(i)
			if !f.Embedded() {
				b.WriteString(f.Name())
				b.WriteByte(' ')
			}
			w.writeType(b, f.Type())
			if tag := t.Tag(i); tag != "" {
				b.WriteByte(' ')
				b.WriteString(strconv.Quote(tag))
			}
		}
		b.WriteByte('}')
	case *types.Interface:
		w.writeInterface(b, t)
	case *types.Union:
		for i := range t.Len() {
			if i > 0 {
				b.WriteString(" | ")
			}
			if t.Term(i).Tilde() {
				b.WriteByte('~')
			}
			w.writeType(b, t.Term(i).Type())
		}
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() != nil && obj.Pkg() != w.pkg {
			b.WriteString(obj.Pkg().Name())
			b.WriteByte('.')
		}
		b.WriteString(obj.Name())
		if args := t.TypeArgs(); args.Len() > 0 {
			b.WriteByte('[')
			for i := range args.Len() {
				if i > 0 {
					b.WriteString(", ")
				}
				w.writeType(b, args.At(i))
			}
			b.WriteByte(']')
		}
	case *types.TypeParam:
		fmt.Fprintf(b, "$%d", t.Index())
	default:
		panic(fmt.Sprintf("unexpected type %T", t))
	}
}

// writeInterface writes an interface literal: its embedded types (a
// constraint's type terms), then its explicit methods in source order.
func (w *writer) writeInterface(b *strings.Builder, t *types.Interface) {
	if t.Empty() {
		b.WriteString("any")
		return
	}
	var parts []string
	for i := range t.NumEmbeddeds() {
		parts = append(parts, w.typ(t.EmbeddedType(i)))
	}
	for i := range t.NumExplicitMethods() {
		m := t.ExplicitMethod(i)
		parts = append(parts, m.Name()+w.signature(m.Type().(*types.Signature)))
	}
	if t.IsImplicit() {
		b.WriteString(strings.Join(parts, "; ")) // [T ~int | ~string]
		return
	}
	b.WriteString("interface { ")
	b.WriteString(strings.Join(parts, "; "))
	b.WriteString(" }")
}

// basicName is the name of a basic type, with an untyped constant's kind
// written as Go's listing does (ideal-int, ideal-string, ...).
func basicName(t *types.Basic) string {
	switch t.Kind() {
	case types.Uint8:
		return "uint8" // and byte
	case types.Int32:
		return "int32" // and rune
	case types.UnsafePointer:
		return "unsafe.Pointer"
	case types.UntypedBool:
		return "ideal-bool"
	case types.UntypedInt:
		return "ideal-int"
	case types.UntypedRune:
		return "ideal-char"
	case types.UntypedFloat:
		return "ideal-float"
	case types.UntypedComplex:
		return "ideal-complex"
	case types.UntypedString:
		return "ideal-string"
	}
	return t.Name()
}

// signature writes a signature without its func keyword and parameter
// names: (T1, ...T2) R or (T1) (R1, R2).
func (w *writer) signature(sig *types.Signature) string {
	var b strings.Builder
	b.WriteByte('(')
	params := sig.Params()
	for i := range params.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		t := params.At(i).Type()
		if sig.Variadic() && i == params.Len()-1 {
			b.WriteString("...")
			t = t.(*types.Slice).Elem()
		}
		w.writeType(&b, t)
	}
	b.WriteByte(')')
	switch res := sig.Results(); res.Len() {
	case 0:
	case 1:
		b.WriteByte(' ')
		w.writeType(&b, res.At(0).Type())
	default:
		b.WriteString(" (")
		for i := range res.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			w.writeType(&b, res.At(i).Type())
		}
		b.WriteByte(')')
	}
	return b.String()
}

// typeParams writes a type parameter list, [$0 any, $1 comparable], or
// nothing.
func (w *writer) typeParams(list *types.TypeParamList) string {
	if list.Len() == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := range list.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		tp := list.At(i)
		fmt.Fprintf(&b, "$%d ", tp.Index())
		w.writeType(&b, tp.Constraint())
	}
	b.WriteByte(']')
	return b.String()
}
