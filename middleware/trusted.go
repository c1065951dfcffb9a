package middleware

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/middleware/trusteddocs"
)

// GraphQL error codes of persisted and trusted documents. Their HTTP
// statuses are pinned by tests.
const (
	// CodePersistedQueryNotFound: the request names a document by its
	// hash (extensions.persistedQuery.sha256Hash or documentId) and the
	// trusted documents hold none of that hash, in mode enforce, or for a
	// documentId in any mode (400). Its message is gqlgen's and Apollo's,
	// PersistedQueryNotFound, so automatic persisted query clients read it
	// as they read gqlgen's own (which answers an unknown hash, without
	// trusted documents or in mode allow_unlisted, with 200).
	CodePersistedQueryNotFound = "PERSISTED_QUERY_NOT_FOUND"
	// CodeDocumentNotTrusted: in mode enforce, the request sends a
	// document that is not in the trusted documents (403).
	CodeDocumentNotTrusted = "DOCUMENT_NOT_TRUSTED"
)

// TrustedDocumentsOptions name the trusted documents: the operations a
// server's own clients send, from a manifest their build writes out
// (package trusteddocs reads the formats). A request names one by its
// hash, as an automatic persisted query does
// (extensions.persistedQuery.sha256Hash) or as GraphQL over HTTP does
// (documentId, "sha256:<hex>"), or sends its text. Trusted documents are
// parsed, validated and compiled into cost plans when the extension is
// added to a server and at every Reload, which re-reads File; a manifest
// that fails refuses Handler's extension or the Reload, naming the entry.
//
// Every trusted operation is priced with its variables and debited like
// any other: trust never lifts the budget, MaxCost, MaxBreadth (on
// literal and variable values alike) or the bounds on variables.
type TrustedDocumentsOptions struct {
	// File is the manifest's path (bounded by
	// trusteddocs.DefaultMaxBytes); "" with Manifest nil: no trusted
	// documents.
	File string `yaml:"file"`
	// Manifest is the trusted documents given in code, instead of File.
	Manifest *trusteddocs.Manifest `yaml:"-"`
	// Mode is trusteddocs.Enforce (the default) or
	// trusteddocs.AllowUnlisted.
	Mode trusteddocs.Mode `yaml:"mode"`
	// RelaxStructuralLimits lifts, for trusted documents only, the caps
	// on their shape that are known when they are compiled: MaxDepth,
	// MaxAliases, MaxRootFields, MaxNodes, MaxTokens and MaxSelections
	// (the absolute nesting guard stays).
	RelaxStructuralLimits bool `yaml:"relax_structural_limits"`
}

// trustedSet is the trusted documents in force.
type trustedSet struct {
	m       *trusteddocs.Manifest
	enforce bool
	relax   bool
}

// compileTrusted validates o, reading its file.
func compileTrusted(o TrustedDocumentsOptions) (*trustedSet, error) {
	var mode trusteddocs.Mode
	switch o.Mode {
	case "", trusteddocs.Enforce:
		mode = trusteddocs.Enforce
	case trusteddocs.AllowUnlisted:
		mode = o.Mode
	default:
		return nil, keyed(fmt.Errorf("%w: trusted documents mode %q; want %q or %q", ErrInvalidConfig, o.Mode, trusteddocs.Enforce, trusteddocs.AllowUnlisted), "trusted_documents", "mode")
	}
	m := o.Manifest
	switch {
	case o.File != "" && m != nil:
		return nil, keyed(fmt.Errorf("%w: trusted documents take a File or a Manifest, not both", ErrInvalidConfig), "trusted_documents", "file")
	case o.File != "":
		var err error
		if m, err = trusteddocs.Load(o.File, 0); err != nil {
			return nil, keyed(fmt.Errorf("%w: %w", ErrInvalidConfig, err), "trusted_documents", "file")
		}
	case m == nil && (o.Mode != "" || o.RelaxStructuralLimits):
		return nil, keyed(fmt.Errorf("%w: trusted documents have a mode but no file", ErrInvalidConfig), "trusted_documents", "file")
	case m == nil:
		return nil, nil
	}
	return &trustedSet{m: m, enforce: mode == trusteddocs.Enforce, relax: o.RelaxStructuralLimits}, nil
}

// lookup returns the trusted document whose text is query.
func (t *trustedSet) lookup(query string) *trusteddocs.Document {
	if t == nil || query == "" {
		return nil
	}
	d, _ := t.m.Lookup(trusteddocs.Hash(query))
	return d
}

// relaxes reports whether d's structural caps are lifted.
func (t *trustedSet) relaxes(d *trusteddocs.Document) bool {
	return t != nil && t.relax && d != nil
}

// relaxed reports whether st's structural caps are lifted: its plan lifts
// them (budget.Plan.RelaxStructuralLimits), or it runs a trusted document
// whose caps are lifted. The same caps are lifted either way.
func (st *requestState) relaxed() bool {
	return st.plan != nil && st.plan.RelaxStructuralLimits || st.documentBoundsLifted()
}

// documentBoundsLifted reports whether st skips the document bounds
// (MaxTokens, MaxSelections), which protect the parser and validation
// before anything is priced: only for a trusted document whose caps are
// lifted, whose text was known and compiled at start. A plan that relaxes
// its structural caps keeps them: its documents may be any text.
func (st *requestState) documentBoundsLifted() bool {
	return st.set.trusted.relaxes(st.trustedDoc)
}

// trustedPlans are the compiled cost plans of the trusted documents'
// operations, by hash, then operation name ("" for an anonymous one).
type trustedPlans map[string]map[string]*complexity.Plan

// compileTrustedPlans parses, validates and compiles every trusted
// document against schema, pricing with a (the relaxed analyzer when the
// structural caps are lifted); an error names the entry.
func compileTrustedPlans(schema *ast.Schema, a *complexity.Analyzer, t *trustedSet) (trustedPlans, error) {
	plans := make(trustedPlans, t.m.Len())
	for _, d := range t.m.Documents() {
		doc, errs := gqlparser.LoadQuery(schema, d.Body)
		if len(errs) > 0 {
			return nil, fmt.Errorf("%w: trusted document %s%s: %v", ErrInvalidConfig, d.Hash, nameOf(d), errs[0].Message)
		}
		ops := make(map[string]*complexity.Plan, len(doc.Operations))
		for _, op := range doc.Operations {
			p, err := a.Compile(doc, op)
			if err != nil {
				return nil, fmt.Errorf("%w: trusted document %s%s: %w", ErrInvalidConfig, d.Hash, nameOf(d), err)
			}
			ops[op.Name] = p
		}
		plans[d.Hash] = ops
	}
	return plans, nil
}

func nameOf(d *trusteddocs.Document) string {
	if d.Name == "" {
		return ""
	}
	return fmt.Sprintf(" (%s)", d.Name)
}

// relaxedOptions are s's analyzer options with the structural caps lifted.
func (s *settings) relaxedOptions() []complexity.Option {
	return append(s.complexityOptions(),
		complexity.WithMaxDepth(0), complexity.WithMaxAliases(0),
		complexity.WithMaxRootFields(0), complexity.WithMaxNodes(0))
}

// persistedHash reads extensions.persistedQuery.sha256Hash from a
// request's decoded extensions; ok is false when there is none.
func persistedHash(ext map[string]any) (hash string, ok bool) {
	pq, _ := ext["persistedQuery"].(map[string]any)
	if pq == nil {
		return "", false
	}
	h, _ := pq["sha256Hash"].(string)
	return h, true
}

// persistedHashJSON is persistedHash of extensions still encoded (valid
// JSON, already bounded by the variables budget).
func persistedHashJSON(ext []byte) (hash string, ok bool) {
	if ext == nil {
		return "", false
	}
	var v struct {
		PersistedQuery *struct {
			Sha256Hash string `json:"sha256Hash"`
		} `json:"persistedQuery"`
	}
	if json.Unmarshal(ext, &v) != nil || v.PersistedQuery == nil {
		return "", false
	}
	return v.PersistedQuery.Sha256Hash, true
}

// trustedRequest is what the trusted documents make of a request: the
// document it runs (nil: not a trusted one), whether its text must be
// filled in from the manifest, or a refusal.
type trustedRequest struct {
	doc    *trusteddocs.Document
	inject bool
}

// resolveTrusted applies the trusted documents t to a request with query
// (hasQuery: it sends a non-empty one), documentId id (hasID) and
// extensions.persistedQuery.sha256Hash apq (hasAPQ).
func (t *trustedSet) resolve(query string, hasQuery bool, id string, hasID bool, apq string, hasAPQ bool) (trustedRequest, *refusal) {
	if t == nil {
		return trustedRequest{}, nil
	}
	if hasQuery {
		if d := t.lookup(query); d != nil {
			return trustedRequest{doc: d}, nil
		}
		if t.enforce {
			return trustedRequest{}, refuse(statusOfCode(CodeDocumentNotTrusted), CodeDocumentNotTrusted, "the document is not a trusted document of this server")
		}
		return trustedRequest{}, nil
	}
	name := apq
	if hasID {
		name = id
	} else if !hasAPQ {
		return trustedRequest{}, nil // no document at all: gqlgen says so
	}
	if hash, ok := trusteddocs.ParseID(name); ok {
		if d, ok := t.m.Lookup(hash); ok {
			return trustedRequest{doc: d, inject: true}, nil
		}
	}
	if hasID || t.enforce {
		return trustedRequest{}, refuse(statusOfCode(CodePersistedQueryNotFound), CodePersistedQueryNotFound, "PersistedQueryNotFound")
	}
	return trustedRequest{}, nil // allow_unlisted: gqlgen's persisted queries may know it
}

// statusOfCode is the HTTP status of a trusted documents' refusal, by its
// code, for the wrapper's refusals and the extension's alike (0: the
// verdict's).
func statusOfCode(code string) int {
	switch code {
	case CodeDocumentNotTrusted:
		return http.StatusForbidden
	case CodePersistedQueryNotFound:
		return http.StatusBadRequest
	}
	return 0
}

// PersistedQueryCache returns a cache for gqlgen's automatic persisted
// queries (extension.AutomaticPersistedQuery.Cache) that answers with
// the trusted documents in force first and then with c, which keeps what
// clients register: use a bounded one (querycache.NewPersisted). In mode
// enforce it answers with the trusted documents only and c is never
// written. With it, a hash the trusted documents hold is found however
// the extensions are ordered on the server and over every transport;
// without it, gqlgen's extension must come after the Limiter's for a
// WebSocket operation to be found by a trusted hash (the GraphQL wrapper
// fills in the document of an HTTP request itself). c may be nil: no
// registrations.
func (l *Limiter) PersistedQueryCache(c graphql.Cache[string]) graphql.Cache[string] {
	return &persistedCache{l: l, c: c}
}

type persistedCache struct {
	l *Limiter
	c graphql.Cache[string]
}

// trusted reports whether the trusted documents hold hash (and its
// document), and whether they are enforced.
func (p *persistedCache) trusted(hash string) (doc string, found, enforce bool) {
	t := p.l.current().trusted
	if t == nil {
		return "", false, false
	}
	if h, ok := trusteddocs.ParseID(hash); ok {
		if d, ok := t.m.Lookup(h); ok {
			return d.Body, true, t.enforce
		}
	}
	return "", false, t.enforce
}

// Get implements graphql.Cache.
func (p *persistedCache) Get(ctx context.Context, hash string) (string, bool) {
	doc, found, enforce := p.trusted(hash)
	switch {
	case found:
		return doc, true
	case enforce || p.c == nil:
		return "", false
	}
	return p.c.Get(ctx, hash)
}

// Add implements graphql.Cache.
func (p *persistedCache) Add(ctx context.Context, hash, query string) {
	if _, found, enforce := p.trusted(hash); found || enforce || p.c == nil {
		return
	}
	p.c.Add(ctx, hash, query)
}
