package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/costguard/costguard/middleware"
)

// DefaultMaxBatch is how many operations one batched request may hold
// unless -max-batch says otherwise.
const DefaultMaxBatch = 10

// batching answers a POST whose JSON body is an array of operations (as
// Apollo Client's BatchHttpLink sends them): each element is served by
// next as a request of its own, with the client's headers and address
// (but an Accept of JSON), so each is identified, bounded, priced and
// charged as a lone POST would be, and the answers come back in order in
// one array, with status 200. Its rate-limit headers are those of the
// last answer (the budget after every operation of the batch);
// Retry-After, when an operation was refused, is the longest any answer
// asked for. Every other request goes to next as it came.
//
// A batch refused whole (BAD_BATCH) is answered through refused, when set:
// the limiter's REST wrapper (lim.REST), which identifies, sheds and
// charges it as a REST request before the refusal is written, so that a
// client cannot have batches decoded for nothing.
type batching struct {
	next         http.Handler
	refused      http.Handler // answers a refused batch; nil: refuseBatch alone
	maxOps       int          // operations in one batch; more is refused 400
	maxBodyBytes int64        // a body longer than this goes to next, which refuses it
}

// newBatching is batching in front of next, its refusals charged through
// lim's REST wrapper.
func newBatching(next http.Handler, lim *middleware.Limiter, maxOps int, maxBodyBytes int64) batching {
	return batching{next: next, refused: lim.REST(http.HandlerFunc(answerRefusal)), maxOps: maxOps, maxBodyBytes: maxBodyBytes}
}

// batchRefusal keys, in a refused batch's context, why it was refused.
type batchRefusal struct{}

// refuse answers r, a batch refused whole, with msg.
func (b batching) refuse(w http.ResponseWriter, r *http.Request, msg string) {
	if b.refused == nil {
		refuseBatch(w, msg)
		return
	}
	r.Body = http.NoBody // read already: the refusal reads nothing
	b.refused.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), batchRefusal{}, msg)))
}

// answerRefusal writes the refusal batching.refuse put in r's context.
func answerRefusal(w http.ResponseWriter, r *http.Request) {
	msg, _ := r.Context().Value(batchRefusal{}).(string)
	refuseBatch(w, msg)
}

// ServeHTTP implements http.Handler.
func (b batching) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Body == nil || !isJSON(r.Header.Get("Content-Type")) ||
		r.ContentLength > b.maxBodyBytes {
		// Not a batch, or declared too long to be one: next refuses it
		// without this handler reading it.
		b.next.ServeHTTP(w, r)
		return
	}
	// Only a body that opens an array is read here. Any other goes to
	// next with no more than its first bytes read (and kept) here, so
	// that the limiter alone bounds what a lone POST holds in memory.
	body := bufio.NewReaderSize(r.Body, arrayPeekBytes)
	if !opensArray(body) {
		r.Body = replay{Reader: body, Closer: r.Body}
		b.next.ServeHTTP(w, r)
		return
	}
	head, err := io.ReadAll(io.LimitReader(body, b.maxBodyBytes+1))
	if err != nil || int64(len(head)) > b.maxBodyBytes {
		// Too long to be a batch: next reads (and bounds) the body as it
		// came, from what was read and what was not.
		r.Body = replay{Reader: io.MultiReader(bytes.NewReader(head), body), Closer: r.Body}
		b.next.ServeHTTP(w, r)
		return
	}
	var ops []json.RawMessage
	if err := json.Unmarshal(head, &ops); err != nil {
		b.refuse(w, r, "the request body is not a JSON array of operations: "+err.Error())
		return
	}
	switch {
	case len(ops) == 0:
		b.refuse(w, r, "the batch holds no operation")
		return
	case len(ops) > b.maxOps:
		b.refuse(w, r, "the batch holds "+strconv.Itoa(len(ops))+" operations, more than the "+strconv.Itoa(b.maxOps)+" a batch may hold")
		return
	}
	b.serveBatch(w, r, ops)
}

// serveBatch serves each of ops as a request of its own, like r, and
// answers the array of their answers.
func (b batching) serveBatch(w http.ResponseWriter, r *http.Request, ops []json.RawMessage) {
	var out bytes.Buffer
	out.WriteByte('[')
	var last http.Header
	retryAfter := 0
	for i, op := range ops {
		if r.Context().Err() != nil {
			// The client is gone: its later operations would be charged
			// and forwarded for an answer nobody reads.
			return
		}
		rec := b.serveOne(r, op)
		if i > 0 {
			out.WriteByte(',')
		}
		rec.appendTo(&out)
		if s, err := strconv.Atoi(rec.header.Get("Retry-After")); err == nil {
			retryAfter = max(retryAfter, s)
		}
		last = rec.header
	}
	out.WriteByte(']')
	for k, v := range last {
		if k != "Content-Length" && k != "Retry-After" {
			w.Header()[k] = v
		}
	}
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(out.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out.Bytes())
}

// serveOne serves op, one operation of the batch r, as a POST of its own
// with r's headers, and returns its answer.
func (b batching) serveOne(r *http.Request, op json.RawMessage) *answer {
	sub := r.Clone(r.Context())
	sub.Body = io.NopCloser(bytes.NewReader(op))
	sub.ContentLength = int64(len(op))
	sub.Header.Set("Content-Length", strconv.Itoa(len(op)))
	// The array is JSON, so is each answer in it: never a stream
	// (text/event-stream, multipart/mixed) whatever the batch's Accept
	// asked for.
	sub.Header.Set("Accept", "application/json")
	rec := &answer{header: make(http.Header)}
	b.next.ServeHTTP(rec, sub)
	return rec
}

// appendTo appends the answer to out as an element of the batch's array:
// its body when it is a GraphQL answer; otherwise (a plain-text refusal)
// an error of its own, with the status it came with.
func (a *answer) appendTo(out *bytes.Buffer) {
	if body := bytes.TrimSpace(a.body.Bytes()); json.Valid(body) && len(body) > 0 && body[0] == '{' {
		out.Write(body)
		return
	}
	b, _ := json.Marshal(map[string]any{"errors": []any{map[string]any{
		"message":    string(bytes.TrimSpace(a.body.Bytes())),
		"extensions": map[string]any{"status": a.code()},
	}}})
	out.Write(b)
}

// isJSON reports whether a Content-Type is JSON's: the only one a batch
// is sent as.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// arrayPeekBytes is how far into a body a batch's opening bracket is
// looked for: a body that opens with more white space than this is not
// taken for a batch.
const arrayPeekBytes = 512

// opensArray reports whether a JSON body's first token, within its first
// arrayPeekBytes, opens an array. It reads at most arrayPeekBytes of the
// body, which body keeps to be read again.
func opensArray(body *bufio.Reader) bool {
	for n := 1; n <= arrayPeekBytes; n++ {
		p, err := body.Peek(n)
		if err != nil {
			return false
		}
		switch p[n-1] {
		case ' ', '\t', '\r', '\n':
		case '[':
			return true
		default:
			return false
		}
	}
	return false
}

// refuseBatch answers 400 with a GraphQL error coded BAD_BATCH.
func refuseBatch(w http.ResponseWriter, msg string) {
	b, _ := json.Marshal(map[string]any{"errors": []any{map[string]any{
		"message": msg, "extensions": map[string]any{"code": "BAD_BATCH"},
	}}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(b)
}

// replay is a request body read from Reader and closed through Closer.
type replay struct {
	io.Reader
	io.Closer
}

// answer records one operation's answer within a batch.
type answer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (a *answer) Header() http.Header { return a.header }
func (a *answer) WriteHeader(status int) {
	if a.status == 0 {
		a.status = status
	}
}
func (a *answer) Write(p []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(p)
}

// code is the answer's status.
func (a *answer) code() int {
	if a.status == 0 {
		return http.StatusOK
	}
	return a.status
}
