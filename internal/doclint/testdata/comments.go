// Package fixture is read by TestGoCommentFindings: issue 9 in its doc.
package fixture

import "strings"

// This round: a line comment.
func f() string {
	s := "issue 12, this round, a session: a string, not a comment"
	r := `/* landed in a raw string */ // and a reviewer`
	_ = '/'
	/* A block comment,
	over three lines, that
	landed on its third. */
	return s + r // a session in a trailing comment
}

var n = strings.Count("a", "b") + /* a reviewer's */ 1

// A name that holds a word is not the word: sessionID, landedAt, tissue 9,
// issue9, Issue.title, round trips.
var sessionID = n

// The second finding.
var _ = sessionID
