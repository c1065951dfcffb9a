// Package reviews is a gqlgen subgraph that adds reviews to the User entity
// the accounts subgraph owns. Its schema is schema.graphqls; generated.go,
// federation.go and models_gen.go are gqlgen's (go tool gqlgen generate,
// run here).
package reviews

import (
	"strconv"

	"github.com/99designs/gqlgen/graphql"
)

// all holds the reviews, newest first: four by each of the users "1", "2"
// and "3", taking turns.
var all = func() []*Review {
	var rs []*Review
	for i := range 12 {
		author := strconv.Itoa(i%3 + 1)
		rs = append(rs, &Review{ID: strconv.Itoa(12 - i), Body: "review " + strconv.Itoa(12-i) + " by user " + author, Author: &User{ID: author}})
	}
	return rs
}()

// latest returns at most first reviews, newest first, by author when it is
// not empty.
func latest(first int, author string) []*Review {
	var out []*Review
	for _, r := range all {
		if len(out) >= first {
			break
		}
		if author == "" || r.Author.ID == author {
			out = append(out, r)
		}
	}
	return out
}

// Schema returns the subgraph's executable schema.
func Schema() graphql.ExecutableSchema {
	return NewExecutableSchema(Config{Resolvers: &Resolver{}})
}
