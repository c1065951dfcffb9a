package main

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/overload"
)

// durationForm is how every duration error says what to write.
const durationForm = "a Go duration with a unit, such as 1h or 90s"

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	// plainKey is a map key that reads well after a dot: plans.anon.
	plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// enums are the string types of the library whose values are names: a
// value outside the list is a mistake of shape, named with its line.
var enums = map[reflect.Type][]string{
	reflect.TypeFor[budget.Mode]():         {string(budget.Enforce), string(budget.Shadow)},
	reflect.TypeFor[budget.FailureMode]():  {string(budget.FailOpen), string(budget.FailClosed)},
	reflect.TypeFor[budget.FieldLimitBy](): {string(budget.ByPrincipal), string(budget.ByIP), string(budget.ByBoth)},
	reflect.TypeFor[budget.LimitAlgorithm](): {string(budget.TokenBucket), string(budget.LeakyBucketPolicing), string(budget.LeakyBucketShaping),
		string(budget.FixedWindow), string(budget.SlidingLog), string(budget.SlidingCounter)},
	reflect.TypeFor[stack.OverLimitCache]():            {string(stack.OverLimitCacheAuto), string(stack.OverLimitCacheOn), string(stack.OverLimitCacheOff)},
	reflect.TypeFor[middleware.TrustedDocumentsMode](): {string(middleware.TrustedEnforce), string(middleware.TrustedAllowUnlisted)},
}

// zero says what an explicit 0 means for one key.
type zero uint8

const (
	// zeroRefused (the rule for every key not in zeros): the library
	// would read 0 as "the default", while in this file 0 is taken
	// literally, so it is refused rather than silently replaced.
	zeroRefused zero = iota
	// zeroAsIs: the library's 0 means what the file's does.
	zeroAsIs
	// zeroNone: the file's 0 means "nothing", middleware.None to the
	// library, whose 0 is a default that is something.
	zeroNone
)

// fieldKey names a key of a section: the struct type and its YAML key.
type fieldKey struct {
	t   reflect.Type
	key string
}

// zeros are the keys where the file may write 0, and what it means there.
var zeros = map[fieldKey]zero{
	{reflect.TypeFor[middleware.GraphQLOptions](), "max_cost"}:               zeroAsIs, // no cap besides the burst
	{reflect.TypeFor[config](), "upload_cost_per_mib"}:                       zeroAsIs,
	{reflect.TypeFor[middleware.Config](), "retry_after_jitter"}:             zeroAsIs,
	{reflect.TypeFor[middleware.Lane](), "queue"}:                            zeroAsIs, // not queued
	{reflect.TypeFor[overload.Config](), "max_queue"}:                        zeroAsIs, // max_in_flight
	{reflect.TypeFor[config](), "demo_latency"}:                              zeroAsIs,
	{reflect.TypeFor[middleware.ConcurrencyOptions](), "per_principal"}:      zeroNone, // no cap (per plan: planConfig.plan)
	{reflect.TypeFor[middleware.SubscriptionOptions](), "max_per_principal"}: zeroNone,
}

// checkDocument walks a parsed YAML document against config, the type it
// decodes into, before it is decoded: yaml.v3's own errors name a line and a
// Go type but no key. Each error here starts with the line and the key path
// (plans.anon.per): an unknown key, a value of the wrong shape, a count
// that is not a whole number or is negative, a duration without a unit, a
// mode or priority the library does not have, a 0 where the library would
// read the default. It rewrites the 0 of a zeroNone key to
// middleware.None, so that the document decodes to what the file says.
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
	if values, ok := enums[t]; ok {
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" || !contains(values, n.Value) {
			return fail("%s is not %s", describe(n), quotedList(values))
		}
		return nil
	}
	if reflect.PointerTo(t).Implements(textUnmarshalerType) && t.Kind() != reflect.Struct {
		// A name (overload.Priority): the library parses it.
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			return fail("%s is not a name", describe(n))
		}
		if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
			return fail("%v", err)
		}
		return nil
	}
	if t == durationType {
		var d time.Duration
		if n.Kind != yaml.ScalarNode || n.Decode(&d) != nil {
			return fail("%s is not a duration; write %s", describe(n), durationForm)
		}
		if d < 0 {
			return fail("%s is negative", describe(n))
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
			key := join(path, k.Value)
			if err := checkNode(key, v, f.typ); err != nil {
				return err
			}
			if err := checkZero(key, v, f.typ, zeros[fieldKey{f.in, k.Value}]); err != nil {
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
			key := mapPath(path, k.Value)
			if kt := t.Key(); kt.Kind() != reflect.String {
				// A key with a name (overload.shed_at's priorities).
				if err := checkNode(key, k, kt); err != nil {
					return err
				}
			}
			if err := checkNode(key, v, t.Elem()); err != nil {
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
	case reflect.Int, reflect.Int64:
		// A whole number: yaml.v3 would truncate 1.5 to 1.
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
			return fail("%s is not a whole number", describe(n))
		}
		var v int64
		if n.Decode(&v) != nil {
			return fail("%s is not a whole number", n.Value)
		}
		if t.Kind() == reflect.Int && v > math.MaxInt32 {
			// An int of the library: the same file works on every
			// platform.
			return fail("%s is more than %d", n.Value, math.MaxInt32)
		}
		if v < 0 {
			return fail("%s is negative", n.Value)
		}
		return nil
	}
	// A scalar: string, bool or float64.
	v := reflect.New(t)
	if n.Kind != yaml.ScalarNode || n.Decode(v.Interface()) != nil {
		want := map[reflect.Kind]string{reflect.Bool: "true or false", reflect.Float64: "a number", reflect.String: "a string"}[t.Kind()]
		return fail("%s is not %s", describe(n), want)
	}
	if f := v.Elem(); f.Kind() == reflect.Float64 && f.Float() < 0 {
		return fail("%s is negative", n.Value)
	}
	return nil
}

// checkZero applies rule to n, the value of type t of the key at path,
// once its shape is checked: a number or duration that is 0 is refused,
// kept, or rewritten to middleware.None.
func checkZero(path string, n *yaml.Node, t reflect.Type, rule zero) error {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Float64: // time.Duration is an int64
	default:
		return nil
	}
	if n.Kind != yaml.ScalarNode || !isZero(n) {
		return nil
	}
	switch rule {
	case zeroAsIs:
	case zeroNone:
		n.Value, n.Tag = strconv.Itoa(middleware.None), "!!int"
	default:
		return fmt.Errorf("line %d: %s: %s is not allowed: the library would take its default; leave the key out for that", n.Line, path, n.Value)
	}
	return nil
}

// isZero reports whether the scalar n is a number, or a duration, that is 0.
func isZero(n *yaml.Node) bool {
	switch n.ShortTag() {
	case "!!int", "!!float":
		var f float64
		return n.Decode(&f) == nil && f == 0
	case "!!str":
		d, err := time.ParseDuration(n.Value)
		return err == nil && d == 0
	}
	return false
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

func contains(values []string, v string) bool {
	for _, s := range values {
		if s == v {
			return true
		}
	}
	return false
}

// quotedList is `"a" or "b"`, `"a", "b" or "c"`.
func quotedList(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = strconv.Quote(v)
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
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

// field is a key of a section: the type of its value, and the struct that
// declares it (an inlined one for the library's keys).
type field struct {
	key     string
	typ, in reflect.Type
}

// fields lists the YAML keys of struct t in declaration order, those of
// inlined structs in their place, as yaml.v3 decodes them.
func fields(t reflect.Type) []field {
	var fs []field
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case opts == "inline":
			fs = append(fs, fields(f.Type)...)
		case name != "" && name != "-" && f.IsExported():
			fs = append(fs, field{key: name, typ: f.Type, in: t})
		}
	}
	return fs
}

// fieldByKey finds the field of struct t whose yaml tag is key.
func fieldByKey(t reflect.Type, key string) (field, bool) {
	for _, f := range fields(t) {
		if f.key == key {
			return f, true
		}
	}
	return field{}, false
}

// fieldNames lists the YAML keys of struct t, in declaration order.
func fieldNames(t reflect.Type) []string {
	var names []string
	for _, f := range fields(t) {
		names = append(names, f.key)
	}
	return names
}

// locate names the key at path (a budget.ConfigError's) as the messages
// of checkDocument do, lanes[0].queue, and finds its line in doc: that of
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
