package complexity_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/costguard/costguard/complexity"
)

// mediaSDL is shaped like a media organiser: lists nested without
// slicing arguments, and a page size inside an input object.
const mediaSDL = `
type Query {
  findScenes(filter: FindFilter): FindScenesResult!
  allScenes: [Scene!]!
  scene(id: ID!): Scene
  tags(first: Int): [Tag!]!
}
input FindFilter { per_page: Int = 25, page: Int }
type FindScenesResult { count: Int!, scenes: [Scene!]! }
type Scene { id: ID!, title: String, galleries: [Gallery!]!, performers: [Performer!]!, tags: [Tag!]! }
type Gallery { id: ID!, scenes: [Scene!]!, tags: [Tag!]! }
type Performer { id: ID!, name: String, tags: [Tag!]! @listSize(assumedSize: 5) }
type Tag { id: ID! }
`

func TestAssumedSizesPriceAsListSize(t *testing.T) {
	schema := loadSchema(t, mediaSDL)
	const q = `{ scene(id: 1) { galleries { scenes { id } } performers { tags { id } } } }`
	cost := func(opts ...complexity.Option) int64 {
		t.Helper()
		a, err := complexity.New(schema, opts...)
		if err != nil {
			t.Fatal(err)
		}
		p := prepare(t, schema, q, nil)
		r, err := a.AnalyzeOperation(p.doc, p.op, p.vars)
		if err != nil {
			t.Fatal(err)
		}
		return r.Points
	}
	// scene 1 + galleries 10 × (1 + scenes 10) + performers 10 × (1 + tags 5).
	if got := cost(); got != 1+10*(1+10)+10*(1+5) {
		t.Fatalf("default: %d", got)
	}
	// The option replaces the schema's assumedSize and the default alike.
	got := cost(complexity.WithAssumedSizes(map[string]int{"Scene.galleries": 2, "Gallery.scenes": 3, "Performer.tags": 1, "Scene.performers": 4}))
	if want := int64(1 + 2*(1+3) + 4*(1+1)); got != want {
		t.Fatalf("with assumed sizes: %d, want %d", got, want)
	}
	// As @listSize(assumedSize: 3) on the field would.
	sdl := strings.Replace(mediaSDL, "galleries: [Gallery!]!", "galleries: [Gallery!]! @listSize(assumedSize: 2)", 1)
	sdl = strings.Replace(sdl, "scenes: [Scene!]!, tags", "scenes: [Scene!]! @listSize(assumedSize: 3), tags", 1)
	sdl = strings.Replace(sdl, "performers: [Performer!]!", "performers: [Performer!]! @listSize(assumedSize: 4)", 1)
	sdl = strings.Replace(sdl, "@listSize(assumedSize: 5)", "@listSize(assumedSize: 1)", 1)
	a, err := complexity.New(loadSchema(t, sdl))
	if err != nil {
		t.Fatal(err)
	}
	s2 := a.Schema()
	p := prepare(t, s2, q, nil)
	r, err := a.AnalyzeOperation(p.doc, p.op, p.vars)
	if err != nil {
		t.Fatal(err)
	}
	if r.Points != got {
		t.Fatalf("@listSize prices %d, the option %d", r.Points, got)
	}
}

func TestAssumedSizesKeepArgumentBounds(t *testing.T) {
	schema := loadSchema(t, mediaSDL)
	a, err := complexity.New(schema, complexity.WithAssumedSizes(map[string]int{"Query.tags": 2}))
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]int64{
		`{ tags(first: 50) { id } }`: 50, // the argument bounds it: its bound stands
		`{ tags { id } }`:            2,  // only the assumption does
	} {
		p := prepare(t, schema, q, nil)
		r, err := a.AnalyzeOperation(p.doc, p.op, p.vars)
		if err != nil {
			t.Fatal(err)
		}
		if r.Points != want {
			t.Errorf("%s: %d, want %d", q, r.Points, want)
		}
	}
}

func TestAssumedSizesRefused(t *testing.T) {
	schema := loadSchema(t, mediaSDL)
	for sizes, want := range map[string]map[string]int{
		"no such field":        {"Scene.gallery": 3},
		"no such field ":       {"Nope.scenes": 3},
		"no such field  ":      {"Scene": 3},
		"not a list":           {"Scene.title": 3},
		"must not be negative": {"Scene.galleries": -1},
		"input":                {"FindFilter.per_page": 3},
	} {
		_, err := complexity.New(schema, complexity.WithAssumedSizes(want))
		if !errors.Is(err, complexity.ErrInvalidOption) {
			t.Errorf("%v: %v, want ErrInvalidOption", want, err)
			continue
		}
		if msg := strings.TrimSpace(sizes); msg != "input" && !strings.Contains(err.Error(), msg) {
			t.Errorf("%v: %v, want %q", want, err, msg)
		}
	}
}

// scenesData returns a findScenes response of scenes with the given
// numbers of galleries, each holding one scene.
func scenesData(galleries ...int) string {
	var b strings.Builder
	b.WriteString(`{"allScenes":[`)
	for i, n := range galleries {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"%d","galleries":[`, i)
		for j := range n {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"scenes":[{"id":"%d"}]}`, j)
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`]}`)
	return b.String()
}

func stats(t *testing.T, rec *complexity.ListSizeRecorder) map[string]complexity.ListSizeStats {
	t.Helper()
	out := map[string]complexity.ListSizeStats{}
	for _, s := range rec.Fields() {
		out[s.Field] = s
	}
	return out
}

func TestListSizeRecorderRecordsAssumedLists(t *testing.T) {
	schema := loadSchema(t, mediaSDL)
	rec := complexity.NewListSizeRecorder()
	a, err := complexity.New(schema, complexity.WithListSizeRecorder(rec), complexity.WithAssumedSizes(map[string]int{"Gallery.scenes": 2}))
	if err != nil {
		t.Fatal(err)
	}
	const q = `{ allScenes { id galleries { scenes { id } } } tags(first: 3) { id } }`
	p := prepare(t, schema, q, nil)
	plan, err := a.Compile(p.doc, p.op)
	if err != nil {
		t.Fatal(err)
	}
	// Through the Analyzer and through the plan alike.
	withTags := func(data string) []byte { return []byte(strings.TrimSuffix(data, "}") + `,"tags":[{"id":"1"}]}`) }
	if _, err := a.ActualCost(p.doc, p.op, p.vars, withTags(scenesData(3, 12, 0))); err != nil {
		t.Fatal(err)
	}
	if _, err := plan.ActualCost(p.vars, withTags(scenesData(1))); err != nil {
		t.Fatal(err)
	}
	// Malformed: nothing is recorded.
	if _, err := plan.ActualCost(p.vars, []byte(scenesData(40)[:30])); err == nil {
		t.Fatal("a truncated response priced")
	}
	got := stats(t, rec)
	// Query.tags has an argument; Query.allScenes, Scene.galleries and
	// Gallery.scenes rest on assumptions.
	if _, ok := got["Query.tags"]; ok {
		t.Errorf("Query.tags, bounded by first, was recorded: %+v", got["Query.tags"])
	}
	g := got["Scene.galleries"]
	if g.Responses != 2 || g.Max != 12 || g.Assumed != 10 || g.Overruns != 1 {
		t.Errorf("Scene.galleries: %+v, want 2 responses, max 12, assumed 10, 1 overrun", g)
	}
	// One sample per response: the largest list (12, then 1).
	if g.Buckets[complexity.ListSizeBucket(12)] != 1 || g.Buckets[complexity.ListSizeBucket(1)] != 1 {
		t.Errorf("Scene.galleries buckets: %v", g.Buckets)
	}
	if s := got["Gallery.scenes"]; s.Responses != 2 || s.Max != 1 || s.Assumed != 2 || s.Overruns != 0 {
		t.Errorf("Gallery.scenes: %+v", s)
	}
	if s := got["Query.allScenes"]; s.Responses != 2 || s.Max != 3 {
		t.Errorf("Query.allScenes: %+v", s)
	}
}

func TestListSizeRecorderSkipsHandedDownSizes(t *testing.T) {
	const sdl = `
type Query { page(first: Int): Page @listSize(slicingArguments: ["first"], sizedFields: ["items"], requireOneSlicingArgument: false) }
type Page { items: [Item!]! }
type Item { id: ID! }
`
	schema := loadSchema(t, sdl)
	for _, c := range []struct {
		query    string
		recorded bool
	}{
		{`{ page(first: 2) { items { id } } }`, false},
		{`{ page { items { id } } }`, true},
	} {
		// A recorder per case: one shared across cases would carry the
		// second case's sample into the first when the order changes.
		q, recorded := c.query, c.recorded
		rec := complexity.NewListSizeRecorder()
		a, err := complexity.New(schema, complexity.WithListSizeRecorder(rec))
		if err != nil {
			t.Fatal(err)
		}
		p := prepare(t, schema, q, nil)
		if _, err := a.ActualCost(p.doc, p.op, p.vars, []byte(`{"page":{"items":[{"id":"1"}]}}`)); err != nil {
			t.Fatal(err)
		}
		if got := len(rec.Fields()) > 0; got != recorded {
			t.Errorf("%s: recorded %v, want %v", q, got, recorded)
		}
	}
}

func TestListSizeRecorderOneSamplePerResponse(t *testing.T) {
	schema := loadSchema(t, mediaSDL)
	rec := complexity.NewListSizeRecorder()
	a, err := complexity.New(schema, complexity.WithListSizeRecorder(rec))
	if err != nil {
		t.Fatal(err)
	}
	p := prepare(t, schema, `{ allScenes { galleries { scenes { id } } } }`, nil)
	// 99 responses of small lists, then one client's response of 2,000
	// scenes of 50 galleries each: one sample, not 2,000.
	for range 99 {
		if _, err := a.ActualCost(p.doc, p.op, p.vars, []byte(scenesData(2, 3))); err != nil {
			t.Fatal(err)
		}
	}
	big := make([]int, 2000)
	for i := range big {
		big[i] = 50
	}
	if _, err := a.ActualCost(p.doc, p.op, p.vars, []byte(scenesData(big...))); err != nil {
		t.Fatal(err)
	}
	g := stats(t, rec)["Scene.galleries"]
	if g.Responses != 100 || g.Max != 50 || g.Overruns != 1 {
		t.Fatalf("Scene.galleries: %+v", g)
	}
	if s := g.Suggested(); s != 3 {
		t.Errorf("suggested %d, want 3: one response moves the 99th percentile by one rank", s)
	}
}

func TestListSizeSuggested(t *testing.T) {
	for _, c := range []struct {
		sizes []int64
		want  int64
	}{
		{nil, 0},
		{[]int64{0}, 1},       // never below 1
		{[]int64{37}, 37},     // capped at the largest
		{[]int64{3, 5, 7}, 7}, // fewer than 100: the largest
		{append(repeat(6, 99), 1000), 6},
		{append(repeat(37, 98), 1000, 1000), 1000},
		{append(repeat(33, 99), 1000), 39}, // its bucket's upper bound, [32, 39]
	} {
		var s complexity.ListSizeStats
		for _, n := range c.sizes {
			one := complexity.ListSizeStats{Responses: 1, Max: n, Buckets: make([]int64, complexity.ListSizeBucket(n)+1)}
			one.Buckets[complexity.ListSizeBucket(n)] = 1
			s.Merge(one)
		}
		if got := s.Suggested(); got != c.want {
			t.Errorf("%v: suggested %d, want %d", c.sizes, got, c.want)
		}
	}
}

func repeat(n int64, times int) []int64 {
	out := make([]int64, times)
	for i := range out {
		out[i] = n
	}
	return out
}

func TestListSizeBucketBounds(t *testing.T) {
	prev := -1
	for _, n := range []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 31, 32, 39, 40, 1000, 1 << 31, 1<<32 - 1, 1 << 32, 1<<63 - 1} {
		b := complexity.ListSizeBucket(n)
		if b < prev || b >= complexity.ListSizeBuckets {
			t.Errorf("bucket of %d: %d (previous %d)", n, b, prev)
		}
		prev = b
	}
	if complexity.ListSizeBucket(32) != complexity.ListSizeBucket(39) || complexity.ListSizeBucket(39) == complexity.ListSizeBucket(40) {
		t.Error("32…39 should share a bucket, 40 start the next")
	}
}

func TestFormatListSizes(t *testing.T) {
	got := complexity.FormatListSizes(map[string]int{"Scene.galleries": 3, "Gallery.scenes": 12})
	want := "Gallery.scenes @listSize(assumedSize: 12)\nScene.galleries @listSize(assumedSize: 3)\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// BenchmarkActualCostRecording is BenchmarkActualCost's pages with their
// lists left unsliced (so sized by the default, an assumption), priced
// through the plan without and with a ListSizeRecorder: the difference is
// what recording the sizes adds to the actual-cost walk.
func BenchmarkActualCostRecording(b *testing.B) {
	schema := exampleSchema(b)
	query := `{ user(login: "octocat") { login repos { name issues { title body } } } }`
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"page-110", actualPage(10, 10)},
		{"1MB", actualPage(100, 60)},
	} {
		for _, recording := range []bool{false, true} {
			var opts []complexity.Option
			if recording {
				opts = append(opts, complexity.WithListSizeRecorder(complexity.NewListSizeRecorder()))
			}
			a, err := complexity.New(schema, opts...)
			if err != nil {
				b.Fatal(err)
			}
			p := prepare(b, schema, query, nil)
			plan, err := a.Compile(p.doc, p.op)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/recording=%v", c.name, recording), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(c.data)))
				for b.Loop() {
					if _, err := plan.ActualCost(p.vars, c.data); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// A recorder holds at most MaxRecordedListFields fields, each a fixed
// set of counters, whatever the schema and the responses: a response
// over more list fields counts the rest as dropped.
func TestListSizeRecorderBounded(t *testing.T) {
	const fields = complexity.MaxRecordedListFields + 4
	var sdl, query, data strings.Builder
	sdl.WriteString("type T { id: ID }\ntype Query {\n")
	query.WriteString("{")
	data.WriteString("{")
	for i := range fields {
		fmt.Fprintf(&sdl, "  f%d: [T]\n", i)
		fmt.Fprintf(&query, " f%d { id }", i)
		if i > 0 {
			data.WriteByte(',')
		}
		fmt.Fprintf(&data, `"f%d":[{"id":"1"},{"id":"2"}]`, i)
	}
	sdl.WriteString("}\n")
	query.WriteString(" }")
	data.WriteString("}")
	schema := loadSchema(t, sdl.String())
	rec := complexity.NewListSizeRecorder()
	a, err := complexity.New(schema, complexity.WithListSizeRecorder(rec))
	if err != nil {
		t.Fatal(err)
	}
	p := prepare(t, schema, query.String(), nil)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 3 {
		if _, err := a.ActualCost(p.doc, p.op, p.vars, []byte(data.String())); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	got := rec.Fields()
	if len(got) != complexity.MaxRecordedListFields || rec.Dropped() != 3*4 {
		t.Fatalf("%d fields, %d dropped; want %d and 12", len(got), rec.Dropped(), complexity.MaxRecordedListFields)
	}
	if got[0].Responses != 3 || got[0].Max != 2 {
		t.Errorf("%+v", got[0])
	}
	// About 1 KiB of counters a field, with its key and map slot.
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > complexity.MaxRecordedListFields*1300 {
		t.Errorf("the recorder grew the heap by %d bytes, more than 1,300 a field", grew)
	}
}

// On a field with several @listSize, the option reads as if each declared
// the size; a slicing argument, an input object's page size included,
// still bounds the list, and such a list is not recorded.
func TestAssumedSizesWithSeveralListSizesAndPaths(t *testing.T) {
	schema := loadSchema(t, `
type Query {
  items(first: Int, limit: Int): [Item!]! @listSize(slicingArguments: ["first"], requireOneSlicingArgument: false) @listSize(slicingArguments: ["limit"], requireOneSlicingArgument: false)
  page(filter: Filter): [Item!]!
}
input Filter { per_page: Int }
type Item { id: ID! }`)
	rec := complexity.NewListSizeRecorder()
	a, err := complexity.New(schema, complexity.WithListSizeRecorder(rec), complexity.WithAssumedSizes(map[string]int{"Query.items": 3, "Query.page": 4}))
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]int64{
		`{ items { id } }`:                        3,
		`{ items(first: 7) { id } }`:              7, // the larger of 7 and the other rule's 3
		`{ page { id } }`:                         4,
		`{ page(filter: {per_page: 40}) { id } }`: 1 + 40, // the input object weighs 1
	} {
		p := prepare(t, schema, q, nil)
		r, err := a.AnalyzeOperation(p.doc, p.op, p.vars)
		if err != nil {
			t.Fatal(err)
		}
		if r.Points != want {
			t.Errorf("%s: %d, want %d", q, r.Points, want)
		}
	}
	p := prepare(t, schema, `{ page(filter: {per_page: 2}) { id } }`, nil)
	if _, err := a.ActualCost(p.doc, p.op, p.vars, []byte(`{"page":[{"id":"1"}]}`)); err != nil {
		t.Fatal(err)
	}
	if got := rec.Fields(); len(got) != 0 {
		t.Errorf("a list bounded by filter.per_page was recorded: %+v", got)
	}
}
