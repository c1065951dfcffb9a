package shardmap

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/costguard/costguard/internal/kept"
)

var errInvalid = errors.New("test: invalid config")

// item is a test value: a rank and whether it is free to evict.
type item struct {
	rank int64
	free bool
}

func byRank(v *item) (int64, bool) { return v.rank, v.free }

// mutexShard and rwShard are the two shapes the stores use.
type mutexShard struct {
	sync.Mutex
	Table[*item]
}

type rwShard struct {
	sync.RWMutex
	Table[*item]
}

var (
	_ Shard = (*mutexShard)(nil)
	_ Shard = (*rwShard)(nil)
)

func newTable(max int) *Table[*item] {
	t := new(Table[*item])
	t.reset(max)
	return t
}

func TestResolve(t *testing.T) {
	def := Size{MaxKeys: 1000, Shards: 32}
	cases := []struct {
		name string
		in   Size
		def  Size
		want Size
		msg  string // empty: valid
	}{
		{"zero takes the defaults", Size{}, def, Size{1000, 32}, ""},
		{"explicit", Size{64, 4}, def, Size{64, 4}, ""},
		{"one key per shard", Size{8, 8}, def, Size{8, 8}, ""},
		{"small MaxKeys lowers the default Shards", Size{MaxKeys: 3}, def, Size{3, 3}, ""},
		{"Shards alone", Size{Shards: 5}, def, Size{1000, 5}, ""},
		{"negative MaxKeys", Size{MaxKeys: -1}, def, Size{}, "MaxKeys must not be negative (got -1)"},
		{"negative Shards", Size{Shards: -2}, def, Size{}, "Shards must not be negative (got -2)"},
		{"negative MaxKeys reported first", Size{-1, -2}, def, Size{}, "MaxKeys must not be negative (got -1)"},
		{"more shards than keys", Size{4, 8}, def, Size{}, "Shards (8) exceeds MaxKeys (4)"},
		{"more shards than default keys", Size{Shards: 2000}, def, Size{}, "Shards (2000) exceeds MaxKeys (1000)"},
		{"bad default", Size{}, Size{}, Size{}, "no room for keys"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.in.Resolve(errInvalid, c.def)
			if c.msg == "" {
				if err != nil || got != c.want {
					t.Fatalf("Resolve: %+v, %v; want %+v", got, err, c.want)
				}
				return
			}
			if !errors.Is(err, errInvalid) || !strings.HasPrefix(err.Error(), "test: invalid config: ") ||
				!strings.Contains(err.Error(), c.msg) {
				t.Fatalf("Resolve: %v; want the caller's error mentioning %q", err, c.msg)
			}
		})
	}
}

func TestPerShard(t *testing.T) {
	for _, c := range []struct {
		size Size
		want int
	}{{Size{100_000, 64}, 1562}, {Size{10, 10}, 1}, {Size{10, 3}, 3}, {Size{1, 1}, 1}} {
		if got := c.size.PerShard(); got != c.want {
			t.Errorf("%+v: PerShard %d, want %d", c.size, got, c.want)
		}
	}
}

func TestNewPanicsOnUnresolvedSize(t *testing.T) {
	for _, size := range []Size{{}, {MaxKeys: 4}, {MaxKeys: 4, Shards: 8}, {MaxKeys: 4, Shards: -1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%+v) did not panic", size)
				}
			}()
			New[mutexShard](size)
		}()
	}
}

// TestInsert covers a Table of room 4 whose whole content is sampled, so
// the victim is determined.
func TestInsert(t *testing.T) {
	cases := []struct {
		name    string
		held    map[string]item
		key     string
		refuse  bool // nil Rank
		ok      bool
		evicted string // empty: nothing evicted
	}{
		{"room left", map[string]item{"a": {rank: 1}}, "b", false, true, ""},
		{"room left, refusing", map[string]item{"a": {rank: 1}}, "b", true, true, ""},
		{"full: lowest rank goes", map[string]item{"a": {rank: 3}, "b": {rank: 1}, "c": {rank: 2}, "d": {rank: 9}}, "e", false, true, "b"},
		{"full: a free entry goes first", map[string]item{"a": {rank: 3}, "b": {rank: 1}, "c": {rank: 7, free: true}, "d": {rank: 9}}, "e", false, true, "c"},
		{"full: negative ranks", map[string]item{"a": {rank: -3}, "b": {rank: 1}, "c": {rank: -7}, "d": {rank: 0}}, "e", false, true, "c"},
		{"full, refusing", map[string]item{"a": {}, "b": {}, "c": {}, "d": {}}, "e", true, false, ""},
		{"full: a held key is replaced", map[string]item{"a": {rank: 3}, "b": {rank: 1}, "c": {}, "d": {}}, "a", false, true, ""},
		{"full, refusing: a held key is replaced", map[string]item{"a": {}, "b": {}, "c": {}, "d": {}}, "d", true, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := newTable(4)
			for k, v := range c.held {
				tb.Insert(k, &v, byRank)
			}
			v := &item{rank: 100}
			rank := Rank[*item](byRank)
			if c.refuse {
				rank = nil
			}
			if ok := tb.Insert(c.key, v, rank); ok != c.ok {
				t.Fatalf("Insert: %v, want %v", ok, c.ok)
			}
			checkInserted(t, tb, c.key, v, c.ok, c.held, c.evicted)
		})
	}
}

// checkInserted checks a Table of at most 4 keys after v was inserted
// under key: it holds v exactly when the insertion succeeded (ok), and
// every key it held before but evicted.
func checkInserted[V comparable, H any](t *testing.T, tb *Table[V], key string, v V, ok bool, before map[string]H, evicted string) {
	t.Helper()
	if got, held := tb.Get(key); held != ok || held && got != v {
		t.Fatalf("Get(%q) after the insertion: %v, %v", key, got, held)
	}
	for k := range before {
		_, held := tb.Get(k)
		if want := k != evicted; held != want {
			t.Errorf("%q held: %v, want %v", k, held, want)
		}
	}
	if tb.Len() > 4 {
		t.Fatalf("Len %d > 4", tb.Len())
	}
}

// TestEvictionBound inserts many keys into a Table much larger than the
// sample: it stays at its bound, and only ever evicts within the sample's
// reach of the lowest ranks.
func TestEvictionBound(t *testing.T) {
	for _, max := range []int{1, 2, Sample, 100} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			tb := newTable(max)
			for i := range 10 * max {
				if !tb.Insert(fmt.Sprint("k", i), &item{rank: int64(i)}, byRank) {
					t.Fatal("Insert with a Rank refused a key")
				}
				if n, want := tb.Len(), min(i+1, max); n != want {
					t.Fatalf("after %d inserts: Len %d, want %d", i+1, n, want)
				}
			}
			// The newest key always survives its own insertion.
			if _, ok := tb.Get(fmt.Sprint("k", 10*max-1)); !ok {
				t.Fatal("the newest key is gone")
			}
		})
	}
}

// timed is a test value for InsertDue: when it becomes free.
type timed struct{ due int64 }

func byDue(v *timed) int64 { return v.due }

func newDueTable(max int) *Table[*timed] {
	t := new(Table[*timed])
	t.reset(max)
	return t
}

// TestInsertDue covers a Table of room 4: a full one drops only an entry
// due by now, the earliest first, and otherwise refuses.
func TestInsertDue(t *testing.T) {
	cases := []struct {
		name    string
		held    map[string]int64 // key: due time
		key     string
		now     int64
		ok      bool
		evicted string // empty: nothing evicted
	}{
		{"room left", map[string]int64{"a": 50}, "b", 0, true, ""},
		{"full, nothing due: refused", map[string]int64{"a": 50, "b": 10, "c": 30, "d": 20}, "e", 9, false, ""},
		{"full: the one due goes", map[string]int64{"a": 50, "b": 10, "c": 30, "d": 20}, "e", 10, true, "b"},
		{"full: the earliest due goes", map[string]int64{"a": 5, "b": 10, "c": 3, "d": 20}, "e", 15, true, "c"},
		{"full: negative times", map[string]int64{"a": -5, "b": 10, "c": 3, "d": 20}, "e", 0, true, "a"},
		{"full: a held key is replaced", map[string]int64{"a": 50, "b": 10, "c": 30, "d": 20}, "a", 0, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := newDueTable(4)
			for k, due := range c.held {
				if !tb.InsertDue(k, &timed{due}, -100, byDue) {
					t.Fatalf("InsertDue(%q) refused with room left", k)
				}
			}
			if _, held := c.held[c.key]; tb.Len() == 4 && !held {
				// Room agrees with InsertDue and drops the same entry.
				if got := tb.Room(c.now, byDue); got != c.ok {
					t.Fatalf("Room: %v, want %v", got, c.ok)
				}
				if c.ok {
					if _, held := tb.Get(c.evicted); held {
						t.Fatalf("Room made room without dropping %q", c.evicted)
					}
					tb.InsertDue(c.evicted, &timed{c.held[c.evicted]}, -100, byDue) // put it back
				}
			}
			v := &timed{100}
			if ok := tb.InsertDue(c.key, v, c.now, byDue); ok != c.ok {
				t.Fatalf("InsertDue: %v, want %v", ok, c.ok)
			}
			checkInserted(t, tb, c.key, v, c.ok, c.held, c.evicted)
		})
	}
}

// TestKeyedTable: a table of struct keys, set up by Init, bounds and
// reclaims like a Table; keys equal as strings in no way meet.
func TestKeyedTable(t *testing.T) {
	type pair struct{ a, b string }
	var tb KeyedTable[pair, *timed]
	tb.Init(2, func(p pair) (pair, bool) { return p, true })
	if !tb.InsertDue(pair{"x", "y"}, &timed{10}, 0, byDue) || !tb.InsertDue(pair{"xy", ""}, &timed{20}, 0, byDue) {
		t.Fatal("InsertDue refused with room left")
	}
	if tb.InsertDue(pair{"x", "z"}, &timed{30}, 9, byDue) {
		t.Fatal("a full table took a key with nothing due")
	}
	if !tb.InsertDue(pair{"x", "z"}, &timed{30}, 10, byDue) {
		t.Fatal("a full table kept an entry that was due")
	}
	if _, held := tb.Get(pair{"x", "y"}); held || tb.Len() != 2 {
		t.Fatalf("the due entry is still held (Len %d)", tb.Len())
	}
	if v, _ := tb.Get(pair{"xy", ""}); v == nil || v.due != 20 {
		t.Fatalf("Get(xy) = %v", v)
	}
}

// TestInsertDueFollowsMovedTimes moves due times after insertion: later
// without a word, earlier with Sooner. The Table still drops exactly the
// entries due by now.
func TestInsertDueFollowsMovedTimes(t *testing.T) {
	tb := newDueTable(3)
	a, b, c := &timed{10}, &timed{20}, &timed{30}
	tb.InsertDue("a", a, 0, byDue)
	tb.InsertDue("b", b, 0, byDue)
	tb.InsertDue("c", c, 0, byDue)
	a.due = 40 // a was written to: due later
	if tb.InsertDue("x", &timed{100}, 15, byDue) {
		t.Fatal("at 15 nothing is due, yet x was stored")
	}
	if _, held := tb.Get("a"); !held {
		t.Fatal("a, due at 40, was dropped at 15")
	}
	c.due = 5 // a refund: due earlier
	tb.Sooner("c", 5, byDue)
	if !tb.InsertDue("x", &timed{100}, 15, byDue) {
		t.Fatal("c is due at 5, yet x was refused at 15")
	}
	if _, held := tb.Get("c"); held {
		t.Fatal("x took the place of another key than c")
	}
	// A held key replaced by an earlier-due value is found by its new time.
	tb.InsertDue("x", &timed{16}, 15, byDue)
	if !tb.InsertDue("y", &timed{100}, 17, byDue) {
		t.Fatal("x is due at 16, yet y was refused at 17")
	}
	if _, held := tb.Get("x"); held {
		t.Fatal("y took the place of another key than x")
	}
}

// TestInsertDueStepBound puts more than Sample moved entries ahead of the
// one that is due: an insertion does at most Sample heap steps and may
// refuse, but each refusal makes progress, so within a few insertions the
// due entry is found.
func TestInsertDueStepBound(t *testing.T) {
	const max = 40
	tb := newDueTable(max)
	var moved []*timed
	for i := range max - 1 {
		v := &timed{int64(i)}
		moved = append(moved, v)
		tb.InsertDue(fmt.Sprint("busy", i), v, 0, byDue)
	}
	tb.InsertDue("due", &timed{max}, 0, byDue)
	for _, v := range moved {
		v.due = 1000 // all written to since: due much later
	}
	refusals := 0
	for !tb.InsertDue("new", &timed{2000}, max, byDue) {
		if refusals++; refusals > (max+Sample-1)/Sample {
			t.Fatalf("refused %d times: the steps made no progress", refusals)
		}
	}
	if refusals == 0 {
		t.Fatal("the first insertion went past Sample steps")
	}
	if _, held := tb.Get("due"); held {
		t.Fatal("new took the place of a busy key")
	}
}

// TestDueModel runs random inserts, writes (due later), refunds (due
// earlier, with Sooner), deletes and sweeps against a plain map: the Table
// never drops an entry that is not due, a sweep drops every entry that is,
// and the heap stays within twice the Table's bound.
func TestDueModel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const max = 16
	tb := newDueTable(max)
	model := map[string]*timed{}
	now := int64(0)
	for i := range 200_000 {
		key := fmt.Sprint("k", r.IntN(64))
		v, held := model[key]
		switch op := r.IntN(10); {
		case op < 4:
			if held {
				continue
			}
			nv := &timed{now + r.Int64N(50)}
			ok := tb.InsertDue(key, nv, now, byDue)
			for k, old := range model {
				if _, still := tb.Get(k); !still {
					if old.due > now {
						t.Fatalf("op %d: %s dropped at %d, due at %d", i, k, now, old.due)
					}
					delete(model, k)
				}
			}
			if ok {
				model[key] = nv
			} else if len(model) < max {
				t.Fatalf("op %d: refused with room left", i)
			}
		case op < 6 && held:
			v.due += r.Int64N(30)
		case op < 7 && held:
			v.due -= r.Int64N(30)
			tb.Sooner(key, v.due, byDue)
		case op < 8 && held:
			tb.Delete(key)
			delete(model, key)
		case op < 9:
			now += r.Int64N(10)
		default:
			tb.DeleteDue(now, byDue)
			for k, v := range model {
				if _, still := tb.Get(k); still != (v.due > now) {
					t.Fatalf("op %d: after a sweep at %d, %s (due %d) held: %v", i, now, k, v.due, still)
				}
				if v.due <= now {
					delete(model, k)
				}
			}
		}
		if tb.Len() != len(model) || tb.Len() > max {
			t.Fatalf("op %d: Len %d, model %d", i, tb.Len(), len(model))
		}
		if len(tb.order) > 2*max+Sample {
			t.Fatalf("op %d: %d heap items for at most %d keys", i, len(tb.order), max)
		}
	}
	tb.Clear()
	if tb.Len() != 0 || len(tb.order) != 0 {
		t.Fatalf("Clear left %d keys, %d heap items", tb.Len(), len(tb.order))
	}
}

func TestDeleteFuncAndClear(t *testing.T) {
	tb := newTable(10)
	for i := range 10 {
		tb.Insert(fmt.Sprint(i), &item{rank: int64(i)}, nil)
	}
	tb.DeleteFunc(func(_ string, v *item) bool { return v.rank%2 == 0 })
	if tb.Len() != 5 {
		t.Fatalf("Len %d after deleting the even ranks, want 5", tb.Len())
	}
	for i := range 10 {
		if _, ok := tb.Get(fmt.Sprint(i)); ok != (i%2 == 1) {
			t.Errorf("%d held: %v", i, ok)
		}
	}
	tb.Delete("1")
	tb.Delete("absent")
	if tb.Len() != 4 {
		t.Fatalf("Len %d after Delete, want 4", tb.Len())
	}
	tb.Clear()
	if tb.Len() != 0 {
		t.Fatalf("Len %d after Clear", tb.Len())
	}
	if !tb.Insert("again", &item{}, nil) {
		t.Fatal("a cleared Table refused a key")
	}
}

func TestMap(t *testing.T) {
	m := New[mutexShard](Size{MaxKeys: 40, Shards: 4})
	if m.Size() != (Size{40, 4}) {
		t.Fatalf("Size %+v", m.Size())
	}
	seen := map[*mutexShard]bool{}
	for i := range 100 {
		key := fmt.Sprint("key:", i)
		sh := m.Shard(key)
		if m.Shard(key) != sh {
			t.Fatalf("%q moved shards", key)
		}
		if i := m.Index(key); i < 0 || i >= 4 || m.At(i) != sh {
			t.Fatalf("%q: Index %d does not name its Shard", key, i)
		}
		seen[sh] = true
		sh.Lock()
		sh.Insert(key, &item{}, nil) // refused once the shard is full
		sh.Unlock()
	}
	if len(seen) != 4 {
		t.Errorf("100 keys used %d of 4 shards", len(seen))
	}
	n := 0
	m.Each(func(sh *mutexShard) {
		if sh.Len() > 10 {
			t.Errorf("a shard holds %d keys, more than MaxKeys / Shards", sh.Len())
		}
		n += sh.Len()
	})
	if m.Len() != n || n > 40 || n < 10 {
		t.Fatalf("Len %d, shards hold %d; want equal and at most 40", m.Len(), n)
	}
	m.Each((*mutexShard).Clear)
	if m.Len() != 0 {
		t.Fatalf("Len %d after clearing every shard", m.Len())
	}
}

// TestConcurrent runs inserts, lookups, deletes and whole-map walks from
// many goroutines on read-write locked shards, under -race; the bound
// holds throughout.
func TestConcurrent(t *testing.T) {
	m := New[rwShard](Size{MaxKeys: 32, Shards: 4})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				key := fmt.Sprint("k", (g*31+i)%200)
				sh := m.Shard(key)
				switch i % 4 {
				case 0, 1:
					sh.Lock()
					sh.Insert(key, &item{rank: int64(i)}, byRank)
					sh.Unlock()
				case 2:
					sh.RLock()
					sh.Get(key)
					sh.RUnlock()
				case 3:
					sh.Lock()
					sh.Delete(key)
					sh.Unlock()
				}
				if i%100 == 0 {
					if n := m.Len(); n > 32 {
						t.Errorf("Len %d > MaxKeys 32", n)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	m.Each(func(sh *rwShard) {
		if sh.Len() > 8 {
			t.Errorf("a shard holds %d keys, more than 8", sh.Len())
		}
	})
}

// counterShard is what a store declares: its own lock and a Table.
type counterShard struct {
	sync.Mutex
	Table[*int]
}

// Example counts calls per key in at most two keys; a new key evicts the
// least used one.
func Example() {
	size, err := Size{MaxKeys: 2, Shards: 1}.Resolve(errInvalid, Size{MaxKeys: 1000, Shards: 32})
	if err != nil {
		panic(err)
	}
	m := New[counterShard](size)
	leastUsed := func(n *int) (int64, bool) { return int64(*n), false }
	for _, key := range []string{"a", "b", "a", "a", "c"} {
		sh := m.Shard(key)
		sh.Lock()
		if n, ok := sh.Get(key); ok {
			*n++
		} else {
			sh.Insert(key, new(int), leastUsed)
		}
		sh.Unlock()
	}
	m.Each(func(sh *counterShard) {
		for _, key := range []string{"a", "b", "c"} {
			if n, ok := sh.Get(key); ok {
				fmt.Printf("%s: %d more calls\n", key, *n)
			}
		}
	})
	fmt.Println("keys:", m.Len())
	// Output:
	// a: 2 more calls
	// c: 0 more calls
	// keys: 2
}

// BenchmarkShardGet is the lookup every store call starts with.
func BenchmarkShardGet(b *testing.B) {
	m := New[mutexShard](Size{MaxKeys: 100_000, Shards: 64})
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("principal:", i)
		sh := m.Shard(keys[i])
		sh.Insert(keys[i], &item{}, byRank)
	}
	i := 0
	for b.Loop() {
		sh := m.Shard(keys[i%len(keys)])
		sh.Lock()
		if _, ok := sh.Get(keys[i%len(keys)]); !ok {
			b.Fatal("key lost")
		}
		sh.Unlock()
		i++
	}
}

// A Table keeps a copy of each new key, never the caller's memory, and
// refuses a key longer than MaxKeyBytes, by Insert and by InsertDue.
func TestTableOwnsItsKeys(t *testing.T) {
	big := strings.Repeat("k", 1<<20)
	var plain Table[*item]
	plain.reset(4)
	due := newDueTable(4)
	if !plain.Insert(big[:10], &item{}, nil) || !due.InsertDue(big[10:30], &timed{1}, 0, byDue) {
		t.Fatal("a short key refused")
	}
	for k := range plain.keys {
		if kept.Shares(k, big) {
			t.Fatal("Insert stored the caller's memory")
		}
	}
	for k := range due.keys {
		if kept.Shares(k, big) {
			t.Fatal("InsertDue stored the caller's memory")
		}
	}
	due.InsertDue(big[10:30], &timed{0}, 0, byDue) // an earlier due time: a new heap item
	due.Sooner(big[10:30], 0, byDue)
	for _, it := range due.order {
		if kept.Shares(it.key, big) {
			t.Fatal("the due heap holds the caller's memory")
		}
	}
	long := big[:MaxKeyBytes+1]
	if plain.Insert(long, &item{}, nil) || due.InsertDue(long, &timed{1}, 0, byDue) {
		t.Fatal("a key past MaxKeyBytes was stored")
	}
	if !plain.Insert(long[:MaxKeyBytes], &item{}, nil) || plain.Len() != 2 || due.Len() != 1 {
		t.Fatal("a key of MaxKeyBytes refused")
	}
}
