package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/middleware"
)

// The attacks of the threat model (docs/threat-model.md), at the sizes it
// measures them, against the example server with its default configuration. TestAttacks sends each
// through real HTTP, checks that it is refused or bounded and what it is
// charged, then sends 20 copies at once and bounds the heap they raise;
// BenchmarkAttacks measures the server's time and allocations per request
// (docs/threat-model.md quotes both).

// attack is one hostile request.
type attack struct {
	name string
	// method and target default to POST /graphql; body builds the body.
	method, target string
	body           func() string
	// drained: the client has spent its whole budget first.
	drained bool
	// status and code expected; charged is the points it costs.
	status  int
	code    string
	charged int64
}

// repeatJoin is n copies of format with # replaced by the index, joined by
// sep.
func repeatJoin(n int, format, sep string) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(strings.ReplaceAll(format, "#", strconv.Itoa(i)))
	}
	return b.String()
}

func jsonBody(query string, vars map[string]any) string {
	m := map[string]any{"query": query}
	if vars != nil {
		m["variables"] = vars
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// stringIntQuery takes its slicing arguments from $f: Int, which a client
// may send as a JSON string. gqlgen reads "1000000" as 1,000,000, and so
// must the price.
const stringIntQuery = `query($f:Int){ user(login:"octocat") { repos(first:$f) { issues(first:$f) { title } } } }`

var attacks = []attack{
	{
		name:   "an Int slicing argument sent as the string \"1000000\"",
		body:   func() string { return jsonBody(stringIntQuery, map[string]any{"f": "1000000"}) },
		status: http.StatusUnprocessableEntity, code: complexity.CodeMaxBreadthExceeded, charged: 1,
	},
	{
		name:   "an Int slicing argument sent as the string \"100\"",
		body:   func() string { return jsonBody(stringIntQuery, map[string]any{"f": "100"}) },
		status: http.StatusUnprocessableEntity, code: complexity.CodeMaxCostExceeded, charged: 1, // 10,101 points
	},
	{
		name:   "an Int slicing argument sent as the string \"-5\"",
		body:   func() string { return jsonBody(stringIntQuery, map[string]any{"f": "-5"}) },
		status: http.StatusUnprocessableEntity, code: complexity.CodeMaxBreadthExceeded, charged: 1,
	},
	{
		name:   "an Int slicing argument sent as the string \"3\"",
		body:   func() string { return jsonBody(stringIntQuery, map[string]any{"f": "3"}) },
		status: http.StatusOK, charged: 1 + 3*(1+3), // priced as the number 3
	},
	{
		name:   "8,000 __typename (88 KB)",
		body:   func() string { return jsonBody("{"+strings.Repeat(" __typename", 8000)+" }", nil) },
		status: http.StatusUnprocessableEntity, code: complexity.CodeMaxSelectionsExceeded, charged: 1,
	},
	{
		name:    "8,000 __typename from a client with 0 points left",
		body:    func() string { return jsonBody("{"+strings.Repeat(" __typename", 8000)+" }", nil) },
		drained: true, status: http.StatusTooManyRequests, code: budget.CodeRateLimited,
	},
	{
		name:   "65,000 aliases (972 KB)",
		body:   func() string { return jsonBody("{"+repeatJoin(65000, "a#:__typename", " ")[:972_000]+"}", nil) },
		status: http.StatusUnprocessableEntity, code: complexity.CodeMaxSelectionsExceeded, charged: 1,
	},
	{
		name:   "90,000 aliases (1.4 MB)",
		body:   func() string { return jsonBody("{"+repeatJoin(90000, "a#:__typename", " ")+"}", nil) },
		status: http.StatusRequestEntityTooLarge, code: middleware.CodeRequestTooLarge, charged: 1,
	},
	{
		name:   "500 __typename, the most max_selections lets through",
		body:   func() string { return jsonBody("{"+strings.Repeat(" __typename", 500)+" }", nil) },
		status: http.StatusOK, charged: 1,
	},
	{
		name:   "500 aliases",
		body:   func() string { return jsonBody("{"+repeatJoin(500, "a#:__typename", " ")+"}", nil) },
		status: http.StatusUnprocessableEntity, code: complexity.CodeMaxAliasesExceeded, charged: 1,
	},
	{
		name: "5,000 aliased __schema (549 KB)",
		body: func() string {
			return jsonBody("{"+repeatJoin(5000, "s#: __schema { types { name kind description fields { name description type { name kind ofType { name } } } } }", " ")+"}", nil)
		},
		status: http.StatusUnprocessableEntity, code: complexity.CodeMaxSelectionsExceeded, charged: 1,
	},
	{
		name: "300,000 undeclared {} variables (900 KB)",
		body: func() string {
			vars := repeatJoin(300000, `"#":{}`, ",")
			return `{"query":"{ __typename }","variables":{` + vars[:strings.LastIndexByte(vars[:900_000-40], ',')] + `}}`
		},
		status: http.StatusBadRequest, code: middleware.CodeVariablesTooLarge, charged: 1,
	},
	{
		name: "one 900 KB list variable",
		body: func() string {
			return `{"query":"query($ids: [ID!]) { __typename }","variables":{"ids":[` + repeatJoin(150000, `#`, ",") + `]}}`
		},
		status: http.StatusBadRequest, code: middleware.CodeVariablesTooLarge, charged: 1,
	},
	{
		name:   "a valid 900 KB document",
		body:   func() string { return jsonBody(`{ __type(name: "`+strings.Repeat("x", 900_000)+`") { name } }`, nil) },
		status: http.StatusOK, charged: 1, // min_cost: an operation's first __type is free of introspection_cost, like a tool's schema fetch
	},
	{
		name: "a valid 900 KB variable",
		body: func() string {
			return jsonBody(`mutation($t: String!) { createIssue(repo: "hello-world", title: $t) { id } }`, map[string]any{"t": strings.Repeat("x", 900_000)})
		},
		status: http.StatusOK, charged: 11,
	},
	{
		name:   "mutation by GET",
		method: http.MethodGet,
		target: "/graphql?query=" + strings.ReplaceAll(`mutation{createIssue(repo:"hello-world",title:"x"){id}}`, " ", "%20"),
		status: http.StatusNotAcceptable, charged: 0,
	},
}

// request builds the attack's request once, so that sending copies of it
// costs the test's own heap nothing but the request.
func (a attack) request() (method, target, body string) {
	method, target = a.method, a.target
	if method == "" {
		method, target = http.MethodPost, "/graphql"
	}
	if a.body != nil {
		body = a.body()
	}
	return method, target, body
}

// attackClient waits for 100 Continue before sending a body, so that a
// body the server refuses by its declared length is never sent.
var attackClient = &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second, MaxIdleConnsPerHost: 32}}

// send does one request from the anonymous client of a real HTTP server.
func send(t testing.TB, url, method, target, body string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url+target, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if len(body) > 64<<10 {
		req.Header.Set("Expect", "100-continue")
	}
	resp, err := attackClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// drain spends the anonymous client's whole budget (500 points) on REST
// searches (10 points each).
func drain(t *testing.T, url string) {
	t.Helper()
	for i := 0; ; i++ {
		resp, err := http.Get(url + "/api/search?q=octo")
		require.NoError(t, err)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			return
		}
		require.Less(t, i, 100, "the budget never ran out")
	}
}

func TestAttacks(t *testing.T) {
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			// Charges read as requested prices: no refunds of unused cost.
			ts := newTestServer(t, withoutRefunds(defaultConfig()), deps{})
			hs := httptest.NewServer(ts.h)
			t.Cleanup(hs.Close)
			before := int64(500)
			if a.drained {
				drain(t, hs.URL)
				before = 0
			}
			method, target, reqBody := a.request()
			calls := ts.res.Calls()
			resp, body := send(t, hs.URL, method, target, reqBody)
			require.Equal(t, a.status, resp.StatusCode, "%.300s", body)
			if a.code != "" {
				assert.Equal(t, a.code, decodeGraphQL(t, body).code())
			}
			if a.status != http.StatusOK {
				assert.Less(t, len(body), 1024, "a refusal is short: %.300s", body)
				assert.Equal(t, calls, ts.res.Calls(), "a resolver ran")
			}
			// What it cost, read from the next request's headers.
			probe, err := http.Get(hs.URL + "/api/users/octocat")
			require.NoError(t, err)
			probe.Body.Close()
			if before > 0 {
				assert.Equal(t, before-a.charged-1, headerInt(t, probe.Header, middleware.HeaderXRateLimitRemaining), "charged")
			}

			// Twenty copies at once raise the heap by less than 50 MB.
			assert.Less(t, heapRaisedBy(t, 20, func() { send(t, hs.URL, method, target, reqBody) }), uint64(50<<20))
		})
	}
}

// heapRaisedBy runs fn n times at once and returns how far the heap in use
// rose above where it started, sampled every millisecond.
func heapRaisedBy(t *testing.T, n int, fn func()) uint64 {
	t.Helper()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	var wg sync.WaitGroup
	for range n {
		wg.Go(fn)
	}
	wg.Wait()
	close(done)
	<-sampled
	t.Logf("heap in use: %d MB, peak +%d MB with %d in flight", base>>20, (peak-base)>>20, n)
	return peak - base
}

// Documents that are valid and admitted are cached once parsed: gqlgen's
// cache is bounded by bytes, so a stream of distinct large documents does
// not pile up.
func TestQueryCacheBoundedUnderDistinctDocuments(t *testing.T) {
	cfg := defaultConfig()
	cfg.Plans["anon"] = planConfig{Plan: budget.Plan{Burst: 1_000_000_000, Rate: 1_000_000_000, Per: time.Second}}
	ts := newTestServer(t, cfg, deps{})
	hs := httptest.NewServer(ts.h)
	t.Cleanup(hs.Close)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	const docs, size = 60, 900_000 // 54 MB of distinct valid documents
	for i := range docs {
		name := fmt.Sprintf("%06d", i) + strings.Repeat("x", size)
		resp, body := send(t, hs.URL, http.MethodPost, "/graphql", jsonBody(`{ __type(name: "`+name+`") { name } }`, nil))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%.300s", body)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	retained := int64(ms.HeapInuse) - int64(base)
	t.Logf("%d distinct %d KB documents: heap +%d MB", docs, size/1000, retained>>20)
	assert.Less(t, retained, int64(50<<20), "the query cache holds at most query_cache_bytes (32 MiB)")
}

// BenchmarkAttacks measures each attack's time and allocations per request
// on the server, in-process (no network), from a client whose budget never
// runs out unless the attack drains it; the peer is an admitted 61-point
// operation.
func BenchmarkAttacks(b *testing.B) {
	all := append([]attack{{name: "peer: README query", body: func() string { return benchBody }, status: http.StatusOK}}, attacks...)
	for _, a := range all {
		b.Run(strings.ReplaceAll(a.name, " ", "_"), func(b *testing.B) {
			cfg := defaultConfig()
			if !a.drained {
				cfg.Plans["anon"] = planConfig{Plan: budget.Plan{Burst: 1_000_000_000, Rate: 1_000_000_000, Per: time.Second}}
			}
			h, cleanup, err := newServer(cfg, deps{})
			require.NoError(b, err)
			defer cleanup()
			method, target, body := a.request()
			serve := func() int {
				r := httptest.NewRequest(method, target, strings.NewReader(body))
				r.RemoteAddr = "203.0.113.7:40000"
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code
			}
			if a.drained {
				for serve() != http.StatusTooManyRequests {
				}
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if code := serve(); code != a.status {
					b.Fatalf("status %d, want %d", code, a.status)
				}
			}
		})
	}
}

// A flood of new client addresses cannot reset another principal's
// budget: a full memory store drops only whole budgets, and identities it
// cannot hold share their plan's overflow bucket.
func TestFloodOfNewClientsResetsNoBudget(t *testing.T) {
	cfg := withoutRefunds(defaultConfig())
	cfg.MemoryStore.MaxKeys = 256
	ts := newTestServer(t, cfg, deps{})

	// alice spends down to 38 of her 5,000 points.
	for _, q := range []string{`{ user(login: "octocat") { repos(first: 100) { issues(first: 48) { title } } } }`, readmeQuery} {
		w, _ := ts.graphql(alice, q)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	}
	left := func() int64 {
		w := ts.do(alice, http.MethodGet, "/api/users/octocat", nil)
		require.Equal(t, http.StatusOK, w.Code)
		return headerInt(t, w.Header(), middleware.HeaderXRateLimitRemaining)
	}
	require.Equal(t, int64(37), left())

	const flood = 20_000
	admitted := 0
	for i := range flood {
		c := client{remoteAddr: fmt.Sprintf("10.%d.%d.%d:1", i>>16, (i>>8)&255, i&255)}
		switch w := ts.do(c, http.MethodGet, "/api/users/octocat", nil); w.Code {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	// Each identity the store holds had its own 500 points; the rest shared
	// the anon plan's one overflow bucket.
	t.Logf("%d of %d new addresses admitted", admitted, flood)
	assert.LessOrEqual(t, admitted, int(cfg.MemoryStore.MaxKeys)+500)
	assert.Equal(t, int64(36), left(), "alice's budget is what she left it, less this request")

	// An hour on, the flood's budgets are whole again: new addresses get
	// buckets of their own, and alice's has refilled as it should.
	ts.clock.Advance(time.Hour)
	w := ts.do(client{remoteAddr: "192.0.2.200:1"}, http.MethodGet, "/api/users/octocat", nil)
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, int64(499), headerInt(t, w.Header(), middleware.HeaderXRateLimitRemaining))
	assert.Equal(t, int64(4999), left())
}

// withoutRefunds turns off the refund of unused cost on every plan of cfg,
// so that what a request is charged is its requested price.
func withoutRefunds(cfg config) config {
	no := false
	for name, p := range cfg.Plans {
		p.RefundUnused = &no
		cfg.Plans[name] = p
	}
	return cfg
}
