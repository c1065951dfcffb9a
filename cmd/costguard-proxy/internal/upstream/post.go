package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// POST serves GraphQL over HTTP POST as gqlgen's transport.POST does: it
// takes the same requests, decodes them the same way and answers with the
// same Content-Type, statuses and errors. It differs in how it writes a
// forwarded answer: the data the forwarder read and checked is written as
// the upstream sent it, where json.Marshal would check and compact it
// again (on a 40 KB answer, nearly half of the handler's CPU). The
// bytes are the same as json.Marshal's when the upstream's data is
// compact. Any other response (gqlgen's own errors, data an extension
// replaced) is encoded by json.Marshal, as transport.POST encodes it.
type POST struct{}

var _ graphql.Transport = POST{}

// The media types of an answer, chosen by the request's Accept.
const (
	mediaJSON            = "application/json"
	mediaGraphQLResponse = "application/graphql-response+json"
)

// Supports reports whether r is a POST with a JSON body that is not a
// WebSocket upgrade.
func (POST) Supports(r *http.Request) bool {
	if r.Header.Get("Upgrade") != "" || r.Method != http.MethodPost {
		return false
	}
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mediaType == mediaJSON
}

// Do runs the operation of r's body and writes its answer.
func (POST) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	mediaType := answerMediaType(r.Header.Get("Accept"))
	w.Header().Add("Content-Type", mediaType)
	seen := &checkedData{}
	ctx := context.WithValue(r.Context(), checkedDataKey{}, seen)
	start := graphql.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeAnswer(w, exec.DispatchError(ctx, gqlerror.List{gqlerror.Errorf("could not read request body: %+v", err)}), nil)
		return
	}
	params := &graphql.RawParams{Headers: r.Header}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(params); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		msg := gqlerror.Errorf("json request body could not be decoded: %+v body:%s", err, body)
		writeAnswer(w, exec.DispatchError(ctx, gqlerror.List{msg}), nil)
		return
	}
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	opCtx, errs := exec.CreateOperationContext(ctx, params)
	if errs != nil {
		w.WriteHeader(operationErrorStatus(errs, mediaType))
		writeAnswer(w, exec.DispatchError(graphql.WithOperationContext(ctx, opCtx), errs), nil)
		return
	}
	responses, ctx := exec.DispatchOperation(ctx, opCtx)
	writeAnswer(w, responses(ctx), seen.data)
}

// answerMediaType is the Content-Type of the answer to a request whose
// Accept header is accept: the first media type of accept that names
// either, JSON when accept is empty, and the GraphQL response type when
// accept names neither or names any application type.
func answerMediaType(accept string) string {
	if accept == "" {
		return mediaJSON
	}
	for part := range strings.SplitSeq(accept, ",") {
		mediaType, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mediaType {
		case mediaJSON:
			return mediaJSON
		case mediaGraphQLResponse, "*/*", "application/*":
			return mediaGraphQLResponse
		}
	}
	return mediaGraphQLResponse
}

// operationErrorStatus is the status of an operation refused before it
// ran (a parse or validation error, a refused extension): a protocol
// error is 422 under JSON and 400 under the GraphQL response type, as the
// GraphQL over HTTP specification asks of the latter; any other is 200.
func operationErrorStatus(errs gqlerror.List, mediaType string) int {
	if errcode.GetErrorKind(errs) != errcode.KindProtocol {
		return http.StatusOK
	}
	if mediaType == mediaGraphQLResponse {
		return http.StatusBadRequest
	}
	return http.StatusUnprocessableEntity
}

// checkedData is where execute leaves, for the POST serving the
// operation, the data it read from the upstream and checked as JSON.
type checkedData struct{ data []byte }

type checkedDataKey struct{}

// noteChecked records data, checked by decodeResponse, for the POST
// serving ctx's operation, if any.
func noteChecked(ctx context.Context, data []byte) {
	if seen, ok := ctx.Value(checkedDataKey{}).(*checkedData); ok {
		seen.data = data
	}
}

// writeAnswer writes resp, whose data may be checked: the bytes
// decodeResponse checked. A response that cannot be encoded panics, as
// in transport.POST, and gqlgen's handler answers 422.
func writeAnswer(w io.Writer, resp *graphql.Response, checked []byte) {
	b, err := encodeAnswer(resp, checked)
	if err != nil {
		panic(fmt.Errorf("upstream: encoding a response: %w", err))
	}
	_, _ = w.Write(b)
}

// encodeAnswer is json.Marshal(resp), but for data that is checked (the
// same bytes, not a copy): those are written as they are, with the
// escapes json.Marshal adds (TestEncodeAnswerIsMarshal pins the equality).
func encodeAnswer(resp *graphql.Response, checked []byte) ([]byte, error) {
	if resp == nil || len(resp.Data) == 0 || len(resp.Data) != len(checked) || &resp.Data[0] != &checked[0] {
		return json.Marshal(resp)
	}
	var errs []byte
	if len(resp.Errors) > 0 {
		var err error
		if errs, err = json.Marshal(resp.Errors); err != nil {
			return nil, err
		}
	}
	rest, err := json.Marshal(afterData(*resp))
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(errs)+len(resp.Data)+len(rest)+len(`{"errors":,"data":}`)+64)
	b = append(b, '{')
	if errs != nil {
		b = append(b, `"errors":`...)
		b = append(b, errs...)
		b = append(b, ',')
	}
	b = append(b, `"data":`...)
	b = appendEscapingHTML(b, resp.Data)
	if len(rest) > len("{}") {
		b = append(b, ',')
		b = append(b, rest[1:]...)
	} else {
		b = append(b, '}')
	}
	return b, nil
}

// afterData is graphql.Response with the members encoded after data
// alone. The conversion from graphql.Response compiles only while the
// two have the same fields, so a field gqlgen adds stops the build rather
// than going missing from the answers.
type afterData struct {
	Errors     gqlerror.List   `json:"-"`
	Data       json.RawMessage `json:"-"`
	Label      string          `json:"label,omitempty"`
	Path       ast.Path        `json:"path,omitempty"`
	HasNext    *bool           `json:"hasNext,omitempty"`
	Extensions map[string]any  `json:"extensions,omitempty"`
}

// appendEscapingHTML appends the JSON value src to dst with <, >, &,
// U+2028 and U+2029 escaped, as encoding/json escapes them in the
// strings it writes. src is valid JSON, so each of them is inside a
// string.
func appendEscapingHTML(dst, src []byte) []byte {
	if bytes.IndexByte(src, '<') < 0 && bytes.IndexByte(src, '>') < 0 && bytes.IndexByte(src, '&') < 0 &&
		bytes.IndexByte(src, 0xE2) < 0 {
		return append(dst, src...)
	}
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(src); i++ {
		switch c := src[i]; {
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			start = i + 1
		case c == 0xE2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8: // U+2028, U+2029
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[src[i+2]&0xF])
			i += 2
			start = i + 1
		}
	}
	return append(dst, src[start:]...)
}
