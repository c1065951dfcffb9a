package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/admin"
	"github.com/costguard/costguard/opcosts"
	"github.com/costguard/costguard/spenders"
	"github.com/costguard/costguard/timeline"
)

// adminViews is what an admin listener keeps of every decision, fed as
// the example server feeds them. The Prometheus metrics, a module of their
// own, keep copies too (prommetrics' TestLabelValuesAreCopies, and the
// example server's TestNamedDocumentFloodPinsNothing feeds them all).
type adminViews struct {
	stats  *admin.Stats
	spend  *spenders.Tracker
	recent *timeline.Timeline
	ops    *opcosts.Tracker
}

func newAdminViews(t *testing.T) *adminViews {
	t.Helper()
	v := &adminViews{stats: admin.NewStats(time.Time{}, nil)}
	var err error
	if v.spend, err = spenders.New(spenders.Config{}); err != nil {
		t.Fatal(err)
	}
	if v.recent, err = timeline.New(timeline.Config{}); err != nil {
		t.Fatal(err)
	}
	if v.ops, err = opcosts.New(opcosts.Config{}); err != nil {
		t.Fatal(err)
	}
	return v
}

func (v *adminViews) ObserveDecision(e *middleware.Event) {
	v.stats.Add(e)
	v.spend.Add(e.Time, e.Plan, e.Key, e.Net())
	v.recent.Add(e.Key, timeline.Entry{
		Time: e.Time, Kind: string(e.Kind), Operation: e.Operation, Plan: e.Plan,
		Requested: e.RequestedCost, Actual: e.ActualCost, HasActual: e.HasActualCost,
		Charged: e.Charged, Outcome: string(e.Outcome), Code: e.Code,
	})
	if e.Kind == middleware.KindGraphQL {
		v.ops.Add(e.Time, opcosts.Decision{Operation: e.Operation, Requested: e.RequestedCost, Actual: e.ActualCost, HasActual: e.HasActualCost,
			Refused: e.Outcome != budget.ClassAdmitted})
	}
}

// viewerCost is the price of { viewer { login } }.
const viewerCost = 1

// pinnedDocument is a named query of size bytes: a name of 80 bytes,
// distinct in its first 64, one field, and a comment making up the size.
func pinnedDocument(addr, i, size int) string {
	name := fmt.Sprintf("Pinned_%d_%04d_", addr, i)
	name += strings.Repeat("N", 80-len(name))
	q := "query " + name + " { viewer { login } }\n#"
	return q + strings.Repeat("x", size-len(q))
}

// 16 named documents of 900 KB from 4 addresses through real HTTP, 12
// admitted and 4 refused 429, each recorded by every admin view: once the
// plan cache that priced them is replaced (a reload that changes how
// operations are priced), what the flood leaves live is a few kilobytes
// of names and counters. Were a kept operation name a substring of its
// document, the 16 documents (14 MB) would stay. The example server's
// TestNamedDocumentFloodPinsNothing (a long test) sends 480 through its
// query cache.
func TestNamedDocumentsPinNothing(t *testing.T) {
	const addrs, perAddr, size = 4, 4, 900 << 10
	const slack = 4 << 20 // the views' counters and names, the HTTP buffers
	cfg := testConfig(t, newClock())
	cfg.REST = middleware.RESTOptions{}
	cfg.Plans["anon"] = budget.Plan{Burst: 3 * viewerCost, Rate: 1, Per: time.Hour, DisableRefund: true} // 3 admitted an address, then 429
	cfg.TrustedProxies = []string{"127.0.0.1/32", "::1/128"}                                             // the test is the proxy
	views := newAdminViews(t)
	cfg.Observer = views
	lim := newLimiter(t, cfg)
	srv := httptest.NewServer(graphQLServerOf(lim, forgetfulSchema{newTestSchema()}))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{}}

	before := liveHeap()
	status := map[int]int{}
	var body bytes.Buffer
	for i := range perAddr {
		for a := range addrs {
			body.Reset()
			if err := json.NewEncoder(&body).Encode(map[string]string{"query": pinnedDocument(a, i, size)}); err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/graphql", &body)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", 10+a))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status[resp.StatusCode]++
		}
	}
	body = bytes.Buffer{}
	if status[http.StatusOK] != 12 || status[http.StatusTooManyRequests] != 4 {
		t.Fatalf("statuses %v, want 12 admitted and 4 refused", status)
	}
	// A reload that changes how operations are priced: the next operation
	// builds a new plan cache, and the old one, with every document it
	// held, is garbage.
	cfg.GraphQL.MaxDepth = 9
	if err := lim.Reload(cfg.Policy); err != nil {
		t.Fatal(err)
	}
	do(t, srv.Config.Handler, request{path: "/graphql", body: `{"query":"{ viewer { login } }"}`, header: bearer(aliceKey)})
	client.CloseIdleConnections()
	grown := liveHeap() - before

	t.Logf("%v: the live heap grew by %.1f MB", status, float64(grown)/(1<<20))
	if entries, principals := views.recent.Len(); principals != addrs+1 || entries != addrs*perAddr+1 {
		t.Fatalf("the timeline holds %d entries of %d principals", entries, principals)
	}
	if grown > slack {
		t.Fatalf("the flood left %d bytes live, more than %d", grown, slack)
	}
	runtime.KeepAlive(views)
}

// forgetfulSchema executes as testSchema does, without the mock that
// records every call's context (and so every request) for the test's
// whole life.
type forgetfulSchema struct{ s *testSchema }

func (f forgetfulSchema) Schema() *ast.Schema { return f.s.schema }

func (forgetfulSchema) Complexity(context.Context, string, string, int, map[string]any) (int, bool) {
	return 0, false
}

func (f forgetfulSchema) Exec(ctx context.Context) graphql.ResponseHandler {
	done := false
	return func(ctx context.Context) *graphql.Response {
		if done {
			return nil
		}
		done = true
		return &graphql.Response{Data: f.s.exec(ctx)}
	}
}

// liveHeap is the heap's live bytes after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
