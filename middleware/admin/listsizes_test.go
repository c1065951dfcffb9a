package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/middleware/admin"
)

// recordedSizes returns a recorder that priced three responses of
// { scenes { galleries { id } } }, whose scenes held 2, 3 and 40
// galleries at most.
func recordedSizes(t *testing.T) *complexity.ListSizeRecorder {
	t.Helper()
	schema, err := complexity.LoadSchema(&ast.Source{Input: `
type Query { scenes: [Scene!]! }
type Scene { galleries: [Gallery!]! }
type Gallery { id: ID! }`})
	if err != nil {
		t.Fatal(err)
	}
	rec := complexity.NewListSizeRecorder()
	a, err := complexity.New(schema, complexity.WithListSizeRecorder(rec))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := parser.ParseQuery(&ast.Source{Input: `{ scenes { galleries { id } } }`})
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{
		`{"scenes":[{"galleries":[{"id":"1"},{"id":"2"}]}]}`,
		`{"scenes":[{"galleries":[{"id":"1"},{"id":"2"},{"id":"3"}]},{"galleries":[]}]}`,
		`{"scenes":[{"galleries":[` + ids(40) + `]}]}`,
	} {
		if _, err := a.ActualCost(doc, doc.Operations[0], nil, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	return rec
}

func ids(n int) string {
	s := ""
	for i := range n {
		if i > 0 {
			s += ","
		}
		s += `{"id":"x"}`
	}
	return s
}

type sharedSizes struct {
	stats []complexity.ListSizeStats
	err   error
}

func (s sharedSizes) ListSizes(context.Context) ([]complexity.ListSizeStats, error) {
	return s.stats, s.err
}

func TestListSizes(t *testing.T) {
	rec := recordedSizes(t)
	srv, _ := newAPI(t, admin.Config{TokenSHA256: admin.HashToken(token), ListSizes: rec})
	ok := "Bearer " + token
	// Scene.galleries: 3 responses (2, 3, 40), one overrun of 10; with
	// fewer than 100 responses the suggestion is the largest. Query.scenes
	// returned 1, 2 and 1 scenes.
	want := `{"fields":[` +
		`{"field":"Query.scenes","assumed":10,"responses":3,"overruns":0,"max":2,"buckets":[0,2,1],"suggested":2},` +
		`{"field":"Scene.galleries","assumed":10,"responses":3,"overruns":1,"max":40,"buckets":[0,0,1,1` + zeros(complexity.ListSizeBucket(40)-4) + `,1],"suggested":40}],` +
		`"assumed_sizes":{"Query.scenes":2,"Scene.galleries":40},` +
		`"schema":"Query.scenes @listSize(assumedSize: 2)\nScene.galleries @listSize(assumedSize: 40)\n","dropped":0}`
	if status, body := call(t, srv, "GET", "/admin/list-sizes", ok, ""); status != 200 || body != want {
		t.Errorf("GET /admin/list-sizes: %d %s\nwant 200 %s", status, body, want)
	}
	if status, _ := call(t, srv, "GET", "/admin/list-sizes", "", ""); status != 401 {
		t.Errorf("without a token: %d, want 401", status)
	}
	plain, _ := newAPI(t, admin.Config{TokenSHA256: admin.HashToken(token)})
	if status, _ := call(t, plain, "GET", "/admin/list-sizes", ok, ""); status != 404 {
		t.Errorf("without ListSizes: %d, want 404", status)
	}
	// A shared view answers for every process; its failure is a 503.
	merged := rec.Fields()
	merged[1].Merge(complexity.ListSizeStats{Field: "Scene.galleries", Responses: 1, Max: 90, Buckets: bucketOf(90)})
	shared, _ := newAPI(t, admin.Config{TokenSHA256: admin.HashToken(token), ListSizes: rec, SharedListSizes: sharedSizes{stats: merged}})
	if status, body := call(t, shared, "GET", "/admin/list-sizes", ok, ""); status != 200 || !strings.Contains(body, `"Scene.galleries":90`) {
		t.Errorf("shared: %d %s", status, body)
	}
	failing, _ := newAPI(t, admin.Config{TokenSHA256: admin.HashToken(token), ListSizes: rec, SharedListSizes: sharedSizes{err: errors.New("down")}})
	if status, _ := call(t, failing, "GET", "/admin/list-sizes", ok, ""); status != 503 {
		t.Errorf("shared store down: %d, want 503", status)
	}
}

func bucketOf(n int64) []int64 {
	b := make([]int64, complexity.ListSizeBucket(n)+1)
	b[len(b)-1] = 1
	return b
}

func zeros(n int) string {
	s := ""
	for range n {
		s += ",0"
	}
	return s
}
