// Package walk_test measures which functions of the module one request
// executes: run once with COSTGUARD_WALK=setup and once with a request
// kind (post, rest, ws), each with -coverpkg, and subtract (walk.sh).
package walk_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/internal/wstest"
	"github.com/costguard/costguard/middleware"
)

const readmeQuery = `{"query":"{ user(login: \"alice\") { repos(first: 2) { name } } }"}`

func TestWalk(t *testing.T) {
	kind := os.Getenv("COSTGUARD_WALK")
	if kind == "" {
		t.Skip("COSTGUARD_WALK unset: run internal/walk/walk.sh")
	}
	lim, err := middleware.New(middleware.Dependencies{}, middleware.Policy{
		Plans:         map[string]budget.Plan{"anon": {Burst: 100000, Rate: 100000, Per: time.Hour}},
		AnonymousPlan: "anon",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	res := graph.NewResolver()
	srv := handler.New(res.Schema())
	srv.AddTransport(transport.Websocket{KeepAlivePingInterval: time.Hour})
	srv.AddTransport(transport.POST{})
	mux := http.NewServeMux()
	mux.Handle("/graphql", lim.Handler(srv))
	mux.Handle("/api/", lim.REST(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`) })))
	ts := httptest.NewServer(mux)
	defer ts.Close()

	switch kind {
	case "setup":
	case "post":
		resp, err := http.Post(ts.URL+"/graphql", "application/json", strings.NewReader(readmeQuery))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"repos"`) {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	case "rest":
		resp, err := http.Get(ts.URL + "/api/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatal(resp.StatusCode)
		}
	case "ws":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, _, err := wstest.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/graphql", wstest.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.WriteJSON(ctx, map[string]any{"type": "connection_init"})
		var m map[string]any
		if err := c.ReadJSON(ctx, &m); err != nil || m["type"] != "connection_ack" {
			t.Fatal(m, err)
		}
		c.WriteJSON(ctx, map[string]any{"type": "subscribe", "id": "1", "payload": map[string]any{"query": `subscription { issueCreated(repo: "hello-world") { title } }`}})
		for res.Subscribers() == 0 {
			if ctx.Err() != nil {
				c.ReadJSON(context.Background(), &m)
				t.Fatal("no subscriber:", m)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := res.Mutation().CreateIssue(ctx, "hello-world", "walk"); err != nil {
			t.Fatal(err)
		}
		if err := c.ReadJSON(ctx, &m); err != nil || m["type"] != "next" {
			t.Fatal(m, err)
		}
	default:
		t.Fatalf("COSTGUARD_WALK=%s: want setup, post, rest or ws", kind)
	}
}
