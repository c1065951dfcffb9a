// Package doclint holds a test that keeps the user documentation (README.md,
// BENCHMARKS.md and docs/*.md) about the product, not about how it was
// built: it fails on words that only make sense to the people who wrote a
// change ("issue 9", "this round", "session", "landed").
package doclint
