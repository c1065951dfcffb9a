package redisstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/redisstore"
)

// TestTakeAllKeys: Name "" is Take's key; a named budget is
// prefix:{tag}:algorithm:name, under the owner's hash tag.
func TestTakeAllKeys(t *testing.T) {
	rdb := redistest.SharedServer(t).Client(t)
	s := newStore(t, rdb, nil)
	ctx := context.Background()
	quota := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 100, Period: time.Hour}
	reqs := []limiter.Request{
		{Key: "user{42}", Limit: roomy, Cost: 1},
		{Key: "user{42}", Name: "quota", Limit: quota, Cost: 1},
		{Key: "user{42}", Name: "a:b{c}", Limit: roomy, Cost: 1},
	}
	if err := s.TakeAll(ctx, reqs, make([]limiter.Decision, 3)); err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSuffix(s.Key("user{42}", limiter.TokenBucket), ":token_bucket")
	want := []string{
		s.Key("user{42}", limiter.TokenBucket),
		base + ":fixed_window:quota",
		base + ":token_bucket:a:b{c}",
	}
	if !strings.HasSuffix(base, ":{user%7B42%7D}") {
		t.Fatalf("key base %q", base)
	}
	for _, k := range want {
		if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Errorf("key %q: exists %d, %v", k, n, err)
		}
	}
}

// TestTakeAllCrossSlot: on a Cluster (or Ring), budgets of owners in
// different slots are refused before any command is sent (the client
// below has no server); on a standalone server any owners mix.
func TestTakeAllCrossSlot(t *testing.T) {
	a, b := "alice", "bob"
	if redisstore.Slot(a) == redisstore.Slot(b) {
		t.Fatal("pick owners in different slots")
	}
	same := "" // an owner in a's slot
	for i := 0; same == ""; i++ {
		if k := "carol" + strconv.Itoa(i); redisstore.Slot(k) == redisstore.Slot(a) {
			same = k
		}
	}
	reqs := []limiter.Request{{Key: a, Limit: roomy, Cost: 1}, {Key: b, Limit: roomy, Cost: 1}}
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		client func() redis.UniversalClient
	}{
		{"cluster", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
		}},
		{"ring", func() redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": "127.0.0.1:1"}})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := c.client()
			t.Cleanup(func() { _ = client.Close() })
			s := newStore(t, client, nil)
			ds := []limiter.Decision{{Allowed: true}, {}}
			err := s.TakeAll(ctx, reqs, ds)
			if !errors.Is(err, redisstore.ErrCrossSlot) || ds[0] != (limiter.Decision{}) {
				t.Fatalf("TakeAll: %+v, %v; want ErrCrossSlot", ds, err)
			}
			if c.name == "ring" { // a Ring shards by tag: one slot is not enough
				sameSlot := []limiter.Request{reqs[0], {Key: same, Limit: roomy, Cost: 1}}
				if err := s.TakeAll(ctx, sameSlot, ds); !errors.Is(err, redisstore.ErrCrossSlot) {
					t.Fatalf("owners in one slot on a Ring: %v; want ErrCrossSlot", err)
				}
			}
		})
	}
	t.Run("standalone", func(t *testing.T) {
		s := newStore(t, redistest.SharedServer(t).Client(t), nil)
		ds := make([]limiter.Decision, 2)
		if err := s.TakeAll(ctx, reqs, ds); err != nil || !limiter.AllAllowed(ds) {
			t.Fatalf("TakeAll: %+v, %v", ds, err)
		}
	})
	t.Run("cluster_same_slot", func(t *testing.T) {
		s := newStore(t, redistest.SharedCluster(t).Client(t), nil)
		ds := make([]limiter.Decision, 2)
		if err := s.TakeAll(ctx, []limiter.Request{reqs[0], {Key: same, Limit: roomy, Cost: 1}}, ds); err != nil || !limiter.AllAllowed(ds) {
			t.Fatalf("TakeAll: %+v, %v", ds, err)
		}
	})
}

// TestTakeAllWrongType: a budget whose key holds another type fails the
// call with Redis's error, and the other budgets are not debited.
func TestTakeAllWrongType(t *testing.T) {
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			rdb := target.client(t)
			s := newStore(t, rdb, nil)
			ctx := context.Background()
			if err := rdb.Set(ctx, s.Key("owner", limiter.FixedWindow), "not a hash", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			quota := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 10, Period: time.Hour}
			reqs := []limiter.Request{
				{Key: "owner", Name: "a", Limit: roomy, Cost: 3},
				{Key: "owner", Limit: quota, Cost: 1},
				{Key: "owner", Name: "b", Limit: quota, Cost: 2},
			}
			ds := make([]limiter.Decision, 3)
			err := s.TakeAll(ctx, reqs, ds)
			var rerr redis.Error
			if !errors.As(err, &rerr) || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), "request 1") {
				t.Fatalf("TakeAll: %v; want WRONGTYPE for request 1", err)
			}
			if !ds[0].Allowed || ds[1].Allowed || !ds[2].Allowed {
				t.Errorf("decisions %+v; want the others answered as peeks", ds)
			}
			for i, r := range []limiter.Request{reqs[0], reqs[2]} {
				r.Cost = 0
				peek := make([]limiter.Decision, 1)
				if err := s.TakeAll(ctx, []limiter.Request{r}, peek); err != nil || peek[0].Remaining != r.Limit.Capacity() {
					t.Errorf("budget %d debited: %+v, %v", i, peek[0], err)
				}
			}
		})
	}
}

// TestTakeAllCoalesced: a TakeAll queued with Takes leaves in the same
// round trip, as a script call of its own, and every call gets its own
// answer.
func TestTakeAllCoalesced(t *testing.T) {
	_, rdb, s := private(t, redisstore.Config{})
	rec := newRecorder()
	redisstore.SetBatchHook(s, rec.hook)
	ctx := context.Background()
	if _, err := s.Take(ctx, "warm-up", roomy, 0); err != nil {
		t.Fatal(err)
	}
	ds := make([]limiter.Decision, 1)
	if err := s.TakeAll(ctx, []limiter.Request{{Key: "warm-up", Limit: roomy}}, ds); err != nil { // caches multi.lua
		t.Fatal(err)
	}
	<-rec.seen
	<-rec.seen
	before := commandStats(t, rdb)
	release := rec.holdBatch(2)
	defer release()
	first := goTake(ctx, s, "user:0", roomy, 1)
	<-rec.seen // held
	var outs []<-chan outcome
	for i := 1; i <= 4; i++ {
		outs = append(outs, goTake(ctx, s, "user:"+strconv.Itoa(i), roomy, 1))
	}
	waitFor(t, "4 queued calls", func() bool { return redisstore.Queued(s) == 4 })
	tight := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 2, Period: time.Hour}
	all := make(chan error, 2)
	dsA, dsB := make([]limiter.Decision, 2), make([]limiter.Decision, 2)
	go func() {
		all <- s.TakeAll(ctx, []limiter.Request{{Key: "user:1", Name: "q", Limit: tight, Cost: 1}, {Key: "user:1", Limit: roomy, Cost: 2}}, dsA)
	}()
	go func() {
		all <- s.TakeAll(ctx, []limiter.Request{{Key: "user:2", Name: "q", Limit: tight, Cost: 3}, {Key: "user:2", Limit: roomy, Cost: 2}}, dsB)
	}()
	waitFor(t, "6 queued calls", func() bool { return redisstore.Queued(s) == 6 })
	release()
	for i, c := range append([]<-chan outcome{first}, outs...) {
		if o := <-c; o.err != nil || !o.d.Allowed {
			t.Fatalf("Take %d: %+v, %v", i, o.d, o.err)
		}
	}
	for range 2 {
		if err := <-all; err != nil && !errors.Is(err, limiter.ErrCostExceedsCapacity) {
			t.Fatal(err)
		}
	}
	if !limiter.AllAllowed(dsA) || dsA[1].Remaining != roomy.Burst-3 {
		t.Errorf("user:1's TakeAll: %+v; want both admitted after its Take", dsA)
	}
	if dsB[0].Allowed || !dsB[1].Allowed || dsB[1].Remaining != roomy.Burst-1 {
		t.Errorf("user:2's TakeAll: %+v; want the quota over capacity and the bucket as it stands", dsB)
	}
	if d, _ := s.Take(ctx, "user:2", roomy, 0); d.Remaining != roomy.Burst-1 {
		t.Errorf("user:2 debited by a refused TakeAll: %+v", d)
	}
	if got := rec.batchSizes(); fmt.Sprint(got[2:]) != "[1 6 1]" {
		t.Errorf("batch sizes %v, want [… 1 6 1]: the held call, the queue, the peek", got)
	}
	// The queued round trip: the four Takes in one script call, each
	// TakeAll in its own.
	if n := commandStats(t, rdb) - before; n != 1+3+1 {
		t.Errorf("%d script calls, want 5", n)
	}
}

// Environment of a helper process started by TestTakeAllAcrossProcesses.
const (
	envMultiHelper = "COSTGUARD_REDISSTORE_TAKEALL" // "standalone" or "cluster"
	envMultiOwner  = "COSTGUARD_REDISSTORE_TAKEALL_OWNER"
	multiLine      = "TAKEALL "
)

// The budgets of the cross-process test: taken in groups, so each budget's
// spending is the sum of the admitted groups naming it. A fixed clock
// (every process reads the same instant) means no refill.
var (
	crossX = limiter.Request{Name: "x", Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 300, Period: time.Hour}, Cost: 1}
	crossY = limiter.Request{Name: "y", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 400, Rate: 1, Period: time.Hour}, Cost: 1}
	crossZ = limiter.Request{Name: "", Limit: limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 350, Period: time.Hour}, Cost: 1}
	crossT = time.Date(2030, 1, 1, 0, 30, 0, 0, time.UTC)
)

// crossGroups are the groups of budgets a helper takes together; the last
// is a plain Take of crossZ's budget.
func crossGroups(owner string) [][]limiter.Request {
	x, y, z := crossX, crossY, crossZ
	x.Key, y.Key, z.Key = owner, owner, owner
	return [][]limiter.Request{{x, y}, {y, z}, {x, y, z}, {z}}
}

// TestTakeAllAcrossProcesses: 3 OS processes (this test binary, re-run)
// with 3 callers each take overlapping groups of one owner's budgets,
// plain Takes mixed in: every budget ends spent by exactly the admitted
// groups that name it, never beyond its capacity, on one server and on a
// Cluster.
func TestTakeAllAcrossProcesses(t *testing.T) {
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			var (
				addrs []string
				rdb   redis.UniversalClient
			)
			if mode == "cluster" {
				addrs, rdb = redistest.SharedCluster(t).Addrs(), redistest.SharedCluster(t).Client(t)
			} else {
				addrs, rdb = []string{redistest.SharedServer(t).Addr()}, redistest.SharedServer(t).Client(t)
			}
			prefix, owner := uniquePrefix(t), "owner-"+mode
			var (
				wg   sync.WaitGroup
				outs [procs]bytes.Buffer
				errs [procs]error
			)
			for i := range procs {
				cmd := exec.Command(os.Args[0], "-test.run=^TestTakeAllHelperProcess$", "-test.count=1", "-test.v")
				cmd.Env = append(os.Environ(),
					envMultiHelper+"="+mode,
					envAddrs+"="+strings.Join(addrs, ","),
					envPrefix+"="+prefix,
					envMultiOwner+"="+owner,
				)
				cmd.Stdout = &outs[i]
				cmd.Stderr = &outs[i]
				wg.Go(func() { errs[i] = cmd.Run() })
			}
			wg.Wait()
			var admitted [4]int64
			for i := range procs {
				if errs[i] != nil {
					t.Fatalf("helper %d: %v\n%s", i, errs[i], outs[i].String())
				}
				a, err := parseMultiHelper(outs[i].String())
				if err != nil {
					t.Fatalf("helper %d: %v\n%s", i, err, outs[i].String())
				}
				for g := range admitted {
					admitted[g] += a[g]
				}
			}
			s, err := redisstore.New(rdb, redisstore.Config{Prefix: prefix, Clock: limitertest.NewFakeClock(crossT), ExpiryMargin: testMargin})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			a := admitted
			spent := []int64{a[0] + a[2], a[0] + a[1] + a[2], a[1] + a[2] + a[3]}
			for i, r := range []limiter.Request{crossX, crossY, crossZ} {
				r.Key, r.Cost = owner, 0
				ds := make([]limiter.Decision, 1)
				if err := s.TakeAll(context.Background(), []limiter.Request{r}, ds); err != nil {
					t.Fatal(err)
				}
				if got := ds[0].Limit - ds[0].Remaining; got != spent[i] || got > ds[0].Limit {
					t.Errorf("budget %q spent %d; the admissions naming it: %d (capacity %d)", r.Name, got, spent[i], ds[0].Limit)
				}
			}
			t.Logf("%d processes: admitted per group %v; budget y spent %d of %d", procs, a, spent[1], crossY.Limit.Burst)
			if spent[1] != crossY.Limit.Burst {
				t.Errorf("budget y spent %d of %d: the callers never ran it dry", spent[1], crossY.Limit.Burst)
			}
		})
	}
}

func parseMultiHelper(out string) ([4]int64, error) {
	var a [4]int64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), multiLine)
		if !ok {
			continue
		}
		_, err := fmt.Sscanf(line, "%d %d %d %d", &a[0], &a[1], &a[2], &a[3])
		return a, err
	}
	return a, fmt.Errorf("no %q line in the output", multiLine)
}

// TestTakeAllHelperProcess is one process of TestTakeAllAcrossProcesses;
// it does nothing unless started by it.
func TestTakeAllHelperProcess(t *testing.T) {
	mode := os.Getenv(envMultiHelper)
	if mode == "" {
		t.Skip("helper process for TestTakeAllAcrossProcesses")
	}
	addrs := strings.Split(os.Getenv(envAddrs), ",")
	var rdb redis.UniversalClient
	if mode == "cluster" {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: addrs[0]})
	}
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{Prefix: os.Getenv(envPrefix), Clock: limitertest.NewFakeClock(crossT), ExpiryMargin: testMargin})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	owner := os.Getenv(envMultiOwner)
	groups := crossGroups(owner)
	var (
		mu       sync.Mutex
		admitted [4]int64
		wg       sync.WaitGroup
	)
	for w := range 3 {
		wg.Go(func() {
			for i := range 200 {
				g := (w + i) % len(groups)
				ok := false
				if g == 3 {
					d, err := s.Take(ctx, owner, crossZ.Limit, 1)
					if err != nil {
						t.Error(err)
						return
					}
					ok = d.Allowed
				} else {
					ds := make([]limiter.Decision, len(groups[g]))
					if err := s.TakeAll(ctx, groups[g], ds); err != nil {
						t.Error(err)
						return
					}
					ok = limiter.AllAllowed(ds)
				}
				if ok {
					mu.Lock()
					admitted[g]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("%s%d %d %d %d\n", multiLine, admitted[0], admitted[1], admitted[2], admitted[3])
}

// BenchmarkTakeAll measures, on one server, a TakeAll of three budgets of
// one owner (one script call) against three Takes of the same budgets
// (three round trips), one caller, coalescing off.
func BenchmarkTakeAll(b *testing.B) {
	rdb := redistest.SharedServer(b).Client(b)
	s := newStoreWith(b, rdb, nil, redisstore.Config{DisableCoalescing: true})
	ctx := context.Background()
	big := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1 << 30, Rate: 1 << 30, Period: time.Second}
	quota := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 1 << 40, Period: time.Hour}
	reqs := []limiter.Request{
		{Key: "owner", Limit: big, Cost: 1},
		{Key: "owner", Name: "quota", Limit: quota, Cost: 1},
		{Key: "owner", Name: "field", Limit: big, Cost: 1},
	}
	b.Run("take_all_3", func(b *testing.B) {
		ds := make([]limiter.Decision, 3)
		b.ReportAllocs()
		for b.Loop() {
			if err := s.TakeAll(ctx, reqs, ds); err != nil || !limiter.AllAllowed(ds) {
				b.Fatal(ds, err)
			}
		}
	})
	b.Run("take_3", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i, l := range []limiter.Limit{big, quota, big} {
				if _, err := s.Take(ctx, "owner"+strconv.Itoa(i), l, 1); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
