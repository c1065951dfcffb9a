// Package adoption holds a test that installs costguard the way docs/gqlgen.md
// says on a project made by gqlgen init today, in a temporary directory: the
// cost directives in its schema and gqlgen.yml, gqlgen generate, a build,
// one priced request through gqlgen's client, and the same query to a real
// server over every transport gqlgen ships (WebSocket by both subprotocols),
// each checked to return its data and pay its actual cost once (the
// project's test is testdata/costguard_test.go). COSTGUARD_GQLGEN_VERSION
// chooses the gqlgen the project is made with: unset, the version
// costguard's go.mod requires; minimum, the oldest gqlgen and gqlparser that
// docs/gqlgen.md's "Versions" names; latest; or a version. It has no code of
// its own.
package adoption
