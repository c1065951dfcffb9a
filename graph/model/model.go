// Package model holds the Go types of the example schema in graph/: the
// hand-written objects (User, Repository, Issue) and, in models_gen.go, what
// gqlgen generates from the SDL (the Node and SearchResult interfaces,
// UserConnection, RateLimit and Attachment). Objects here are plain values: relations such as a user's
// repositories are resolved by graph.Resolver, not stored in the structs.
package model

// User is a GitHub-like account.
type User struct {
	ID    string
	Login string
	Name  *string
}

// Repository belongs to one user; its Name is unique across users.
type Repository struct {
	ID         string
	Name       string
	OwnerLogin string
	Topics     []string
}

// Issue belongs to one repository.
type Issue struct {
	ID    string
	Title string
	Body  *string
}

func (User) IsNode()               {}
func (u User) GetID() string       { return u.ID }
func (User) IsSearchResult()       {}
func (Repository) IsNode()         {}
func (r Repository) GetID() string { return r.ID }
func (Repository) IsSearchResult() {}
func (Issue) IsNode()              {}
func (i Issue) GetID() string      { return i.ID }
func (Issue) IsSearchResult()      {}

var (
	_ Node         = (*User)(nil)
	_ Node         = (*Repository)(nil)
	_ Node         = (*Issue)(nil)
	_ SearchResult = (*User)(nil)
	_ SearchResult = (*Repository)(nil)
	_ SearchResult = (*Issue)(nil)
)
