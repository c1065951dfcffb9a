// Package apicheck holds a test that freezes the library's public API: it
// lists every exported name of the library module's packages (budget,
// challenge, client, complexity, identity, limiter, middleware, opcosts, overload,
// override, spenders, timeline and their subpackages; internal packages
// and the optional modules excepted) and compares the listing with
// api/costguard.txt. A change to the API fails the test until the listing
// changes with it (go test ./internal/apicheck -update); see api/README.md.
// It also bounds how many package-level names a package may export
// (bounds), so that a package keeps one job, and how long a function of
// the adapter may be (maxFunctionLines), so that each step of a request
// has a name.
// It has no code of its own.
package apicheck
