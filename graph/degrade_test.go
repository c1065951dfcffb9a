package graph_test

import (
	"context"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/overload"
)

// degraded is an overload.Degrader with a fixed answer.
type degraded map[string]bool

func (d degraded) Degraded(feature string) bool { return d[feature] }

// withDegrader sends a request whose context carries d, as the middleware's
// wrappers do under load.
func withDegrader(d overload.Degrader) client.Option {
	return func(bd *client.Request) {
		bd.HTTP = bd.HTTP.WithContext(overload.WithDegradation(bd.HTTP.Context(), d))
	}
}

// User.recommendations lists at most five repositories of other users, in
// seeding order, and an empty list while the feature is switched off.
func TestRecommendations(t *testing.T) {
	c := newClient(graph.NewResolver())
	const q = `{ user(login: "octocat") { recommendations { name owner { login } } } }`
	data, errs := do(t, c, q)
	require.Empty(t, errs)
	assert.JSONEq(t, `{"user":{"recommendations":[
		{"name":"wonderland","owner":{"login":"alice"}},
		{"name":"looking-glass","owner":{"login":"alice"}},
		{"name":"build-tools","owner":{"login":"bob"}}]}}`, data)

	data, errs = do(t, c, `{ user(login: "carol") { recommendations { name } } }`)
	require.Empty(t, errs)
	assert.JSONEq(t, `{"user":{"recommendations":[
		{"name":"hello-world"},{"name":"spoon-knife"},{"name":"linguist"},
		{"name":"octocat.github.io"},{"name":"wonderland"}]}}`, data, "at most five")

	data, errs = do(t, c, q, withDegrader(degraded{graph.FeatureRecommendations: true}))
	require.Empty(t, errs)
	assert.JSONEq(t, `{"user":{"recommendations":[]}}`, data)

	data, errs = do(t, c, `{ user(login: "bob") { recommendations { name } } }`, withDegrader(degraded{"search": true}))
	require.Empty(t, errs)
	assert.Contains(t, data, "hello-world", "another feature's degradation changes nothing here")
}

// A root resolver waits out WithLatency, but not past its context: a
// request whose client left gets the context's error at once, and a
// mutation then changes nothing.
func TestLatencyHonoursContext(t *testing.T) {
	r := graph.NewResolver(graph.WithLatency(time.Hour)) // never waited out here
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	u, err := r.Query().User(ctx, "octocat")
	require.ErrorIs(t, err, context.Canceled)
	assert.Nil(t, u)
	_, err = r.Query().Search(ctx, "octo", nil)
	require.ErrorIs(t, err, context.Canceled)
	_, err = r.Mutation().CreateIssue(ctx, "hello-world", "never opened")
	require.ErrorIs(t, err, context.Canceled)

	// Without latency the same resolvers answer, and the mutation above
	// left the repository as it was.
	repo, err := graph.NewResolver().Query().Repository(t.Context(), "hello-world")
	require.NoError(t, err)
	issues, err := r.Repository().Issues(t.Context(), repo, nil, nil)
	require.NoError(t, err)
	assert.Len(t, issues, 3)
}
