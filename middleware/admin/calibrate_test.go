package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/admin"
)

// organiserSDL is shaped like a media organiser's API: lists nested
// without page arguments both ways (Scene.galleries, Gallery.scenes), and
// the page size inside an input object.
const organiserSDL = `
type Query {
  findScenes(filter: FindFilterType): FindScenesResultType!
  findGalleries(filter: FindFilterType): FindGalleriesResultType!
}
input FindFilterType { q: String, page: Int, per_page: Int = 25, sort: String }
type FindScenesResultType { count: Int!, scenes: [Scene!]! }
type FindGalleriesResultType { count: Int!, galleries: [Gallery!]! }
type Scene { id: ID!, title: String, files: [VideoFile!]!, galleries: [Gallery!]!, performers: [Performer!]!, tags: [Tag!]! }
type Gallery { id: ID!, title: String, files: [GalleryFile!]!, scenes: [Scene!]!, performers: [Performer!]!, tags: [Tag!]! }
type Performer { id: ID!, name: String!, tags: [Tag!]! }
type Tag { id: ID!, name: String! }
type VideoFile { path: String!, size: Int! }
type GalleryFile { path: String! }
`

// The organiser's pages: a scene list, a gallery list, and a wall of
// scenes with their galleries' scenes.
const (
	findScenes = `query FindScenes { findScenes(filter: {per_page: 40}) { count scenes { id title files { path size }
  galleries { id title } performers { id name tags { id } } tags { id name } } } }`
	findGalleries = `query FindGalleries { findGalleries(filter: {per_page: 40}) { count galleries { id title files { path }
  scenes { id title performers { id name } tags { id } } performers { id tags { id } } tags { id } } } }`
	sceneWall = `query SceneWall { findScenes(filter: {per_page: 40}) { scenes { id
  galleries { id scenes { id galleries { id } performers { id } } } } } }`
)

// organiserSizes is how many items each list of the seeded library
// returns for the i-th object of its parent: a page holds 40, a scene
// 1 file, up to 2 galleries, 3 performers and 8 tags, a gallery up to
// 3 scenes, a performer up to 5 tags. overrun gives every scene 2
// galleries, and scene 7 of a page 7, past what the traffic showed.
func organiserSizes(overrun bool) func(coord string, i int) int {
	return func(coord string, i int) int {
		switch coord {
		case "FindScenesResultType.scenes", "FindGalleriesResultType.galleries":
			return 40
		case "Scene.galleries":
			switch {
			case overrun && i == 7:
				return 7
			case overrun:
				return 2
			}
			return i % 3
		case "Scene.performers", "Gallery.performers":
			return i % 4
		case "Scene.tags", "Gallery.tags":
			return i % 9
		case "Gallery.scenes":
			return i % 4
		case "Performer.tags":
			return i % 6
		}
		return 1 // files
	}
}

// organiser is an executable schema that answers any selection of
// organiserSDL from sizes, without generated code.
func organiser(schema *ast.Schema, sizes func() func(string, int) int) graphql.ExecutableSchema {
	return &graphql.ExecutableSchemaMock{
		SchemaFunc: func() *ast.Schema { return schema },
		ComplexityFunc: func(context.Context, string, string, int, map[string]any) (int, bool) {
			return 0, false
		},
		ExecFunc: func(ctx context.Context) graphql.ResponseHandler {
			op := graphql.GetOperationContext(ctx).Operation
			var b bytes.Buffer
			writeSelection(&b, op.SelectionSet, sizes(), 0)
			return graphql.OneShot(&graphql.Response{Data: b.Bytes()})
		},
	}
}

// writeSelection writes the object at index i of its list for set.
func writeSelection(b *bytes.Buffer, set ast.SelectionSet, size func(string, int) int, i int) {
	b.WriteByte('{')
	for k, sel := range set {
		f := sel.(*ast.Field)
		if k > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(b, "%q:", f.Alias)
		switch {
		case f.Definition.Type.Elem != nil:
			b.WriteByte('[')
			for j := range size(f.ObjectDefinition.Name+"."+f.Name, i) {
				if j > 0 {
					b.WriteByte(',')
				}
				writeSelection(b, f.SelectionSet, size, j)
			}
			b.WriteByte(']')
		case f.SelectionSet != nil:
			writeSelection(b, f.SelectionSet, size, i)
		case f.Definition.Type.Name() == "Int":
			b.WriteString(strconv.Itoa(i))
		default:
			fmt.Fprintf(b, `"%s-%d"`, f.Name, i)
		}
	}
	b.WriteByte('}')
}

type organiserServer struct {
	url   string
	lim   *middleware.Limiter
	admin *httptest.Server
}

// newOrganiser serves the organiser's API through a Limiter with one plan
// of 5,000 points (mode), recording list sizes in rec, and its admin API.
func newOrganiser(t *testing.T, mode budget.Mode, listSizes map[string]int, rec *complexity.ListSizeRecorder, overrun *bool, gql middleware.GraphQLOptions) organiserServer {
	t.Helper()
	schema := gqlparser.MustLoadSchema(&ast.Source{Name: "organiser.graphqls", Input: organiserSDL})
	lim, err := middleware.New(middleware.Dependencies{
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		ListSizeRecorder: rec,
	}, middleware.Policy{
		Plans:         map[string]budget.Plan{"user": {Burst: 5000, Rate: 5000, Per: time.Hour}, "anon": {Burst: 5000, Rate: 5000, Per: time.Hour}},
		AnonymousPlan: "anon",
		APIKeys:       map[string]identity.APIKey{"organiser-key": {Principal: "organiser", Plan: "user"}},
		Mode:          mode,
		ListSizes:     listSizes,
		GraphQL:       gql,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	srv := handler.New(organiser(schema, func() func(string, int) int { return organiserSizes(*overrun) }))
	srv.AddTransport(transport.POST{})
	api := httptest.NewServer(lim.Handler(srv))
	t.Cleanup(api.Close)
	h, err := admin.New(lim, admin.Config{TokenSHA256: admin.HashToken(token), ListSizes: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	adminSrv := httptest.NewServer(h)
	t.Cleanup(adminSrv.Close)
	return organiserServer{url: api.URL, lim: lim, admin: adminSrv}
}

type pageAnswer struct {
	status    int
	remaining int64
	requested int64
	actual    int64
	code      string
}

// page sends query over HTTP with the organiser's key.
func (s organiserServer) page(t *testing.T, query string) pageAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"query": query})
	req, err := http.NewRequest("POST", s.url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer organiser-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Errors []struct {
			Extensions struct{ Code string } `json:"extensions"`
		} `json:"errors"`
		Extensions struct {
			Cost *middleware.Cost `json:"cost"`
		} `json:"extensions"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	a := pageAnswer{status: resp.StatusCode}
	a.remaining, _ = strconv.ParseInt(resp.Header.Get(middleware.HeaderXRateLimitRemaining), 10, 64)
	if c := out.Extensions.Cost; c != nil {
		a.requested = c.RequestedQueryCost
		if c.ActualQueryCost != nil {
			a.actual = *c.ActualQueryCost
		}
	}
	if len(out.Errors) > 0 {
		a.code = out.Errors[0].Extensions.Code
	}
	return a
}

// An app whose lists nest without page arguments: priced at the default
// size, its scene wall is refused by a 5,000-point plan. Shadow mode lets
// its pages run while the list sizes they return are recorded; the admin
// API suggests sizes from them; with those sizes (list_sizes) every page
// fits the plan, and a response that holds more than a suggested size
// still pays for what it returned, the overrun counted on its field.
func TestCalibratedListSizesFitAPlan(t *testing.T) {
	overrun := false
	pages := map[string]string{"FindScenes": findScenes, "FindGalleries": findGalleries, "SceneWall": sceneWall}

	// Enforced at the default size (each page at its per_page), every
	// page is refused: the prices docs/operations.md quotes.
	before := newOrganiser(t, budget.Enforce, nil, nil, &overrun, middleware.GraphQLOptions{})
	for name, want := range map[string]int64{"FindScenes": 5642, "FindGalleries": 13642, "SceneWall": 84442} {
		if a := before.page(t, pages[name]); a.status != http.StatusUnprocessableEntity || a.code != complexity.CodeMaxCostExceeded || a.requested != want {
			t.Errorf("%s before calibration: %+v, want 422 %s at %d", name, a, complexity.CodeMaxCostExceeded, want)
		}
	}

	// Shadow mode: every page runs, and the sizes are recorded.
	rec := complexity.NewListSizeRecorder()
	shadow := newOrganiser(t, budget.Shadow, nil, rec, &overrun, middleware.GraphQLOptions{})
	for range 5 {
		for _, q := range pages {
			if a := shadow.page(t, q); a.status != http.StatusOK || a.actual > a.requested {
				t.Fatalf("shadow: %+v", a)
			}
		}
	}
	status, body := call(t, shadow.admin, "GET", "/admin/list-sizes", "Bearer "+token, "")
	if status != http.StatusOK {
		t.Fatalf("list-sizes: %d %s", status, body)
	}
	var answer struct {
		Fields []struct {
			complexity.ListSizeStats
			Suggested int64
		}
		AssumedSizes map[string]int `json:"assumed_sizes"`
		Schema       string
	}
	if err := json.Unmarshal([]byte(body), &answer); err != nil {
		t.Fatal(err)
	}
	// The largest list each field returned, from pages that each count
	// once per field: Scene.performers is in all three pages (15
	// responses), Scene.galleries in two (10).
	for coord, want := range map[string]int{
		"Scene.galleries": 2, "Gallery.scenes": 3, "Scene.performers": 3, "Gallery.performers": 3,
		"Scene.tags": 8, "Gallery.tags": 8, "Performer.tags": 2, "Scene.files": 1, "Gallery.files": 1,
	} {
		if got := answer.AssumedSizes[coord]; got != want {
			t.Errorf("suggested %s: %d, want %d (%s)", coord, got, want, body)
		}
	}
	for _, f := range answer.Fields {
		if f.Field == "Scene.galleries" && (f.Responses != 10 || f.Overruns != 0 || f.Assumed != complexity.DefaultListSize) {
			t.Errorf("Scene.galleries: %+v, want 10 responses without overruns at the default size", f)
		}
		if f.Field == "Scene.performers" && f.Responses != 15 {
			t.Errorf("Scene.performers: %+v, want 15 responses", f)
		}
	}
	if !strings.Contains(answer.Schema, "Scene.galleries @listSize(assumedSize: 2)\n") {
		t.Errorf("schema lines: %s", answer.Schema)
	}

	// Enforced with the suggestions: every page fits the plan.
	overrun = true
	rec = complexity.NewListSizeRecorder()
	after := newOrganiser(t, budget.Enforce, answer.AssumedSizes, rec, &overrun, middleware.GraphQLOptions{})
	for name, want := range map[string]int64{"FindScenes": 842, "FindGalleries": 2202, "SceneWall": 1562} {
		if a := after.page(t, pages[name]); a.status != http.StatusOK || a.requested != want {
			t.Errorf("%s after calibration: %+v, want 200 at %d, within the plan's 5,000 points", name, a, want)
		}
	}
	// Every scene now holds its 2 galleries, and scene 7 holds 7: the
	// response costs more than its price (1 + 1 + 40 × (1 + 2)), and the
	// whole actual cost is debited.
	const galleries = `{ findScenes(filter: {per_page: 40}) { scenes { galleries { id } } } }`
	first := after.page(t, galleries)
	second := after.page(t, galleries)
	if first.requested != 122 || first.actual != 1+1+40+2*39+7 || first.remaining-second.remaining != second.actual {
		t.Errorf("overrun: %+v then %+v: want 122 requested, 127 actual, debited whole", first, second)
	}
	// Every response that selected Scene.galleries since the overrun began
	// overran its assumed 2 (FindScenes, SceneWall, both galleries pages).
	overrunsCounted(t, after.admin, complexity.ListSizeStats{Field: "Scene.galleries", Assumed: 2, Responses: 4, Overruns: 4, Max: 7})
}

// overrunsCounted checks that /admin/list-sizes counts overruns on want's
// field, as want says, and on no other field.
func overrunsCounted(t *testing.T, adminSrv *httptest.Server, want complexity.ListSizeStats) {
	t.Helper()
	status, body := call(t, adminSrv, "GET", "/admin/list-sizes", "Bearer "+token, "")
	var answer struct{ Fields []complexity.ListSizeStats }
	if err := json.Unmarshal([]byte(body), &answer); status != http.StatusOK || err != nil {
		t.Fatalf("list-sizes: %d %s", status, body)
	}
	found := false
	for _, f := range answer.Fields {
		if f.Field != want.Field {
			if f.Overruns != 0 {
				t.Errorf("%s: %d overruns, want none", f.Field, f.Overruns)
			}
			continue
		}
		found = true
		f.Buckets = nil
		if !reflect.DeepEqual(f, want) {
			t.Errorf("%s: %+v, want %+v", want.Field, f, want)
		}
	}
	if !found {
		t.Errorf("%s not recorded: %s", want.Field, body)
	}
}

// A page a static cap refuses (graphql.max_cost, max_depth, …) runs in
// shadow mode without a price to settle; its lists are recorded all the
// same, read without the caps.
func TestShadowedCapsStillRecordListSizes(t *testing.T) {
	overrun := false
	rec := complexity.NewListSizeRecorder()
	s := newOrganiser(t, budget.Shadow, nil, rec, &overrun, middleware.GraphQLOptions{MaxCost: 100, MaxDepth: 4})
	if a := s.page(t, sceneWall); a.status != http.StatusOK || a.requested != 0 {
		t.Fatalf("scene wall over the caps in shadow mode: %+v, want 200 unpriced", a)
	}
	got := map[string]int64{}
	for _, f := range rec.Fields() {
		got[f.Field] = f.Max
	}
	// The wall's galleries hold 0 to 2 scenes' worth: gallery 1 of a
	// scene holds 1 scene.
	if got["Scene.galleries"] != 2 || got["Gallery.scenes"] != 1 {
		t.Errorf("recorded %v, want Scene.galleries 2, Gallery.scenes 1", got)
	}
}
