package main

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/costguard/costguard/identity"
	"go.yaml.in/yaml/v3"
)

// durationForm is how every duration error says what to write.
const durationForm = "a Go duration with a unit, such as 1h or 90s"

var (
	durationType    = reflect.TypeFor[time.Duration]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	// plainKey is a map key that reads well after a dot: plans.anon.
	plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// checkDocument walks a parsed YAML document against config, the type it
// decodes into, before it is decoded: yaml.v3's own errors name a line and a
// Go type but no key. Each error here starts with the line and the key path
// (plans.anon.per): an unknown key, a value of the wrong shape, a count
// that is not a whole number, a duration without a unit.
func checkDocument(doc *yaml.Node) error {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	n := doc.Content[0]
	if n.Kind != yaml.MappingNode && !isNull(n) {
		return fmt.Errorf("line %d: the file must be a mapping of keys such as plans: and graphql:", n.Line)
	}
	return checkNode("", n, reflect.TypeFor[config]())
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// checkNode checks n, found at path, against t.
func checkNode(path string, n *yaml.Node, t reflect.Type) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("line %d: %s: %s", n.Line, path, fmt.Sprintf(format, args...))
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		// The type checks itself (whole, modeName); checking it here
		// puts the line and key path in front of its message.
		if err := reflect.New(t).Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			return fail("%v", err)
		}
		return nil
	}
	switch t {
	case durationType:
		var d time.Duration
		if n.Kind != yaml.ScalarNode || n.Decode(&d) != nil {
			return fail("%s is not a duration; write %s", describe(n), durationForm)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return checkNode(path, n, t.Elem())
	case reflect.Struct:
		if isNull(n) {
			return nil // an empty section keeps its defaults
		}
		if n.Kind != yaml.MappingNode {
			return fail("%s is not a mapping of the keys %s", describe(n), strings.Join(fieldNames(t), ", "))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			f, ok := fieldByKey(t, k.Value)
			if !ok {
				return fmt.Errorf("line %d: %s: unknown key; the keys here are %s",
					k.Line, join(path, k.Value), strings.Join(fieldNames(t), ", "))
			}
			if err := checkNode(join(path, k.Value), v, f.Type); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if isNull(n) {
			return nil
		}
		if n.Kind != yaml.MappingNode {
			return fail("%s is not a mapping", describe(n))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return fail("a key is %s, not a single value", describe(k))
			}
			if err := checkNode(mapPath(path, k.Value), v, t.Elem()); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if isNull(n) {
			return nil
		}
		if n.Kind != yaml.SequenceNode {
			return fail("%s is not a list; write [a, b]", describe(n))
		}
		for i, v := range n.Content {
			if err := checkNode(fmt.Sprintf("%s[%d]", path, i), v, t.Elem()); err != nil {
				return err
			}
		}
		return nil
	}
	// A scalar: string, bool or float64.
	v := reflect.New(t)
	if n.Kind != yaml.ScalarNode || n.Decode(v.Interface()) != nil {
		want := map[reflect.Kind]string{reflect.Bool: "true or false", reflect.Float64: "a number", reflect.String: "a string"}[t.Kind()]
		return fail("%s is not %s", describe(n), want)
	}
	return nil
}

// describe quotes a scalar's value, or names a node's shape.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if n.ShortTag() == "!!str" {
		return fmt.Sprintf("%q", n.Value)
	}
	return n.Value
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapPath names an entry of a map: plans.anon, rest.routes["GET /x"], and
// for API keys, which are secrets, only their SHA-256.
func mapPath(path, key string) string {
	switch {
	case path == "api_keys":
		return fmt.Sprintf("api_keys[SHA-256 %s]", identity.HashAPIKey(key))
	case plainKey.MatchString(key):
		return join(path, key)
	}
	return fmt.Sprintf("%s[%q]", path, key)
}

// fieldByKey finds the field of struct t whose yaml tag is key.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key && name != "" && name != "-" {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// fieldNames lists the YAML keys of struct t, in declaration order.
func fieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}
