package middleware

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/internal/jsontext"
	"github.com/costguard/costguard/limiter"
)

// The cache stays within its bounds whatever is put in it, and finds what
// it kept.
func TestScreenCacheBounds(t *testing.T) {
	lim := complexity.DocumentLimits{MaxTokens: 100}
	for _, size := range []int{10, 2000, 40_000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := newScreenCache()
			var last string
			for i := range 5 * screenCacheEntries {
				literal := fmt.Sprintf(`"query Q%d($a: Int) { x(a: $a) %s }"`, i, strings.Repeat(" ", size))
				key, query, shared := queryLiteral([]byte(literal))
				c.put(key, newScreenedQuery(key, query, shared, lim))
				if q := c.get([]byte(literal)); q == nil || q.query != literal[1:len(literal)-1] {
					t.Fatalf("entry %d not found after put: %+v", i, q)
				}
				last = literal
			}
			entries, bytes := 0, int64(0)
			for i := range c.shards {
				s := &c.shards[i]
				entries += len(s.m)
				bytes += s.bytes
				var sum int64
				for _, q := range s.m {
					sum += q.bytes
				}
				if sum != s.bytes {
					t.Errorf("shard %d counts %d bytes, holds %d", i, s.bytes, sum)
				}
			}
			if entries > screenCacheEntries || bytes > screenCacheBytes {
				t.Errorf("%d entries, %d bytes: past the bounds %d, %d", entries, bytes, screenCacheEntries, screenCacheBytes)
			}
			if entries < screenCacheShards {
				t.Errorf("only %d entries kept", entries)
			}
			if q := c.get([]byte(last)); q == nil || len(q.dollars) != 1 || q.dollars[0] != "a" {
				t.Errorf("last entry: %+v", q)
			}
		})
	}
	c := newScreenCache()
	huge := `"` + strings.Repeat("x", screenCacheMaxQuery) + `"`
	key, query, shared := queryLiteral([]byte(huge))
	c.put(key, newScreenedQuery(key, query, shared, lim))
	if c.get([]byte(huge)) != nil {
		t.Error("a query past screenCacheMaxQuery was kept")
	}
}

// An entry knows which variables its document reads, and keeps them all
// when the lexer cannot read it.
func TestScreenedQueryReadVariables(t *testing.T) {
	vars := []byte(`{"a":1, "b":[2], "c":{"d":3}}`)
	for _, tc := range []struct {
		literal string
		want    string // the object kept; "" for all of them
	}{
		{`"query($a: Int, $c: Int) { x(a: $a, c: $c) }"`, `{"a":1,"c":{"d":3}}`},
		{`"query($\u0062: Int) { x }"`, `{"b":[2]}`},
		{`"query($a: Int, $b: Int, $c: Int) { x }"`, ""},
		{`"query($a: Int, $b: Int, $c: Int, $e: Int) { x }"`, ""},
		{`"query($a: Int) { x }"`, `{"a":1}`},
		{`"{ x }"`, `{}`},
		{`"{ x(s: \"unterminated) }"`, ""},
	} {
		key, query, shared := queryLiteral([]byte(tc.literal))
		read, others := newScreenedQuery(key, query, shared, complexity.DocumentLimits{}).readVariables(vars, nil)
		got := ""
		if others {
			got = string(appendObject(nil, vars, read))
		}
		if got != tc.want {
			t.Errorf("%s: kept %q, want %q", tc.literal, got, tc.want)
		}
	}
}

// The variables a document does not name cost no memory that grows with
// them: 10,000 of them beside the one it reads leave one member kept.
func TestUnreadVariablesKeptNowhere(t *testing.T) {
	var vars strings.Builder
	vars.WriteString(`{"a":1`)
	for i := range 10_000 {
		fmt.Fprintf(&vars, `,"v%d":%d`, i, i)
	}
	vars.WriteString(`}`)
	key, query, shared := queryLiteral([]byte(`"query($a: Int) { x(a: $a) }"`))
	q := newScreenedQuery(key, query, shared, complexity.DocumentLimits{})
	var buf [8]jsontext.Member
	b := []byte(vars.String())
	if read, others := q.readVariables(b, buf[:0]); !others || len(read) != 1 || string(read[0].Name) != "a" {
		t.Fatalf("read %d members (others %v), want a alone", len(read), others)
	}
	if allocs := testing.AllocsPerRun(5, func() { q.readVariables(b, buf[:0]) }); allocs > 2 {
		t.Errorf("10,000 unread variables: %.0f allocations, want at most 2", allocs)
	}
}

// Through real HTTP, a stream of distinct documents of realistic size (16
// KB each, 48 MB in all) leaves the screen cache within its bounds while
// every request is still screened: the last one is found in the cache.
func TestScreenCacheBoundedOverHTTP(t *testing.T) {
	l, err := New(Dependencies{
		Clock:  limiter.SystemClock{},
		Logger: slog.New(slog.DiscardHandler),
	}, Policy{
		Plans:         map[string]budget.Plan{"anon": {Burst: 1e9, Rate: 1e9, Per: time.Second}},
		AnonymousPlan: "anon",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var passed atomic.Int64
	srv := httptest.NewServer(l.graphQL(http.HandlerFunc( // no gqlgen behind: the wrapper's screening alone
		func(w http.ResponseWriter, r *http.Request) {
			passed.Add(1)
		})))
	defer srv.Close()
	const docs, size = 3000, 16 << 10
	pad := strings.Repeat(" ", size)
	var last string
	for i := range docs {
		last = fmt.Sprintf(`{"query":"query Q%d { viewer { login } }%s"}`, i, pad)
		resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(last))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("document %d: status %d", i, resp.StatusCode)
		}
	}
	if got := passed.Load(); got != docs {
		t.Fatalf("%d of %d documents reached the handler", got, docs)
	}
	entries, bytes := 0, int64(0)
	for i := range l.screened.shards {
		s := &l.screened.shards[i]
		s.mu.RLock()
		entries += len(s.m)
		bytes += s.bytes
		s.mu.RUnlock()
	}
	t.Logf("%d documents of %d KB: the cache holds %d, %d KB", docs, size>>10, entries, bytes>>10)
	if entries > screenCacheEntries || bytes > screenCacheBytes {
		t.Errorf("%d entries, %d bytes: past the bounds %d, %d", entries, bytes, screenCacheEntries, screenCacheBytes)
	}
	literal := last[len(`{"query":`) : len(last)-1]
	if q := l.screened.get([]byte(literal)); q == nil {
		t.Error("the last document is not in the cache")
	}
}
