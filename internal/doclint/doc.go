// Package doclint holds the tests that keep the user documentation
// (README.md, BENCHMARKS.md and docs/*.md) and the comments of the
// repository's Go files about the product, not about how it was built.
//
// Both fail on the same process words: words that only make sense to the
// people who wrote or reviewed a change ("issue 9", "this round",
// "session", "landed", "reviewer", "the second finding"). One pattern
// serves both, so a word refused in a page is refused in a comment.
//
// The Go comments are every // and /* */ comment of every .go file under
// the repository root, in every module (in go.work or not), read from the
// parsed file, so that a string literal is never taken for a comment.
// Skipped: generated files ("Code generated ... DO NOT EDIT." before the
// package clause), whose comments are their generator's; directories the
// go command ignores (names starting with "." or "_"); and this package,
// which names the words it refuses.
//
// The pages are also checked for links: every relative link names a file
// that exists and, for a page, a heading it has. Go comments are not:
// their links are doc links to Go names or full URLs, not paths of the
// repository.
package doclint
