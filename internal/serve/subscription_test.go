package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/middleware"
)

// docsSubscription is the subscription docs/gqlgen.md shows.
const docsSubscription = `subscription { issueCreated(repo: "hello-world") { id title } }`

// docs/gqlgen.md's subscription over a WebSocket (graphql-transport-ws, the key
// in connection_init as a browser sends it): the subscribe pays its price,
// each event its actual cost, and extensions.cost says so.
func TestDocsSubscription(t *testing.T) {
	ts := newTestServer(t, defaultConfig(), deps{})
	srv := httptest.NewServer(ts.h)
	defer srv.Close()

	body, _ := json.Marshal(map[string]string{"query": docsSubscription})
	r := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(string(body)))
	r.RemoteAddr = alice.remoteAddr
	r.Header.Set("Authorization", "Bearer "+alice.apiKey)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(middleware.HeaderGraphQLCost, "validate")
	w := httptest.NewRecorder()
	ts.h.ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	priced := decodeGraphQL(t, w.Body.Bytes())
	require.NotNil(t, priced.Extensions.Cost)
	assert.EqualValues(t, 1, priced.Extensions.Cost.RequestedQueryCost, "docs/gqlgen.md prices the subscription at 1")
	before := *priced.Extensions.Cost.ThrottleStatus.CurrentlyAvailable

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/graphql",
		&websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	require.NoError(t, err)
	defer c.CloseNow()
	type message struct {
		ID      string          `json:"id,omitempty"`
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload,omitempty"`
	}
	read := func() message {
		for {
			var m message
			require.NoError(t, wsjson.Read(ctx, c, &m))
			if m.Type != "ping" && m.Type != "pong" {
				return m
			}
		}
	}
	require.NoError(t, wsjson.Write(ctx, c, message{Type: "connection_init", Payload: json.RawMessage(`{"Authorization":"Bearer ` + demoAPIKey + `"}`)}))
	require.Equal(t, "connection_ack", read().Type)
	sub, _ := json.Marshal(map[string]string{"query": docsSubscription})
	require.NoError(t, wsjson.Write(ctx, c, message{ID: "1", Type: "subscribe", Payload: sub}))

	// Open issues (as another client) until the subscription, set up
	// asynchronously, sees one.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			ts.graphql(anonymous, `mutation { createIssue(repo: "hello-world", title: "Subscribed") { id } }`)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	event := read()
	close(stop)
	<-done
	require.Equal(t, "next", event.Type, string(event.Payload))
	t.Logf("%s", event.Payload)
	var got struct {
		Data struct {
			IssueCreated struct{ Title string }
		}
		Extensions struct{ Cost middleware.Cost }
	}
	require.NoError(t, json.Unmarshal(event.Payload, &got), string(event.Payload))
	assert.Equal(t, "Subscribed", got.Data.IssueCreated.Title)
	cost := got.Extensions.Cost
	require.NotNil(t, cost.ActualQueryCost)
	require.NotNil(t, cost.ThrottleStatus.CurrentlyAvailable)
	assert.EqualValues(t, 1, cost.RequestedQueryCost)
	assert.EqualValues(t, 1, *cost.ActualQueryCost, "an event of one issue costs 1")
	assert.Equal(t, before-1-1, *cost.ThrottleStatus.CurrentlyAvailable, "the subscribe paid 1, the event 1")
}
