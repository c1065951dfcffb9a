package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two processes' /admin/list-sizes answers: Scene.galleries returned at
// most 2 in 99 responses and 40 in one; Gallery.scenes was seen once.
const (
	processA = `{"fields":[{"field":"Scene.galleries","assumed":10,"responses":60,"overruns":0,"max":2,"buckets":[0,10,50],"suggested":2},
{"field":"Gallery.scenes","assumed":10,"responses":1,"overruns":1,"max":12,"buckets":[0,0,0,0,0,0,0,0,0,0,1],"suggested":12}],"assumed_sizes":{},"schema":"","dropped":0}`
	processB = `{"fields":[{"field":"Scene.galleries","assumed":10,"responses":40,"overruns":1,"max":40,"buckets":[0,0,39,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1],"suggested":40}]}`
)

func runListSizesCmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestListSizesMergesProcesses(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	if err := os.WriteFile(a, []byte(processA), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte(processB), 0o600); err != nil {
		t.Fatal(err)
	}
	// Merged, Scene.galleries has 100 responses: the 99th largest is 2.
	code, out, errOut := runListSizesCmd(t, processB, "list-sizes", a, "-")
	want := `field            assumed  responses  overruns  max  suggested
Gallery.scenes   10       1          1         12   12
Scene.galleries  10       100        1         40   2

Gallery.scenes @listSize(assumedSize: 12)
Scene.galleries @listSize(assumedSize: 2)
`
	if code != 0 || out != want {
		t.Errorf("exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errOut, out, want)
	}
	code, out, _ = runListSizesCmd(t, "", "list-sizes", "-json", "-min-responses", "2", a, b)
	if want := "{\n  \"Scene.galleries\": 2\n}\n"; code != 0 || out != want {
		t.Errorf("-json -min-responses 2: exit %d, %q, want %q", code, out, want)
	}
	// One process alone: 40 is within the top 1% of 40 responses.
	if code, out, _ = runListSizesCmd(t, "", "list-sizes", "-json", b); !strings.Contains(out, `"Scene.galleries": 40`) {
		t.Errorf("one process: exit %d, %s", code, out)
	}
}

func TestListSizesFromAdmin(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/admin/list-sizes" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"error":"a bearer token is required"}`, http.StatusUnauthorized)
			return
		}
		w.Write([]byte(processB))
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runListSizesCmd(t, "", "list-sizes", "-admin", srv.URL+"/", "-token-file", tokenFile, "-json"); code != 0 || out != "{\n  \"Scene.galleries\": 40\n}\n" {
		t.Errorf("exit %d, %q, %s", code, out, errOut)
	}
	if code, _, errOut := runListSizesCmd(t, "", "list-sizes", "-admin", srv.URL); code != 1 || !strings.Contains(errOut, "401") {
		t.Errorf("without the token: exit %d, %s", code, errOut)
	}
}

func TestListSizesRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		stdin string
		args  []string
		code  int
		err   string
	}{
		{"", []string{"list-sizes"}, 2, "give -admin URL"},
		{"", []string{"list-sizes", "-token-file", "x", "f"}, 2, "-token-file needs -admin"},
		{"", []string{"list-sizes", "-min-responses", "0", "-"}, 2, "-min-responses"},
		{"[1]", []string{"list-sizes", "-"}, 1, "not an /admin/list-sizes answer"},
		{`{"fields":[{"responses":1}]}`, []string{"list-sizes", "-"}, 1, "without a name"},
		{"", []string{"list-sizes", "no-such-file"}, 1, "no-such-file"},
	} {
		code, _, errOut := runListSizesCmd(t, c.stdin, c.args...)
		if code != c.code || !strings.Contains(errOut, c.err) {
			t.Errorf("%v: exit %d, %q; want %d, %q", c.args, code, errOut, c.code, c.err)
		}
	}
}

// -list-sizes prices with the sizes cost list-sizes -json prints, as the
// server's list_sizes does; a file that is not such a map is wrong usage,
// a coordinate the schema lacks an invalid schema configuration.
func TestListSizesFlag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	schema := write("s.graphql", "type Query { scenes: [Scene!]! }\ntype Scene { galleries: [Gallery!]! }\ntype Gallery { id: ID! }\n")
	query := write("q.graphql", "{ scenes { galleries { id } } }")
	price := func(args ...string) (int, string, string) {
		return runListSizesCmd(t, "", append([]string{"-schema", schema, "-query", query, "-json", "-breakdown-limit", "0"}, args...)...)
	}
	cost := func(out string) int64 {
		var r struct{ Cost int64 }
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		return r.Cost
	}
	if code, out, errOut := price(); code != 0 || cost(out) != 10*(1+10) {
		t.Errorf("default sizes: exit %d, %s %s", code, out, errOut)
	}
	sizes := write("sizes.json", `{"Query.scenes": 40, "Scene.galleries": 2}`)
	if code, out, errOut := price("-list-sizes", sizes); code != 0 || cost(out) != 40*(1+2) {
		t.Errorf("-list-sizes: exit %d, %s %s", code, out, errOut)
	}
	if code, _, errOut := price("-list-sizes", write("bad.json", `["Scene.galleries"]`)); code != 2 || !strings.Contains(errOut, "not a JSON object") {
		t.Errorf("a list: exit %d, %s", code, errOut)
	}
	if code, out, _ := price("-list-sizes", write("typo.json", `{"Scene.gallery": 2}`)); code != 1 || !strings.Contains(out, `Scene.gallery`) {
		t.Errorf("a coordinate the schema lacks: exit %d, %s", code, out)
	}
}
