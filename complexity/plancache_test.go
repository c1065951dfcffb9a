package complexity_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/complexity"
)

func TestPlanCacheBounds(t *testing.T) {
	schema, err := complexity.LoadSchema(&ast.Source{Name: "fuzz.graphql", Input: fuzzSDL})
	if err != nil {
		t.Fatal(err)
	}
	a, err := complexity.New(schema, complexity.WithBreakdownLimit(0))
	if err != nil {
		t.Fatal(err)
	}
	docs := make([]*ast.QueryDocument, 10)
	for i := range docs {
		docs[i] = mustParse(t, fmt.Sprintf(`query($n: Int) { items(first: $n) { id } x%d: featured { id } }`, i))
	}
	get := func(c *complexity.PlanCache, i int) *complexity.Plan {
		t.Helper()
		p, err := c.Get(docs[i], docs[i].Operations[0])
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	// By entries: the least recently used goes first.
	c := a.NewPlanCache(3, 0)
	p0 := get(c, 0)
	get(c, 1)
	get(c, 2)
	if get(c, 0) != p0 {
		t.Error("a hit compiled again")
	}
	get(c, 3) // evicts 1, the least recently used
	if n, _ := c.Len(); n != 3 {
		t.Errorf("%d plans kept, want 3", n)
	}
	if get(c, 0) != p0 {
		t.Error("the recently used plan was evicted")
	}

	// By bytes: every plan here has the same size.
	size := p0.Size()
	if size <= 0 {
		t.Fatalf("Size() = %d", size)
	}
	c = a.NewPlanCache(100, 4*size)
	for i := range docs {
		get(c, i)
	}
	if n, bytes := c.Len(); n != 4 || bytes != 4*size {
		t.Errorf("%d plans, %d bytes kept; want 4 and %d", n, bytes, 4*size)
	}

	// A plan larger than the byte bound is returned, not kept.
	c = a.NewPlanCache(100, size-1)
	if get(c, 0) == nil {
		t.Fatal("no plan")
	}
	if n, bytes := c.Len(); n != 0 || bytes != 0 {
		t.Errorf("%d plans, %d bytes kept of an oversized plan", n, bytes)
	}

	// GetCharging charges the document's bytes too, on a miss only.
	c = a.NewPlanCache(100, 3*(size+1000))
	calls := 0
	charge := func() int64 { calls++; return 1000 }
	for i := range docs {
		if _, err := c.GetCharging(docs[i], docs[i].Operations[0], charge); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.GetCharging(docs[9], docs[9].Operations[0], charge); err != nil {
		t.Fatal(err)
	}
	if n, bytes := c.Len(); n != 3 || bytes != 3*(size+1000) || calls != len(docs) {
		t.Errorf("%d plans, %d bytes kept, %d charges; want 3, %d and %d", n, bytes, calls, 3*(size+1000), len(docs))
	}

	// Concurrent use (run with -race).
	c = a.NewPlanCache(5, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				p := get(c, (g+i)%len(docs))
				if _, err := p.Evaluate(map[string]any{"n": int64(i)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if n, _ := c.Len(); n != 5 {
		t.Errorf("%d plans kept, want 5", n)
	}
}
