package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
)

// lossWatch counts a store's data-loss reports and records when the first
// came.
type lossWatch struct {
	n     atomic.Int64
	first atomic.Int64 // UnixNano of the first report
}

func watchLoss(t *testing.T, s *redisstore.Store) *lossWatch {
	t.Helper()
	w := &lossWatch{}
	t.Cleanup(s.OnDataLoss(func() {
		if w.n.Add(1) == 1 {
			w.first.Store(time.Now().UnixNano())
		}
	}))
	return w
}

// waitLoss polls until w has heard of a loss, at most within, and returns
// how long after since it came.
func waitLoss(t *testing.T, w *lossWatch, since time.Time, within time.Duration) time.Duration {
	t.Helper()
	deadline := time.Now().Add(within)
	for w.n.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no data-loss report within %v", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Unix(0, w.first.Load()).Sub(since)
}

// quiet probes each store twice, as its probe loop does each interval (a
// baseline and a comparison), so the baseline is known before the test
// breaks something, and checks that nothing was reported lost.
func quiet(t *testing.T, stores []*redisstore.Store, watches []*lossWatch) {
	t.Helper()
	for _, s := range stores {
		for range 2 {
			if err := s.CheckDataLoss(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, w := range watches {
		if n := w.n.Load(); n != 0 {
			t.Fatalf("store %d: %d data-loss reports before anything was lost", i, n)
		}
	}
}

// Two stores ("processes") on one server hear of a restart without
// persistence, of FLUSHALL and of FLUSHDB, each within the default
// interval plus a round trip of the server answering again. Each case has
// a server of its own, so the cases run in parallel, and beside the other
// parallel tests.
func TestOnDataLossStandalone(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		break_ func(t *testing.T, srv *redistest.Server, rdb redis.UniversalClient)
	}{
		{"restart without persistence", func(t *testing.T, srv *redistest.Server, _ redis.UniversalClient) {
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
		}},
		{"FLUSHALL", func(t *testing.T, _ *redistest.Server, rdb redis.UniversalClient) {
			if err := rdb.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"FLUSHDB", func(t *testing.T, _ *redistest.Server, rdb redis.UniversalClient) {
			if err := rdb.FlushDB(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			prefix := uniquePrefix(t)
			var (
				stores  []*redisstore.Store
				watches []*lossWatch
			)
			for range 2 {
				s, err := redisstore.New(srv.Client(t).(*redis.Client), redisstore.Config{Prefix: prefix})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				stores, watches = append(stores, s), append(watches, watchLoss(t, s))
			}
			quiet(t, stores, watches)
			start := time.Now()
			tc.break_(t, srv, srv.Client(t))
			broken := time.Now() // a restart has completed: the new server answers
			for i, w := range watches {
				lat := waitLoss(t, w, broken, time.Second)
				t.Logf("store %d heard of the loss %v after the %s completed (%v after it began; interval %v)",
					i, lat.Round(time.Millisecond), tc.name, (lat + broken.Sub(start)).Round(time.Millisecond), redisstore.DefaultDataLossInterval)
			}
		})
	}
}

// On a Cluster, a FLUSHALL of one master is heard of: its epoch key lives
// in one of that master's own slots. The Cluster is the test's own, so it
// runs in parallel with the other parallel tests.
func TestOnDataLossCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t) // a private one: the test flushes a master
	s, err := redisstore.New(cl.Client(t).(*redis.ClusterClient), redisstore.Config{Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	w := watchLoss(t, s)
	quiet(t, []*redisstore.Store{s}, []*lossWatch{w})
	for i, node := range cl.Nodes() {
		rdb := redis.NewClient(&redis.Options{Addr: node.Addr()})
		defer rdb.Close()
		if n, err := rdb.DBSize(context.Background()).Result(); err != nil || n != 1 {
			t.Fatalf("node %d holds %d keys (%v), want its epoch key", i, n, err)
		}
	}
	node := cl.Nodes()[1]
	rdb := redis.NewClient(&redis.Options{Addr: node.Addr()})
	defer rdb.Close()
	start := time.Now()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	lat := waitLoss(t, w, start, time.Second)
	t.Logf("heard of the flushed master %v after the FLUSHALL", lat.Round(time.Millisecond))
}

// The probe's cost: one round trip per node per round, of INFO server, SET
// NX and GET; decisions send nothing else.
func TestDataLossProbeCost(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t).(*redis.Client)
	s, err := redisstore.New(rdb, redisstore.Config{Prefix: uniquePrefix(t), DisableCoalescing: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	tick := make(chan time.Time)
	rounds := make(chan []string, 1)
	redisstore.SetDataLossHooks(s, tick, func(lost []string) { rounds <- lost })
	defer s.OnDataLoss(func() {})()
	<-rounds // the first round, at once: the baseline

	ctx := context.Background()
	before := commandCalls(t, rdb)
	const nRounds, nDecisions = 10, 100
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1000, Rate: 1000, Period: time.Second}
	for i := range nDecisions {
		if _, err := s.Take(ctx, "user", limit, 1); err != nil {
			t.Fatal(err)
		}
		if i%(nDecisions/nRounds) == 0 {
			tick <- time.Time{}
			if lost := <-rounds; lost != nil {
				t.Fatalf("round lost %q", lost)
			}
		}
	}
	after := commandCalls(t, rdb)
	delta := func(cmd string) int64 { return after[cmd] - before[cmd] }
	// commandstats counts the commands scripts call too: TIME, then a
	// bucket's GET and SET, one each per decision here (every take leaves
	// the bucket short of full). The first EVALSHA met NOSCRIPT and was
	// followed by one EVAL.
	got := map[string]int64{
		"info":         delta("info") - 1, // commandCalls's own INFO commandstats
		"set":          delta("set") - nDecisions,
		"get":          delta("get") - nDecisions,
		"evalsha+eval": delta("evalsha") + delta("eval"),
	}
	want := map[string]int64{"info": nRounds, "set": nRounds, "get": nRounds, "evalsha+eval": nDecisions + 1}
	for cmd, n := range want {
		if got[cmd] != n {
			t.Fatalf("commands sent: %v, want %v", got, want)
		}
	}
	t.Logf("%d decisions and %d probe rounds sent %v: per round per node 1 round trip of 3 commands; per decision 1 script call, nothing added", nDecisions, nRounds, got)
}

// commandCalls reads INFO commandstats: calls per command.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		calls[name] = v
	}
	return calls
}
