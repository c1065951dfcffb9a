package redislistsizes_test

import (
	"reflect"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/listsizes/redislistsizes"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// process is one server's analyzer, recording into its own recorder.
type process struct {
	a   *complexity.Analyzer
	rec *complexity.ListSizeRecorder
	doc *ast.QueryDocument
}

func newProcess(t *testing.T, assumed int) process {
	t.Helper()
	schema, err := complexity.LoadSchema(&ast.Source{Input: `
type Query { scenes: [Scene!]! }
type Scene { galleries: [Gallery!]! }
type Gallery { id: ID! }`})
	if err != nil {
		t.Fatal(err)
	}
	rec := complexity.NewListSizeRecorder()
	a, err := complexity.New(schema, complexity.WithListSizeRecorder(rec), complexity.WithAssumedSizes(map[string]int{"Scene.galleries": assumed}))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := parser.ParseQuery(&ast.Source{Input: `{ scenes { galleries { id } } }`})
	if err != nil {
		t.Fatal(err)
	}
	return process{a, rec, doc}
}

// respond prices a response of one scene holding n galleries.
func (p process) respond(t *testing.T, n int) {
	t.Helper()
	data := `{"scenes":[{"galleries":[`
	for i := range n {
		if i > 0 {
			data += ","
		}
		data += `{"id":"x"}`
	}
	if _, err := p.a.ActualCost(p.doc, p.doc.Operations[0], nil, []byte(data+`]}]}`)); err != nil {
		t.Fatal(err)
	}
}

// Two processes publish to one Redis, twice each; the shared view is the
// sum of both recorders, as if one had seen every response, and a
// publish with nothing new adds nothing.
func TestProcessesMerge(t *testing.T) {
	srv := redistest.StartServer(t)
	a, b := newProcess(t, 2), newProcess(t, 5)
	sa, err := redislistsizes.New(redislistsizes.Config{Client: srv.Client(t), Recorder: a.rec})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := redislistsizes.New(redislistsizes.Config{Client: srv.Client(t), Recorder: b.rec})
	if err != nil {
		t.Fatal(err)
	}
	a.respond(t, 1)
	a.respond(t, 3)
	b.respond(t, 40)
	for _, s := range []*redislistsizes.Shared{sa, sb, sa} {
		if err := s.Publish(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	a.respond(t, 0)
	b.respond(t, 7)
	for _, s := range []*redislistsizes.Shared{sa, sb, sb} {
		if err := s.Publish(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	got, err := sa.ListSizes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]complexity.ListSizeStats{}
	for _, p := range []process{a, b} {
		for _, s := range p.rec.Fields() {
			m, ok := want[s.Field]
			if !ok {
				m = complexity.ListSizeStats{Field: s.Field}
			}
			m.Merge(s)
			want[s.Field] = m
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %d fields, want %d: %+v", len(got), len(want), got)
	}
	for _, g := range got {
		w := want[g.Field]
		w.Assumed = g.Assumed // the last process's to publish, not the larger
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: got %+v, want %+v", g.Field, g, w)
		}
	}
	galleries := got[1]
	if galleries.Field != "Scene.galleries" || galleries.Responses != 5 || galleries.Max != 40 || galleries.Overruns != 3 || galleries.Assumed != 5 {
		t.Errorf("Scene.galleries: %+v, want 5 responses, max 40, 3 overruns (3 > 2, 40 and 7 > 5), assumed 5", galleries)
	}
	if ttl, err := srv.Client(t).PTTL(t.Context(), redislistsizes.DefaultPrefix).Result(); err != nil || ttl <= 0 {
		t.Errorf("ttl %v, %v: the key must expire", ttl, err)
	}
}

func TestConfigRefused(t *testing.T) {
	if _, err := redislistsizes.New(redislistsizes.Config{}); err == nil {
		t.Error("a Config without Client and Recorder was taken")
	}
}
