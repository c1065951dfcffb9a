package middleware_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/middleware"
)

const attachDoc = `mutation($file: Upload!) { attachFile(issue: "I_1", file: $file) { filename size } }`

// patternReader yields n bytes of a repeating pattern without holding
// them: the client side of a large upload allocates nothing per byte.
type patternReader struct{ left int64 }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.left <= 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(b)), p.left))
	for i := range n {
		b[i] = byte('a' + i%26)
	}
	p.left -= int64(n)
	return n, nil
}

// multipartBody streams a GraphQL multipart request with one file of
// size bytes (operations is the first part) and returns its length.
func multipartBody(t *testing.T, operations string, size int64) (io.Reader, int64, string) {
	t.Helper()
	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	if err := mw.WriteField("operations", operations); err != nil {
		t.Fatal(err)
	}
	if err := mw.WriteField("map", `{"0": ["variables.file"]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := mw.CreateFormFile("0", "big.bin"); err != nil {
		t.Fatal(err)
	}
	tail := "\r\n--" + mw.Boundary() + "--\r\n"
	n := int64(head.Len()) + size + int64(len(tail))
	return io.MultiReader(&head, &patternReader{left: size}, strings.NewReader(tail)), n, mw.FormDataContentType()
}

// An upload server: gqlgen's MultipartForm spills files past 1 MiB to disk.
func newUploadAdopter(t *testing.T, cfg config) *adopter {
	return newAdopter(t, cfg, func(lim *middleware.Limiter, srv *handler.Server) http.Handler {
		up := handler.New(graph.NewResolver().Schema())
		up.AddTransport(transport.POST{})
		up.AddTransport(transport.MultipartForm{MaxMemory: 1 << 20, MaxUploadSize: 64 << 20})
		return lim.Handler(up)
	})
}

func (a *adopter) upload(operations string, size int64, chunked bool) (*http.Response, []byte) {
	a.t.Helper()
	body, n, ct := multipartBody(a.t, operations, size)
	req, _ := http.NewRequest(http.MethodPost, a.srv.URL, io.NopCloser(body)) // a length net/http cannot see
	req.Header.Set("Content-Type", ct)
	if !chunked {
		req.ContentLength = n
	}
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

func uploadOps(doc string) string {
	b, _ := json.Marshal(map[string]any{"query": doc, "variables": map[string]any{"file": nil}})
	return string(b)
}

// A 20 MB upload goes through the wrapper without it holding the file:
// gqlgen spills it to disk, and the process allocates a fraction of it.
func TestUploadStreams(t *testing.T) {
	const size = 20 << 20
	a := newUploadAdopter(t, config{Dependencies: middleware.Dependencies{MaxUploadBytes: 32 << 20}})
	before := a.remaining("")
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	resp, body := a.upload(uploadOps(attachDoc), size, false)
	runtime.ReadMemStats(&m1)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	r := decode(t, body)
	var data struct {
		AttachFile struct {
			Filename string
			Size     int64
		}
	}
	if err := json.Unmarshal(r.Data, &data); err != nil || data.AttachFile.Size != size || data.AttachFile.Filename != "big.bin" {
		t.Errorf("attachFile %+v (%v): %s", data.AttachFile, err, body)
	}
	alloc := m1.TotalAlloc - m0.TotalAlloc
	t.Logf("a %d-byte upload allocated %d bytes in the process (client and server)", size, alloc)
	if alloc > size/2 {
		t.Errorf("the upload of %d bytes allocated %d bytes in the process", size, alloc)
	}
	price := r.Extensions.Cost.RequestedQueryCost
	if got := a.remaining(""); got != before-price || price < 2 {
		t.Errorf("budget %d, want %d - %d", got, before, price)
	}
}

// UploadCostPerMiB prices the bytes of a multipart request on top of its
// operation.
func TestUploadCostPerMiB(t *testing.T) {
	a := newUploadAdopter(t, config{Policy: middleware.Policy{GraphQL: middleware.GraphQLOptions{UploadCostPerMiB: 2}}})
	const plain int64 = 10 + 1 // the mutation, and its Attachment
	resp, body := a.upload(uploadOps(attachDoc), 3<<20, false)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	// 3 MiB of file and a few hundred bytes of parts: 4 MiB begun.
	if got, want := decode(t, body).Extensions.Cost.RequestedQueryCost, plain+4*2; got != want {
		t.Errorf("requestedQueryCost %d, want %d", got, want)
	}
}

// A multipart request over MaxUploadBytes is refused 413, declared or
// chunked; one whose operations part is over MaxBodyBytes too, before
// anything else is read; one whose operations part is not first, 400.
// Each pays InvalidCost.
func TestUploadBounds(t *testing.T) {
	a := newUploadAdopter(t, config{Dependencies: middleware.Dependencies{MaxUploadBytes: 2 << 20, MaxBodyBytes: 4 << 10}})
	for _, chunked := range []bool{false, true} {
		before := a.remaining("")
		resp, body := a.upload(uploadOps(attachDoc), 3<<20, chunked)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), middleware.CodeRequestTooLarge) {
			t.Errorf("chunked %v: %d %s, want 413", chunked, resp.StatusCode, body)
		}
		if got := a.remaining(""); got != before-1 {
			t.Errorf("chunked %v: budget %d, want %d", chunked, got, before-1)
		}
	}
	big := uploadOps(attachDoc + strings.Repeat(" ", 8<<10))
	if resp, body := a.upload(big, 10, true); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("large operations: %d %s, want 413", resp.StatusCode, body)
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("map", `{}`)
	_ = mw.WriteField("operations", uploadOps(attachDoc))
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, a.srv.URL, &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("map first: %d, want 400", resp.StatusCode)
	}
	// The operations part is screened like a JSON body.
	calls := a.res.Calls()
	resp, body := a.upload(uploadOps(`mutation($file: Upload!) { attachFile(issue: "I_1", file: $file) { size `+strings.Repeat("s ", 600)+`} }`), 10, true)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), complexity.CodeMaxSelectionsExceeded) {
		t.Errorf("too many selections in operations: %d %s, want 422 %s", resp.StatusCode, body, complexity.CodeMaxSelectionsExceeded)
	}
	if a.res.Calls() != calls {
		t.Error("a refused upload ran a resolver")
	}
}

// A body that arrives too slowly is answered 408 REQUEST_TIMEOUT, never
// as a store failure.
func TestSlowBodyIsRequestTimeout(t *testing.T) {
	a := newAdopter(t, config{}, nil)
	slow := httptest.NewUnstartedServer(a.h)
	slow.Config.ReadTimeout = 300 * time.Millisecond
	slow.Start()
	defer slow.Close()
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.WriteString(pw, `{"query":"{ user(login: \"octocat\") { login } }",`)
		time.Sleep(time.Second) // past the server's ReadTimeout
		_, _ = io.WriteString(pw, `"variables":{}}`)
		_ = pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, slow.URL, pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err := slow.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), middleware.CodeRequestTimeout) {
		t.Errorf("%d %s, want 408 %s", resp.StatusCode, body, middleware.CodeRequestTimeout)
	}
}

// An upload from a client whose budget is spent is refused before its
// body is read: the server does not take in megabytes it cannot charge.
func TestUploadRefusedBeforeReadingWhenBroke(t *testing.T) {
	a := newUploadAdopter(t, config{})
	for a.remaining("") > 0 {
		if w := do(t, a.h, request{path: "/", body: `{"query":"{ __typename }"}`, remoteAddr: "127.0.0.1:1"}); w.Code != http.StatusOK {
			break
		}
	}
	body, n, ct := multipartBody(t, uploadOps(attachDoc), 20<<20)
	counted := &readCounter{r: body}
	r := httptest.NewRequest(http.MethodPost, "/", counted)
	r.RemoteAddr = "127.0.0.1:1"
	r.ContentLength = n
	r.Header.Set("Content-Type", ct)
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Errorf("%d %s, want 429 with Retry-After", w.Code, w.Body)
	}
	if counted.n != 0 {
		t.Errorf("%d bytes of the upload were read", counted.n)
	}
}
