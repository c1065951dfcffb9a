package complexity

import (
	"errors"
	"fmt"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/lexer"
)

// Codes of the pre-parse bounds (CheckDocument). Like the other codes they
// are part of the public contract.
const (
	CodeMaxTokensExceeded     = "MAX_TOKENS_EXCEEDED"
	CodeMaxSelectionsExceeded = "MAX_SELECTIONS_EXCEEDED"
)

// Sentinels of the pre-parse bounds.
var (
	ErrMaxTokens     = errors.New("complexity: maximum tokens exceeded")
	ErrMaxSelections = errors.New("complexity: maximum selections exceeded")
)

// DocumentLimits bound a raw document before it is parsed and validated.
// Zero means no limit.
type DocumentLimits struct {
	// MaxTokens caps the lexical tokens of the document (punctuators,
	// names, values), as gqlparser's parser token limit counts them.
	MaxTokens int
	// MaxSelections caps the selections written in the document: fields
	// (an aliased field counts once), fragment spreads and inline
	// fragments, in every operation and fragment definition. Validation
	// (overlapping fields) and gqlgen's field collection are quadratic in
	// the selections of one selection set, so this is what keeps them
	// bounded.
	MaxSelections int
}

// DocumentSize is what CheckDocument counted.
type DocumentSize struct {
	Tokens     int
	Selections int
}

// CheckDocument counts the tokens and selections of query in one pass of
// the lexer, without building a syntax tree, and refuses the document with
// MAX_TOKENS_EXCEEDED or MAX_SELECTIONS_EXCEEDED as soon as a limit is
// passed, so its time is linear in the bytes read and bounded by the
// limits. A document the lexer cannot read is not refused here: the parser
// reports it. The error carries Value (what was counted when the limit was
// passed) and Limit, and no location: the document was never parsed.
func CheckDocument(query string, lim DocumentLimits) (DocumentSize, error) {
	lex := lexer.New(&ast.Source{Input: query})
	var (
		size DocumentSize
		// braces holds one entry per open '{': true for a selection set,
		// false for an input object value.
		braces []bool
		// parens counts open '(' and '[': inside them every '{' is a value.
		parens int
		// prev and prev2 are the kinds of the last two tokens; prevOn is
		// set when the last token was the name "on".
		prev, prev2 lexer.Type
		prevOn      bool
	)
	for {
		tok, err := lex.ReadToken()
		if err != nil || tok.Kind == lexer.EOF {
			return size, nil
		}
		size.Tokens++
		if lim.MaxTokens > 0 && size.Tokens > lim.MaxTokens {
			return size, documentError(CodeMaxTokensExceeded, "tokens", size.Tokens, lim.MaxTokens)
		}
		inSelectionSet := parens == 0 && len(braces) > 0 && braces[len(braces)-1]
		switch tok.Kind {
		case lexer.BraceL:
			braces = append(braces, parens == 0)
		case lexer.BraceR:
			if len(braces) > 0 {
				braces = braces[:len(braces)-1]
			}
		case lexer.ParenL, lexer.BracketL:
			parens++
		case lexer.ParenR, lexer.BracketR:
			if parens > 0 {
				parens--
			}
		case lexer.Spread:
			if inSelectionSet {
				size.Selections++
			}
		case lexer.Name:
			// A field starts with a name that is not the field name after
			// an alias (prev ':'), a directive name (prev '@'), a fragment
			// name or "on" after '...', or the type condition after "on".
			if inSelectionSet && prev != lexer.Colon && prev != lexer.At && prev != lexer.Spread &&
				!(prevOn && prev2 == lexer.Spread) {
				size.Selections++
			}
		}
		if lim.MaxSelections > 0 && size.Selections > lim.MaxSelections {
			return size, documentError(CodeMaxSelectionsExceeded, "selections", size.Selections, lim.MaxSelections)
		}
		prev2, prev = prev, tok.Kind
		prevOn = tok.Kind == lexer.Name && tok.Value == "on"
	}
}

func documentError(code, what string, n, limit int) *Error {
	return &Error{
		Code:    code,
		Message: fmt.Sprintf("the document has more than %d %s", limit, what),
		Value:   float64(n), Limit: float64(limit),
	}
}
