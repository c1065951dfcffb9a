// Package apicheck holds a test that freezes the library's public API: it
// lists every exported name of the packages under budget/, complexity/,
// limiter/ and middleware/ (internal packages excepted) and compares the listing with
// api/costguard.txt. A change to the API fails the test until the listing
// changes with it (go test ./internal/apicheck -update); see api/README.md.
// It has no code of its own.
package apicheck
