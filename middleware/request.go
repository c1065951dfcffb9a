package middleware

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/lexer"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/internal/echo"
	"github.com/costguard/costguard/internal/jsontext"
)

// GraphQL error codes of requests refused before gqlgen reads them. Their
// HTTP statuses are pinned by tests.
const (
	// CodeRequestTooLarge: the body is larger than Dependencies.MaxBodyBytes (413).
	CodeRequestTooLarge = "REQUEST_TOO_LARGE"
	// CodeInvalidRequest: the body is not one JSON object of the
	// GraphQL-over-HTTP shape (400).
	CodeInvalidRequest = "INVALID_REQUEST"
	// CodeVariablesTooLarge: variables or extensions hold more values, or
	// nest deeper, than GraphQLOptions allow (400).
	CodeVariablesTooLarge = "VARIABLES_TOO_LARGE"
)

// refusal is a request answered before gqlgen runs.
type refusal struct {
	status  int
	code    string
	message string
	// gqlErr, when set, is the error to answer with (a document bound).
	gqlErr *gqlerror.Error
	// free: nothing is charged (a GET mutation).
	free bool
}

func refuse(status int, code, format string, args ...any) *refusal {
	return &refusal{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// smallBody is the size below which a body is read in one allocation and
// never waits for MaxBodyBytesInFlight.
const smallBody = 64 << 10

// readBody reads r's body whole, at most limit bytes, so a body of unknown
// length (chunked) is refused with 413 as surely as a declared one, and
// puts what it read back for the next handler. Memory grows with the bytes
// that arrive, never with the length a client declares: a client that
// declares a megabyte and sends a byte holds a small buffer.
func readBody(r *http.Request, limit int64) ([]byte, *refusal) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > limit {
		return nil, refuse(http.StatusRequestEntityTooLarge, CodeRequestTooLarge,
			"the request body is %d bytes; the limit is %d", r.ContentLength, limit)
	}
	// Unknown length (-1, or 0 with a body, as requests built in-process by
	// gqlgen's client package or by a middleware that replaced r.Body say
	// it): read to EOF, one byte past the limit to see it.
	want := limit + 1
	if r.ContentLength > 0 {
		want = r.ContentLength
	}
	body := make([]byte, 0, min(want, smallBody))
	var err error
	for int64(len(body)) < want {
		if len(body) == cap(body) { // double, up to what is still wanted
			body = slices.Grow(body, int(min(int64(cap(body)), want-int64(len(body)))))
		}
		var n int
		n, err = r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err != nil {
			break
		}
	}
	if err == io.EOF {
		err = nil
		if r.ContentLength > 0 && int64(len(body)) < r.ContentLength {
			err = io.ErrUnexpectedEOF
		}
	}
	if err != nil {
		if ref := readRefusal(err); ref != nil {
			return nil, ref
		}
		return nil, refuse(http.StatusBadRequest, CodeInvalidRequest, "the request body could not be read")
	}
	if int64(len(body)) > limit {
		return nil, refuse(http.StatusRequestEntityTooLarge, CodeRequestTooLarge,
			"the request body is larger than %d bytes", limit)
	}
	r.Body = newReplayBody(body)
	r.ContentLength = int64(len(body))
	return body, nil
}

// replayBody hands a body that was read on to the next handler: the
// reader and its Close in one allocation.
type replayBody struct{ bytes.Reader }

func newReplayBody(b []byte) *replayBody {
	rb := new(replayBody)
	rb.Reset(b)
	return rb
}

// Close implements io.Closer: nothing to release.
func (*replayBody) Close() error { return nil }

// screenGraphQL bounds what gqlgen's transports will decode into memory,
// before they decode it: the body's size, and for JSON requests (POST
// bodies, GET's variables and extensions parameters) the number and
// nesting of the values in variables and extensions. Variables the
// document never mentions are dropped, as execution would ignore them,
// before they are decoded. It may rewrite r's body or URL.
//
// It also applies the document bounds (MaxTokens, MaxSelections) to the
// query it finds, so that an oversized document is refused before gqlgen
// reads the body again and decodes it; st records that the extension need
// not count it again.
func (l *Limiter) screenGraphQL(r *http.Request, body []byte, st *requestState) *refusal {
	if r.Method == http.MethodGet {
		return l.screenGETParams(r, st)
	}
	if body == nil {
		return nil
	}
	if v := r.Header["Content-Type"]; len(v) == 0 || v[0] != jsonMIME && !decodedAsJSON(v[0], body) {
		return nil // the usual spelling of JSON is taken without parsing it (which allocates)
	}
	out, ref := l.screenJSONParams(body, st)
	if ref != nil {
		return ref
	}
	if len(out) != len(body) {
		r.Body = newReplayBody(out)
		r.ContentLength = int64(len(out))
	}
	return nil
}

// decodedAsJSON reports whether gqlgen's transports will decode body as a
// JSON request, variables and extensions included: a JSON body (POST, SSE,
// multipart/mixed), and a form-encoded one holding `"query":`, which
// transport.UrlEncodedForm decodes as JSON whatever its Content-Type says.
// Unscreened, such a form let a 1 MB body of variables cost gqlgen 64-126
// ms and 59 MB of allocations to decode, for a 1-point price.
func decodedAsJSON(contentType string, body []byte) bool {
	if isJSON(contentType) {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == formMIME && bytes.Contains(body, formJSONMarker)
}

// formJSONMarker is what makes transport.UrlEncodedForm decode a form body
// as JSON.
var formJSONMarker = []byte(`"query":`)

func isJSON(contentType string) bool {
	if contentType == jsonMIME {
		return true // the usual spelling, without parsing (which allocates)
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == jsonMIME
}

// The members of a GraphQL-over-HTTP request body that gqlgen decodes.
// encoding/json matches member names case-insensitively (with Unicode
// folding), so any other spelling of these is refused rather than decoded
// behind the screen's back.
var requestMembers = []string{"query", "operationName", "variables", "extensions"}

var requestMemberBytes = func() (b [][]byte) {
	for _, m := range requestMembers {
		b = append(b, []byte(m))
	}
	return b
}()

// screenJSONParams checks a POST body and returns it, or a copy without the
// undeclared variables.
func (l *Limiter) screenJSONParams(body []byte, st *requestState) ([]byte, *refusal) {
	env, ref := scanEnvelope(body, st)
	if ref != nil {
		return nil, ref
	}
	var tr trustedRequest
	if st.set.trusted != nil {
		if tr, ref = l.trustedJSON(env.query, env.docID, env.ext, st); ref != nil {
			return nil, ref
		}
	}
	if tr.inject {
		// A hash the trusted documents hold: gqlgen gets the document's
		// text in place of the query member, or before the others.
		lit, _ := json.Marshal(tr.doc.Body)
		out := make([]byte, 0, len(body)+len(lit)+10)
		if env.queryAt.End > 0 {
			out = append(append(append(out, body[:env.queryAt.Start]...), lit...), body[env.queryAt.End:]...)
		} else {
			open := bytes.IndexByte(body, '{') + 1
			out = append(append(append(out, body[:open]...), `"query":`...), lit...)
			if rest := bytes.TrimLeft(body[open:], " \t\r\n"); len(rest) > 0 && rest[0] != '}' {
				out = append(out, ',')
			}
			out = append(out, body[open:]...)
		}
		return out, nil
	}
	if st.trustedDoc != nil && st.documentBoundsLifted() {
		// Trusted, as sent, and its bounds lifted: its variables are all
		// kept (and bounded).
		if st.documentChecked == "" && len(env.query) > 2 {
			st.documentChecked = jsonString(env.query)
		}
		return body, nil
	}
	screened, ref := l.screenQuery(env.query, st)
	if ref != nil {
		return nil, ref
	}
	var buf [8]jsontext.Member
	read, others := screened.readVariables(env.variables, buf[:0])
	if !others {
		return body, nil
	}
	out := make([]byte, 0, len(body))
	out = append(out, body[:env.varsAt.Start]...)
	out = appendObject(out, env.variables, read)
	return append(out, body[env.varsAt.End:]...), nil
}

// envelope is what scanEnvelope found of a JSON request body.
type envelope struct {
	query     []byte          // the query's string literal
	queryAt   jsontext.Member // the query member, when there is one
	variables []byte          // the variables object
	varsAt    jsontext.Member // its member
	docID     []byte          // documentId's value (trusted documents)
	ext       []byte          // the extensions object
}

// countedMembers are the members whose values GraphQLOptions bound.
var countedMembers = [][]byte{[]byte("variables"), []byte("extensions")}

// scanEnvelope checks body, a JSON request, as gqlgen will decode it (one
// object; each member it reads at most once, spelled as it expects, of
// the type it expects) and bounds its variables and extensions, in one
// walk that decodes nothing but member names and stops at the first bound
// passed.
func scanEnvelope(body []byte, st *requestState) (envelope, *refusal) {
	var (
		env  envelope
		buf  [8]jsontext.Member // more are a member given twice, refused
		seen [4]bool            // of requestMembers
	)
	lim := jsontext.Limits{Keep: keepRequestMember, MaxMembers: len(buf), Count: countedMembers,
		MaxValues: st.set.gql.MaxVariableValues, MaxDepth: st.set.gql.MaxVariablesDepth}
	if st.set.trusted != nil {
		lim.Keep = keepTrustedRequestMember
	}
	members, status := jsontext.Members(body, buf[:0], lim)
	if ref := membersRefusal(status, members, lim, "the request body"); ref != nil {
		return env, ref
	}
	for _, m := range members {
		name := m.Key()
		if string(name) == "documentId" && st.set.trusted != nil {
			env.docID = body[m.Start:m.End]
			continue
		}
		canonical, at := "", 0
		for i, want := range requestMembers {
			if string(name) == want || canonical == "" && bytes.EqualFold(name, requestMemberBytes[i]) {
				canonical, at = want, i // the usual spelling first, without folding case
			}
		}
		if canonical == "" {
			continue // encoding/json skips it without keeping it
		}
		if string(name) != canonical || seen[at] {
			return env, refuse(http.StatusBadRequest, CodeInvalidRequest,
				"the request body has a member %q; expected each of %s at most once, spelled so",
				echo.Cut(string(name)), strings.Join(requestMembers, ", "))
		}
		seen[at] = true
		if ref := env.take(canonical, m, body[m.Start:m.End]); ref != nil {
			return env, ref
		}
	}
	return env, nil
}

// take keeps what the envelope needs of its member canonical, m, whose
// value is v, after checking v's type.
func (env *envelope) take(canonical string, m jsontext.Member, v []byte) *refusal {
	switch canonical {
	case "query", "operationName":
		if v[0] != '"' && !isNull(v) {
			return refuse(http.StatusBadRequest, CodeInvalidRequest, "%s must be a string", canonical)
		}
		if canonical == "query" {
			env.queryAt = m
			if v[0] == '"' {
				env.query = v
			}
		}
	case "variables", "extensions":
		if v[0] != '{' && !isNull(v) {
			return refuse(http.StatusBadRequest, CodeInvalidRequest, "%s must be an object", canonical)
		}
		switch {
		case v[0] != '{':
		case canonical == "extensions":
			env.ext = v
		default:
			env.variables, env.varsAt = v, m
		}
	}
	return nil
}

// keepRequestMember reports whether the member of a request body named
// name (as written) is one gqlgen decodes, in any spelling encoding/json
// would match: the screen reads those and refuses the misspelled, and
// skips the rest without keeping them, however many a body repeats.
func keepRequestMember(name []byte) bool { return isRequestMember(name, false) }

// keepTrustedRequestMember is keepRequestMember, and documentId.
func keepTrustedRequestMember(name []byte) bool { return isRequestMember(name, true) }

func isRequestMember(name []byte, documentID bool) bool {
	switch string(name) { // the usual spellings, without folding case
	case "query", "operationName", "variables", "extensions":
		return true
	case "documentId":
		return documentID
	}
	var buf [96]byte // longer than any spelling of a member's name, each character escaped
	if bytes.IndexByte(name, '\\') >= 0 || !utf8.Valid(name) {
		if len(name) > len(buf) {
			return false
		}
		name = jsontext.AppendUnquoted(buf[:0], name)
	}
	if documentID && string(name) == "documentId" {
		return true
	}
	for i := range requestMemberBytes {
		if bytes.EqualFold(name, requestMemberBytes[i]) {
			return true
		}
	}
	return false
}

// membersRefusal is the refusal of what jsontext.Members found of the
// JSON object what names, or nil.
func membersRefusal(status jsontext.Status, members []jsontext.Member, lim jsontext.Limits, what string) *refusal {
	switch status {
	case jsontext.Invalid:
		return refuse(http.StatusBadRequest, CodeInvalidRequest, "%s is not valid JSON", what)
	case jsontext.NotObject:
		return refuse(http.StatusBadRequest, CodeInvalidRequest, "%s is not a JSON object", what)
	case jsontext.TooDeep:
		return refuse(http.StatusBadRequest, CodeVariablesTooLarge, "%s nest deeper than %d levels",
			members[len(members)-1].Name, lim.MaxDepth)
	case jsontext.TooMany:
		return refuse(http.StatusBadRequest, CodeVariablesTooLarge, "variables and extensions hold more than the limit of values")
	case jsontext.TooManyMembers:
		return refuse(http.StatusBadRequest, CodeInvalidRequest, "%s repeats its members; expected each of %s at most once",
			what, strings.Join(requestMembers, ", "))
	}
	return nil
}

// screenQuery applies the document bounds to the query whose JSON string
// literal is literal (nil: none), from the screen cache when the same
// literal passed the same bounds before, and marks st checked.
func (l *Limiter) screenQuery(literal []byte, st *requestState) (*screenedQuery, *refusal) {
	lim := st.set.documentLimits()
	if len(literal) <= 2 { // nil, or ""
		// No document: one named by its hash, which gqlgen's persisted
		// queries fill in. Its variables are all kept (still bounded):
		// there is no text here to tell which it reads.
		return &screenedQuery{unreadable: true}, l.checkDocument("", st)
	}
	if q := l.screened.get(literal); q != nil && q.limits == lim {
		st.documentChecked = q.query
		return q, nil
	}
	key, query, shared := queryLiteral(literal)
	if ref := l.checkDocument(query, st); ref != nil {
		return nil, ref
	}
	q := newScreenedQuery(key, query, shared, lim)
	l.screened.put(key, q)
	return q, nil
}

// trustedJSON applies the trusted documents to a POST body's query
// literal, documentId value and extensions object (each nil when absent).
func (l *Limiter) trustedJSON(query, docID, ext []byte, st *requestState) (trustedRequest, *refusal) {
	if st.set.trusted == nil {
		return trustedRequest{}, nil
	}
	var q, id string
	if query != nil {
		q = jsonString(query)
	}
	hasID := docID != nil && !isNull(docID)
	if hasID {
		if docID[0] != '"' {
			return trustedRequest{}, refuse(http.StatusBadRequest, CodeInvalidRequest, "documentId must be a string")
		}
		id = jsonString(docID)
	}
	apq, hasAPQ := persistedHashJSON(ext)
	return l.applyTrusted(q, id, hasID, apq, hasAPQ, st)
}

// applyTrusted resolves a request against the trusted documents and
// bounds a document filled in from them (unless their bounds are lifted):
// a document sent as text is bounded by the caller, as any other.
func (l *Limiter) applyTrusted(q, id string, hasID bool, apq string, hasAPQ bool, st *requestState) (trustedRequest, *refusal) {
	t := st.set.trusted
	tr, ref := t.resolve(q, q != "", id, hasID, apq, hasAPQ)
	if ref != nil || tr.doc == nil {
		return tr, ref
	}
	st.trustedDoc = tr.doc
	switch {
	case st.trustedDoc != nil && st.documentBoundsLifted():
		st.documentChecked = tr.doc.Body
	case tr.inject:
		return tr, l.checkDocument(tr.doc.Body, st)
	}
	return tr, nil
}

// jsonString decodes v, a valid JSON string literal, as encoding/json
// does (FuzzJSONString holds the two equal) without its reflection: a
// query string usually carries escaped quotes, and decoding it is on every
// request's path. Without a backslash its content is the string itself
// (valid JSON holds no raw control characters). Invalid UTF-8 and lone
// surrogates become U+FFFD, as encoding/json makes them.
func jsonString(v []byte) string {
	v = v[1 : len(v)-1]
	if bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v) {
		return string(v)
	}
	return string(jsontext.AppendUnquoted(make([]byte, 0, len(v)), v))
}

// appendObject appends to out an object of members, members of the
// object src.
func appendObject(out, src []byte, members []jsontext.Member) []byte {
	out = append(out, '{')
	for i, m := range members {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, src[m.KeyStart:m.End]...)
	}
	return append(out, '}')
}

// screenGETParams applies the same bounds to a GET request's variables and
// extensions parameters.
func (l *Limiter) screenGETParams(r *http.Request, st *requestState) *refusal {
	q := r.URL.Query()
	if t := st.set.trusted; t != nil {
		apq, hasAPQ := "", false
		if ext := bytes.TrimSpace([]byte(q.Get("extensions"))); len(ext) > 0 && jsontext.Valid(ext) && ext[0] == '{' {
			// Bounded before it is decoded, as below with the variables.
			env, ref := getEnvelope(q, st, "extensions")
			if ref != nil {
				return ref
			}
			apq, hasAPQ = persistedHashJSON(env.ext)
		}
		tr, ref := l.applyTrusted(q.Get("query"), q.Get("documentId"), q.Has("documentId"), apq, hasAPQ, st)
		if ref != nil {
			return ref
		}
		if tr.inject {
			q.Set("query", tr.doc.Body)
			r.URL.RawQuery = q.Encode()
		}
	}
	switch {
	case st.trustedDoc != nil && st.documentBoundsLifted(): // the trusted document lifts the bounds
		st.documentChecked = q.Get("query")
	case st.trustedDoc == nil || st.documentChecked != q.Get("query"): // else bounded above
		if ref := l.checkDocument(q.Get("query"), st); ref != nil {
			return ref
		}
	}
	if op := selectedOperation(q.Get("query"), q.Get("operationName")); op == "mutation" || op == "subscription" {
		// gqlgen's GET transport would parse and validate it only to refuse
		// it; refused here, nothing is parsed and nothing is charged.
		return &refusal{status: http.StatusNotAcceptable, free: true,
			gqlErr: gqlerror.Errorf("GET requests only allow query operations")}
	}
	env, ref := getEnvelope(q, st, "variables", "extensions")
	if ref != nil || env.variables == nil {
		return ref
	}
	var screened screenedQuery
	screened.dollars, screened.unreadable = dollarNames(q.Get("query"))
	// No document (one named by its hash) or a trusted one: keep them all
	// (bounded above).
	screened.unreadable = screened.unreadable || q.Get("query") == "" || st.trustedDoc != nil
	var buf [8]jsontext.Member
	if read, others := screened.readVariables(env.variables, buf[:0]); others {
		q.Set("variables", string(appendObject(nil, env.variables, read)))
		r.URL.RawQuery = q.Encode()
	}
	return nil
}

// getEnvelope screens the parameters names of a GET request (variables,
// extensions) as the members of a POST body: each valid JSON, an object or
// null, their values bounded together.
func getEnvelope(q url.Values, st *requestState, names ...string) (envelope, *refusal) {
	body := []byte{'{'}
	for _, name := range names {
		v := bytes.TrimSpace([]byte(q.Get(name)))
		if len(v) == 0 {
			continue
		}
		if !jsontext.Valid(v) {
			return envelope{}, refuse(http.StatusBadRequest, CodeInvalidRequest, "%s is not valid JSON", name)
		}
		if len(body) > 1 {
			body = append(body, ',')
		}
		body = append(append(append(append(body, '"'), name...), '"', ':'), v...)
	}
	return scanEnvelope(append(body, '}'), st)
}

// checkDocument applies the document bounds to query and marks st checked
// when it passes.
func (l *Limiter) checkDocument(query string, st *requestState) *refusal {
	_, err := complexity.CheckDocument(query, st.set.documentLimits())
	var cerr *complexity.Error
	if errors.As(err, &cerr) {
		return &refusal{status: http.StatusUnprocessableEntity, gqlErr: cerr.GQLError()}
	}
	st.documentChecked = query
	return nil
}

// selectedOperation returns the type ("query", "mutation",
// "subscription") of the operation gqlgen will run from query, found by
// the lexer alone: the one named operationName, or the only one. It
// returns "" when it cannot tell (no such operation, several without a
// name, a lexical error), and gqlgen decides.
func selectedOperation(query, operationName string) string {
	lex := lexer.New(&ast.Source{Input: query})
	type operation struct{ typ, name string }
	var (
		ops        []operation
		depth      int  // open braces, parens and brackets
		pending    bool // a definition's header is open: its '{' comes next at depth 0
		expectName bool // the last token was an operation keyword
	)
	for {
		tok, err := lex.ReadToken()
		if err != nil {
			return ""
		}
		if tok.Kind == lexer.EOF {
			break
		}
		wasExpecting := expectName
		expectName = false
		switch tok.Kind {
		case lexer.BraceL:
			if depth == 0 {
				if !pending {
					ops = append(ops, operation{typ: "query"}) // shorthand { … }
				}
				pending = false
			}
			depth++
		case lexer.ParenL, lexer.BracketL:
			depth++
		case lexer.BraceR, lexer.ParenR, lexer.BracketR:
			depth--
		case lexer.Name:
			switch {
			case depth != 0:
			case wasExpecting:
				ops[len(ops)-1].name = tok.Value
			case pending:
				// a fragment's name or type condition, a type in a header
			case tok.Value == "query" || tok.Value == "mutation" || tok.Value == "subscription":
				ops = append(ops, operation{typ: tok.Value})
				pending, expectName = true, true
			case tok.Value == "fragment":
				pending = true
			}
		}
	}
	if operationName == "" {
		if len(ops) == 1 {
			return ops[0].typ
		}
		return ""
	}
	for _, op := range ops {
		if op.name == operationName {
			return op.typ
		}
	}
	return ""
}

func isNull(v []byte) bool { return string(v) == "null" }

// newJSONBudget is a request's budget of variable values and nesting; a
// lifted cap (0 once normalised) counts without limit.
func (s *settings) newJSONBudget() jsonBudget {
	b := jsonBudget{values: s.gql.MaxVariableValues, depth: s.gql.MaxVariablesDepth}
	if b.values == 0 {
		b.values = -1
	}
	if b.depth == 0 {
		b.depth = -1
	}
	return b
}

// jsonBudget counts the values of variables and extensions together against
// GraphQLOptions.MaxVariableValues, and bounds their nesting.
type jsonBudget struct {
	values int // left
	depth  int
}

// measureDecoded counts the values of v, as gqlgen decoded it from a
// WebSocket message (which the wrapper never sees), against the same
// budget as measure: every scalar, array and object counts one.
func (b *jsonBudget) measureDecoded(name string, v map[string]any) *refusal {
	if v == nil {
		return nil
	}
	tooDeep := false
	var walk func(v any, depth int) bool
	walk = func(v any, depth int) bool {
		if b.depth >= 0 && depth > b.depth {
			tooDeep = true
			return false
		}
		if b.values == 0 {
			return false
		}
		b.values--
		switch v := v.(type) {
		case map[string]any:
			for _, e := range v {
				if !walk(e, depth+1) {
					return false
				}
			}
		case []any:
			for _, e := range v {
				if !walk(e, depth+1) {
					return false
				}
			}
		}
		return true
	}
	switch {
	case walk(v, 1):
		return nil
	case tooDeep:
		return refuse(http.StatusBadRequest, CodeVariablesTooLarge, "%s nest deeper than %d levels", name, b.depth)
	}
	return refuse(http.StatusBadRequest, CodeVariablesTooLarge, "variables and extensions hold more than the limit of values")
}
