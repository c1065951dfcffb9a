// Package testenv decides which tests a run includes. A plain go test work
// (every module of go.work) or go test ./... (the library) runs what a
// contributor runs often: unit tests and the conformance suites against
// real Redis, in about a minute. The long suites (Redis failover, the
// example server's chaos run, the adoption project built with gqlgen init,
// the benchmark harness's overload scenario) run only when
// COSTGUARD_LONG_TESTS=1 is set, and always under CI=true; a test that
// can run at two sizes takes the larger one then (LongEnabled):
//
//	func TestFailover(t *testing.T) {
//		testenv.Long(t)
//		...
//	}
//
// Run them by hand with
//
//	COSTGUARD_LONG_TESTS=1 go test work
package testenv

import (
	"os"
	"testing"
)

// LongEnv is the environment variable that turns the long suites on when
// set to 1.
const LongEnv = "COSTGUARD_LONG_TESTS"

// LongEnabled reports whether the long suites run: LongEnv is 1 or CI is
// true (CI never skips them).
func LongEnabled() bool {
	return os.Getenv(LongEnv) == "1" || os.Getenv("CI") == "true"
}

// Long skips tb, saying how to run it, unless the long suites are enabled.
// Call it first in a long test.
func Long(tb testing.TB) {
	tb.Helper()
	if !LongEnabled() {
		tb.Skip("long test: run it with " + LongEnv + "=1 go test ./...")
	}
}

// Missing ends tb because something it needs is not on this machine
// (a server binary, a tool): it fails under CI=true, where every test must
// run, and skips otherwise. why says what is missing and for what.
func Missing(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatal(why + " (CI=true: this test must run)")
		return // a stand-in for a test may not end the goroutine
	}
	tb.Skip(why + " (skipping)")
}
