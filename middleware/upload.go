package middleware

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"strings"
)

// A GraphQL multipart request (file uploads) is not read into memory by
// the wrapper: its first part, operations, is read and screened like a
// JSON body, and the rest streams to gqlgen, whose MultipartForm transport
// keeps small files in memory and spills larger ones to disk (its
// MaxMemory and MaxUploadSize apply as without the limiter).

const (
	// CodeRequestTimeout: the request body did not arrive in time (408).
	CodeRequestTimeout = "REQUEST_TIMEOUT"

	// defaultMaxUploadBytes is the default of Dependencies.MaxUploadBytes, the
	// size gqlgen's MultipartForm allows by default.
	defaultMaxUploadBytes = 32 << 20

	// multipartSlack is what the multipart reader may read past the
	// operations part (its buffer and the next part's boundary) and the
	// part's headers may take: the replay buffer holds at most
	// MaxBodyBytes and this.
	multipartSlack = 64 << 10

	mib = 1 << 20
)

// isMultipart reports whether r is a POST of multipart/form-data, the
// GraphQL multipart request gqlgen's MultipartForm transport serves, and
// returns its boundary.
func isMultipart(r *http.Request) (boundary string, ok bool) {
	ct := contentType(r.Header)
	if r.Method != http.MethodPost || len(ct) < len("multipart/") || !strings.EqualFold(ct[:len("multipart/")], "multipart/") {
		return "", false // without parsing (which allocates): the JSON requests' path
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return "", false
	}
	return params["boundary"], true
}

// contentType is h.Get("Content-Type") without canonicalizing the name
// again on every request (the key is already canonical).
func contentType(h http.Header) string {
	if v := h["Content-Type"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// countingReader counts the bytes of a multipart body read through it,
// and keeps the refusal its first failed read calls for (too large, too
// slow): gqlgen, which reads the files, would answer it 422.
type countingReader struct {
	r       io.Reader
	n       int64
	refused *refusal
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF && c.refused == nil {
		c.refused = readRefusal(err)
	}
	return n, err
}

// recordingReader keeps what is read through it, up to limit bytes, so
// that it can be read again.
type recordingReader struct {
	r     io.Reader
	buf   []byte
	limit int
}

var errRecordingFull = errors.New("middleware: the operations part is too large")

func (rr *recordingReader) Read(p []byte) (int, error) {
	if len(rr.buf) >= rr.limit {
		return 0, errRecordingFull
	}
	p = p[:min(len(p), rr.limit-len(rr.buf))]
	n, err := rr.r.Read(p)
	rr.buf = append(rr.buf, p[:n]...)
	return n, err
}

// replayedBody is a body whose first bytes were read already: they are
// read again, then the rest.
type replayedBody struct {
	io.Reader
	io.Closer
}

// screenMultipart bounds a multipart request without buffering it: the
// whole body by MaxUploadBytes (413 when declared larger, or once more has
// arrived), its first part, operations, by MaxBodyBytes and the request
// screen. It hands gqlgen the body to read again from its start, and
// keeps a count of the bytes read, for UploadCostPerMiB.
func (l *Limiter) screenMultipart(w http.ResponseWriter, r *http.Request, boundary string, st *requestState) *refusal {
	if r.ContentLength > l.maxUpload {
		return refuse(http.StatusRequestEntityTooLarge, CodeRequestTooLarge,
			"the multipart request is %d bytes; the limit is %d", r.ContentLength, l.maxUpload)
	}
	body := r.Body
	counted := &countingReader{r: http.MaxBytesReader(w, body, l.maxUpload)}
	rec := &recordingReader{r: counted, limit: int(min(l.maxBody+multipartSlack, l.maxUpload))}
	part, err := multipart.NewReader(rec, boundary).NextPart()
	if err != nil {
		if ref := readRefusal(err); ref != nil {
			return ref
		}
		if errors.Is(err, errRecordingFull) {
			return refuse(http.StatusRequestEntityTooLarge, CodeRequestTooLarge,
				"the first part of the multipart request is larger than %d bytes", l.maxBody)
		}
		return refuse(http.StatusBadRequest, CodeInvalidRequest, "the multipart request has no parts")
	}
	if part.FormName() != "operations" {
		return refuse(http.StatusBadRequest, CodeInvalidRequest, "the first part of a multipart request must be operations")
	}
	ops, err := io.ReadAll(io.LimitReader(part, l.maxBody+1))
	switch {
	case err != nil && errors.Is(err, errRecordingFull), err == nil && int64(len(ops)) > l.maxBody:
		return refuse(http.StatusRequestEntityTooLarge, CodeRequestTooLarge,
			"the operations part is larger than %d bytes", l.maxBody)
	case err != nil:
		if ref := readRefusal(err); ref != nil {
			return ref
		}
		return refuse(http.StatusBadRequest, CodeInvalidRequest, "the operations part could not be read")
	}
	// gqlgen decodes operations as one request object: screen it as a
	// JSON body (its bounds, its document), and let it read the original.
	if _, ref := l.screenJSONParams(ops, st); ref != nil {
		return ref
	}
	r.Body = replayedBody{Reader: io.MultiReader(bytes.NewReader(rec.buf), counted), Closer: body}
	st.upload = counted
	return nil
}

// readRefusal is the refusal of a body read that failed because the body
// was too large (413) or too slow (408); nil for any other failure.
func readRefusal(err error) *refusal {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return refuse(http.StatusRequestEntityTooLarge, CodeRequestTooLarge,
			"the request body is larger than %d bytes", mbe.Limit)
	}
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return refuse(http.StatusRequestTimeout, CodeRequestTimeout, "the request body did not arrive in time")
	}
	return nil
}

// uploadCost is what the bytes of a multipart request add to its
// operation's price: UploadCostPerMiB for each MiB begun. gqlgen has read
// the whole body (its files included) before the operation is priced.
func (s *requestState) uploadCost() int64 {
	per := s.set.gql.UploadCostPerMiB
	if s.upload == nil || per <= 0 {
		return 0
	}
	mibs := (s.upload.n + mib - 1) / mib
	return saturatingMul(mibs, per)
}

// saturatingMul is a × b for non-negative a and b, at most MaxInt64.
func saturatingMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > (1<<63-1)/b {
		return 1<<63 - 1
	}
	return a * b
}
