// Package accounts is a gqlgen subgraph that owns the User entity: its id
// and name. Its schema is schema.graphqls; generated.go, federation.go and
// models_gen.go are gqlgen's (go tool gqlgen generate, run here).
package accounts

import "github.com/99designs/gqlgen/graphql"

var users = map[string]string{"1": "Ada", "2": "Grace", "3": "Barbara"}

func userByID(id string) *User {
	name, ok := users[id]
	if !ok {
		return nil
	}
	return &User{ID: id, Name: name}
}

// Schema returns the subgraph's executable schema.
func Schema() graphql.ExecutableSchema {
	return NewExecutableSchema(Config{Resolvers: &Resolver{}})
}
