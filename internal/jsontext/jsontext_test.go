package jsontext

import (
	"encoding/json"
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
