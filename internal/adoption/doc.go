// Package adoption holds a test that installs costguard the way docs/gqlgen.md
// says on a project made by gqlgen init today, in a temporary directory: the
// cost directives in its schema and gqlgen.yml, gqlgen generate, a build,
// one priced request through gqlgen's client, and the same query to a real
// server over every transport gqlgen ships (WebSocket by both subprotocols),
// each checked to return its data and pay its actual cost once (the
// project's test is testdata/costguard_test.go). COSTGUARD_GQLGEN_VERSION
// chooses the gqlgen the project is made with: unset or minimum, the
// versions costguard's go.mod requires, the oldest gqlgen and gqlparser the
// library works with (docs/gqlgen.md's "Versions" names them); latest; or a
// version. A second test (TestAdopterPinsSurvive) adds costguard to a
// module pinned to gqlgen v0.17.73, chromedp v0.9.2, client_golang v1.19.0
// and pgx v5.5.0 (testdata/pins/main.go) and fails if adding it changed any
// of those versions or the go directive. It has no code of its own.
package adoption
