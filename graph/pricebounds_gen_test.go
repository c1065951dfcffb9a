package graph_test

import (
	"encoding/json"
	"fmt"
	"strings"
)

// opGen turns fuzz bytes into a valid operation over the example schema and
// the JSON variables sent with it. Every choice reads one byte; once the
// bytes run out every choice reads 0, which always means the smallest
// option, so any input gives a finite operation. Most operations it writes
// pass validation; the few that do not (a merged field with two sets of
// arguments, a variable shape gqlgen refuses) are skipped by the harness.
type opGen struct {
	in      []byte
	vars    []string // declarations: "$v1: Int = 3"
	values  []string // the JSON members sent: `"v1": "1000000"`
	frags   []string // fragment definitions
	nVar    int
	nFrag   int
	nAlias  int
	maxNest int
}

// maxGenDepth bounds the nesting of generated fields.
const maxGenDepth = 6

// generate returns the query and the variables JSON ("" for none).
func generate(recipe []byte) (query, variables string) {
	g := &opGen{in: recipe, maxNest: maxGenDepth}
	var body, head string
	if g.pick(16) == 15 {
		head, body = "mutation", g.mutationSelection()
	} else {
		head, body = "query", g.selection("Query", 1, nil)
	}
	if g.flag() {
		head += " Op"
	}
	if len(g.vars) > 0 {
		head += "(" + strings.Join(g.vars, ", ") + ")"
	}
	query = head + " " + body
	for _, f := range g.frags {
		query += "\n" + f
	}
	if len(g.values) > 0 || g.flag() {
		variables = "{" + strings.Join(g.values, ", ") + "}"
	}
	return query, variables
}

func (g *opGen) byte() byte {
	if len(g.in) == 0 {
		return 0
	}
	b := g.in[0]
	g.in = g.in[1:]
	return b
}

// pick returns a choice in [0, n).
func (g *opGen) pick(n int) int { return int(g.byte()) % n }

// flag is a yes/no choice; no when the input is exhausted.
func (g *opGen) flag() bool { return g.byte()&1 == 1 }

func (g *opGen) oneOf(xs ...string) string { return xs[g.pick(len(xs))] }

// The seeded values arguments draw from: some match, some do not.
var (
	genLogins  = []string{"octocat", "alice", "bob", "carol", "nobody"}
	genRepos   = []string{"hello-world", "linguist", "wonderland", "build-tools", "nothing"}
	genIDs     = []string{"U_octocat", "R_hello-world", "I_3", "U_carol", "R_spoon-knife", "I_14", "nope"}
	genQueries = []string{"", "o", "e", "wonder", "flaky", "zzz", "R"}
)

// variable declares a new variable and records the JSON value sent for it
// (none when value is "").
func (g *opGen) variable(typ, value string) string {
	g.nVar++
	name := fmt.Sprintf("v%d", g.nVar)
	g.vars = append(g.vars, "$"+name+": "+typ)
	if value != "" {
		g.values = append(g.values, fmt.Sprintf("%q: %s", name, value))
	}
	return "$" + name
}

// stringArg is a String! or ID! argument: a literal or a variable.
func (g *opGen) stringArg(typ string, choices []string) string {
	v := choices[g.pick(len(choices))]
	q, _ := json.Marshal(v)
	if !g.flag() {
		return string(q)
	}
	if typ == "ID!" && g.pick(4) == 3 {
		return g.variable(typ, "17") // an ID sent as a number; coerced, matches nothing
	}
	return g.variable(typ, string(q))
}

// The sizes slicing arguments take: around the seeded list lengths (at most
// 4 repositories, 3 issues, 3 followers, 25 search results), the default
// list size 10, the example server's breadth cap 100, and far beyond.
var genSizes = []int64{0, 1, 2, 3, 4, 5, 9, 10, 11, 24, 25, 26, 100, 101, 1000000, 1 << 40}

func (g *opGen) size() int64 {
	if g.flag() {
		return int64(g.pick(13))
	}
	return genSizes[g.pick(len(genSizes))]
}

// sliceArg is the value of a first or last argument of type Int (Int! when
// nonNull): a literal, null, or a variable sent in one of the JSON shapes
// gqlgen's POST transport accepts or refuses.
func (g *opGen) sliceArg(nonNull bool) string {
	n := g.size()
	switch g.pick(4) {
	case 0, 1:
		return fmt.Sprint(n)
	case 2:
		if !nonNull {
			return "null"
		}
		return fmt.Sprint(n)
	}
	typ := "Int"
	if nonNull || g.flag() {
		typ = "Int!"
	}
	if g.pick(4) == 3 {
		typ = fmt.Sprintf("Int = %d", g.size()) // a default, sent or not
	}
	var value string
	switch g.pick(12) {
	case 0, 1, 2: // a JSON number: a json.Number, coerced to int64
		value = fmt.Sprint(n)
	case 3, 4: // a numeric string: gqlgen accepts it for Int
		value = fmt.Sprintf("%q", fmt.Sprint(n))
	case 5: // a signed or zero-padded numeric string, also accepted
		value = fmt.Sprintf("%q", g.oneOf("+", "0", "-")+fmt.Sprint(n))
	case 6: // null
		value = "null"
	case 7: // absent: the default if any, else no argument
		value = ""
	case 8: // a negative number
		value = fmt.Sprint(-n - 1)
	case 9: // a float, fractional or whole: refused for Int
		value = g.oneOf(fmt.Sprintf("%d.0", n), fmt.Sprintf("%d.5", n), fmt.Sprintf("%de0", n))
	case 10: // a list holding one number, or a fractional string: refused
		value = g.oneOf(fmt.Sprintf("[%d]", n), fmt.Sprintf("%q", fmt.Sprintf("%d.5", n)))
	default: // a number beyond int64
		value = "92233720368547758080"
	}
	return g.variable(typ, value)
}

// The numbers of ids nodes is asked for: none, around the seeded objects
// (4 users, 9 repositories, 14 issues), the default list size 10, the
// example server's breadth cap and nodes' own cap (100), and beyond.
var genIDCounts = []int{0, 1, 2, 3, 5, 9, 10, 11, 14, 15, 25, 99, 100, 101, 150}

// idValues writes n ids as GraphQL string literals (JSON strings too):
// drawn one by one (seeded, unknown, repeated), every issue ID in turn (the
// seeded ones, then unknown ones), or one id repeated.
func (g *opGen) idValues() []string {
	ids := make([]string, genIDCounts[g.pick(len(genIDCounts))])
	switch g.pick(3) {
	case 0:
		for i := range ids {
			ids[i] = genIDs[g.pick(len(genIDs))]
		}
	case 1:
		for i := range ids {
			ids[i] = fmt.Sprintf("I_%d", i+1)
		}
	default:
		id := genIDs[g.pick(len(genIDs))]
		for i := range ids {
			ids[i] = id
		}
	}
	for i, id := range ids {
		q, _ := json.Marshal(id)
		ids[i] = string(q)
	}
	return ids
}

// idsArg is the value of nodes' ids argument ([ID!]!): a list literal, one
// id not in a list (input coercion makes it a list of one), a list literal
// with a variable among its elements, or a variable of list type sent as a
// JSON list, as one string, with numbers, or not at all (its default).
func (g *opGen) idsArg() string {
	ids := g.idValues()
	list := "[" + strings.Join(ids, ", ") + "]"
	single := `"U_alice"`
	if len(ids) > 0 {
		single = ids[0]
	}
	switch g.pick(6) {
	case 0, 1:
		return list
	case 2:
		return single
	case 3:
		return "[" + strings.Join(append(ids, g.variable("ID!", single)), ", ") + "]"
	}
	typ := "[ID!]!"
	if g.pick(4) == 3 {
		typ = "[ID!] = " + list // a nullable variable with a default, sent or not
	}
	var value string
	switch g.pick(6) {
	case 0, 1, 2:
		value = list
	case 3: // one string: coerced to a list of one
		value = single
	case 4: // absent: the default if any, else refused
		value = ""
	default: // numbers are IDs too
		value = "[" + strings.Join(append([]string{"17", "3"}, ids...), ", ") + "]"
	}
	return g.variable(typ, value)
}

// limitArg writes the optional limit argument of recentIssues: absent (its
// schema default, 5), or any value a first may take.
func (g *opGen) limitArg() string {
	if g.pick(3) == 0 {
		return ""
	}
	return "(limit: " + g.sliceArg(false) + ")"
}

// firstLast writes the optional first/last arguments of repos and issues.
func (g *opGen) firstLast() string {
	var args []string
	switch g.pick(4) {
	case 1:
		args = append(args, "first: "+g.sliceArg(false))
	case 2:
		args = append(args, "last: "+g.sliceArg(false))
	case 3:
		args = append(args, "first: "+g.sliceArg(false), "last: "+g.sliceArg(false))
	}
	if len(args) == 0 {
		return ""
	}
	return "(" + strings.Join(args, ", ") + ")"
}

// directives sometimes adds @skip or @include, with a literal or a variable.
func (g *opGen) directives() string {
	if g.pick(6) != 5 {
		return ""
	}
	name := g.oneOf("skip", "include")
	var cond string
	switch g.pick(4) {
	case 0:
		cond = "true"
	case 1:
		cond = "false"
	case 2:
		cond = g.variable("Boolean!", g.oneOf("true", "false"))
	default: // nullable with a default: sent, null (refused by gqlgen) or absent
		cond = g.variable("Boolean = "+g.oneOf("true", "false"), g.oneOf("true", "false", "", "null"))
	}
	return fmt.Sprintf(" @%s(if: %s)", name, cond)
}

// key returns an alias prefix ("x: ") or "". Keys already used in this
// selection set get a fresh alias, so most fields merge validly; shared
// keys ("x", "y") across type conditions put different fields of different
// members at one response path.
func (g *opGen) key(name string, used map[string]bool) string {
	k := ""
	switch g.pick(8) {
	case 5, 6:
		g.nAlias++
		k = fmt.Sprintf("a%d", g.nAlias)
	case 7:
		// "__typename" too: an alias there on one member may claim to be
		// another, which ActualCost must not believe.
		k = g.oneOf("x", "y", "__typename")
	}
	resp := k
	if resp == "" {
		resp = name
	}
	if used[resp] {
		g.nAlias++
		k = fmt.Sprintf("a%d", g.nAlias)
		resp = k
	}
	used[resp] = true
	if k == "" {
		return ""
	}
	return k + ": "
}

// The fields of each type: name, arguments writer, result type ("" for a
// leaf).
type genField struct {
	name string
	args func(g *opGen) string
	typ  string
}

var genFields = map[string][]genField{
	"Query": {
		{"user", func(g *opGen) string { return "(login: " + g.stringArg("String!", genLogins) + ")" }, "User"},
		{"repository", func(g *opGen) string { return "(name: " + g.stringArg("String!", genRepos) + ")" }, "Repository"},
		{"node", func(g *opGen) string { return "(id: " + g.stringArg("ID!", genIDs) + ")" }, "Node"},
		{"search", func(g *opGen) string {
			q := "query: " + g.stringArg("String!", genQueries)
			if g.pick(8) == 7 { // no first: SLICING_ARGUMENT_REQUIRED
				return "(" + q + ")"
			}
			return "(" + q + ", first: " + g.sliceArg(false) + ")"
		}, "SearchResult"},
		{"nodes", func(g *opGen) string { return "(ids: " + g.idsArg() + ")" }, "Node"},
		{"__typename", nil, ""},
	},
	"User": {
		{"login", nil, ""},
		{"id", nil, ""},
		{"name", nil, ""},
		{"repos", (*opGen).firstLast, "Repository"},
		{"followers", func(g *opGen) string { return "(first: " + g.sliceArg(true) + ")" }, "UserConnection"},
		{"recommendations", nil, "Repository"},
		{"recentIssues", (*opGen).limitArg, "Issue"},
		{"__typename", nil, ""},
	},
	"Repository": {
		{"name", nil, ""},
		{"id", nil, ""},
		{"topics", nil, ""},
		{"issues", (*opGen).firstLast, "Issue"},
		{"owner", nil, "User"},
		{"__typename", nil, ""},
	},
	"Issue": {
		{"title", nil, ""},
		{"id", nil, ""},
		{"body", nil, ""},
		{"bodyHTML", nil, ""},
		{"__typename", nil, ""},
	},
	"UserConnection": {
		{"nodes", nil, "User"},
		{"totalCount", nil, ""},
	},
	"Node":         {{"id", nil, ""}, {"__typename", nil, ""}},
	"SearchResult": {{"__typename", nil, ""}},
}

// members are the type conditions a fragment inside a selection of typ may
// carry: typ itself, and for abstract types their members and the other
// abstract type they overlap with.
var genConditions = map[string][]string{
	"Query":          {"Query"},
	"User":           {"User", "Node"},
	"Repository":     {"Repository", "Node"},
	"Issue":          {"Issue", "Node"},
	"UserConnection": {"UserConnection"},
	"Node":           {"User", "Repository", "Issue", "Node", "SearchResult"},
	"SearchResult":   {"User", "Repository", "Issue", "SearchResult", "Node"},
}

var genAbstract = map[string]bool{"Node": true, "SearchResult": true}

// selection writes a selection set on typ at depth (root fields at 1).
// used tracks the response keys of the enclosing set, shared with the
// fragments written into it, so keys rarely clash.
func (g *opGen) selection(typ string, depth int, used map[string]bool) string {
	if used == nil {
		used = map[string]bool{}
	}
	fields := genFields[typ]
	var items []string
	var last genField // the last field with a selection, and its head
	var lastHead string
	for i := 0; i < 5; i++ {
		if i > 0 && !g.flag() {
			break
		}
		switch c := g.pick(9); {
		case c == 8 && lastHead != "": // the same field again: the executor merges the two
			items = append(items, lastHead+g.directives()+" "+g.selection(last.typ, depth+1, nil))
		case c == 6 && depth < g.maxNest: // an inline fragment
			cond := genConditions[typ][g.pick(len(genConditions[typ]))]
			head := "..."
			if g.flag() || cond != typ {
				head += " on " + cond
			}
			items = append(items, head+g.directives()+" "+g.selection(cond, depth, g.keysFor(typ, cond, used)))
		case c == 7 && depth < g.maxNest: // a named fragment, written once and spread
			cond := genConditions[typ][g.pick(len(genConditions[typ]))]
			g.nFrag++
			name := fmt.Sprintf("F%d", g.nFrag)
			g.frags = append(g.frags, "") // reserve the slot: nested fragments come after
			slot := len(g.frags) - 1
			g.frags[slot] = fmt.Sprintf("fragment %s on %s %s", name, cond, g.selection(cond, depth, g.keysFor(typ, cond, used)))
			items = append(items, "..."+name+g.directives())
		default:
			f := fields[g.pick(len(fields))]
			if f.typ != "" && depth >= g.maxNest {
				f = fields[len(fields)-1] // every type's last field is a leaf: stop here
			}
			item := g.key(f.name, used) + f.name
			if f.args != nil {
				item += f.args(g)
			}
			if f.typ != "" {
				last, lastHead = f, item
			}
			item += g.directives()
			if f.typ != "" {
				item += " " + g.selection(f.typ, depth+1, nil)
			}
			items = append(items, item)
		}
	}
	return "{ " + strings.Join(items, " ") + " }"
}

// keysFor returns the response keys a fragment on cond inside a selection
// on typ shares: all of them, unless cond is another concrete type, whose
// fields never merge with its siblings' (different members may reuse a key).
func (g *opGen) keysFor(typ, cond string, used map[string]bool) map[string]bool {
	if cond != typ && !genAbstract[cond] {
		return map[string]bool{}
	}
	return used
}

// mutationSelection opens an issue or two: mutations execute no list, so
// their price must hold no nodes.
func (g *opGen) mutationSelection() string {
	used := map[string]bool{}
	var items []string
	for i := 0; i < 3; i++ {
		if i > 0 && !g.flag() {
			break
		}
		title, _ := json.Marshal(g.oneOf("Bug", "", "Another bug"))
		items = append(items, g.key("createIssue", used)+"createIssue(repo: "+g.stringArg("String!", genRepos)+
			", title: "+string(title)+") "+g.selection("Issue", 2, nil))
	}
	return "{ " + strings.Join(items, " ") + " }"
}
