package keycache_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/identity/keycache"
)

// fakeClock is a Clock tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

var start = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func (c *fakeClock) Now() time.Time          { return start.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// fakeKeys is a KeyLookup that counts its calls. keys maps an API key to
// its grant; err, when set, is every call's answer; gate, when set, holds
// every call until it is closed, after telling entered.
type fakeKeys struct {
	mu      sync.Mutex
	keys    map[string]identity.APIKey
	err     error
	calls   atomic.Int64
	entered chan struct{}
	gate    chan struct{}
	// deadline is whether the last call's context had a deadline.
	deadline atomic.Bool
}

func (f *fakeKeys) LookupAPIKey(ctx context.Context, apiKey string) (string, string, error) {
	f.calls.Add(1)
	_, ok := ctx.Deadline()
	f.deadline.Store(ok)
	if f.gate != nil {
		f.entered <- struct{}{}
		select {
		case <-f.gate:
		case <-ctx.Done():
			return "", "", ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return "", "", f.err
	}
	g, ok := f.keys[apiKey]
	if !ok {
		return "", "", identity.ErrUnknownAPIKey
	}
	return g.Principal, g.Plan, nil
}

func (f *fakeKeys) set(apiKey string, g *identity.APIKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g == nil {
		delete(f.keys, apiKey)
		return
	}
	f.keys[apiKey] = *g
}

func (f *fakeKeys) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func newFake() *fakeKeys {
	return &fakeKeys{keys: map[string]identity.APIKey{
		"alice-key": {Principal: "alice", Plan: "free"},
		"bob-key":   {Principal: "bob", Plan: "pro"},
	}}
}

var errDown = errors.New("database down")

func TestCache(t *testing.T) {
	type step struct {
		advance time.Duration
		do      func(f *fakeKeys) // changes the backing store first
		key     string
		want    string // principal; "" with wantErr
		wantErr error
		calls   int64 // backing calls so far
	}
	opts := []keycache.Option{
		keycache.WithTTL(time.Minute), keycache.WithUnknownTTL(10 * time.Second),
		keycache.WithLookupBudget(1, 2),
	}
	revoke := func(f *fakeKeys) { f.set("alice-key", nil) }
	issue := func(f *fakeKeys) { f.set("carol-key", &identity.APIKey{Principal: "carol", Plan: "free"}) }
	tests := []struct {
		name  string
		steps []step
	}{
		{"a known key is looked up once a TTL", []step{
			{key: "alice-key", want: "alice", calls: 1},
			{key: "alice-key", want: "alice", calls: 1},
			{advance: time.Minute - 1, key: "alice-key", want: "alice", calls: 1},
			{advance: 1, key: "alice-key", want: "alice", calls: 2},
			{key: "alice-key", want: "alice", calls: 2},
		}},
		{"a revoked key works until its TTL ends", []step{
			{key: "alice-key", want: "alice", calls: 1},
			{do: revoke, advance: 59 * time.Second, key: "alice-key", want: "alice", calls: 1},
			{advance: time.Second, key: "alice-key", wantErr: identity.ErrUnknownAPIKey, calls: 2},
			{advance: 9 * time.Second, key: "alice-key", wantErr: identity.ErrUnknownAPIKey, calls: 2},
		}},
		{"an unknown key is looked up once an unknown TTL", []step{
			{key: "carol-key", wantErr: identity.ErrUnknownAPIKey, calls: 1},
			{do: issue, advance: 10*time.Second - 1, key: "carol-key", wantErr: identity.ErrUnknownAPIKey, calls: 1},
			{advance: 1, key: "carol-key", want: "carol", calls: 2},
		}},
		{"unseen keys spend the budget; an empty bucket answers without a query", []step{
			{key: "x1", wantErr: identity.ErrUnknownAPIKey, calls: 1},
			{key: "x2", wantErr: identity.ErrUnknownAPIKey, calls: 2},
			{key: "x3", wantErr: keycache.ErrNotLookedUp, calls: 2},
			{key: "alice-key", wantErr: keycache.ErrNotLookedUp, calls: 2},
			{advance: time.Second, key: "x3", wantErr: identity.ErrUnknownAPIKey, calls: 3},
			{key: "x4", wantErr: keycache.ErrNotLookedUp, calls: 3},
		}},
		{"a key found gives its token back", []step{
			{key: "alice-key", want: "alice", calls: 1},
			{key: "bob-key", want: "bob", calls: 2},
			{key: "x1", wantErr: identity.ErrUnknownAPIKey, calls: 3},
			{key: "x2", wantErr: identity.ErrUnknownAPIKey, calls: 4},
			{key: "x3", wantErr: keycache.ErrNotLookedUp, calls: 4},
		}},
		{"a known key past its TTL is refreshed with the bucket empty", []step{
			{key: "alice-key", want: "alice", calls: 1},
			{advance: time.Minute, key: "x1", wantErr: identity.ErrUnknownAPIKey, calls: 2},
			{key: "x2", wantErr: identity.ErrUnknownAPIKey, calls: 3},
			{key: "x3", wantErr: keycache.ErrNotLookedUp, calls: 3},
			{key: "alice-key", want: "alice", calls: 4},
			{key: "alice-key", want: "alice", calls: 4},
		}},
		{"errors are returned, not cached, and keep their token", []step{
			{do: func(f *fakeKeys) { f.setErr(errDown) }, key: "alice-key", wantErr: errDown, calls: 1},
			{key: "alice-key", wantErr: errDown, calls: 2},
			{key: "alice-key", wantErr: keycache.ErrNotLookedUp, calls: 2},
			{do: func(f *fakeKeys) { f.setErr(nil) }, advance: time.Second, key: "alice-key", want: "alice", calls: 3},
			{key: "alice-key", want: "alice", calls: 3},
		}},
		{"a known key whose refresh fails answers the error, then refreshes without a token", []step{
			{key: "alice-key", want: "alice", calls: 1},
			{key: "x1", wantErr: identity.ErrUnknownAPIKey, calls: 2},
			{key: "x2", wantErr: identity.ErrUnknownAPIKey, calls: 3},
			{advance: time.Minute, key: "x3", wantErr: identity.ErrUnknownAPIKey, calls: 4},
			{key: "x4", wantErr: identity.ErrUnknownAPIKey, calls: 5},
			{do: func(f *fakeKeys) { f.setErr(errDown) }, key: "alice-key", wantErr: errDown, calls: 6},
			{do: func(f *fakeKeys) { f.setErr(nil) }, key: "alice-key", want: "alice", calls: 7},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock, f := &fakeClock{}, newFake()
			c, err := keycache.New(f, append(opts, keycache.WithClock(clock))...)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				if s.do != nil {
					s.do(f)
				}
				clock.Advance(s.advance)
				got, _, err := c.LookupAPIKey(t.Context(), s.key)
				if s.wantErr != nil {
					if !errors.Is(err, s.wantErr) {
						t.Fatalf("step %d: %s: err %v, want %v", i, s.key, err, s.wantErr)
					}
				} else if err != nil || got != s.want {
					t.Fatalf("step %d: %s: %q, %v; want %q", i, s.key, got, err, s.want)
				}
				if n := f.calls.Load(); n != s.calls {
					t.Fatalf("step %d: %s: %d backing calls, want %d", i, s.key, n, s.calls)
				}
			}
		})
	}
}

func TestOptions(t *testing.T) {
	f := newFake()
	tests := []struct {
		name string
		opt  keycache.Option
	}{
		{"zero TTL", keycache.WithTTL(0)},
		{"negative unknown TTL", keycache.WithUnknownTTL(-time.Second)},
		{"no known entries", keycache.WithMaxKeys(0, 10)},
		{"no unknown entries", keycache.WithMaxKeys(10, 0)},
		{"no lookups", keycache.WithLookupBudget(0, 10)},
		{"no burst", keycache.WithLookupBudget(10, 0)},
		{"a rate past the bound", keycache.WithLookupBudget(1_000_001, 10)},
		{"a burst past the bound", keycache.WithLookupBudget(10, 1_000_001)},
		{"zero timeout", keycache.WithLookupTimeout(0)},
		{"nil clock", keycache.WithClock(nil)},
	}
	for _, tt := range tests {
		if _, err := keycache.New(f, tt.opt); !errors.Is(err, keycache.ErrInvalidConfig) {
			t.Errorf("%s: err %v, want ErrInvalidConfig", tt.name, err)
		}
	}
	if _, err := keycache.New(nil); !errors.Is(err, keycache.ErrInvalidConfig) {
		t.Errorf("nil lookup: err %v, want ErrInvalidConfig", err)
	}
	if _, err := keycache.New(f, keycache.WithLookupBudget(1_000_000, 1_000_000), keycache.WithMaxKeys(1, 1)); err != nil {
		t.Errorf("the largest budget and the smallest caps: %v", err)
	}
}

func TestErrNotLookedUpIsUnknown(t *testing.T) {
	if !errors.Is(keycache.ErrNotLookedUp, identity.ErrUnknownAPIKey) {
		t.Fatal("ErrNotLookedUp is not an ErrUnknownAPIKey: the middleware would answer it 503, not 401")
	}
}

// TestDefaultBudget pins the defaults docs/keys.md states: 100 lookups of
// unseen keys back to back, then 100 a second.
func TestDefaultBudget(t *testing.T) {
	clock, f := &fakeClock{}, newFake()
	c, err := keycache.New(f, keycache.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	flood(t, c, clock, 0, 1000, 0)
	if n := f.calls.Load(); n != keycache.DefaultLookupBurst || keycache.DefaultLookupBurst != 100 {
		t.Fatalf("%d lookups with the clock stopped, want the burst, 100", n)
	}
	clock.Advance(time.Second)
	flood(t, c, clock, 1000, 1000, 0)
	if n := f.calls.Load(); n != 200 || keycache.DefaultLookupsPerSecond != 100 {
		t.Fatalf("%d lookups a second later, want 200", n)
	}
	if keycache.DefaultTTL != time.Minute || keycache.DefaultUnknownTTL != 30*time.Second ||
		keycache.DefaultMaxKeys != 100_000 || keycache.DefaultMaxUnknownKeys != 10_000 ||
		keycache.DefaultLookupTimeout != time.Second {
		t.Fatal("a default changed: update docs/keys.md and this test")
	}
}

// flood looks up n distinct keys nobody issued, numbered from first,
// advancing clock by step before each, and fails on any answer but unknown.
func flood(tb testing.TB, c *keycache.Cache, clock *fakeClock, first, n int, step time.Duration) {
	tb.Helper()
	ctx := context.Background()
	buf := make([]byte, 0, 32)
	for i := first; i < first+n; i++ {
		clock.Advance(step)
		buf = strconv.AppendInt(append(buf[:0], "random-"...), int64(i), 16)
		if _, _, err := c.LookupAPIKey(ctx, string(buf)); !errors.Is(err, identity.ErrUnknownAPIKey) {
			tb.Fatalf("random key %d: err %v, want unknown", i, err)
		}
	}
}

// TestFlood sends 1,000,000 distinct keys nobody issued, 100,000 a second
// for ten seconds of the fake clock: the backing lookup is asked at most
// burst + rate × 10 s times, the entries stay within their cap, and the
// known keys held before the flood are still answered from memory.
func TestFlood(t *testing.T) {
	const (
		keys  = 1_000_000
		step  = 10 * time.Microsecond // 100,000 keys a second
		rate  = keycache.DefaultLookupsPerSecond
		burst = keycache.DefaultLookupBurst
	)
	clock, f := &fakeClock{}, newFake()
	c, err := keycache.New(f, keycache.WithClock(clock), keycache.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, _, err := c.LookupAPIKey(ctx, "alice-key"); err != nil {
		t.Fatal(err)
	}
	f.calls.Store(0)
	flood(t, c, clock, 0, keys, step)
	elapsed := time.Duration(keys) * step
	budget := int64(burst + rate*elapsed/time.Second)
	if n := f.calls.Load(); n > budget || n < budget-1 {
		t.Errorf("%d lookups for %d random keys in %v, want %d (burst %d + %d a second)", n, keys, elapsed, budget, burst, rate)
	}
	s := c.Stats()
	t.Logf("%d random keys in %v: %d lookups, %d answered without one; %d unknown entries held",
		keys, elapsed, s.Lookups, s.NotLookedUp, s.Unknown)
	if s.Unknown > keycache.DefaultMaxUnknownKeys {
		t.Errorf("%d unknown entries, above the cap %d", s.Unknown, keycache.DefaultMaxUnknownKeys)
	}
	calls := f.calls.Load()
	if p, _, err := c.LookupAPIKey(ctx, "alice-key"); p != "alice" || err != nil || f.calls.Load() != calls {
		t.Errorf("alice after the flood: %q, %v, %d lookups; want her, from memory", p, err, f.calls.Load()-calls)
	}
}

// TestFloodMemory sends 1,000,000 distinct keys nobody issued (200,000
// under -race) through a cache whose budget lets every one be looked up:
// the unknown entries stay at their cap, the known ones are not pushed
// out, and the heap does not grow with the number of keys.
func TestFloodMemory(t *testing.T) {
	const (
		maxUnknown = 10_000
		perEntry   = 400 // bytes an entry may take, map slot included
	)
	keys := 1_000_000
	if raceEnabled {
		keys = 200_000
	}
	clock, f := &fakeClock{}, newFake()
	c, err := keycache.New(f, keycache.WithClock(clock), keycache.WithTTL(time.Hour),
		keycache.WithMaxKeys(100, maxUnknown), keycache.WithLookupBudget(1_000_000, 1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.LookupAPIKey(t.Context(), "alice-key"); err != nil {
		t.Fatal(err)
	}
	before := heapInUse()
	flood(t, c, clock, 0, keys, time.Microsecond)
	grown := heapInUse() - before
	s := c.Stats()
	if s.Lookups != uint64(keys)+1 {
		t.Fatalf("%d lookups, want every key looked up", s.Lookups)
	}
	if s.Unknown != maxUnknown || s.Known != 1 {
		t.Errorf("%d unknown and %d known entries held, want %d and 1", s.Unknown, s.Known, maxUnknown)
	}
	t.Logf("%d random keys: the heap grew by %d bytes (%d unknown entries held)", keys, grown, s.Unknown)
	if grown > maxUnknown*perEntry {
		t.Errorf("the heap grew by %d bytes, more than %d entries of %d bytes", grown, maxUnknown, perEntry)
	}
	runtime.KeepAlive(c)
}

// TestMemoryPerEntry measures what a known entry costs: docs/keys.md
// quotes the figure and this test keeps it true.
func TestMemoryPerEntry(t *testing.T) {
	const limit = 300
	n := 100_000
	if raceEnabled {
		n = 20_000
	}
	f := &fakeKeys{keys: make(map[string]identity.APIKey, n)}
	for i := range n {
		f.keys["key-"+strconv.Itoa(i)] = identity.APIKey{Principal: "user-" + strconv.Itoa(i), Plan: "free"}
	}
	c, err := keycache.New(f, keycache.WithClock(&fakeClock{}), keycache.WithLookupBudget(1_000_000, 1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	before := heapInUse()
	for i := range n {
		if _, _, err := c.LookupAPIKey(t.Context(), "key-"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	per := (heapInUse() - before) / int64(n)
	t.Logf("%d known entries: %d bytes each (principals of %d bytes held by the backing store too)", n, per, len("user-99999"))
	if per > limit {
		t.Errorf("%d bytes an entry, above %d", per, limit)
	}
	runtime.KeepAlive(c)
	runtime.KeepAlive(f)
}

// heapInUse returns the bytes of live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// gated returns a fake whose lookups wait for gate, after telling entered.
func gated() *fakeKeys {
	f := newFake()
	f.entered, f.gate = make(chan struct{}), make(chan struct{})
	return f
}

// waitJoined waits until n callers wait for another's lookup.
func waitJoined(c *keycache.Cache, n uint64) {
	for c.Stats().Joined < n {
		runtime.Gosched()
	}
}

type result struct {
	principal string
	err       error
}

func lookupAsync(ctx context.Context, c *keycache.Cache, key string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		p, _, err := c.LookupAPIKey(ctx, key)
		ch <- result{p, err}
	}()
	return ch
}

// TestOneLookupPerKey: concurrent callers of one key wait for one lookup,
// whether it finds the key or not, and share its answer.
func TestOneLookupPerKey(t *testing.T) {
	const callers = 50
	for _, tt := range []struct{ key, want string }{{"alice-key", "alice"}, {"nobody-key", ""}} {
		t.Run(tt.key, func(t *testing.T) {
			f := gated()
			c, err := keycache.New(f, keycache.WithClock(&fakeClock{}), keycache.WithLookupBudget(1, 1))
			if err != nil {
				t.Fatal(err)
			}
			results := make([]<-chan result, callers)
			results[0] = lookupAsync(t.Context(), c, tt.key)
			<-f.entered
			for i := 1; i < callers; i++ {
				results[i] = lookupAsync(t.Context(), c, tt.key)
			}
			waitJoined(c, callers-1)
			close(f.gate)
			for i, ch := range results {
				r := <-ch
				if r.principal != tt.want || (tt.want == "") != errors.Is(r.err, identity.ErrUnknownAPIKey) {
					t.Errorf("caller %d: %q, %v; want %q", i, r.principal, r.err, tt.want)
				}
			}
			if n := f.calls.Load(); n != 1 {
				t.Errorf("%d lookups, want 1", n)
			}
		})
	}
}

// TestWaiterLeaves: a caller waiting for another's lookup leaves when its
// own context ends; the lookup goes on and its answer is kept.
func TestWaiterLeaves(t *testing.T) {
	f := gated()
	c, err := keycache.New(f, keycache.WithClock(&fakeClock{}))
	if err != nil {
		t.Fatal(err)
	}
	first := lookupAsync(t.Context(), c, "alice-key")
	<-f.entered
	ctx, cancel := context.WithCancel(t.Context())
	second := lookupAsync(ctx, c, "alice-key")
	waitJoined(c, 1)
	cancel()
	if r := <-second; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the waiter whose context ended: %q, %v; want context.Canceled", r.principal, r.err)
	}
	close(f.gate)
	if r := <-first; r.principal != "alice" {
		t.Fatalf("the caller that looked up: %q, %v", r.principal, r.err)
	}
	if p, _, err := c.LookupAPIKey(t.Context(), "alice-key"); p != "alice" || err != nil || f.calls.Load() != 1 {
		t.Fatalf("afterwards: %q, %v after %d lookups; want alice from memory", p, err, f.calls.Load())
	}
}

// TestLookerLeaves: when the caller running the lookup leaves (its context
// ends and the lookup fails with it), a waiter runs the lookup itself
// rather than answering the other's cancellation.
func TestLookerLeaves(t *testing.T) {
	f := gated()
	c, err := keycache.New(f, keycache.WithClock(&fakeClock{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	first := lookupAsync(ctx, c, "alice-key")
	<-f.entered
	second := lookupAsync(t.Context(), c, "alice-key")
	waitJoined(c, 1)
	cancel()
	if r := <-first; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the caller that left: %q, %v; want context.Canceled", r.principal, r.err)
	}
	<-f.entered // the waiter's own lookup
	close(f.gate)
	if r := <-second; r.principal != "alice" || r.err != nil {
		t.Fatalf("the waiter: %q, %v; want alice", r.principal, r.err)
	}
	if n := f.calls.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2", n)
	}
}

// TestLookupDeadline: every backing call has a deadline, even when the
// caller's context has none.
func TestLookupDeadline(t *testing.T) {
	f := newFake()
	c, err := keycache.New(f, keycache.WithClock(&fakeClock{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.LookupAPIKey(context.Background(), "alice-key"); err != nil {
		t.Fatal(err)
	}
	if !f.deadline.Load() {
		t.Fatal("the backing lookup ran without a deadline")
	}
}

// TestEviction: past its cap, the least recently used known key goes;
// unknown keys, capped apart, never push out known ones.
func TestEviction(t *testing.T) {
	f := newFake()
	f.set("carol-key", &identity.APIKey{Principal: "carol", Plan: "free"})
	clock := &fakeClock{}
	c, err := keycache.New(f, keycache.WithClock(clock), keycache.WithMaxKeys(2, 3), keycache.WithLookupBudget(1000, 1000))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, k := range []string{"alice-key", "bob-key", "alice-key", "carol-key"} { // bob is the least recent
		if _, _, err := c.LookupAPIKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	flood(t, c, clock, 0, 100, 0)
	if s := c.Stats(); s.Known != 2 || s.Unknown != 3 {
		t.Fatalf("%d known and %d unknown entries, want 2 and 3", s.Known, s.Unknown)
	}
	calls := f.calls.Load()
	for _, k := range []string{"alice-key", "carol-key"} {
		if _, _, err := c.LookupAPIKey(ctx, k); err != nil || f.calls.Load() != calls {
			t.Fatalf("%s: %v, looked up again; want it from memory", k, err)
		}
	}
	if _, _, err := c.LookupAPIKey(ctx, "bob-key"); err != nil || f.calls.Load() != calls+1 {
		t.Fatalf("bob-key: %v; want it looked up again, evicted", err)
	}
}

// TestConcurrent mixes known, unknown and failing lookups, evictions and a
// moving clock from many goroutines: run it with -race. Every answer must
// be right, and the caps must hold.
func TestConcurrent(t *testing.T) {
	f := newFake()
	clock := &fakeClock{}
	c, err := keycache.New(f, keycache.WithClock(clock), keycache.WithMaxKeys(2, 8),
		keycache.WithTTL(time.Millisecond), keycache.WithUnknownTTL(time.Millisecond), keycache.WithLookupBudget(1000, 10))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"alice-key": "alice", "bob-key": "bob"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				clock.Advance(time.Microsecond * time.Duration(g))
				key := []string{"alice-key", "bob-key", "u-" + strconv.Itoa(i%20)}[i%3]
				p, _, err := c.LookupAPIKey(context.Background(), key)
				if w := want[key]; (w == "" && !errors.Is(err, identity.ErrUnknownAPIKey)) || (w != "" && (err != nil || p != w)) {
					t.Errorf("%s: %q, %v; want %q", key, p, err, w)
					return
				}
			}
		})
	}
	wg.Wait()
	if s := c.Stats(); s.Known > 2 || s.Unknown > 8 {
		t.Fatalf("%d known and %d unknown entries, above the caps", s.Known, s.Unknown)
	}
}

// panicking is a KeyLookup that panics on its first call.
type panicking struct {
	*fakeKeys
	once sync.Once
}

func (p *panicking) LookupAPIKey(ctx context.Context, apiKey string) (string, string, error) {
	p.once.Do(func() { panic("lookup bug") })
	return p.fakeKeys.LookupAPIKey(ctx, apiKey)
}

// TestLookupPanics: a lookup that panics does not leave its key waiting
// forever: the next caller looks it up again.
func TestLookupPanics(t *testing.T) {
	p := &panicking{fakeKeys: newFake()}
	c, err := keycache.New(p, keycache.WithClock(&fakeClock{}))
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not reach the caller")
			}
		}()
		_, _, _ = c.LookupAPIKey(t.Context(), "alice-key")
	}()
	if got, _, err := c.LookupAPIKey(t.Context(), "alice-key"); got != "alice" || err != nil {
		t.Fatalf("after the panic: %q, %v; want alice", got, err)
	}
}

// Forget makes the next request ask the backing lookup: a revoked key is
// refused at once, and a key issued after the cache found it unknown is
// granted at once; a forgotten known key needs no token of the budget of
// unseen keys, even while a flood has spent it.
func TestForget(t *testing.T) {
	ctx := context.Background()
	clock, f := &fakeClock{}, newFake()
	c, err := keycache.New(f, keycache.WithClock(clock), keycache.WithLookupBudget(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.LookupAPIKey(ctx, "alice-key"); err != nil {
		t.Fatal(err)
	}
	flood(t, c, clock, 0, 10, 0) // the budget of unseen keys is spent
	f.set("alice-key", nil)      // revoked
	if p, _, err := c.LookupAPIKey(ctx, "alice-key"); err != nil || p != "alice" {
		t.Fatalf("before Forget: %q, %v; want the cached grant", p, err)
	}
	c.Forget("alice-key")
	if _, _, err := c.LookupAPIKey(ctx, "alice-key"); !errors.Is(err, identity.ErrUnknownAPIKey) || errors.Is(err, keycache.ErrNotLookedUp) {
		t.Fatalf("after Forget: %v; want unknown, looked up", err)
	}

	clock.Advance(time.Second) // a token for the next unseen key
	if _, _, err := c.LookupAPIKey(ctx, "carol-key"); !errors.Is(err, identity.ErrUnknownAPIKey) {
		t.Fatal(err)
	}
	f.set("carol-key", &identity.APIKey{Principal: "carol", Plan: "pro"}) // issued
	c.Forget("carol-key")
	clock.Advance(time.Second)
	if p, _, err := c.LookupAPIKey(ctx, "carol-key"); err != nil || p != "carol" {
		t.Fatalf("a key issued after the cache found it unknown, forgotten: %q, %v", p, err)
	}
	c.Forget("never-seen") // nothing held: nothing happens
	if s := c.Stats(); s.Known != 1 || s.Unknown != 2 || s.NotLookedUp != 9 {
		t.Fatalf("stats %+v: want carol known; alice and the one flood key looked up unknown; 9 not looked up", s)
	}
}
