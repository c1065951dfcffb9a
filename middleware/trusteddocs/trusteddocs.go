// Package trusteddocs reads a manifest of trusted GraphQL documents: the
// operations a server's own clients send, each named by the SHA-256 of its
// text, as client build tools write them out. Two formats are read:
//
//   - a flat JSON object of hash to document, {"<sha256 hex>": "<document>"}
//     (GraphQL Codegen's client preset, Relay's persisted queries);
//   - Apollo's persisted query manifest, {"format":
//     "apollo-persisted-query-manifest", "version": 1, "operations": [{"id",
//     "name", "type", "body"}]}.
//
// Every id must be the lowercase hex SHA-256 of its document's text, byte
// for byte, or the manifest is refused with an error naming the entry: a
// request that names a document by its hash (an automatic persisted query's
// extensions.persistedQuery.sha256Hash, or GraphQL over HTTP's documentId)
// then gets exactly the text that hash stands for.
//
// The package reads manifests and names the modes (Mode); package
// middleware (the TrustedDocuments option) decides what a request may run
// with them.
package trusteddocs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// DefaultMaxBytes bounds a manifest file Load reads when given no bound of
// its own: 16 MiB holds thousands of operations.
const DefaultMaxBytes = 16 << 20

// ApolloFormat is the format member of Apollo's persisted query manifest.
const ApolloFormat = "apollo-persisted-query-manifest"

// Mode says what runs besides the trusted documents. Its values are the
// mode key's values in a YAML configuration (trusted_documents.mode).
type Mode string

const (
	// Enforce runs only the trusted documents: any other document, or an
	// unknown hash, is refused and pays middleware's
	// GraphQLOptions.InvalidCost.
	Enforce Mode = "enforce"
	// AllowUnlisted runs other documents too, under the usual caps
	// (gqlgen's automatic persisted queries included).
	AllowUnlisted Mode = "allow_unlisted"
)

// ErrInvalidManifest wraps every error about a manifest's content.
var ErrInvalidManifest = errors.New("trusteddocs: invalid manifest")

// Document is one trusted document.
type Document struct {
	// Hash is the lowercase hex SHA-256 of Body.
	Hash string
	// Name is the operation's name in an Apollo manifest ("" in a flat
	// one), for messages.
	Name string
	// Body is the document's text.
	Body string
}

// Manifest is a set of trusted documents, read-only once built and safe
// for concurrent use.
type Manifest struct {
	docs map[string]*Document
}

// Hash returns the lowercase hex SHA-256 of a document's text, the id a
// manifest and a request name it by.
func Hash(body string) string {
	sum := sha256.Sum256([]byte(body))
	return hex.EncodeToString(sum[:])
}

// ParseID returns the hash a request's document id names: "sha256:<hex>"
// (GraphQL over HTTP's trusted documents) or the bare hex, in either case.
// ok is false for anything else.
func ParseID(id string) (hash string, ok bool) {
	if p, rest, found := strings.Cut(id, ":"); found {
		if !strings.EqualFold(p, "sha256") {
			return "", false
		}
		id = rest
	}
	if len(id) != sha256.Size*2 {
		return "", false
	}
	for i := range len(id) {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return "", false
		}
	}
	return strings.ToLower(id), true
}

// Load reads the manifest file at path, refusing one larger than maxBytes
// (0: DefaultMaxBytes).
func Load(path string, maxBytes int64) (*Manifest, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trusteddocs: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("trusteddocs: reading %s: %w", path, err)
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalidManifest, path, maxBytes)
	}
	m, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// apolloManifest is Apollo's persisted query manifest.
type apolloManifest struct {
	Format     string `json:"format"`
	Version    int    `json:"version"`
	Operations []struct {
		ID   string `json:"id"`
		Name string `json:"name"`
		Type string `json:"type"`
		Body string `json:"body"`
	} `json:"operations"`
}

// Parse reads a manifest in either format. An empty manifest is valid: it
// trusts nothing.
func Parse(data []byte) (*Manifest, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrInvalidManifest)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidManifest, err)
	}
	m := &Manifest{docs: make(map[string]*Document, len(probe))}
	if _, ok := probe["format"]; ok {
		var am apolloManifest
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&am); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidManifest, err)
		}
		if am.Format != ApolloFormat {
			return nil, fmt.Errorf("%w: format %q; want %q, or a flat object of hash to document", ErrInvalidManifest, am.Format, ApolloFormat)
		}
		if am.Version != 1 {
			return nil, fmt.Errorf("%w: version %d of %s; only version 1 is read", ErrInvalidManifest, am.Version, ApolloFormat)
		}
		for i, op := range am.Operations {
			entry := fmt.Sprintf("operations[%d] (id %q, name %q)", i, op.ID, op.Name)
			switch op.Type {
			case "query", "mutation", "subscription":
			default:
				return nil, fmt.Errorf("%w: %s: type %q; want query, mutation or subscription", ErrInvalidManifest, entry, op.Type)
			}
			if err := m.add(entry, op.ID, op.Name, op.Body); err != nil {
				return nil, err
			}
		}
		return m, nil
	}
	for _, id := range slices.Sorted(maps.Keys(probe)) {
		var body string
		if err := json.Unmarshal(probe[id], &body); err != nil {
			return nil, fmt.Errorf("%w: entry %q: the document is not a string", ErrInvalidManifest, id)
		}
		if err := m.add(fmt.Sprintf("entry %q", id), id, "", body); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// add checks one entry and keeps it.
func (m *Manifest) add(entry, id, name, body string) error {
	if body == "" {
		return fmt.Errorf("%w: %s: the document is empty", ErrInvalidManifest, entry)
	}
	hash, ok := ParseID(id)
	if !ok || hash != id && "sha256:"+hash != id {
		return fmt.Errorf("%w: %s: the id is not a lowercase hex SHA-256", ErrInvalidManifest, entry)
	}
	if got := Hash(body); got != hash {
		return fmt.Errorf("%w: %s: the id is not the SHA-256 of the document (%s)", ErrInvalidManifest, entry, got)
	}
	if _, dup := m.docs[hash]; dup {
		return fmt.Errorf("%w: %s: the id appears twice", ErrInvalidManifest, entry)
	}
	m.docs[hash] = &Document{Hash: hash, Name: name, Body: body}
	return nil
}

// Lookup returns the document of hash (lowercase hex, as ParseID returns
// it).
func (m *Manifest) Lookup(hash string) (*Document, bool) {
	if m == nil {
		return nil, false
	}
	d, ok := m.docs[hash]
	return d, ok
}

// Len is the number of documents.
func (m *Manifest) Len() int {
	if m == nil {
		return 0
	}
	return len(m.docs)
}

// Documents returns the documents, sorted by hash.
func (m *Manifest) Documents() []*Document {
	if m == nil {
		return nil
	}
	out := make([]*Document, 0, len(m.docs))
	for _, d := range m.docs {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b *Document) int { return strings.Compare(a.Hash, b.Hash) })
	return out
}
