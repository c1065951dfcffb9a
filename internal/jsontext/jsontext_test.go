package jsontext

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
)

// validCases are documents at the edges of the grammar, each checked
// against encoding/json.Valid rather than a hand-written expectation.
var validCases = []string{
	``, ` `, `{}`, `[]`, ` { } `, `[ ]`, `{"a":1}`, `{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":}`, `{1:2}`,
	`[1,]`, `[,1]`, `[1 2]`, `[1,2]`, `{"a":[1,{"b":null}],"c":"d"}`, `{"a":1}}`, `[[]`, `[]]`, `{]`, `[}`,
	`"abc"`, `"ab`, `"a\"b"`, `"a\\"`, `"a\/b"`, `"\b\f\n\r\t"`, `"\u00e9"`, `"\u00g9"`, `"\u00e"`, `"\x"`, "\"a\x01b\"",
	"\"\xff\xfe\"", "\"é\"", `"\uD83D\uDE00"`, `"\uD83D"`,
	`0`, `-0`, `-`, `01`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `-1.5e10`, `- 1`, `1 2`, `+1`, `0x1`, `1.5.5`,
	`true`, `tru`, `truex`, `false`, `null`, `nul`, `nullnull`, `True`,
	"\t\n\r {\"a\"\t:\n1\r}\t", "\v{}", "{}\x00",
	strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100),
	strings.Repeat(`[{"a":`, 80) + "1" + strings.Repeat("}]", 80),
	strings.Repeat(`[{"a":`, 80) + "1" + strings.Repeat("]}", 80),
	`{"query":"{ user(login: \"octocat\") { login } }","variables":{"n":5}}`,
}

func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, c := range validCases {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%.60q) = %v, encoding/json says %v", c, got, want)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

func TestPlainEnd(t *testing.T) {
	for _, c := range []struct {
		in   string
		from int
		want int
	}{
		{"", 0, 0},
		{"abc", 0, 3},
		{`ab"c`, 0, 2},
		{`abcdefghijkl\mn`, 0, 12},
		{"abcdefgh\x1fij", 0, 8},
		{"abcdefgh\x1fij", 9, 11},
		{"\xff\xfe\x80abcdefgh\"", 0, 11},
		{`"`, 0, 0},
		{`abcdefgh"`, 3, 8},
		{`abcdefghijklmnopqrs"`, 0, 19},
		{`abcdefghijklmnopabcdefg\`, 0, 23},
		{"abcdefghijk\x00mnopqrstuvwxyz", 0, 11},
		{strings.Repeat("é", 40) + `"`, 0, 80},
	} {
		if got := PlainEnd([]byte(c.in), c.from); got != c.want {
			t.Errorf("PlainEnd(%q, %d) = %d, want %d", c.in, c.from, got, c.want)
		}
	}
}

// BenchmarkPlainEnd finds the end of strings of a typical response: short
// keys and titles.
//
//	go test ./internal/jsontext -run '^$' -bench PlainEnd
func BenchmarkPlainEnd(b *testing.B) {
	for _, s := range []string{`title"`, `issues"`, `Fix the flaky test in CI"`, `An issue title of some forty characters"`} {
		in := []byte(s)
		b.Run(strconv.Itoa(len(s)-1), func(b *testing.B) {
			for b.Loop() {
				if PlainEnd(in, 0) != len(in)-1 {
					b.Fatal("wrong end")
				}
			}
		})
	}
}

// BenchmarkValid compares Valid with encoding/json.Valid, its peer, on a
// GraphQL request body and on a body of 10,000 variable values.
//
//	go test ./internal/jsontext -run '^$' -bench Valid -benchmem
func BenchmarkValid(b *testing.B) {
	var vars strings.Builder
	vars.WriteString(`{"query":"query($ids: [ID!]!) { nodes(ids: $ids) { id } }","variables":{"ids":[`)
	for i := range 10_000 {
		if i > 0 {
			vars.WriteByte(',')
		}
		vars.WriteString(`"MDQ6VXNlcjU4MzIzMQ=="`)
	}
	vars.WriteString("]}}")
	for _, c := range []struct{ name, body string }{
		{"request", `{"query":"{ user(login: \"octocat\") { repos(first: 10) { issues(first: 5) { title } } } }"}`},
		{"10k-values", vars.String()},
	} {
		body := []byte(c.body)
		b.Run(c.name+"/jsontext", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if !Valid(body) {
					b.Fatal("invalid")
				}
			}
		})
		b.Run(c.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if !json.Valid(body) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// membersCases are objects whose members Members must find as
// encoding/json decodes them.
var membersCases = []string{
	`{}`, ` { "a" : 1 } `, `{"a":1,"b":"x","a":[1,{"c":null}]}`, `{"q\"x":{"y":[[[]]]}}`, `{"\u0061":{}}`,
	`{"variables":{"a":[1,2,3],"b":{"c":{"d":1}}},"query":"{ x }"}`, `[1]`, `"a"`, `{"a":1`, `{"a":1}x`,
}

func FuzzMembers(f *testing.F) {
	for _, c := range append(membersCases, validCases...) {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, status := Members(b, nil, Limits{})
		valid := json.Valid(b)
		isObject := valid && bytes.TrimLeft(b, " \t\r\n")[0] == '{'
		switch {
		case !valid:
			if status != Invalid {
				t.Fatalf("Members(%q): %v, encoding/json says invalid", b, status)
			}
			return
		case !isObject:
			if status != NotObject {
				t.Fatalf("Members(%q): %v, want NotObject", b, status)
			}
			return
		case status != Object:
			t.Fatalf("Members(%q): %v, want Object", b, status)
		}
		want := decodedMembers(t, b)
		if len(got) != len(want) {
			t.Fatalf("Members(%q): %d members, encoding/json reads %d", b, len(got), len(want))
		}
		for i, m := range got {
			w := want[i]
			if string(m.Key()) != w.name || string(b[m.Start:m.End]) != string(w.raw) || b[m.KeyStart] != '"' {
				t.Fatalf("Members(%q)[%d] = %q: %q, want %q: %q", b, i, m.Key(), b[m.Start:m.End], w.name, w.raw)
			}
			if values, depth := countTokens(t, w.raw); m.Values != values || m.Depth != depth {
				t.Fatalf("Members(%q)[%d]: %d values %d deep, want %d and %d", b, i, m.Values, m.Depth, values, depth)
			}
		}
		checkKept(t, b, got)
	})
}

// checkKept holds Members with a Keep and a MaxMembers against all, the
// members of the valid object b that Members returned without them.
func checkKept(t *testing.T, b []byte, all []Member) {
	evenLength := func(name []byte) bool { return len(name)%2 == 0 }
	got, status := Members(b, nil, Limits{Keep: evenLength, MaxMembers: 3})
	var kept []Member
	for _, m := range all {
		if evenLength(m.Name) {
			kept = append(kept, m)
		}
	}
	wantStatus := Object
	if len(kept) > 3 {
		kept, wantStatus = kept[:3], TooManyMembers
	}
	if status != wantStatus || len(got) != len(kept) {
		t.Fatalf("Members(%q) keeping even names, at most 3: %v with %d, want %v with %d", b, status, len(got), wantStatus, len(kept))
	}
	for i := range got {
		g, k := got[i], kept[i]
		if string(g.Name) != string(k.Name) || g.KeyStart != k.KeyStart || g.Start != k.Start || g.End != k.End {
			t.Fatalf("Members(%q) keeping even names: [%d] = %+v, want %+v", b, i, g, k)
		}
	}
}

type decodedMember struct {
	name string
	raw  json.RawMessage
}

// decodedMembers reads the members of the object b in order, by
// encoding/json's tokens.
func decodedMembers(t *testing.T, b []byte) []decodedMember {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var out []decodedMember
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		out = append(out, decodedMember{name: tok.(string), raw: raw})
	}
	return out
}

// countTokens counts the values of raw as written (a duplicated name's
// too), itself included, and how deep its containers nest, from
// encoding/json's tokens.
func countTokens(t *testing.T, raw []byte) (values, deepest int) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var inObject []bool // of the open containers
	wantKey := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return values, deepest
		}
		if err != nil {
			t.Fatal(err)
		}
		if wantKey {
			wantKey = false // a name: not a value
			continue
		}
		switch tok {
		case json.Delim('}'), json.Delim(']'):
			inObject = inObject[:len(inObject)-1]
		case json.Delim('{'), json.Delim('['):
			values++
			inObject = append(inObject, tok == json.Delim('{'))
			deepest = max(deepest, len(inObject))
		default:
			values++
		}
		wantKey = len(inObject) > 0 && inObject[len(inObject)-1] && dec.More()
	}
}

func TestMembersLimits(t *testing.T) {
	body := []byte(`{"query":"{ a b c }","variables":{"x":[1,2,3]},"extensions":{"e":[[[1]]]},"other":[1,2,3,4,5,6,7,8,9]}`)
	counted := [][]byte{[]byte("variables"), []byte("extensions")}
	for _, c := range []struct {
		lim     Limits
		status  Status
		members int // returned; the last is where the walk stopped
	}{
		{Limits{Count: counted}, Object, 4},
		{Limits{Count: counted, MaxValues: 10, MaxDepth: 4}, Object, 4}, // 5 + 5 values; 4 deep
		{Limits{Count: counted, MaxValues: 9}, TooMany, 3},
		{Limits{Count: counted, MaxValues: 4}, TooMany, 2},
		{Limits{Count: counted, MaxDepth: 3}, TooDeep, 3},
		{Limits{MaxValues: 11}, TooMany, 4}, // every member counted: the query's 1 too
	} {
		got, status := Members(body, nil, c.lim)
		if status != c.status || len(got) != c.members {
			t.Errorf("%+v: %v with %d members, want %v with %d", c.lim, status, len(got), c.status, c.members)
		}
	}
	keepVars := func(name []byte) bool { return string(name) != "other" }
	if got, status := Members(body, nil, Limits{Keep: keepVars, Count: counted}); status != Object || len(got) != 3 {
		t.Errorf("keeping all but other: %v with %d members, want all 3 others", status, len(got))
	}
	if got, status := Members(body, nil, Limits{Keep: keepVars, MaxMembers: 2}); status != TooManyMembers || len(got) != 2 {
		t.Errorf("keeping at most 2: %v with %d members, want TooManyMembers with 2", status, len(got))
	}
	repeated := []byte(`{` + strings.Repeat(`"junk":1,`, 1000) + `"query":"{ a }"}`)
	if got, status := Members(repeated, nil, Limits{Keep: func(name []byte) bool { return string(name) == "query" }}); status != Object || len(got) != 1 {
		t.Errorf("a thousand junk members skipped: %v with %d members, want the query alone", status, len(got))
	}
	got, _ := Members(body, nil, Limits{Count: counted})
	if v, e := got[1], got[2]; v.Values != 5 || v.Depth != 2 || e.Values != 5 || e.Depth != 4 || got[0].Values != 0 {
		t.Errorf("counts %+v %+v %+v", got[0], v, e)
	}
}

// BenchmarkMembers walks a GraphQL request body once for its members,
// against Valid alone on the same body.
//
//	go test ./internal/jsontext -run '^$' -bench Members -benchmem
func BenchmarkMembers(b *testing.B) {
	body := []byte(`{"query":"query($login: String!) { user(login: $login) { repos(first: 10) { name issues(first: 5) { title } } } }","variables":{"login":"octocat"}}`)
	lim := Limits{Count: [][]byte{[]byte("variables"), []byte("extensions")}, MaxValues: 10_000, MaxDepth: 16}
	var buf [4]Member
	b.Run("members", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, s := Members(body, buf[:0], lim); s != Object {
				b.Fatal(s)
			}
		}
	})
	b.Run("valid", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if !Valid(body) {
				b.Fatal("invalid")
			}
		}
	})
}
