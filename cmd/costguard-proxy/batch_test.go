package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
)

// batchConfig is the anonymous budget the batch tests draw from, refilled
// so slowly (a day) that a test never sees a point come back, with a small
// max_body_bytes so that one operation can exceed it cheaply.
const batchConfig = `
plans:
  anon: {burst: 1000, rate: 1000, per: 24h}
anonymous_plan: anon
max_body_bytes: 4096
`

// batchOps are operations priced in different ways: a refund (priced 10,
// returns 4), an overrun (priced 10, returns 25), a lone object, a
// mutation, and one that fails validation (invalid_cost).
var batchOps = []string{
	query(`{ user(login: "alice") { repos(first: 9) { name } } }`, nil),
	query(`{ labels { name } }`, nil),
	query(`{ user(login: $login) { login } }`, nil), // invalid: $login is undeclared
	query(`query($login: String!) { user(login: $login) { login } }`, map[string]any{"login": "bob"}),
	query(`mutation { createIssue(repo: "Repo:beta", title: "batched") { title } }`, nil),
}

// startProxyInFront starts a proxy in front of up with the configuration
// config and args.
func startProxyInFront(t *testing.T, up nodeUpstream, config string, args ...string) *proxy {
	t.Helper()
	return startProxy(t, append([]string{"-upstream", up.URL, "-schema", upstreamSchema,
		"-config", writeFile(t, "costguard.yaml", config)}, args...)...)
}

// batchAnswer is the answer to a batched POST.
type batchAnswer struct {
	status int
	header http.Header
	body   []byte
	ops    []*gqlAnswer // the array's elements, when it is one
}

// postBatch posts body, a JSON array, to url.
func postBatch(t *testing.T, url, body string, header ...string) *batchAnswer {
	t.Helper()
	a := postGraphQL(t, url, body, header...)
	b := &batchAnswer{status: a.status, header: a.header, body: a.body}
	if len(a.body) > 0 && a.body[0] == '[' {
		var raws []json.RawMessage
		if err := json.Unmarshal(a.body, &raws); err != nil {
			t.Fatalf("answer %s: %v", a.body, err)
		}
		for _, raw := range raws {
			op := &gqlAnswer{body: raw}
			if err := json.Unmarshal(raw, op); err != nil {
				t.Fatalf("element %s: %v", raw, err)
			}
			b.ops = append(b.ops, op)
		}
	}
	return b
}

// batchOf is the JSON array of ops.
func batchOf(ops ...string) string { return "[" + strings.Join(ops, ",") + "]" }

// rateLimitHeaders are the headers that report the budget.
var rateLimitHeaders = []string{
	middleware.HeaderRateLimit, middleware.HeaderRateLimitPolicy,
	middleware.HeaderXRateLimitLimit, middleware.HeaderXRateLimitRemaining, middleware.HeaderXRateLimitUsed,
}

// Each operation of a batch is priced and charged as it would be alone:
// the batch's answers, in order, report what the same operations sent one
// by one to a proxy with a fresh budget report, and the batch's budget
// headers are the last operation's.
func TestBatchChargesEachOperationAsALonePOST(t *testing.T) {
	up := startUpstream(t, "yoga.js")
	batched := postBatch(t, startProxyInFront(t, up, batchConfig).URL+"/graphql", batchOf(batchOps...))
	if batched.status != http.StatusOK || len(batched.ops) != len(batchOps) {
		t.Fatalf("batch: %d %s, want 200 and %d answers", batched.status, batched.body, len(batchOps))
	}
	if ct := batched.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("batch Content-Type %q, want application/json", ct)
	}
	if ra := batched.header.Get(middleware.HeaderRetryAfter); ra != "" {
		t.Errorf("batch with nothing refused has Retry-After %q", ra)
	}
	if hits := up.hits(t); hits != len(batchOps)-1 {
		t.Errorf("the upstream executed %d operations, want %d (all but the invalid one)", hits, len(batchOps)-1)
	}

	alone := startProxyInFront(t, up, batchConfig)
	var last *gqlAnswer
	for i, op := range batchOps {
		last = postGraphQL(t, alone.URL+"/graphql", op)
		got := batched.ops[i]
		if got.Extensions.Cost == nil || !reflect.DeepEqual(got.Extensions.Cost, last.Extensions.Cost) {
			t.Errorf("operation %d: batched cost %s, alone %s", i, costJSON(got.Extensions.Cost), costJSON(last.Extensions.Cost))
		}
		if got.code() != last.code() || (last.code() == "") != (len(got.Errors) == 0) {
			t.Errorf("operation %d: batched %s, alone %s", i, got.body, last.body)
		}
		if !bytes.Equal(got.Data, last.Data) && i != 4 { // createIssue's issue is a new one
			t.Errorf("operation %d: batched data %s, alone %s: answers out of order?", i, got.Data, last.Data)
		}
	}
	for _, h := range rateLimitHeaders {
		if got, want := batched.header.Get(h), last.header.Get(h); got != want || got == "" {
			t.Errorf("batch %s: %q, want the last operation's %q", h, got, want)
		}
	}
}

// A budget that runs out within a batch refuses the batch's later
// operations, which never reach the upstream; the batch is still
// answered 200, with the longest Retry-After of its refusals.
func TestBatchBudgetRunsOutMidBatch(t *testing.T) {
	up := startUpstream(t, "yoga.js")
	p := startProxyInFront(t, up, `
plans:
  anon: {burst: 25, rate: 25, per: 24h, refund_unused: false}
anonymous_plan: anon
`)
	op := query(`{ user(login: "alice") { repos(first: 9) { name } } }`, nil) // priced 10
	got := postBatch(t, p.URL+"/graphql", batchOf(op, op, op, op))
	if got.status != http.StatusOK || len(got.ops) != 4 {
		t.Fatalf("batch: %d %s, want 200 and 4 answers", got.status, got.body)
	}
	for i, a := range got.ops {
		switch {
		case i < 2 && (len(a.Errors) != 0 || a.Extensions.Cost == nil || *a.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != int64(15-10*i)):
			t.Errorf("operation %d: %s, want admitted, %d left", i, a.body, 15-10*i)
		case i >= 2 && a.code() != budget.CodeRateLimited:
			t.Errorf("operation %d: %s, want %s", i, a.body, budget.CodeRateLimited)
		}
	}
	if hits := up.hits(t); hits != 2 {
		t.Errorf("the upstream executed %d operations, want the 2 admitted", hits)
	}
	if r := got.header.Get(middleware.HeaderXRateLimitRemaining); r != "5" {
		t.Errorf("batch %s %q, want 5", middleware.HeaderXRateLimitRemaining, r)
	}
	retry, err := strconv.Atoi(got.header.Get(middleware.HeaderRetryAfter))
	alone := postGraphQL(t, p.URL+"/graphql", op)
	want, _ := strconv.Atoi(alone.header.Get(middleware.HeaderRetryAfter))
	if err != nil || alone.status != http.StatusTooManyRequests || want < 1 || retry < want || retry > want+1 {
		t.Errorf("batch Retry-After %q, want that of the same refusal alone (%d %q)",
			got.header.Get(middleware.HeaderRetryAfter), alone.status, alone.header.Get(middleware.HeaderRetryAfter))
	}
}

// A batch the proxy cannot serve is refused whole, 400 BAD_BATCH, before
// any of it reaches the upstream.
func TestBatchRefusedWhole(t *testing.T) {
	up := startUpstream(t, "yoga.js")
	p := startProxyInFront(t, up, batchConfig, "-max-batch", "3")
	op := batchOps[0]
	for _, tc := range []struct{ name, body string }{
		{"over -max-batch", batchOf(op, op, op, op)},
		{"empty", "[]"},
		{"empty, spaced", " \r\n\t[ ]"},
		{"unterminated", "[" + op},
		{"trailing comma", "[" + op + ",]"},
		{"trailing data", batchOf(op) + " {}"},
	} {
		got := postBatch(t, p.URL+"/graphql", tc.body)
		if got.status != http.StatusBadRequest || !bytes.Contains(got.body, []byte(`"code":"BAD_BATCH"`)) {
			t.Errorf("%s: %d %s, want 400 BAD_BATCH", tc.name, got.status, got.body)
		}
	}
	if hits := up.hits(t); hits != 0 {
		t.Errorf("the upstream executed %d operations of refused batches", hits)
	}
	if got := postBatch(t, p.URL+"/graphql", batchOf(op, op, op)); got.status != http.StatusOK || len(got.ops) != 3 {
		t.Errorf("a batch of -max-batch operations: %d %s, want 200 and 3 answers", got.status, got.body)
	}
}

// Only a POSTed JSON array is a batch: a lone POST, a GET, or an array
// sent as another media type is answered as without batching.
func TestBatchLeavesOtherRequestsAlone(t *testing.T) {
	up := startUpstream(t, "yoga.js")
	p := startProxyInFront(t, up, batchConfig)
	op := `{ user(login: "alice") { login } }`
	want := `{"user":{"login":"alice"}}`

	lone := postGraphQL(t, p.URL+"/graphql", " \n"+query(op, nil))
	if lone.status != http.StatusOK || string(lone.Data) != want || lone.Extensions.Cost == nil {
		t.Errorf("lone POST: %d %s", lone.status, lone.body)
	}
	get := doGraphQL(t, mustRequest(t, http.MethodGet, p.URL+"/graphql?query="+url.QueryEscape(op), nil))
	if get.status != http.StatusOK || string(get.Data) != want || get.Extensions.Cost == nil {
		t.Errorf("GET: %d %s", get.status, get.body)
	}
	for _, body := range []string{`"[]"`, `null`, `7`} {
		a := postGraphQL(t, p.URL+"/graphql", body)
		if a.status != http.StatusBadRequest || a.code() != middleware.CodeInvalidRequest {
			t.Errorf("POST %s: %d %s, want the limiter's 400 %s", body, a.status, a.body, middleware.CodeInvalidRequest)
		}
	}
	req := mustRequest(t, http.MethodPost, p.URL+"/graphql", strings.NewReader(batchOf(query(op, nil))))
	req.Header.Set("Content-Type", "text/plain")
	if a := doGraphQL(t, req); a.status == http.StatusOK || bytes.HasPrefix(a.body, []byte("[")) {
		t.Errorf("an array as text/plain: %d %s, want it refused as without batching", a.status, a.body)
	}
	if hits := up.hits(t); hits != 2 {
		t.Errorf("the upstream executed %d operations, want 2", hits)
	}
}

// A batch is answered in JSON whatever its Accept asks for: an element
// is never streamed as Server-Sent Events into the array.
func TestBatchAnswersJSONWhateverTheAccept(t *testing.T) {
	up := startUpstream(t, "yoga.js")
	p := startProxyInFront(t, up, batchConfig)
	op := query(`{ user(login: "alice") { login } }`, nil)
	for _, accept := range []string{"text/event-stream", "multipart/mixed", "application/graphql-response+json", "application/json"} {
		got := postBatch(t, p.URL+"/graphql", batchOf(op, op), "Accept", accept)
		if got.status != http.StatusOK || len(got.ops) != 2 {
			t.Errorf("Accept %s: %d %s, want 200 and 2 answers", accept, got.status, got.body)
			continue
		}
		for i, a := range got.ops {
			if string(a.Data) != `{"user":{"login":"alice"}}` || len(a.Errors) != 0 {
				t.Errorf("Accept %s, operation %d: %s", accept, i, a.body)
			}
		}
		if cc := got.header.Get("Cache-Control"); cc != "" {
			t.Errorf("Accept %s: Cache-Control %q, a stream's header on a JSON answer", accept, cc)
		}
	}
}

// A batch body over the batch bound is refused by the limiter as a lone
// POST over max_body_bytes is, 413 REQUEST_TOO_LARGE, declared or not;
// within the bound, each operation is bounded by max_body_bytes alone.
func TestBatchBodyBounds(t *testing.T) {
	up := startUpstream(t, "yoga.js")
	p := startProxyInFront(t, up, batchConfig)
	op := query(`{ user(login: "alice") { login } }`, nil)
	big := `{"query": "{ user(login: \"alice\") { login } }` + strings.Repeat(" ", 5000) + `"}` // over max_body_bytes

	lone := postGraphQL(t, p.URL+"/graphql", big)
	if lone.status != http.StatusRequestEntityTooLarge || lone.code() != middleware.CodeRequestTooLarge {
		t.Fatalf("lone POST over max_body_bytes: %d %s", lone.status, lone.body)
	}
	huge := "[" + op + strings.Repeat(" ", defaultMaxBatchBytes) + "]"
	for _, declared := range []bool{true, false} {
		var body io.Reader = strings.NewReader(huge)
		if !declared {
			body = io.MultiReader(body) // no length: sent chunked
		}
		req := mustRequest(t, http.MethodPost, p.URL+"/graphql", body)
		req.Header.Set("Content-Type", "application/json")
		if a := doGraphQL(t, req); a.status != lone.status || a.code() != lone.code() {
			t.Errorf("batch over the bound (length declared: %v): %d %s, want %d %s", declared, a.status, a.body, lone.status, lone.code())
		}
	}
	if hits := up.hits(t); hits != 0 {
		t.Errorf("the upstream executed %d operations of refused bodies", hits)
	}

	got := postBatch(t, p.URL+"/graphql", batchOf(op, big, op))
	if got.status != http.StatusOK || len(got.ops) != 3 {
		t.Fatalf("batch with one operation over max_body_bytes: %d %s", got.status, got.body)
	}
	if got.ops[1].code() != middleware.CodeRequestTooLarge || len(got.ops[0].Errors)+len(got.ops[2].Errors) != 0 {
		t.Errorf("batch with its second operation over max_body_bytes: %s", got.body)
	}
	if hits := up.hits(t); hits != 2 {
		t.Errorf("the upstream executed %d operations, want 2", hits)
	}
}

// mustRequest is http.NewRequest for a test.
func mustRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// costJSON shows a cost in a failure message.
func costJSON(c *middleware.Cost) string {
	b, _ := json.Marshal(c)
	return string(b)
}

// What is not a batch goes to the limiter unread but for its first
// bytes, whole: the limiter, not the batching, bounds how much of it is
// read and held in memory.
func TestBatchReadsNoMoreThanABatchNeeds(t *testing.T) {
	lone := `{"query": "{ x }"` + strings.Repeat(" ", 1<<20) + "}"
	array := "[" + strings.Repeat(" ", 4096) + "]"
	for _, tc := range []struct {
		name     string
		body     string
		declared bool
	}{
		{"a lone POST", lone, true},
		{"a lone POST of undeclared length", lone, false},
		{"an array declared longer than a batch may be", array, true},
	} {
		body := &countingReader{r: strings.NewReader(tc.body)}
		var readBefore int
		var got []byte
		h := batching{maxOps: DefaultMaxBatch, maxBodyBytes: 1024, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			readBefore = body.n
			got, _ = io.ReadAll(r.Body)
		})}
		req := httptest.NewRequest(http.MethodPost, "/graphql", body)
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = -1
		if tc.declared {
			req.ContentLength = int64(len(tc.body))
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
		if readBefore > arrayPeekBytes {
			t.Errorf("%s: %d bytes read before the limiter saw the request", tc.name, readBefore)
		}
		if string(got) != tc.body {
			t.Errorf("%s: the limiter read %d bytes, not the %d sent", tc.name, len(got), len(tc.body))
		}
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// A batch whose client has gone is not served further: its later
// operations are neither charged nor forwarded.
func TestBatchStopsWhenItsClientLeaves(t *testing.T) {
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	served := 0
	h := batching{maxOps: DefaultMaxBatch, maxBodyBytes: defaultMaxBatchBytes, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		leave() // while its first operation runs
		_, _ = w.Write([]byte(`{"data":{}}`))
	})}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/graphql", strings.NewReader(batchOf(batchOps[:3]...)))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if served != 1 {
		t.Errorf("%d operations served, want 1: the client left during the first", served)
	}
}

// A batch refused whole is charged as a REST request (rest.default_cost,
// 1 point) through the same door as every request: a client cannot have
// batches decoded for nothing, and one whose budget is spent is refused
// 429 before its batch is judged.
func TestRefusedBatchesArePaidFor(t *testing.T) {
	up := startUpstream(t, "yoga.js")
	p := startProxyInFront(t, up, "plans:\n  anon: {burst: 3, rate: 3, per: 24h}\nanonymous_plan: anon\n")
	var statuses []int
	for range 4 {
		req := mustRequest(t, http.MethodPost, p.URL+"/graphql", strings.NewReader(`[{"query": "{ labels { name } }"}, ]`))
		req.Header.Set("Content-Type", "application/json")
		a := doGraphQL(t, req)
		statuses = append(statuses, a.status)
		if a.status == http.StatusBadRequest && a.code() != "BAD_BATCH" {
			t.Errorf("a malformed batch: %s", a.body)
		}
	}
	if want := []int{400, 400, 400, 429}; !slices.Equal(statuses, want) {
		t.Errorf("four malformed batches on a budget of 3: %v, want %v", statuses, want)
	}
	if hits := up.hits(t); hits != 0 {
		t.Errorf("the upstream executed %d operations", hits)
	}
}
