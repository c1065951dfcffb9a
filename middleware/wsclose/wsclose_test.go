package wsclose_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/internal/wstest"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/wsclose"
)

// The core's refusal names its close code the way InitFunc reads it.
var _ interface{ CloseCode() int } = (*middleware.SocketError)(nil)

// schema answers nothing: the connections here end at connection_init.
type schema struct{ s *ast.Schema }

func (s schema) Schema() *ast.Schema { return s.s }

func (schema) Complexity(context.Context, string, string, int, map[string]any) (int, bool) {
	return 0, false
}

func (schema) Exec(context.Context) graphql.ResponseHandler {
	return func(context.Context) *graphql.Response { return nil }
}

// keys knows one key; any other fails with err (nil: unknown).
type keys struct{ err error }

func (k keys) LookupAPIKey(_ context.Context, key string) (string, string, error) {
	if key == "good" {
		return "alice", "anon", nil
	}
	if k.err != nil {
		return "", "", k.err
	}
	return "", "", identity.ErrUnknownAPIKey
}

// closeCode opens a graphql-transport-ws connection whose connection_init
// presents key and returns the code it was closed with (0: acknowledged).
func closeCode(t *testing.T, lookup identity.KeyLookup, wrap bool, key string) int {
	t.Helper()
	lim, err := middleware.New(middleware.Dependencies{
		KeyLookup: lookup,
		Logger:    slog.New(slog.DiscardHandler),
	}, middleware.Policy{
		Plans:         map[string]budget.Plan{"anon": {Burst: 10, Rate: 10, Per: time.Minute}},
		AnonymousPlan: "anon",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	init := lim.WebsocketInit(nil)
	if wrap {
		init = wsclose.InitFunc(init)
	}
	srv := handler.New(schema{gqlparser.MustLoadSchema(&ast.Source{Input: "type Query { a: Int }"})})
	srv.AddTransport(transport.Websocket{InitFunc: init, KeepAlivePingInterval: time.Hour})
	ts := httptest.NewServer(lim.Handler(srv))
	t.Cleanup(ts.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := wstest.Dial(ctx, ts.URL, wstest.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.WriteJSON(ctx, map[string]any{"type": "connection_init", "payload": map[string]string{"Authorization": "Bearer " + key}}); err != nil {
		t.Fatal(err)
	}
	for {
		var m struct{ Type string }
		err := c.ReadJSON(ctx, &m)
		if code := wstest.CloseStatus(err); code >= 0 {
			return code
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Type == "connection_ack" {
			return 0
		}
	}
}

func TestInitFuncClosesWithTheRefusalsCode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lookup identity.KeyLookup
		key    string
		wrap   bool
		want   int
	}{
		{"known key", keys{}, "good", true, 0},
		{"unknown key", keys{}, "nope", true, 4403},
		{"lookup fails", keys{err: errors.New("database down")}, "nope", true, 4500},
		{"unknown key, without wsclose", keys{}, "nope", false, 1000},
	} {
		if got := closeCode(t, tc.lookup, tc.wrap, tc.key); got != tc.want {
			t.Errorf("%s: closed with %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A result without a close code passes through.
func TestInitFuncPassesOtherResults(t *testing.T) {
	want := errors.New("not mine")
	ctx := context.Background()
	got, _, err := wsclose.InitFunc(func(ctx context.Context, _ transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		return ctx, nil, want
	})(ctx, nil)
	if err != want || got != ctx {
		t.Errorf("InitFunc changed a plain error's result: %v", err)
	}
}
