package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gqlclient "github.com/99designs/gqlgen/client"
	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/querycache"
	"github.com/costguard/costguard/middleware/trusteddocs"
)

// reposByVar costs 1 + n: octocat's user, and n repositories.
const reposByVar = `query Repos($n: Int) { user(login: "octocat") { repos(first: $n) { name } } }`

// persistedYAML has plans that neither refill nor refund within a test.
const persistedYAML = "plans:\n  anon: {burst: 500, rate: 1, per: 1h, refund_unused: false}\n" +
	"  free: {burst: 5000, rate: 1, per: 1h, refund_unused: false}\n"

// persistedServer is the example server on store (nil: memory), configured
// by the file at path holding persistedYAML and extra, on a real listener.
func persistedServer(t *testing.T, store limiter.Store, path, extra string) (*server, *httptest.Server) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(persistedYAML+extra), 0o600))
	cfg, err := loadConfig(path)
	require.NoError(t, err)
	d := deps{store: store, resolver: graph.NewResolver(), logger: slog.New(slog.DiscardHandler)}
	if store == nil {
		d.clock = limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	}
	s, cleanup, err := newServer(cfg, d)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cleanup()) })
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

// apq is the extensions member of an automatic persisted query.
func apq(hash string) map[string]any {
	return map[string]any{"persistedQuery": map[string]any{"version": 1, "sha256Hash": hash}}
}

// sent is one answer over real HTTP.
type sent struct {
	status    int
	remaining string
	resp      gqlResponse
}

func (s sent) priced() int64 {
	if s.resp.Extensions.Cost == nil {
		return -1
	}
	return s.resp.Extensions.Cost.RequestedQueryCost
}

func sendReq(t *testing.T, req *http.Request) sent {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return sent{resp.StatusCode, resp.Header.Get(middleware.HeaderXRateLimitRemaining), decodeGraphQL(t, b)}
}

func postJSON(t *testing.T, base string, body map[string]any) sent {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/graphql", strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	return sendReq(t, req)
}

func getParams(t *testing.T, base string, params url.Values) sent {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/graphql?"+params.Encode(), nil)
	return sendReq(t, req)
}

// wsOperation runs one operation over graphql-transport-ws and returns
// its first message's type and payload.
func wsOperation(t *testing.T, base string, payload map[string]any) (string, json.RawMessage) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/graphql",
		&websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	require.NoError(t, err)
	defer c.CloseNow()
	type message struct {
		ID      string          `json:"id,omitempty"`
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload,omitempty"`
	}
	require.NoError(t, wsjson.Write(ctx, c, message{Type: "connection_init"}))
	p, _ := json.Marshal(payload)
	for {
		var m message
		require.NoError(t, wsjson.Read(ctx, c, &m))
		switch m.Type {
		case "connection_ack":
			require.NoError(t, wsjson.Write(ctx, c, message{ID: "1", Type: "subscribe", Payload: p}))
		case "ping", "pong":
		default:
			return m.Type, m.Payload
		}
	}
}

// remainingAfter reads the anonymous budget through a price-only request
// of a document the server runs.
func remainingOf(t *testing.T, base, doc string) int64 {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"query": doc, "variables": map[string]any{"n": 1}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/graphql", strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(middleware.HeaderGraphQLCost, "validate")
	s := sendReq(t, req)
	require.NotNil(t, s.resp.Extensions.Cost, "%+v", s.resp)
	require.NotNil(t, s.resp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable)
	return *s.resp.Extensions.Cost.ThrottleStatus.CurrentlyAvailable
}

func persistedStores(t *testing.T, f func(t *testing.T, store limiter.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, nil) })
	t.Run("redis", func(t *testing.T) {
		rs := redistest.StartServer(t)
		st, err := redisstore.New(rs.Client(t), redisstore.Config{Prefix: "persisted"})
		require.NoError(t, err)
		f(t, st)
	})
}

// The example server serves gqlgen's automatic persisted queries through
// the limiter: a document registered once (screened, priced and paid for)
// is then sent by hash alone, by POST, GET or WebSocket, and priced with
// its variables; an unknown hash, or one that is not its query's, pays
// invalid_cost.
func TestExampleAPQ(t *testing.T) {
	persistedStores(t, func(t *testing.T, store limiter.Store) {
		_, srv := persistedServer(t, store, filepath.Join(t.TempDir(), "costguard.yaml"), "")
		hash := trusteddocs.Hash(reposByVar)
		vars := map[string]any{"n": 5}
		spent := func(f func()) int64 {
			before := remainingOf(t, srv.URL, reposByVar)
			f()
			return before - remainingOf(t, srv.URL, reposByVar)
		}
		var s sent
		assert.EqualValues(t, 1, spent(func() { s = postJSON(t, srv.URL, map[string]any{"extensions": apq(hash), "variables": vars}) }))
		assert.Equal(t, "PERSISTED_QUERY_NOT_FOUND", s.resp.code(), "before it is registered")
		assert.EqualValues(t, 6, spent(func() {
			s = postJSON(t, srv.URL, map[string]any{"query": reposByVar, "extensions": apq(hash), "variables": vars})
		}), "registering runs and pays the document")
		assert.EqualValues(t, 6, spent(func() { s = postJSON(t, srv.URL, map[string]any{"extensions": apq(hash), "variables": vars}) }))
		assert.EqualValues(t, 6, s.priced(), "POST, hash only: %+v", s.resp)
		assert.EqualValues(t, 41, spent(func() {
			s = postJSON(t, srv.URL, map[string]any{"extensions": apq(hash), "variables": map[string]any{"n": 40}})
		}), "another value, another price")
		ext, _ := json.Marshal(apq(hash))
		assert.EqualValues(t, 6, spent(func() { s = getParams(t, srv.URL, url.Values{"extensions": {string(ext)}, "variables": {`{"n":5}`}}) }))
		assert.Equal(t, http.StatusOK, s.status, "GET, hash only: %+v", s.resp)
		assert.EqualValues(t, 6, s.priced())
		var typ string
		var payload json.RawMessage
		assert.EqualValues(t, 6, spent(func() {
			typ, payload = wsOperation(t, srv.URL, map[string]any{"extensions": apq(hash), "variables": vars})
		}))
		assert.Equal(t, "next", typ, "%s", payload)
		assert.EqualValues(t, 1, spent(func() {
			s = postJSON(t, srv.URL, map[string]any{"extensions": apq(hash), "variables": map[string]any{"n": 999999999}})
		}))
		assert.Equal(t, "MAX_BREADTH_EXCEEDED", s.resp.code(), "max_breadth holds on a hash-only request's variables")
		assert.EqualValues(t, 1, spent(func() {
			s = postJSON(t, srv.URL, map[string]any{"query": `{ user(login: "octocat") { login } }`, "extensions": apq(hash)})
		}), "a hash that is not its query's pays invalid_cost: %+v", s.resp)
		assert.EqualValues(t, 1, spent(func() {
			typ, payload = wsOperation(t, srv.URL, map[string]any{"extensions": apq(trusteddocs.Hash("{ x }"))})
		}))
		assert.Contains(t, string(payload), "PERSISTED_QUERY_NOT_FOUND", "an unknown hash over WebSocket")
	})
}

// trusted_documents in the YAML file: in mode enforce only the manifest's
// documents run, by hash or in full; the manifest is re-read on reload,
// and one that fails keeps the running one.
func TestExampleTrustedDocuments(t *testing.T) {
	persistedStores(t, func(t *testing.T, store limiter.Store) {
		dir := t.TempDir()
		manifest := filepath.Join(dir, "manifest.json")
		write := func(docs ...string) {
			m := map[string]string{}
			for _, d := range docs {
				m[trusteddocs.Hash(d)] = d
			}
			b, _ := json.Marshal(m)
			require.NoError(t, os.WriteFile(manifest, b, 0o600))
		}
		write(reposByVar)
		yaml := "graphql: {max_depth: 3}\ntrusted_documents: {file: " + manifest + ", mode: enforce, relax_structural_limits: true}\n"
		path := filepath.Join(dir, "costguard.yaml")
		s0, srv := persistedServer(t, store, path, yaml)
		hash := trusteddocs.Hash(reposByVar)

		s := postJSON(t, srv.URL, map[string]any{"documentId": "sha256:" + hash, "variables": map[string]any{"n": 5}})
		assert.Equal(t, http.StatusOK, s.status, "%+v", s.resp)
		assert.EqualValues(t, 6, s.priced())
		// gqlgen's client, hash only.
		c := gqlclient.New(s0, gqlclient.Path("/graphql"))
		var resp struct {
			User struct{ Repos []struct{ Name string } }
		}
		require.NoError(t, c.Post("", &resp, gqlclient.Extensions(apq(hash)), gqlclient.Var("n", 2)))
		assert.Len(t, resp.User.Repos, 2)

		untrusted := `query Deep { user(login: "octocat") { repos(first: 1) { owner { login } } } }`
		s = postJSON(t, srv.URL, map[string]any{"query": untrusted})
		assert.Equal(t, http.StatusForbidden, s.status)
		assert.Equal(t, middleware.CodeDocumentNotTrusted, s.resp.code())
		s = postJSON(t, srv.URL, map[string]any{"documentId": trusteddocs.Hash(untrusted)})
		assert.Equal(t, http.StatusBadRequest, s.status)
		assert.Equal(t, middleware.CodePersistedQueryNotFound, s.resp.code())

		// The reload re-reads the manifest: the deep document is trusted
		// now, and runs past max_depth 3 since the structural caps are
		// relaxed for trusted documents.
		write(reposByVar, untrusted)
		require.NoError(t, s0.reload(path))
		s = postJSON(t, srv.URL, map[string]any{"documentId": trusteddocs.Hash(untrusted)})
		assert.Equal(t, http.StatusOK, s.status, "%+v", s.resp)

		write(reposByVar, `{ user(login: "octocat") { nosuchfield } }`)
		err := s0.reload(path)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "nosuchfield")
		s = postJSON(t, srv.URL, map[string]any{"documentId": trusteddocs.Hash(untrusted)})
		assert.Equal(t, http.StatusOK, s.status, "the running manifest stays: %+v", s.resp)
	})
}

// The example manifest (Apollo's format) beside the server loads, in mode
// enforce: its operations run by documentId, priced with their variables,
// and nothing else does.
func TestExampleManifest(t *testing.T) {
	dir := t.TempDir()
	manifest, err := filepath.Abs(filepath.Join(exampleDir, "trusted-documents.json"))
	require.NoError(t, err)
	_, srv := persistedServer(t, nil, filepath.Join(dir, "costguard.yaml"), "trusted_documents: {file: "+manifest+", mode: enforce}\n")
	m, err := trusteddocs.Load(manifest, 0)
	require.NoError(t, err)
	require.Equal(t, 3, m.Len())
	var repos *trusteddocs.Document
	for _, d := range m.Documents() {
		if d.Name == "Repos" {
			repos = d
		}
	}
	require.NotNil(t, repos)
	got := postJSON(t, srv.URL, map[string]any{"documentId": "sha256:" + repos.Hash, "variables": map[string]any{"login": "octocat", "n": 2}})
	assert.Equal(t, http.StatusOK, got.status, "%+v", got.resp)
	assert.EqualValues(t, 1+2*(1+5), got.priced())
	got = postJSON(t, srv.URL, map[string]any{"query": reposByVar, "variables": map[string]any{"n": 2}})
	assert.Equal(t, http.StatusForbidden, got.status)
}

// A flood of distinct registrations, each paying its price, leaves the
// server's persisted-query cache within its bounds.
func TestExampleAPQFloodBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	require.NoError(t, os.WriteFile(path, []byte("plans:\n  anon: {burst: 100000, rate: 1, per: 1h}\napi_keys: {}\n"), 0o600))
	cfg, err := loadConfig(path)
	require.NoError(t, err)
	s, cleanup, err := newServer(cfg, deps{clock: limitertest.NewFakeClock(time.Unix(1_800_000_000, 0)), logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cleanup()) })
	const n = querycache.DefaultPersistedEntries + 200
	for i := range n {
		doc := fmt.Sprintf(`{ user(login: "octocat") { login f%d: name } }`, i)
		b, _ := json.Marshal(map[string]any{"query": doc, "extensions": apq(trusteddocs.Hash(doc))})
		r := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(string(b)))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		require.Equal(t, http.StatusOK, w.Code, "%s", w.Body)
	}
	assert.Equal(t, querycache.DefaultPersistedEntries, s.persisted.Len())
	assert.LessOrEqual(t, s.persisted.Bytes(), int64(querycache.DefaultPersistedBytes))
	c := decodeGraphQL(t, func() []byte {
		r := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(`{"query":"{ __typename }"}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(middleware.HeaderGraphQLCost, "validate")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w.Body.Bytes()
	}()).Extensions.Cost
	require.NotNil(t, c)
	assert.EqualValues(t, 100000-n, *c.ThrottleStatus.CurrentlyAvailable, "each registration paid its price, 1")
}
