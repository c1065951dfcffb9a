package complexity_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/costguard/costguard/complexity"
)

func TestCheckDocumentCounts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		query      string
		selections int
	}{
		{"one field", `{ a }`, 1},
		{"alias counts once", `{ x: a y: a }`, 2},
		{"arguments and object values are not selections", `{ a(in: {b: 1, c: [{d: 2}]}, e: $v) { f } }`, 2},
		{"directives are not selections", `{ a @include(if: $x) @skip(if: false) }`, 1},
		{"spreads and inline fragments count", `{ ...F ... on User { a } ... @include(if: true) { b } } fragment F on Query { c }`, 6},
		{"variable definitions and defaults", `query Q($a: [Int!] = [1, 2], $b: In = {x: {y: 1}}) @dir(v: {z: 1}) { a }`, 1},
		{"operation and fragment headers", `mutation M { a } fragment on on on { b }`, 2},
		{"strings hold no selections", `{ a(s: "{ b c d }", t: """{ e }""") }`, 1},
		{"unterminated document counts what it read", `{ a b `, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := complexity.CheckDocument(tc.query, complexity.DocumentLimits{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Selections != tc.selections {
				t.Errorf("selections = %d, want %d", got.Selections, tc.selections)
			}
		})
	}
}

func TestCheckDocumentLimits(t *testing.T) {
	many := "{" + strings.Repeat(" __typename", 5000) + " }"
	for _, tc := range []struct {
		name string
		lim  complexity.DocumentLimits
		code string
		sent error
	}{
		{"tokens", complexity.DocumentLimits{MaxTokens: 1000}, complexity.CodeMaxTokensExceeded, complexity.ErrMaxTokens},
		{"selections", complexity.DocumentLimits{MaxSelections: 1000}, complexity.CodeMaxSelectionsExceeded, complexity.ErrMaxSelections},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size, err := complexity.CheckDocument(many, tc.lim)
			var ce *complexity.Error
			if !errors.As(err, &ce) || ce.Code != tc.code || !errors.Is(err, tc.sent) {
				t.Fatalf("err = %v, want code %s", err, tc.code)
			}
			// It stops at the limit: the rest of the document is never read.
			if size.Tokens > 1002 {
				t.Errorf("read %d tokens past a limit of 1000", size.Tokens)
			}
			if ce.Limit != 1000 || ce.Value != 1001 {
				t.Errorf("value/limit = %v/%v, want 1001/1000", ce.Value, ce.Limit)
			}
		})
	}
	if _, err := complexity.CheckDocument(many, complexity.DocumentLimits{MaxTokens: 5002, MaxSelections: 5000}); err != nil {
		t.Errorf("a document at the limits is refused: %v", err)
	}
}
