package complexity

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
)

// The specs whose cost directives this library reads when a schema links
// them with @link (https://specs.apollo.dev/link/v1.0).
const (
	costSpec       = "https://specs.apollo.dev/cost"
	federationSpec = "https://specs.apollo.dev/federation"
)

// directiveNames are the names a schema writes the cost directives under
// (see readLinks).
type directiveNames struct {
	cost, listSize []string
}

func (n *directiveNames) isCost(name string) bool     { return slices.Contains(n.cost, name) }
func (n *directiveNames) isListSize(name string) bool { return slices.Contains(n.listSize, name) }

// names returns the names of the directive the spec calls spec ("cost"
// or "listSize").
func (n *directiveNames) names(spec string) []string {
	if spec == "cost" {
		return n.cost
	}
	return n.listSize
}

func (n *directiveNames) add(spec, name string) {
	p := &n.listSize
	if spec == "cost" {
		p = &n.cost
	}
	if !slices.Contains(*p, name) {
		*p = append(*p, name)
	}
}

// readLinks resolves the names of @cost and @listSize from a schema's
// @link directives, as the link spec defines them:
//
//   - a link to the cost spec (v0.1) or to federation v2.9 or later
//     brings each directive in under its import name (import: ["@cost"],
//     or renamed: [{name: "@cost", as: "@renamedCost"}]), and under its
//     namespaced name: the spec's name or the link's as: followed by "__"
//     (@cost__listSize, @federation__cost, @fed__listSize), except the
//     directive named like its spec (the cost spec's @cost), which is
//     @cost itself, or the link's as: (@price), unless imported;
//   - @cost and @listSize keep their own names too, as in a schema
//     without links, unless a link imports that directive under another
//     name, which frees the name for the schema's own use.
//
// A link this library cannot read the cost directives of is refused: the
// cost spec at another version or address, federation before v2.9
// importing @cost or @listSize, any other spec imported under either name.
func readLinks(dirs ast.DirectiveList) (directiveNames, error) {
	var n directiveNames
	renamed := map[string]bool{}
	for _, d := range dirs {
		if d.Name != "link" {
			continue
		}
		l, err := parseLink(d)
		if err != nil {
			return n, err
		}
		if err := l.check(); err != nil {
			return n, fmt.Errorf("%w: schema @link(url: %q): %s", ErrInvalidSchema, l.url, err)
		}
		if !l.readable() {
			continue
		}
		ns := l.name
		if l.as != "" {
			ns = l.as
		}
		for _, spec := range []string{"cost", "listSize"} {
			local, imported := l.imports[spec]
			if imported {
				n.add(spec, local)
				renamed[spec] = renamed[spec] || local != spec
			}
			switch {
			case spec != l.name:
				n.add(spec, ns+"__"+spec)
			case !imported:
				n.add(spec, ns)
			}
		}
	}
	for _, spec := range []string{"cost", "listSize"} {
		if !renamed[spec] {
			n.add(spec, spec)
		}
	}
	return n, nil
}

// link is one @link directive, read.
type link struct {
	url      string
	identity string // the URL without its version: https://specs.apollo.dev/cost
	name     string // the spec's name: the identity's last segment
	major    int
	minor    int
	version  bool // the URL ends in a version vMAJOR.MINOR
	as       string
	imports  map[string]string // a directive's name in the spec → its name here
}

func parseLink(d *ast.Directive) (link, error) {
	var l link
	if a := d.Arguments.ForName("url"); a != nil && a.Value != nil {
		l.url = a.Value.Raw
	}
	if a := d.Arguments.ForName("as"); a != nil && a.Value != nil && a.Value.Kind == ast.StringValue {
		l.as = strings.TrimPrefix(a.Value.Raw, "@")
	}
	if u, err := url.Parse(l.url); err == nil {
		segs := strings.Split(strings.Trim(u.Path, "/"), "/")
		last := segs[len(segs)-1]
		if major, minor, ok := parseVersion(last); ok && len(segs) > 1 {
			l.major, l.minor, l.version = major, minor, true
			segs = segs[:len(segs)-1]
		}
		l.name = segs[len(segs)-1]
		l.identity = u.Scheme + "://" + u.Host + "/" + strings.Join(segs, "/")
	}
	if a := d.Arguments.ForName("import"); a != nil && a.Value != nil {
		var err error
		if l.imports, err = readImports(a.Value, l.url); err != nil {
			return l, err
		}
	}
	return l, nil
}

// readImports reads a link's import: list, keeping the directives: "@cost"
// or {name: "@cost", as: "@renamedCost"}.
func readImports(v *ast.Value, linkURL string) (map[string]string, error) {
	elems := []*ast.Value{v}
	if v.Kind == ast.ListValue {
		elems = elems[:0]
		for _, ch := range v.Children {
			elems = append(elems, ch.Value)
		}
	}
	out := map[string]string{}
	for _, e := range elems {
		var name, as string
		switch e.Kind {
		case ast.StringValue:
			name = e.Raw
		case ast.ObjectValue:
			for _, ch := range e.Children {
				switch ch.Name {
				case "name":
					name = ch.Value.Raw
				case "as":
					as = ch.Value.Raw
				}
			}
		case ast.NullValue:
			continue
		default:
			return nil, fmt.Errorf("%w: schema @link(url: %q): import %s is neither a name nor {name:, as:}", ErrInvalidSchema, linkURL, e.String())
		}
		if !strings.HasPrefix(name, "@") {
			continue // a type
		}
		if as == "" {
			as = name
		}
		out[strings.TrimPrefix(name, "@")] = strings.TrimPrefix(as, "@")
	}
	return out, nil
}

func parseVersion(s string) (major, minor int, ok bool) {
	v, found := strings.CutPrefix(s, "v")
	ma, mi, dot := strings.Cut(v, ".")
	if !found || !dot {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(ma)
	minor, err2 := strconv.Atoi(mi)
	return major, minor, err1 == nil && err2 == nil
}

// readable reports whether the cost directives of the link's spec are
// ones this library reads: the cost spec v0.1, federation v2.9 and later.
func (l link) readable() bool {
	switch l.identity {
	case costSpec:
		return l.version && l.major == 0 && l.minor == 1
	case federationSpec:
		return l.version && l.major == 2 && l.minor >= 9
	}
	return false
}

// check refuses a link that uses cost directives this library cannot
// read.
func (l link) check() error {
	if l.readable() {
		return nil
	}
	version := "no version"
	if l.version {
		version = fmt.Sprintf("v%d.%d", l.major, l.minor)
	}
	switch {
	case l.identity == costSpec || l.name == "cost":
		return fmt.Errorf("this library reads the cost directives of %s/v0.1 only, not %s at %s", costSpec, l.identity, version)
	case l.identity == federationSpec:
		for _, spec := range []string{"cost", "listSize"} {
			if _, ok := l.imports[spec]; ok {
				return fmt.Errorf("federation %s has no @%s this library can read (federation v2.9 added it)", version, spec)
			}
		}
		return nil
	}
	for spec, local := range l.imports {
		if local == "cost" || local == "listSize" {
			return fmt.Errorf("imports @%s as @%s, a directive this library cannot read", spec, local)
		}
	}
	return nil
}
