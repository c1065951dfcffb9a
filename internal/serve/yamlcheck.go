package serve

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/costguard/costguard/identity"
)

// durationForm is how every duration error says what to write.
const durationForm = "a Go duration with a unit, such as 1h or 90s"

var (
	// plainKey is a map key that reads well after a dot: plans.anon.
	plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	// yaml.v3's errors, which name a line and a Go type but no key.
	unknownField    = regexp.MustCompile(`^line (\d+): field (.+) not found in type \S+$`)
	cannotUnmarshal = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (\\S+)$")
)

// decodeStrict decodes data over cfg, doc being its parsed document: the
// keys are the yaml tags of cfg's types (the library's own), an unknown
// key is refused, and so is a value of the wrong shape or a count that is
// not a whole number, each named by its line and key path (plans.anon.per).
// What the values mean is for the library to judge.
func decodeStrict(data []byte, doc *yaml.Node, cfg *config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > 0 {
			return explain(doc, te.Errors[0])
		}
		return err
	}
	return wholeNumbers(doc, cfg)
}

// explain names the key of one of yaml.v3's errors, found in doc by its
// line and the value it quotes.
func explain(doc *yaml.Node, msg string) error {
	if m := unknownField.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		for _, e := range entries(doc) {
			if e.key != nil && e.key.Line == line && e.key.Value == m[2] {
				return fmt.Errorf("line %d: %s: unknown key", line, e.path)
			}
		}
	} else if m := cannotUnmarshal.FindStringSubmatch(msg); m != nil {
		// The deepest value of the line with the tag and the text quoted
		// (which yaml.v3 cuts after a few characters).
		line, _ := strconv.Atoi(m[1])
		text, cut := strings.CutSuffix(m[3], "...")
		var found *entry
		for _, e := range entries(doc) {
			n := e.value
			if n.Line != line || n.ShortTag() != "!!"+m[2] || !(n.Value == text || cut && strings.HasPrefix(n.Value, text)) {
				continue
			}
			if found == nil || strings.HasPrefix(e.path, found.path) {
				found = &e
			}
		}
		if found != nil {
			return fmt.Errorf("line %d: %s: %s is not %s", line, found.path, describe(found.value), expected(m[4], found.value))
		}
	}
	return errors.New(msg)
}

// The names the YAML decoder gives this package's types, which follow the
// package's name: a secret is written as a string, every other one (a
// section) as a mapping.
var (
	secretType = reflect.TypeFor[secret]().String()
	ownTypesOf = strings.TrimSuffix(reflect.TypeFor[config]().String(), "config")
)

// expected says what a value of the Go type named typ is written as,
// where n cannot be one.
func expected(typ string, n *yaml.Node) string {
	switch {
	case typ == "string" || typ == secretType:
		return "a string"
	case strings.HasPrefix(typ, ownTypesOf):
		return "a mapping"
	case n.Kind != yaml.ScalarNode && !strings.HasPrefix(typ, "[]") && !strings.HasPrefix(typ, "map[") && strings.Contains(typ, "."):
		// A name the library gives a string (budget.Mode), or a section.
		return "a " + typ
	case typ == "time.Duration":
		return "a duration; write " + durationForm
	case typ == "bool":
		return "true or false"
	case strings.HasPrefix(typ, "int"):
		return "a whole number"
	case strings.HasPrefix(typ, "float"):
		return "a number"
	case strings.HasPrefix(typ, "[]"):
		return "a list; write [a, b]"
	}
	return "a mapping"
}

// wholeNumbers refuses a count written with a fraction (burst: 1.5), which
// yaml.v3 would truncate: cfg, decoded from doc, is encoded again, and a
// number the file writes with a fraction must come back as written.
func wholeNumbers(doc *yaml.Node, cfg *config) error {
	var again yaml.Node
	if err := again.Encode(cfg); err != nil {
		return err
	}
	decoded := make(map[string]*yaml.Node)
	for _, e := range entries(&again) {
		decoded[e.path] = e.value
	}
	for _, e := range entries(doc) {
		n := e.value
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!float" {
			continue
		}
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil && f == math.Trunc(f) {
			continue
		}
		if d := decoded[e.path]; d != nil && d.ShortTag() == "!!int" {
			return fmt.Errorf("line %d: %s: %s is not a whole number", n.Line, e.path, n.Value)
		}
	}
	return nil
}

// entry is a value of a document at its key path, with its key node (nil
// for a list item).
type entry struct {
	path       string
	key, value *yaml.Node
}

// entries lists every value of doc (a document, or its top-level mapping)
// depth first, in the file's order.
func entries(doc *yaml.Node) []entry {
	var out []entry
	var walk func(path string, n *yaml.Node)
	walk = func(path string, n *yaml.Node) {
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := mapPath(path, k.Value)
				out = append(out, entry{path: p, key: k, value: v})
				walk(p, v)
			}
		case yaml.SequenceNode:
			for i, v := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				out = append(out, entry{path: p, value: v})
				walk(p, v)
			}
		}
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		doc = doc.Content[0]
	}
	walk("", doc)
	return out
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

// locate names the key at path (a budget.ConfigError's) as the messages
// of decodeStrict do, lanes[0].queue, and finds its line in doc: that of
// the deepest key of path the file writes (0 when doc is nil).
func locate(doc *yaml.Node, path []string) (key string, line int) {
	var n *yaml.Node
	if doc != nil {
		n = mappingValue(doc, "")
	}
	for _, seg := range path {
		if i, err := strconv.Atoi(seg); err == nil && i >= 0 && (n == nil || n.Kind == yaml.SequenceNode) {
			key = fmt.Sprintf("%s[%d]", key, i)
			if n != nil && i < len(n.Content) {
				n = n.Content[i]
				line = n.Line
			} else {
				n = nil
			}
			continue
		}
		key = mapPath(key, seg)
		if n == nil || n.Kind != yaml.MappingNode {
			n = nil
			continue
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == seg {
				line, next = n.Content[i].Line, n.Content[i+1]
				break
			}
		}
		n = next
	}
	return key, line
}
