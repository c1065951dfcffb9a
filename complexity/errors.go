package complexity

import (
	"errors"
	"fmt"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// Stable error codes, one per rejection reason. They are part of the public
// contract (scripts and clients match on them) and never change.
const (
	CodeMaxDepthExceeded        = "MAX_DEPTH_EXCEEDED"
	CodeMaxBreadthExceeded      = "MAX_BREADTH_EXCEEDED"
	CodeMaxNodesExceeded        = "MAX_NODES_EXCEEDED"
	CodeMaxCostExceeded         = "MAX_COST_EXCEEDED"
	CodeSlicingArgumentRequired = "SLICING_ARGUMENT_REQUIRED"
	CodeMaxAliasesExceeded      = "MAX_ALIASES_EXCEEDED"
	CodeMaxRootFieldsExceeded   = "MAX_ROOT_FIELDS_EXCEEDED"
	// CodeInvalidArgumentValue: an argument or directive value the
	// executor would fail to coerce (an Int given "abc", "1e3" or 1.5, a
	// string beyond 64 bits, a @skip condition that is not a Boolean). It
	// cannot be priced as what runs, so it is refused before execution.
	CodeInvalidArgumentValue = "INVALID_ARGUMENT_VALUE"
)

// Sentinel errors. Every *Error unwraps to the sentinel of its code, so
// errors.Is(err, ErrMaxCost) works as well as errors.As(err, &e) and e.Code.
var (
	ErrMaxDepth        = errors.New("complexity: maximum depth exceeded")
	ErrMaxBreadth      = errors.New("complexity: maximum breadth exceeded")
	ErrMaxNodes        = errors.New("complexity: maximum nodes exceeded")
	ErrMaxCost         = errors.New("complexity: maximum cost exceeded")
	ErrSlicingArgument = errors.New("complexity: slicing argument required")
	ErrMaxAliases      = errors.New("complexity: maximum aliases exceeded")
	ErrMaxRootFields   = errors.New("complexity: maximum root fields exceeded")
	// ErrInvalidArgumentValue is the sentinel of INVALID_ARGUMENT_VALUE.
	ErrInvalidArgumentValue = errors.New("complexity: invalid argument value")

	// ErrInvalidOption: New was given an option value it cannot use.
	ErrInvalidOption = errors.New("complexity: invalid option")
	// ErrInvalidSchema: the schema's @cost or @listSize directives are
	// malformed (an unparsable weight, an unknown slicing argument…).
	ErrInvalidSchema = errors.New("complexity: invalid schema")
	// ErrInvalidDocument: the operation does not match the schema, or the
	// named operation does not exist. Analyze expects validated documents.
	ErrInvalidDocument = errors.New("complexity: invalid document")
	// ErrInvalidResponse: ActualCost was given response data that is not
	// JSON, or whose shape does not match the operation.
	ErrInvalidResponse = errors.New("complexity: invalid response")
)

// Location is a line and column in the query document, 1-based.
type Location struct {
	Line   int `json:"line"`
	Column int `json:"column"`
}

// Error is a rejected operation: a limit exceeded, a slicing-argument rule
// broken, or an argument value the executor could not coerce. Its Message names the field (or the operation) and the numbers;
// Locations points at it in the query.
type Error struct {
	// Code is one of the Code… constants.
	Code string `json:"code"`
	// Message is human readable, without the "complexity: " prefix that
	// Error() adds.
	Message   string     `json:"message"`
	Locations []Location `json:"locations,omitempty"`
	// Path is the response path of the offending field, when there is one.
	Path []string `json:"path,omitempty"`
	// Value is the number found (a depth, a slicing argument, a cost…) and
	// Limit the maximum it was held against. For SLICING_ARGUMENT_REQUIRED,
	// Value is the number of slicing arguments given and Limit is 1; for
	// INVALID_ARGUMENT_VALUE both are 0 (the Message quotes the value, cut
	// to 64 bytes).
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	// Totals holds the operation's totals when they were computed before the
	// rejection (MAX_COST_EXCEEDED and MAX_NODES_EXCEEDED); nil otherwise.
	Totals *Totals `json:"-"`
}

// Error implements error.
func (e *Error) Error() string {
	if len(e.Locations) > 0 {
		return fmt.Sprintf("complexity: %s (line %d, column %d)", e.Message, e.Locations[0].Line, e.Locations[0].Column)
	}
	return "complexity: " + e.Message
}

// Unwrap returns the sentinel error of e's code.
func (e *Error) Unwrap() error {
	switch e.Code {
	case CodeMaxDepthExceeded:
		return ErrMaxDepth
	case CodeMaxBreadthExceeded:
		return ErrMaxBreadth
	case CodeMaxNodesExceeded:
		return ErrMaxNodes
	case CodeMaxCostExceeded:
		return ErrMaxCost
	case CodeSlicingArgumentRequired:
		return ErrSlicingArgument
	case CodeMaxAliasesExceeded:
		return ErrMaxAliases
	case CodeMaxRootFieldsExceeded:
		return ErrMaxRootFields
	case CodeMaxTokensExceeded:
		return ErrMaxTokens
	case CodeMaxSelectionsExceeded:
		return ErrMaxSelections
	case CodeInvalidArgumentValue:
		return ErrInvalidArgumentValue
	}
	return nil
}

// GQLError converts e to a GraphQL error with the code, value and limit in
// its extensions, ready to return to a client.
func (e *Error) GQLError() *gqlerror.Error {
	ge := &gqlerror.Error{
		Message: e.Message,
		Extensions: map[string]any{
			"code":  e.Code,
			"value": e.Value,
			"limit": e.Limit,
		},
	}
	for _, l := range e.Locations {
		ge.Locations = append(ge.Locations, gqlerror.Location{Line: l.Line, Column: l.Column})
	}
	for _, p := range e.Path {
		ge.Path = append(ge.Path, ast.PathName(p))
	}
	return ge
}

func locationsOf(pos *ast.Position) []Location {
	if pos == nil {
		return nil
	}
	return []Location{{Line: pos.Line, Column: pos.Column}}
}
