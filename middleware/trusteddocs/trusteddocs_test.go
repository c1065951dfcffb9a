package trusteddocs_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/costguard/costguard/middleware/trusteddocs"
)

const (
	viewerDoc = `query Viewer { viewer { login } }`
	reposDoc  = `query Repos($n: Int) { viewer { repos(first: $n) { name } } }`
)

func flat(t *testing.T, docs ...string) []byte {
	t.Helper()
	m := map[string]string{}
	for _, d := range docs {
		m[trusteddocs.Hash(d)] = d
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseFlat(t *testing.T) {
	m, err := trusteddocs.Parse(flat(t, viewerDoc, reposDoc))
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != 2 {
		t.Fatalf("Len = %d, want 2", m.Len())
	}
	d, ok := m.Lookup(trusteddocs.Hash(reposDoc))
	if !ok || d.Body != reposDoc {
		t.Fatalf("Lookup = %+v, %v", d, ok)
	}
	if _, ok := m.Lookup(trusteddocs.Hash("{ viewer { name } }")); ok {
		t.Fatal("an unlisted document was found")
	}
}

func TestParseApollo(t *testing.T) {
	manifest := map[string]any{
		"format": trusteddocs.ApolloFormat, "version": 1,
		"operations": []map[string]string{
			{"id": trusteddocs.Hash(viewerDoc), "name": "Viewer", "type": "query", "body": viewerDoc},
			{"id": trusteddocs.Hash(reposDoc), "name": "Repos", "type": "query", "body": reposDoc},
		},
	}
	b, _ := json.Marshal(manifest)
	m, err := trusteddocs.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := m.Lookup(trusteddocs.Hash(viewerDoc))
	if !ok || d.Name != "Viewer" || d.Body != viewerDoc {
		t.Fatalf("Lookup = %+v, %v", d, ok)
	}
	if got := m.Documents(); len(got) != 2 || got[0].Hash > got[1].Hash {
		t.Fatalf("Documents = %+v, want 2 sorted by hash", got)
	}
}

// A manifest whose id is not its document's hash is refused, naming the
// entry: a hash-only request must get exactly the text its hash stands for.
func TestParseRefuses(t *testing.T) {
	wrong := trusteddocs.Hash(viewerDoc)
	apollo := func(op map[string]any) string {
		b, _ := json.Marshal(map[string]any{"format": trusteddocs.ApolloFormat, "version": 1, "operations": []any{op}})
		return string(b)
	}
	for _, tc := range []struct{ name, manifest, want string }{
		{"flat mismatch", `{"` + wrong + `": "` + strings.ReplaceAll(reposDoc, `"`, `\"`) + `"}`, `entry "` + wrong + `": the id is not the SHA-256`},
		{"flat not hex", `{"abc": "{ viewer { login } }"}`, `entry "abc": the id is not a lowercase hex SHA-256`},
		{"flat upper hex", `{"` + strings.ToUpper(wrong) + `": "x"}`, "not a lowercase hex"},
		{"flat not a string", `{"` + wrong + `": 1}`, "the document is not a string"},
		{"flat empty document", `{"` + trusteddocs.Hash("") + `": ""}`, "the document is empty"},
		{"apollo mismatch", apollo(map[string]any{"id": wrong, "name": "Repos", "type": "query", "body": reposDoc}), `operations[0] (id "` + wrong + `", name "Repos"): the id is not the SHA-256`},
		{"apollo type", apollo(map[string]any{"id": wrong, "name": "Viewer", "type": "fragment", "body": viewerDoc}), `type "fragment"`},
		{"apollo unknown member", apollo(map[string]any{"id": wrong, "name": "Viewer", "type": "query", "body": viewerDoc, "extra": 1}), "unknown field"},
		{"apollo format", `{"format": "other", "version": 1, "operations": []}`, `format "other"`},
		{"apollo version", `{"format": "` + trusteddocs.ApolloFormat + `", "version": 2, "operations": []}`, "version 2"},
		{"array", `[]`, "not a JSON object"},
		{"not JSON", `{`, "invalid manifest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := trusteddocs.Parse([]byte(tc.manifest))
			if !errors.Is(err, trusteddocs.ErrInvalidManifest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidManifest saying %q", err, tc.want)
			}
		})
	}
}

func TestLoadBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "manifest.json")
	b := flat(t, viewerDoc, reposDoc)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if m, err := trusteddocs.Load(path, 0); err != nil || m.Len() != 2 {
		t.Fatalf("Load = %v, %v", m, err)
	}
	_, err := trusteddocs.Load(path, int64(len(b)-1))
	if !errors.Is(err, trusteddocs.ErrInvalidManifest) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Load past the bound: err = %v", err)
	}
	if _, err := trusteddocs.Load(filepath.Join(t.TempDir(), "missing.json"), 0); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
}

func TestParseID(t *testing.T) {
	h := trusteddocs.Hash(viewerDoc)
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{h, true}, {"sha256:" + h, true}, {"SHA256:" + strings.ToUpper(h), true},
		{"md5:" + h, false}, {h[:63], false}, {h + "0", false}, {"", false}, {strings.Repeat("g", 64), false},
	} {
		got, ok := trusteddocs.ParseID(tc.id)
		if ok != tc.ok || ok && got != h {
			t.Errorf("ParseID(%q) = %q, %v; want ok %v", tc.id, got, ok, tc.ok)
		}
	}
}
