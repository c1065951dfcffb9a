// Package adoption holds a test that installs costguard the way docs/gqlgen.md
// says on a project made by gqlgen init today, in a temporary directory: the
// cost directives in its schema and gqlgen.yml, gqlgen generate, a build, and
// one priced request through lim.Handler. COSTGUARD_GQLGEN_VERSION chooses
// the gqlgen the project is made with: unset, the version costguard's go.mod
// requires; minimum, the oldest gqlgen and gqlparser that docs/gqlgen.md's
// "Versions" names; latest; or a version. It has no code of its own.
package adoption
