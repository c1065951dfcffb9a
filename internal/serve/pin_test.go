package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
)

// pinSlack is what the flood may leave live on top of the query cache's
// byte bound: the plan cache keeps the documents the query cache keeps
// (it is charged at least as much for each, so it holds no more of
// them), and the rest is what every table the admin views keep holds at
// its bound in bytes (docs/threat-model.md), a few megabytes, plus
// the HTTP server's and client's buffers. A kept name that pins its
// document costs 900 KB a request, so 64 MB is exceeded by the 71st.
const pinSlack = 64 << 20

// floodDocument is a named query of size bytes: the name (at least 64
// bytes, distinct in its first 64), one field, and a comment making up
// the size.
func floodDocument(name string, size int) string {
	q := "query " + name + " { __typename }\n#"
	return q + strings.Repeat("x", size-len(q))
}

// floodName is a distinct operation name of 80 bytes for document i of
// address a.
func floodName(a, i int) string {
	n := fmt.Sprintf("Flood_%d_%04d_", a, i)
	return n + strings.Repeat("N", 80-len(n))
}

// flood sends perAddr named documents of size bytes from each of addrs
// client addresses through a real HTTP server built as the example
// server is, with an anonymous budget of burst points, and returns how
// many were admitted and refused and the live heap the flood added
// once collected.
func flood(t *testing.T, addrs, perAddr, size int, burst int64) (admitted, refused int, grown int64) {
	t.Helper()
	cfg := defaultConfig()
	cfg.TrustedProxies = []string{"127.0.0.1/32", "::1/128"} // the test is the proxy: X-Forwarded-For names the client
	anon := cfg.Plans["anon"]
	anon.Plan = budget.Plan{Burst: burst, Rate: burst, Per: time.Hour}
	cfg.Plans["anon"] = anon
	ts := newTestServer(t, cfg, deps{})
	srv := httptest.NewServer(ts.h)
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	t.Cleanup(client.CloseIdleConnections)

	before := liveHeap()
	var body bytes.Buffer
	for i := range perAddr {
		for a := range addrs {
			body.Reset()
			require.NoError(t, json.NewEncoder(&body).Encode(map[string]string{"query": floodDocument(floodName(a, i), size)}))
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/graphql", &body)
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", 10+a))
			resp, err := client.Do(req)
			require.NoError(t, err)
			answer, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			switch resp.StatusCode {
			case http.StatusOK:
				admitted++
			case http.StatusTooManyRequests:
				refused++
			default:
				t.Fatalf("document %d from address %d: %d %s", i, a, resp.StatusCode, answer)
			}
		}
	}
	body = bytes.Buffer{}
	client.CloseIdleConnections()
	grown = liveHeap() - before
	// What the admin views keep is still there: the flood was recorded.
	entries, principals := ts.h.(*server).recent.Len()
	require.Equal(t, addrs, principals)
	require.Equal(t, addrs*perAddr, entries)
	return admitted, refused, grown
}

// liveHeap is the heap's live bytes after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
