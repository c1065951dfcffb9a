package middleware

import (
	"encoding/json"
	"testing"
)

func TestSelectedOperation(t *testing.T) {
	for _, tc := range []struct {
		query, name, want string
	}{
		{`{ a }`, "", "query"},
		{`query { a }`, "", "query"},
		{`mutation M($a: In = {x: 1}) @d(v: {y: 2}) { a }`, "", "mutation"},
		{`mutation M { a }`, "M", "mutation"},
		{`subscription { a }`, "", "subscription"},
		{`fragment F on Mutation { a } mutation { ...F }`, "", "mutation"},
		{`query Q { a } mutation M { b }`, "M", "mutation"},
		{`query Q { a } mutation M { b }`, "Q", "query"},
		{`query Q { a } mutation M { b }`, "", ""},
		{`query Q { a } mutation M { b }`, "X", ""},
		{`query mutation { a }`, "mutation", "query"},
		{`mutation query { a }`, "", "mutation"},
		{`{ a(s: "mutation { b }") }`, "", "query"},
		{`mutation { a`, "", "mutation"},
		{`"unterminated`, "", ""},
	} {
		if got := selectedOperation(tc.query, tc.name); got != tc.want {
			t.Errorf("selectedOperation(%q, %q) = %q, want %q", tc.query, tc.name, got, tc.want)
		}
	}
}

// jsonString decodes what encoding/json decodes, with or without escapes.
func TestJSONString(t *testing.T) {
	for _, s := range []string{"", "{ viewer { login } }", `a "quoted" word`, "tab\tand\nnewline", `back\slash`, "ünïcødé ✓", "\u2028", "</script>"} {
		v, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonString(v); got != s {
			t.Errorf("jsonString(%s) = %q, want %q", v, got, s)
		}
	}
}
