package middleware_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/trusteddocs"
)

// Documents of the persisted-query tests, on the example schema: octocat
// has four repositories, so reposDoc costs 1 + n and returns 1 + 4.
const (
	reposDoc    = `query Repos($n: Int) { user(login: "octocat") { repos(first: $n) { name } } }`
	deepDoc     = `query Deep { user(login: "octocat") { repos(first: 2) { owner { repos(first: 2) { name } } } } }`
	untrustedQ  = `{ user(login: "octocat") { login } }`
	persistBurs = 1000
)

// persistedAPQ adds gqlgen's automatic persisted queries (an entry-bounded
// cache is enough for a test) before or after the limiter's extension.
func persistedAPQ(before bool) func(lim *middleware.Limiter, srv *handler.Server) http.Handler {
	return installAPQ(before, false)
}

// installAPQ is persistedAPQ, through the Limiter's PersistedQueryCache
// when wrap is set.
func installAPQ(before, wrap bool) func(lim *middleware.Limiter, srv *handler.Server) http.Handler {
	return func(lim *middleware.Limiter, srv *handler.Server) http.Handler {
		var cache graphql.Cache[string] = lru.New[string](100)
		if wrap {
			cache = lim.PersistedQueryCache(cache)
		}
		apq := extension.AutomaticPersistedQuery{Cache: cache}
		if before {
			srv.Use(apq)
			return lim.Handler(srv)
		}
		h := lim.Handler(srv)
		srv.Use(apq)
		return h
	}
}

// persistedConfig has one plan without refunds, so the budget moves by
// the prices, on store (nil: memory).
func persistedConfig(store limiter.Store) config {
	return config{Dependencies: middleware.Dependencies{
		Store: store,
	}, Policy: middleware.Policy{
		Plans: map[string]budget.Plan{
			"anon": {Burst: persistBurs, Rate: 1, Per: time.Hour, DisableRefund: true},
			"pro":  {Burst: persistBurs, Rate: 1, Per: time.Hour, DisableRefund: true},
		},
		AnonymousPlan: "anon",
	}}
}

// apqExt is the extensions member of an automatic persisted query.
func apqExt(hash string) map[string]any {
	return map[string]any{"persistedQuery": map[string]any{"version": 1, "sha256Hash": hash}}
}

// exchange is one response, decoded.
type exchange struct {
	status int
	resp   gqlResponse
}

func (x exchange) requested() int64 {
	if x.resp.Extensions.Cost == nil {
		return -1
	}
	return x.resp.Extensions.Cost.RequestedQueryCost
}

// post sends a JSON body to the adopter's server.
func (a *adopter) post(body map[string]any) exchange {
	a.t.Helper()
	b, _ := json.Marshal(body)
	return a.send(http.MethodPost, "", string(b))
}

// get sends a GET request with params.
func (a *adopter) get(params url.Values) exchange {
	a.t.Helper()
	return a.send(http.MethodGet, "?"+params.Encode(), "")
}

func (a *adopter) send(method, query, body string) exchange {
	a.t.Helper()
	req, _ := http.NewRequest(method, a.srv.URL+query, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out gqlResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		a.t.Fatalf("%s %s: not JSON: %s", method, query, raw)
	}
	return exchange{resp.StatusCode, out}
}

// wsOnce runs one operation with payload on a new graphql-transport-ws
// connection and returns its first message's payload, decoded, and type.
func (a *adopter) wsOnce(payload map[string]any) (string, gqlResponse) {
	a.t.Helper()
	s := a.dial(protoTransportWS, nil, nil)
	raw, _ := json.Marshal(payload)
	if err := s.c.WriteJSON(context.Background(), wsMessage{ID: "1", Type: "subscribe", Payload: raw}); err != nil {
		a.t.Fatal(err)
	}
	m := s.next()
	var out gqlResponse
	if m.Type == "error" {
		var errs []json.RawMessage
		_ = json.Unmarshal(m.Payload, &errs)
		_ = json.Unmarshal([]byte(`{"errors":`+string(m.Payload)+`}`), &out)
		return m.Type, out
	}
	if err := json.Unmarshal(m.Payload, &out); err != nil {
		a.t.Fatalf("ws payload %s: %v", m.Payload, err)
	}
	return m.Type, out
}

// spent runs f and returns what it took from the anonymous budget.
func (a *adopter) spent(f func()) int64 {
	a.t.Helper()
	before := a.remaining("")
	f()
	return before - a.remaining("")
}

// redisStore is a store on a redis-server of the test's own (skipped
// without one, failed under CI=true).
func redisStore(t *testing.T) limiter.Store {
	t.Helper()
	srv := redistest.StartServer(t)
	store, err := redisstore.New(srv.Client(t), redisstore.Config{Prefix: "persisted-" + t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// stores runs f on a memory store and on real Redis.
func stores(t *testing.T, f func(t *testing.T, store limiter.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, nil) })
	t.Run("redis", func(t *testing.T) { f(t, redisStore(t)) })
}

// A hash-only request is priced as the document it stands for, with its
// variables, through every transport and whichever way round gqlgen's
// persisted queries and the limiter are installed; an unknown hash and a
// hash that does not match its query pay invalid_cost.
func TestAPQPricedAsItsDocument(t *testing.T) {
	stores(t, func(t *testing.T, store limiter.Store) {
		for _, before := range []bool{false, true} {
			t.Run(fmt.Sprintf("apq before the limiter %v", before), func(t *testing.T) {
				a := newAdopter(t, persistedConfig(store), persistedAPQ(before))
				hash := trusteddocs.Hash(reposDoc)
				vars := map[string]any{"n": 5}

				if x := a.post(map[string]any{"extensions": apqExt(hash), "variables": vars}); x.resp.code() != "PERSISTED_QUERY_NOT_FOUND" {
					t.Fatalf("before registration: %d %+v", x.status, x.resp)
				}
				var x exchange
				if got := a.spent(func() { x = a.post(map[string]any{"query": reposDoc, "extensions": apqExt(hash), "variables": vars}) }); got != 6 || x.requested() != 6 {
					t.Fatalf("registration: spent %d, priced %d, %+v", got, x.requested(), x.resp)
				}
				// POST, hash only, with gqlgen's client (query "").
				c := client.New(a.h, client.AddHeader("Authorization", "Bearer "+adopterKey))
				var resp struct {
					User struct{ Repos []struct{ Name string } }
				}
				before := a.remaining(adopterKey)
				c.MustPost("", &resp, client.Extensions(apqExt(hash)), client.Var("n", 5))
				if got := before - a.remaining(adopterKey); got != 6 || len(resp.User.Repos) != 4 {
					t.Errorf("POST hash only: spent %d, %+v", got, resp)
				}
				// With another value, another price.
				if got := a.spent(func() { x = a.post(map[string]any{"extensions": apqExt(hash), "variables": map[string]any{"n": 50}}) }); got != 51 || x.requested() != 51 {
					t.Errorf("POST hash only, n=50: spent %d, %+v", got, x.resp)
				}
				// GET, the persisted query's usual transport.
				ext, _ := json.Marshal(apqExt(hash))
				if got := a.spent(func() {
					x = a.get(url.Values{"extensions": {string(ext)}, "variables": {`{"n":5}`}})
				}); got != 6 || x.status != http.StatusOK || x.requested() != 6 {
					t.Errorf("GET hash only: spent %d, %d %+v", got, x.status, x.resp)
				}
				// A WebSocket operation.
				var typ string
				var ws gqlResponse
				if got := a.spent(func() {
					typ, ws = a.wsOnce(map[string]any{"extensions": apqExt(hash), "variables": vars})
				}); got != 6 || typ != "next" || ws.Extensions.Cost == nil || ws.Extensions.Cost.RequestedQueryCost != 6 {
					t.Errorf("WebSocket hash only: spent %d, %s %+v", got, typ, ws)
				}
				// Breadth is held on the variables of a hash-only request.
				if got := a.spent(func() {
					x = a.post(map[string]any{"extensions": apqExt(hash), "variables": map[string]any{"n": 999999999}})
				}); got != 1 || x.resp.code() != "MAX_BREADTH_EXCEEDED" || x.status != http.StatusUnprocessableEntity {
					t.Errorf("first: 999999999: spent %d, %d %+v", got, x.status, x.resp)
				}
				// An unknown hash, by POST, GET and WebSocket, and a hash
				// that is not its query's: each pays invalid_cost.
				unknown := trusteddocs.Hash("{ nothing }")
				uext, _ := json.Marshal(apqExt(unknown))
				for name, f := range map[string]func() string{
					"POST unknown": func() string { return a.post(map[string]any{"extensions": apqExt(unknown)}).resp.code() },
					"GET unknown":  func() string { return a.get(url.Values{"extensions": {string(uext)}}).resp.code() },
					"WS unknown": func() string {
						_, r := a.wsOnce(map[string]any{"extensions": apqExt(unknown)})
						return r.code()
					},
					"mismatch": func() string {
						r := a.post(map[string]any{"query": untrustedQ, "extensions": apqExt(hash)})
						if len(r.resp.Errors) == 0 {
							return "none"
						}
						return r.resp.Errors[0].Message
					},
				} {
					var code string
					if got := a.spent(func() { code = f() }); got != 1 {
						t.Errorf("%s: spent %d, want invalid_cost 1 (%s)", name, got, code)
					}
					if code != "PERSISTED_QUERY_NOT_FOUND" && code != "provided APQ hash does not match query" {
						t.Errorf("%s: %q", name, code)
					}
				}
			})
		}
	})
}

// A document registered through the wrapper is screened once, when it is
// registered: one past the bounds is refused then (never cached), and one
// registered under looser bounds is held by the bounds in force.
func TestAPQRegistrationScreened(t *testing.T) {
	for _, before := range []bool{false, true} {
		t.Run(fmt.Sprintf("apq before the limiter %v", before), func(t *testing.T) {
			cfg := persistedConfig(nil)
			cfg.GraphQL.MaxSelections = 3
			a := newAdopter(t, cfg, persistedAPQ(before))
			big := `{ user(login: "octocat") { login name repos(first: 1) { name } } }`
			hash := trusteddocs.Hash(big)
			if x := a.post(map[string]any{"query": big, "extensions": apqExt(hash)}); x.resp.code() != "MAX_SELECTIONS_EXCEEDED" {
				t.Fatalf("registering a document past the bounds: %d %+v", x.status, x.resp)
			}
			if x := a.post(map[string]any{"extensions": apqExt(hash)}); x.resp.code() != "PERSISTED_QUERY_NOT_FOUND" {
				t.Fatalf("then its hash: %+v", x.resp)
			}
			small := `{ user(login: "octocat") { login name } }`
			sh := trusteddocs.Hash(small)
			if x := a.post(map[string]any{"query": small, "extensions": apqExt(sh)}); x.status != http.StatusOK || len(x.resp.Errors) > 0 {
				t.Fatalf("registering %+v", x.resp)
			}
			cfg.GraphQL.MaxSelections = 2
			if err := a.lim.Reload(a.reloadable(cfg).Policy); err != nil {
				t.Fatal(err)
			}
			var x exchange
			if got := a.spent(func() { x = a.post(map[string]any{"extensions": apqExt(sh)}) }); got != 1 || x.resp.code() != "MAX_SELECTIONS_EXCEEDED" {
				t.Errorf("hash only under tighter bounds: spent %d, %+v", got, x.resp)
			}
		})
	}
}

// reloadable is cfg as the adopter's Limiter was built (its clock,
// logger and store), for Reload.
func (a *adopter) reloadable(cfg config) config {
	cfg.Clock = a.clock
	cfg.Logger = a.cfg.Logger
	cfg.Store = a.cfg.Store
	cfg.APIKeys = a.cfg.APIKeys
	return cfg
}

// writeManifest writes a flat manifest of docs and returns its path.
func writeManifest(t *testing.T, dir string, docs ...string) string {
	t.Helper()
	m := map[string]string{}
	for _, d := range docs {
		m[trusteddocs.Hash(d)] = d
	}
	b, _ := json.Marshal(m)
	path := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// In mode enforce only the manifest's documents run, named by hash (APQ's
// shape or documentId) or sent in full, by POST, GET and WebSocket, each
// priced with its variables; anything else is refused with a stable code
// and pays invalid_cost.
func TestTrustedDocumentsEnforce(t *testing.T) {
	stores(t, func(t *testing.T, store limiter.Store) {
		// gqlgen's persisted queries after the Limiter's extension, or
		// before it with the Limiter's cache.
		t.Run("apq after", func(t *testing.T) { testTrustedEnforce(t, store, installAPQ(false, false)) })
		t.Run("apq before, PersistedQueryCache", func(t *testing.T) { testTrustedEnforce(t, store, installAPQ(true, true)) })
	})
}

func testTrustedEnforce(t *testing.T, store limiter.Store, install func(*middleware.Limiter, *handler.Server) http.Handler) {
	{
		cfg := persistedConfig(store)
		// { __typename } is there for the tests to read the budget with.
		cfg.TrustedDocuments = middleware.TrustedDocumentsOptions{File: writeManifest(t, t.TempDir(), reposDoc, "{ __typename }"), Mode: trusteddocs.Enforce}
		a := newAdopter(t, cfg, install)
		hash := trusteddocs.Hash(reposDoc)
		vars := map[string]any{"n": 5}
		ext, _ := json.Marshal(apqExt(hash))
		for name, f := range map[string]func() exchange{
			"POST apq":        func() exchange { return a.post(map[string]any{"extensions": apqExt(hash), "variables": vars}) },
			"POST documentId": func() exchange { return a.post(map[string]any{"documentId": "sha256:" + hash, "variables": vars}) },
			"POST full":       func() exchange { return a.post(map[string]any{"query": reposDoc, "variables": vars}) },
			"POST null query": func() exchange {
				return a.post(map[string]any{"query": nil, "documentId": hash, "variables": vars})
			},
			"GET apq": func() exchange {
				return a.get(url.Values{"extensions": {string(ext)}, "variables": {`{"n":5}`}})
			},
			"GET documentId": func() exchange {
				return a.get(url.Values{"documentId": {"sha256:" + hash}, "variables": {`{"n":5}`}})
			},
			"WS apq": func() exchange {
				typ, r := a.wsOnce(map[string]any{"extensions": apqExt(hash), "variables": vars})
				if typ != "next" {
					t.Errorf("WS: %s", typ)
				}
				return exchange{http.StatusOK, r}
			},
		} {
			var x exchange
			if got := a.spent(func() { x = f() }); got != 6 || x.status != http.StatusOK || len(x.resp.Errors) > 0 || x.requested() != 6 {
				t.Errorf("%s: spent %d, %d %+v", name, got, x.status, x.resp)
			}
		}
		unknown := trusteddocs.Hash(untrustedQ)
		uext, _ := json.Marshal(apqExt(unknown))
		for _, tc := range []struct {
			name   string
			f      func() exchange
			status int
			code   string
		}{
			{"POST untrusted", func() exchange { return a.post(map[string]any{"query": untrustedQ}) }, 403, middleware.CodeDocumentNotTrusted},
			{"POST untrusted with its hash", func() exchange {
				return a.post(map[string]any{"query": untrustedQ, "extensions": apqExt(unknown)})
			}, 403, middleware.CodeDocumentNotTrusted},
			{"POST unknown hash", func() exchange { return a.post(map[string]any{"extensions": apqExt(unknown)}) }, 400, middleware.CodePersistedQueryNotFound},
			{"POST unknown documentId", func() exchange { return a.post(map[string]any{"documentId": unknown}) }, 400, middleware.CodePersistedQueryNotFound},
			{"POST malformed documentId", func() exchange { return a.post(map[string]any{"documentId": "md5:x"}) }, 400, middleware.CodePersistedQueryNotFound},
			{"GET untrusted", func() exchange { return a.get(url.Values{"query": {untrustedQ}}) }, 403, middleware.CodeDocumentNotTrusted},
			{"GET unknown hash", func() exchange { return a.get(url.Values{"extensions": {string(uext)}}) }, 400, middleware.CodePersistedQueryNotFound},
			{"WS untrusted", func() exchange {
				_, r := a.wsOnce(map[string]any{"query": untrustedQ})
				return exchange{0, r}
			}, 0, middleware.CodeDocumentNotTrusted},
			{"WS unknown hash", func() exchange {
				_, r := a.wsOnce(map[string]any{"extensions": apqExt(unknown)})
				return exchange{0, r}
			}, 0, middleware.CodePersistedQueryNotFound},
		} {
			var x exchange
			if got := a.spent(func() { x = tc.f() }); got != 1 || x.status != tc.status || x.resp.code() != tc.code {
				t.Errorf("%s: spent %d, %d %+v; want invalid_cost, %d %s", tc.name, got, x.status, x.resp, tc.status, tc.code)
			}
		}
		// Trust never lifts the breadth cap on variables, nor the budget.
		var x exchange
		if got := a.spent(func() {
			x = a.post(map[string]any{"extensions": apqExt(hash), "variables": map[string]any{"n": 999999999}})
		}); got != 1 || x.resp.code() != "MAX_BREADTH_EXCEEDED" {
			t.Errorf("first: 999999999: spent %d, %+v", got, x.resp)
		}
	}
}

// relax_structural_limits lifts depth (and the other structural caps)
// for trusted documents only; never the breadth of a variable, nor the
// budget, nor the bounds on variables.
func TestTrustedDocumentsRelax(t *testing.T) {
	for _, relax := range []bool{false, true} {
		t.Run(fmt.Sprintf("relax %v", relax), func(t *testing.T) {
			cfg := persistedConfig(nil)
			cfg.GraphQL.MaxDepth = 3
			cfg.GraphQL.MaxSelections = 4
			cfg.GraphQL.MaxVariableValues = 5
			cfg.Plans = map[string]budget.Plan{
				"anon": {Burst: 100, Rate: 1, Per: time.Hour, DisableRefund: true},
				"pro":  {Burst: 100, Rate: 1, Per: time.Hour, DisableRefund: true},
			}
			cfg.TrustedDocuments = middleware.TrustedDocumentsOptions{
				File: writeManifest(t, t.TempDir(), reposDoc, deepDoc), Mode: trusteddocs.AllowUnlisted, RelaxStructuralLimits: relax,
			}
			a := newAdopter(t, cfg, persistedAPQ(false))
			deepUntrusted := strings.Replace(deepDoc, "first: 2) { name", "first: 3) { name", 1)
			x := a.post(map[string]any{"documentId": trusteddocs.Hash(deepDoc)})
			switch {
			case relax && (x.status != 200 || len(x.resp.Errors) > 0 || x.requested() != 1+2+2*(1+2)):
				t.Errorf("trusted deep document, relaxed: %d %+v", x.status, x.resp)
			case !relax && x.resp.code() != "MAX_SELECTIONS_EXCEEDED":
				t.Errorf("trusted deep document, not relaxed: %d %+v", x.status, x.resp)
			}
			if x := a.post(map[string]any{"query": deepUntrusted}); x.resp.code() != "MAX_SELECTIONS_EXCEEDED" {
				t.Errorf("an unlisted deep document: %d %+v", x.status, x.resp)
			}
			for _, tc := range []struct {
				vars map[string]any
				code string
			}{
				{map[string]any{"n": 999999999}, "MAX_BREADTH_EXCEEDED"},
				{map[string]any{"n": 100}, "MAX_COST_EXCEEDED"},                            // 101 points: more than the burst
				{map[string]any{"n": 5, "x": []int{1, 2, 3, 4, 5}}, "VARIABLES_TOO_LARGE"}, // more values than allowed
			} {
				var x exchange
				if got := a.spent(func() { x = a.post(map[string]any{"documentId": trusteddocs.Hash(reposDoc), "variables": tc.vars}) }); got != 1 || x.resp.code() != tc.code {
					t.Errorf("%v: spent %d, %d %+v; want %s", tc.vars, got, x.status, x.resp, tc.code)
				}
			}
		})
	}
}

// The manifest is checked at start and at every Reload, which re-reads
// the file; a manifest that fails keeps the running one, saying why.
func TestTrustedDocumentsReload(t *testing.T) {
	dir := t.TempDir()
	cfg := persistedConfig(nil)
	cfg.TrustedDocuments = middleware.TrustedDocumentsOptions{File: writeManifest(t, dir, reposDoc, "{ __typename }")}
	a := newAdopter(t, cfg, nil)
	if x := a.post(map[string]any{"query": untrustedQ}); x.resp.code() != middleware.CodeDocumentNotTrusted {
		t.Fatalf("untrusted before the reload: %+v", x.resp)
	}
	writeManifest(t, dir, reposDoc, "{ __typename }", untrustedQ)
	if err := a.lim.Reload(a.reloadable(cfg).Policy); err != nil {
		t.Fatal(err)
	}
	if x := a.post(map[string]any{"query": untrustedQ}); x.status != 200 || len(x.resp.Errors) > 0 {
		t.Fatalf("trusted after the reload: %+v", x.resp)
	}
	// A document the schema refuses, and a file that is not a manifest:
	// the reload fails naming them, and the running manifest stays.
	bad := `{ user(login: "octocat") { nosuchfield } }`
	writeManifest(t, dir, reposDoc, "{ __typename }", bad)
	err := a.lim.Reload(a.reloadable(cfg).Policy)
	if err == nil || !strings.Contains(err.Error(), trusteddocs.Hash(bad)) || !strings.Contains(err.Error(), "nosuchfield") {
		t.Fatalf("Reload with an invalid document: %v", err)
	}
	if err := os.WriteFile(cfg.TrustedDocuments.File, []byte(`{"`+trusteddocs.Hash("x")+`": "y"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.lim.Reload(a.reloadable(cfg).Policy); err == nil || !strings.Contains(err.Error(), "not the SHA-256") {
		t.Fatalf("Reload with a mismatched id: %v", err)
	}
	if x := a.post(map[string]any{"query": untrustedQ}); x.status != 200 || len(x.resp.Errors) > 0 {
		t.Fatalf("the running manifest stays: %+v", x.resp)
	}
}

func TestTrustedDocumentsConfigErrors(t *testing.T) {
	dir := t.TempDir()
	path := writeManifest(t, dir, reposDoc)
	m, _ := trusteddocs.Load(path, 0)
	for _, tc := range []struct {
		o    middleware.TrustedDocumentsOptions
		want string
	}{
		{middleware.TrustedDocumentsOptions{File: path, Mode: "strict"}, `mode "strict"`},
		{middleware.TrustedDocumentsOptions{Mode: trusteddocs.Enforce}, "a mode but no file"},
		{middleware.TrustedDocumentsOptions{File: path, Manifest: m}, "not both"},
		{middleware.TrustedDocumentsOptions{File: filepath.Join(dir, "missing.json")}, "missing.json"},
	} {
		cfg := persistedConfig(nil)
		cfg.TrustedDocuments = tc.o
		_, err := middleware.New(cfg.Dependencies, cfg.Policy)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}

// BenchmarkPersisted measures one POST through gqlgen and the limiter on
// the test schema, by the document's text, by its hash alone (gqlgen's
// automatic persisted queries) and by documentId against trusted
// documents in mode enforce, with a budget that never runs out; and a
// refused unknown hash, which pays invalid_cost.
//
//	go test -run '^$' -bench BenchmarkPersisted -benchmem ./middleware/
func BenchmarkPersisted(b *testing.B) {
	const doc = `query R($n: Int) { viewer { repos(first: $n) { issues(first: 5) { title } } } }`
	hash := trusteddocs.Hash(doc)
	vars := map[string]any{"n": 10}
	build := func(b *testing.B, trusted bool) http.Handler {
		cfg := config{Dependencies: middleware.Dependencies{
			Logger: discardLogger(),
		}, Policy: middleware.Policy{
			Plans:         map[string]budget.Plan{"anon": {Burst: 1e9, Rate: 1e9, Per: time.Second}},
			AnonymousPlan: "anon",
		}}
		if trusted {
			m, err := trusteddocs.Parse([]byte(`{"` + hash + `": ` + strconvQuote(doc) + `}`))
			if err != nil {
				b.Fatal(err)
			}
			cfg.TrustedDocuments = middleware.TrustedDocumentsOptions{Manifest: m}
		}
		lim, err := middleware.New(cfg.Dependencies, cfg.Policy)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { lim.Close() })
		srv := handler.New(newTestSchema().executable())
		srv.AddTransport(transport.POST{})
		srv.SetQueryCache(lru.New[*ast.QueryDocument](100))
		h := lim.Handler(srv)
		srv.Use(extension.AutomaticPersistedQuery{Cache: lim.PersistedQueryCache(lru.New[string](100))})
		return h
	}
	run := func(b *testing.B, h http.Handler, body map[string]any, want int) {
		raw, _ := json.Marshal(body)
		b.ReportAllocs()
		for b.Loop() {
			r := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(string(raw)))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != want {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	}
	b.Run("full document", func(b *testing.B) {
		run(b, build(b, false), map[string]any{"query": doc, "variables": vars}, http.StatusOK)
	})
	b.Run("apq hash only", func(b *testing.B) {
		h := build(b, false)
		reg, _ := json.Marshal(map[string]any{"query": doc, "variables": vars, "extensions": apqExt(hash)})
		r := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(string(reg)))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(httptest.NewRecorder(), r) // registers it
		run(b, h, map[string]any{"variables": vars, "extensions": apqExt(hash)}, http.StatusOK)
	})
	b.Run("trusted documentId", func(b *testing.B) {
		run(b, build(b, true), map[string]any{"documentId": "sha256:" + hash, "variables": vars}, http.StatusOK)
	})
	b.Run("unknown hash refused", func(b *testing.B) {
		run(b, build(b, true), map[string]any{"extensions": apqExt(trusteddocs.Hash("{ x }"))}, http.StatusBadRequest)
	})
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// An Apollo manifest and a document of two operations chosen by
// operationName: the hash is filled in and the choice priced by its own plan, and an
// untrusted document is refused before gqlgen parses it.
func TestTrustedDocumentsApollo(t *testing.T) {
	const two = `query One { user(login: "octocat") { login } } query Many($n: Int) { user(login: "octocat") { repos(first: $n) { name } } }`
	manifest, _ := json.Marshal(map[string]any{
		"format": trusteddocs.ApolloFormat, "version": 1,
		"operations": []map[string]string{
			{"id": trusteddocs.Hash(two), "name": "Many", "type": "query", "body": two},
			{"id": trusteddocs.Hash("{ __typename }"), "name": "", "type": "query", "body": "{ __typename }"},
		},
	})
	path := filepath.Join(t.TempDir(), "apollo.json")
	if err := os.WriteFile(path, manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := persistedConfig(nil)
	cfg.TrustedDocuments = middleware.TrustedDocumentsOptions{File: path}
	a := newAdopter(t, cfg, nil)
	hash := trusteddocs.Hash(two)
	x := a.post(map[string]any{"operationName": "Many", "variables": map[string]any{"n": 7}, "extensions": apqExt(hash)})
	if len(x.resp.Errors) > 0 || x.requested() != 8 {
		t.Errorf("Many, n=7: %d %+v", x.status, x.resp)
	}
	x = a.post(map[string]any{"operationName": "One", "extensions": apqExt(hash)})
	if len(x.resp.Errors) > 0 || x.requested() != 1 {
		t.Errorf("One: %d %+v", x.status, x.resp)
	}
	x = a.post(map[string]any{"query": untrustedQ})
	if x.resp.code() != middleware.CodeDocumentNotTrusted || x.status != http.StatusForbidden {
		t.Errorf("untrusted: %d %+v", x.status, x.resp)
	}
	x = a.post(map[string]any{"extensions": apqExt(trusteddocs.Hash(untrustedQ))})
	if x.resp.code() != middleware.CodePersistedQueryNotFound || x.status != http.StatusBadRequest {
		t.Errorf("unknown hash: %d %+v", x.status, x.resp)
	}
}

// A GET request's extensions are bounded before the trusted documents
// read a hash from them.
func TestTrustedDocumentsGETExtensionsBounded(t *testing.T) {
	cfg := persistedConfig(nil)
	cfg.GraphQL.MaxVariableValues = 10
	cfg.TrustedDocuments = middleware.TrustedDocumentsOptions{File: writeManifest(t, t.TempDir(), reposDoc, "{ __typename }")}
	a := newAdopter(t, cfg, nil)
	big := apqExt(trusteddocs.Hash(reposDoc))
	big["padding"] = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	ext, _ := json.Marshal(big)
	var x exchange
	if got := a.spent(func() { x = a.get(url.Values{"extensions": {string(ext)}}) }); got != 1 || x.resp.code() != middleware.CodeVariablesTooLarge {
		t.Errorf("spent %d, %d %+v", got, x.status, x.resp)
	}
}

// Shadow mode lets static caps through to watch them, never an untrusted
// document: mode allow_unlisted is the way to watch before enforcing.
func TestTrustedDocumentsNotShadowed(t *testing.T) {
	cfg := persistedConfig(nil)
	cfg.Mode = budget.Shadow
	cfg.TrustedDocuments = middleware.TrustedDocumentsOptions{File: writeManifest(t, t.TempDir(), reposDoc)}
	a := newAdopter(t, cfg, persistedAPQ(false))
	if x := a.post(map[string]any{"query": untrustedQ}); x.status != http.StatusForbidden || x.resp.code() != middleware.CodeDocumentNotTrusted {
		t.Errorf("POST: %d %+v", x.status, x.resp)
	}
	if _, r := a.wsOnce(map[string]any{"query": untrustedQ}); r.code() != middleware.CodeDocumentNotTrusted {
		t.Errorf("WebSocket: %+v", r)
	}
}

// PersistedQueryCache answers with the trusted documents first; in mode
// enforce with nothing else, and it stores nothing a client registers.
func TestPersistedQueryCache(t *testing.T) {
	ctx := context.Background()
	other := `{ user(login: "octocat") { name } }`
	for _, mode := range []trusteddocs.Mode{trusteddocs.Enforce, trusteddocs.AllowUnlisted} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := persistedConfig(nil)
			cfg.TrustedDocuments = middleware.TrustedDocumentsOptions{File: writeManifest(t, t.TempDir(), reposDoc), Mode: mode}
			lim := newLimiter(t, cfg)
			inner := lru.New[string](10)
			c := lim.PersistedQueryCache(inner)
			if got, ok := c.Get(ctx, strings.ToUpper(trusteddocs.Hash(reposDoc))); !ok || got != reposDoc {
				t.Errorf("a trusted hash: %q %v", got, ok)
			}
			c.Add(ctx, trusteddocs.Hash(other), other)
			_, stored := inner.Get(ctx, trusteddocs.Hash(other))
			_, found := c.Get(ctx, trusteddocs.Hash(other))
			if want := mode == trusteddocs.AllowUnlisted; stored != want || found != want {
				t.Errorf("a registration: stored %v, found %v; want %v", stored, found, want)
			}
		})
	}
	// Without trusted documents it is the cache it wraps.
	lim := newLimiter(t, persistedConfig(nil))
	c := lim.PersistedQueryCache(lru.New[string](10))
	c.Add(ctx, trusteddocs.Hash(other), other)
	if got, ok := c.Get(ctx, trusteddocs.Hash(other)); !ok || got != other {
		t.Errorf("without trusted documents: %q %v", got, ok)
	}
}

// Persisted queries over the transports the other tests leave out: a
// multipart upload (the operations field carrying only the hash) and SSE
// pay the document's price, as POST does; an unknown hash over either pays
// invalid_cost.
func TestAPQOverMultipartAndSSE(t *testing.T) {
	stores(t, func(t *testing.T, store limiter.Store) {
		a := newAdopter(t, persistedConfig(store), persistedAPQ(false))
		const size = 4 << 10
		ops := func(doc, hash string) string {
			body := map[string]any{"extensions": apqExt(hash), "variables": map[string]any{"file": nil}}
			if doc != "" {
				body["query"] = doc
			}
			b, _ := json.Marshal(body)
			return string(b)
		}
		const price = 11 // the mutation's 10 and its File object's 1, as a plain upload pays
		hash := trusteddocs.Hash(attachDoc)
		for _, step := range []struct {
			name string
			doc  string
		}{{"registration", attachDoc}, {"hash only", ""}} {
			var resp *http.Response
			var body []byte
			got := a.spent(func() { resp, body = a.upload(ops(step.doc, hash), size, false) })
			r := decode(t, body)
			if resp.StatusCode != http.StatusOK || len(r.Errors) > 0 || !strings.Contains(string(r.Data), `"size":4096`) {
				t.Fatalf("multipart %s: %d %s", step.name, resp.StatusCode, body)
			}
			if got != price || r.Extensions.Cost == nil || r.Extensions.Cost.RequestedQueryCost != price {
				t.Errorf("multipart %s: spent %d, want the document's price %d (%s)", step.name, got, price, body)
			}
		}
		unknown := trusteddocs.Hash("{ nothing }")
		var body []byte
		if got := a.spent(func() { _, body = a.upload(ops("", unknown), size, false) }); got != 1 || decode(t, body).code() != "PERSISTED_QUERY_NOT_FOUND" {
			t.Errorf("multipart unknown hash: spent %d, %s", got, body)
		}

		// SSE: the repositories query registered by POST, then hash only.
		reposHash := trusteddocs.Hash(reposDoc)
		vars := map[string]any{"n": 5}
		if x := a.post(map[string]any{"query": reposDoc, "extensions": apqExt(reposHash), "variables": vars}); x.status != http.StatusOK {
			t.Fatalf("registration: %d %+v", x.status, x.resp)
		}
		sse := func(hash string) (int, []byte) {
			b, _ := json.Marshal(map[string]any{"extensions": apqExt(hash), "variables": vars})
			return a.postAccept(string(b), "text/event-stream")
		}
		var status int
		var stream []byte
		if got := a.spent(func() { status, stream = sse(reposHash) }); got != 6 || status != http.StatusOK {
			t.Fatalf("SSE hash only: spent %d, want 6; %d %s", got, status, stream)
		}
		data := readSSEEvent(t, bufio.NewReader(strings.NewReader(string(stream))))
		if r := decode(t, data); r.Extensions.Cost == nil || r.Extensions.Cost.RequestedQueryCost != 6 || !strings.Contains(string(r.Data), `"repos"`) {
			t.Errorf("SSE hash only: %s", data)
		}
		if got := a.spent(func() { status, stream = sse(unknown) }); got != 1 || !strings.Contains(string(stream), "PERSISTED_QUERY_NOT_FOUND") {
			t.Errorf("SSE unknown hash: spent %d, %d %s", got, status, stream)
		}
	})
}

// In mode enforce an untrusted document is refused over multipart and SSE
// too, before it runs, paying invalid_cost; a trusted upload runs.
func TestTrustedDocumentsEnforceMultipartAndSSE(t *testing.T) {
	cfg := persistedConfig(nil)
	cfg.TrustedDocuments = middleware.TrustedDocumentsOptions{File: writeManifest(t, t.TempDir(), attachDoc, "{ __typename }"), Mode: trusteddocs.Enforce}
	a := newAdopter(t, cfg, installAPQ(false, false))
	upload := func(doc string) (int, gqlResponse, []byte) {
		b, _ := json.Marshal(map[string]any{"query": doc, "variables": map[string]any{"file": nil}})
		var resp *http.Response
		var body []byte
		resp, body = a.upload(string(b), 1<<10, false)
		return resp.StatusCode, decode(t, body), body
	}
	var status int
	var r gqlResponse
	var body []byte
	if got := a.spent(func() { status, r, body = upload(attachDoc) }); got != 11 || status != http.StatusOK || len(r.Errors) > 0 {
		t.Errorf("trusted upload: spent %d, %d %s", got, status, body)
	}
	untrustedUpload := `mutation($file: Upload!) { attachFile(issue: "I_2", file: $file) { size } }`
	calls := a.res.Calls()
	if got := a.spent(func() { status, r, body = upload(untrustedUpload) }); got != 1 || status != http.StatusForbidden || r.code() != middleware.CodeDocumentNotTrusted {
		t.Errorf("untrusted upload: spent %d, %d %s", got, status, body)
	}

	var stream []byte
	if got := a.spent(func() {
		_, stream = a.postAccept(`{"query":"{ user(login: \"octocat\") { login } }"}`, "text/event-stream")
	}); got != 1 || !strings.Contains(string(stream), middleware.CodeDocumentNotTrusted) {
		t.Errorf("untrusted SSE: spent %d, %s", got, stream)
	}
	if n := a.res.Calls() - calls; n != 0 {
		t.Errorf("%d resolvers ran for the untrusted upload and SSE query, want none", n)
	}
}
