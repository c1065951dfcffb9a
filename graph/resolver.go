// Package graph is the example GraphQL API costguard is demonstrated and
// tested against: GitHub-like users, repositories and issues, generated with
// gqlgen from schema.graphqls (configuration in gqlgen.yml at the module
// root; regenerate with `go run github.com/99designs/gqlgen@v0.17.73
// generate`, the gqlgen go.mod requires) and served from seeded in-memory
// data.
//
// The schema's core fields carry no cost directives, so by the default rules
// the seed query
//
//	query { user(login: "octocat") { repos(first: 100) { issues(first: 50) { title } } } }
//
// prices to 1 + 100 × (1 + 50 × 1) = 5101 points. Other fields show @cost,
// @listSize, an interface (Node) and a union (SearchResult); rateLimit is
// GitHub's, served from costguard's middleware.RateLimitFrom and free to
// select (@cost(weight: "0") on its type).
//
// Resolver counts its resolver calls so tests can prove that an operation the
// limiter refused ran none of them.
package graph

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
)

// Resolver is the root resolver. It is safe for concurrent use; each Resolver
// owns its own copy of the seeded data, so tests do not share state. The
// zero value is ready to use, as in gqlgen's usual
// NewExecutableSchema(Config{Resolvers: &Resolver{}}).
type Resolver struct {
	once      sync.Once
	data      *store
	calls     atomic.Int64
	onResolve func(ctx context.Context, field string)
	latency   time.Duration
}

// Option configures a Resolver.
type Option func(*Resolver)

// WithOnResolve installs a hook called at the start of every resolver call
// with the field's schema coordinate, such as "Query.user" or
// "Repository.issues". Fields read straight from a struct (login, title, …)
// have no resolver and are not reported. f must be safe for concurrent use.
func WithOnResolve(f func(ctx context.Context, field string)) Option {
	return func(r *Resolver) { r.onResolve = f }
}

// WithLatency makes every root data field (Query.user, Query.repository,
// Query.node, Query.nodes, Query.search, Mutation.createIssue) take d
// before it answers, as a slow backend would, so a demo can fill a server
// with requests in flight. A request whose context ends first gets the
// context's error, and a mutation then changes nothing. Zero (the default)
// adds nothing.
func WithLatency(d time.Duration) Option {
	return func(r *Resolver) { r.latency = d }
}

// NewResolver returns a root resolver over a fresh copy of the seeded data.
func NewResolver(opts ...Option) *Resolver {
	r := &Resolver{}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Calls reports how many resolver calls r has made so far.
func (r *Resolver) Calls() int64 { return r.calls.Load() }

// Subscribers reports how many issueCreated subscriptions are listening
// for new issues: a subscription counts once its resolver has run, and no
// longer once its context has ended.
func (r *Resolver) Subscribers() int {
	r.once.Do(r.seed)
	r.data.mu.RLock()
	defer r.data.mu.RUnlock()
	n := 0
	for _, ws := range r.data.watchers {
		n += len(ws)
	}
	return n
}

// Schema returns the executable schema served by r, ready for
// handler.New.
func (r *Resolver) Schema() graphql.ExecutableSchema {
	return NewExecutableSchema(Config{Resolvers: r})
}

// enter records one resolver call and returns the data to serve it from,
// seeding it on first use.
func (r *Resolver) enter(ctx context.Context, field string) *store {
	r.calls.Add(1)
	if r.onResolve != nil {
		r.onResolve(ctx, field)
	}
	r.once.Do(r.seed)
	return r.data
}

func (r *Resolver) seed() {
	r.data = newStore()
	r.data.seed()
}

// pause waits out r's latency, or returns ctx's error if it ends first.
func (r *Resolver) pause(ctx context.Context) error {
	if r.latency <= 0 {
		return nil
	}
	t := time.NewTimer(r.latency)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ ResolverRoot = (*Resolver)(nil)
