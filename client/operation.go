package client

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
)

// maxBodyBytes bounds what the Transport reads of a request's body to
// know its operation, and buffers of a response's body to read its
// signals: a larger body is passed through untouched, unread.
const maxBodyBytes = 1 << 20

// maxNameBytes bounds an operation name kept in the price cache.
const maxNameBytes = 128

// kind is what a request does, as far as retrying goes.
type kind uint8

const (
	unknownKind  kind = iota // not GraphQL, or unreadable
	queryKind                // a GraphQL query
	mutationKind             // a GraphQL mutation
	subscriptionKind
)

// operation is what the Transport knows of a request before sending it.
type operation struct {
	// key identifies the operation in the price cache: its name and the
	// hash of its document (or of its persisted query); "" when unknown.
	key string
	// name is what View shows for it: the operation name, or the
	// document hash's first bytes for an anonymous one.
	name string
	kind kind
	// idempotent: a REST method that may be sent twice (GET, HEAD,
	// OPTIONS).
	idempotent bool
	// rereadable: the body can be sent again (none, or GetBody is set).
	rereadable bool
}

// graphQLRequest is the part of a GraphQL-over-HTTP request body the
// Transport reads.
type graphQLRequest struct {
	Query         string `json:"query"`
	OperationName string `json:"operationName"`
	Extensions    struct {
		PersistedQuery struct {
			Hash string `json:"sha256Hash"`
		} `json:"persistedQuery"`
	} `json:"extensions"`
}

// readOperation identifies req's operation without consuming its body: a
// GraphQL POST is read through GetBody (at most maxBodyBytes), a GET from
// its URL; any other request is keyed by method and path.
func readOperation(req *http.Request) operation {
	op := operation{
		rereadable: req.Body == nil || req.Body == http.NoBody || req.GetBody != nil,
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions:
		op.idempotent = true
	}
	var g graphQLRequest
	if q := req.URL.Query(); req.Method == http.MethodGet || req.Method == "" {
		g.Query, g.OperationName = q.Get("query"), q.Get("operationName")
		if ext := q.Get("extensions"); ext != "" {
			_ = json.Unmarshal([]byte(ext), &g.Extensions)
		}
	} else if !readGraphQLBody(req, &g) {
		g = graphQLRequest{}
	}
	if g.Query == "" && g.Extensions.PersistedQuery.Hash == "" {
		op.key = req.Method + " " + req.URL.Path
		op.name = clip(op.key)
		return op
	}
	sum := sha256.Sum256([]byte(g.Query))
	hash := hex.EncodeToString(sum[:16])
	if g.Query == "" {
		hash = clip(g.Extensions.PersistedQuery.Hash)
	}
	op.key = clip(g.OperationName) + "\x00" + hash
	var named string
	op.kind, named = operationKind(g.Query, g.OperationName)
	op.name = clip(named)
	if op.name == "" {
		op.name = "sha256:" + hash[:min(len(hash), 16)]
	}
	if g.Query == "" && op.idempotent {
		op.kind = queryKind // a persisted query over GET: mutations are refused on GET
	}
	return op
}

// readGraphQLBody decodes req's JSON body into g through GetBody,
// reporting whether it could.
func readGraphQLBody(req *http.Request, g *graphQLRequest) bool {
	if req.GetBody == nil || req.ContentLength > maxBodyBytes {
		return false
	}
	if mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	body, err := req.GetBody()
	if err != nil {
		return false
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, maxBodyBytes+1))
	if err != nil || len(b) > maxBodyBytes {
		return false
	}
	return json.Unmarshal(b, g) == nil
}

// clip is s cut to maxNameBytes, copied so that it does not keep the
// request's bytes alive.
func clip(s string) string {
	return strings.Clone(s[:min(len(s), maxNameBytes)])
}

// operationKind is the kind and name of the operation named name in the
// GraphQL document doc (the only one when name is ""), read by a lexer
// that skips comments, strings and everything nested: unknownKind when
// there is no such operation or the document is not one it can read.
func operationKind(doc, name string) (kind, string) {
	lx := lexer{src: doc}
	found, foundName, count := unknownKind, "", 0
	for {
		tok, ok := lx.topLevel()
		if !ok {
			break
		}
		k, opName := queryKind, ""
		switch tok {
		case "{": // the shorthand query
		case "query", "mutation", "subscription", "fragment":
			k = keywordKind(tok)
			if k != unknownKind {
				opName = lx.name()
			}
			lx.skipToBody()
		default:
			return unknownKind, "" // not a document this lexer reads
		}
		if k == unknownKind {
			continue
		}
		count++
		if opName == name || name == "" {
			found, foundName = k, opName
		}
	}
	if name == "" && count != 1 {
		return unknownKind, ""
	}
	return found, foundName
}

// keywordKind is the kind of the operations a definition's keyword
// starts; unknownKind for a fragment.
func keywordKind(keyword string) kind {
	switch keyword {
	case "query":
		return queryKind
	case "mutation":
		return mutationKind
	case "subscription":
		return subscriptionKind
	}
	return unknownKind
}

// lexer reads the tokens of a GraphQL document at nesting depth zero.
type lexer struct {
	src   string
	i     int
	depth int
}

// topLevel returns the next token read at depth zero: a name, or "{"
// opening a selection set there; ok is false at the end.
func (l *lexer) topLevel() (tok string, ok bool) {
	for {
		tok, ok = l.next()
		if !ok {
			return "", false
		}
		switch tok {
		case "{", "(", "[":
			l.depth++
			if tok == "{" && l.depth == 1 {
				return tok, true
			}
		case "}", ")", "]":
			l.depth = max(l.depth-1, 0)
		default:
			if l.depth == 0 {
				return tok, true
			}
		}
	}
}

// name returns the operation name following a keyword, or "" when the
// next token is not a name (it is then left for topLevel).
func (l *lexer) name() string {
	save := l.i
	tok, ok := l.next()
	if ok && isNameStart(tok[0]) {
		return tok
	}
	l.i = save
	return ""
}

// skipToBody moves past the tokens of a definition up to the "{" that
// opens its selection set.
func (l *lexer) skipToBody() {
	for {
		tok, ok := l.topLevel()
		if !ok || tok == "{" {
			return
		}
	}
}

// next returns the next token: a name, a punctuator, or a number or
// string (returned as "0" and "\"").
func (l *lexer) next() (string, bool) {
	for l.i < len(l.src) {
		c := l.src[l.i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',':
			l.i++
		case c == '#':
			for l.i < len(l.src) && l.src[l.i] != '\n' && l.src[l.i] != '\r' {
				l.i++
			}
		case c == '"':
			l.skipString()
			return "\"", true
		case isNameStart(c):
			start := l.i
			for l.i < len(l.src) && (isNameStart(l.src[l.i]) || (l.src[l.i] >= '0' && l.src[l.i] <= '9')) {
				l.i++
			}
			return l.src[start:l.i], true
		case c == '-' || (c >= '0' && c <= '9'):
			for l.i < len(l.src) && strings.IndexByte("-+.eE0123456789", l.src[l.i]) >= 0 {
				l.i++
			}
			return "0", true
		default:
			l.i++
			return l.src[l.i-1 : l.i], true
		}
	}
	return "", false
}

// skipString moves past the string (or block string) starting at l.i.
func (l *lexer) skipString() {
	if strings.HasPrefix(l.src[l.i:], `"""`) {
		end := strings.Index(l.src[l.i+3:], `"""`)
		for end >= 0 && l.src[l.i+3+end-1] == '\\' { // \""" is escaped
			next := strings.Index(l.src[l.i+3+end+1:], `"""`)
			if next < 0 {
				end = -1
				break
			}
			end += 1 + next
		}
		if end < 0 {
			l.i = len(l.src)
			return
		}
		l.i += 3 + end + 3
		return
	}
	for l.i++; l.i < len(l.src); l.i++ {
		switch l.src[l.i] {
		case '\\':
			l.i++
		case '"', '\n':
			l.i++
			return
		}
	}
}

func isNameStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}
