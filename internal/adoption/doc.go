// Package adoption holds a test that installs costguard the way docs/gqlgen.md
// says on a project made by gqlgen init today, in a temporary directory: the
// cost directives in its schema and gqlgen.yml, gqlgen generate, a build, and
// one priced request through lim.Handler. It has no code of its own.
package adoption
