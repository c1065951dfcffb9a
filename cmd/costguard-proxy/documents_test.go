package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// sha256Hex is a document's id in persisted queries and manifests.
func sha256Hex(doc string) string {
	sum := sha256.Sum256([]byte(doc))
	return hex.EncodeToString(sum[:])
}

// persisted is a request body naming a document by its hash, with the
// document or without.
func persisted(doc string, withDocument bool) string {
	body := map[string]any{"extensions": map[string]any{"persistedQuery": map[string]any{"version": 1, "sha256Hash": sha256Hex(doc)}}}
	if withDocument {
		body["query"] = doc
	}
	b, _ := json.Marshal(body)
	return string(b)
}

// Automatic persisted queries and trusted documents are the proxy's: a
// client sends a hash, the upstream (which may know neither) gets the
// whole document, priced as it.
func TestDocumentsByHash(t *testing.T) {
	up := startUpstream(t, "yoga.js")
	alice := []string{"Authorization", "Bearer alice-key"}

	t.Run("automatic persisted queries", func(t *testing.T) {
		p := startProxy(t, "-upstream", up.URL, "-schema", upstreamSchema, "-config", writeFile(t, "costguard.yaml", testConfig))
		up.reset(t)
		if a := postGraphQL(t, p.URL+"/graphql", persisted(labelsQuery, false), alice...); a.code() != "PERSISTED_QUERY_NOT_FOUND" {
			t.Errorf("an unknown hash: %d %s", a.status, a.body)
		}
		if a := postGraphQL(t, p.URL+"/graphql", persisted(labelsQuery, true), alice...); a.status != http.StatusOK || a.Extensions.Cost.RequestedQueryCost != 10 {
			t.Errorf("registering: %d %s", a.status, a.body)
		}
		a := postGraphQL(t, p.URL+"/graphql", persisted(labelsQuery, false), alice...)
		if a.status != http.StatusOK || !strings.Contains(string(a.Data), "label-25") || a.Extensions.Cost.RequestedQueryCost != 10 {
			t.Errorf("by hash: %d %s", a.status, a.body)
		}
		if hits := up.hits(t); hits != 2 {
			t.Errorf("the upstream executed %d operations, want 2 (the unknown hash never reached it)", hits)
		}
	})

	t.Run("trusted documents", func(t *testing.T) {
		manifest, _ := json.Marshal(map[string]string{sha256Hex(labelsQuery): labelsQuery})
		cfg := testConfig + "trusted_documents: {file: " + writeFile(t, "manifest.json", string(manifest)) + ", mode: enforce}\n"
		p := startProxy(t, "-upstream", up.URL, "-schema", upstreamSchema, "-config", writeFile(t, "costguard.yaml", cfg))
		up.reset(t)
		if a := postGraphQL(t, p.URL+"/graphql", persisted(labelsQuery, false), alice...); a.status != http.StatusOK || !strings.Contains(string(a.Data), "label-01") {
			t.Errorf("a trusted document by hash: %d %s", a.status, a.body)
		}
		if a := postGraphQL(t, p.URL+"/graphql", query(deepQuery, nil), alice...); a.status != http.StatusForbidden || a.code() != "DOCUMENT_NOT_TRUSTED" {
			t.Errorf("another document: %d %s", a.status, a.body)
		}
		if hits := up.hits(t); hits != 1 {
			t.Errorf("the upstream executed %d operations, want 1", hits)
		}
	})
}

// The proxy's flags are checked before anything starts.
func TestProxyFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-schema", upstreamSchema}, "-upstream is required"},
		{[]string{"-upstream", "http://127.0.0.1:1/graphql"}, "give -schema FILE"},
		{[]string{"-upstream", "http://127.0.0.1:1/graphql", "-schema", upstreamSchema, "-introspect"}, "exclude each other"},
		{[]string{"-upstream", "ftp://example.com/graphql", "-schema", upstreamSchema}, "want an http:// or https:// URL"},
		{[]string{"-upstream", "http://127.0.0.1:1/graphql", "-schema", upstreamSchema, "-max-batch", "0"}, "-max-batch 0"},
		{[]string{"-upstream", "http://127.0.0.1:1/graphql", "-schema", "no-such-file.graphql"}, "-schema"},
	} {
		_, err := runProxy(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("costguard-proxy %s: %v, want an error saying %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
