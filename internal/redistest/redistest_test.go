package redistest

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/tailbuf"
	"github.com/costguard/costguard/internal/testenv"
)

func TestMain(m *testing.M) { Main(m) }

// The tests that wait for servers to start, stop or form a Cluster call
// t.Parallel: each owns its processes and ports, and the shared Cluster is
// started once, under a lock.

// alive reports whether pid names a process that has not been reaped.
func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}

func TestServerStartsAndIsRemoved(t *testing.T) {
	var pid int
	var dir string
	t.Run("use", func(t *testing.T) {
		srv := StartServer(t)
		pid, dir = srv.Pid(), srv.Dir()
		if pid == 0 {
			t.Fatal("Pid() = 0 for a running server")
		}
		ctx := context.Background()
		rdb := srv.Client(t)
		if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		cfg, err := rdb.ConfigGet(ctx, "save").Result()
		if err != nil {
			t.Fatal(err)
		}
		if cfg["save"] != "" {
			t.Errorf("save = %q, want persistence off", cfg["save"])
		}
		cfg, err = rdb.ConfigGet(ctx, "appendonly").Result()
		if err != nil {
			t.Fatal(err)
		}
		if cfg["appendonly"] != "no" {
			t.Errorf("appendonly = %q, want no", cfg["appendonly"])
		}
	})
	if pid == 0 {
		return // the subtest was skipped: no redis-server
	}
	if alive(pid) {
		t.Errorf("redis-server %d still running after cleanup", pid)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir %s still present after cleanup (stat err %v)", dir, err)
	}
}

func TestServerStopRestart(t *testing.T) {
	t.Parallel()
	srv := StartServer(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	oldPid := srv.Pid()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if srv.Pid() != 0 || alive(oldPid) {
		t.Fatalf("server %d still running after Stop", oldPid)
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded against a stopped server")
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if srv.Pid() == 0 || srv.Pid() == oldPid {
		t.Fatalf("Restart: pid %d (old %d)", srv.Pid(), oldPid)
	}
	// Same address, empty data set: the existing client reconnects.
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: err %v, want redis.Nil", err)
	}
}

func TestClusterCoversAllSlots(t *testing.T) {
	t.Parallel()
	cl := SharedCluster(t)
	if got := len(cl.Addrs()); got != ClusterSize {
		t.Fatalf("%d nodes, want %d", got, ClusterSize)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := cl.Client(t).(*redis.ClusterClient)
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	covered := make([]bool, 16384)
	masters := map[string]bool{}
	for _, s := range slots {
		if len(s.Nodes) != 1 {
			t.Errorf("slots %d-%d: %d nodes, want 1 master and no replicas", s.Start, s.End, len(s.Nodes))
		}
		masters[s.Nodes[0].Addr] = true
		for i := s.Start; i <= s.End; i++ {
			if covered[i] {
				t.Fatalf("slot %d assigned twice", i)
			}
			covered[i] = true
		}
	}
	for i, ok := range covered {
		if !ok {
			t.Fatalf("slot %d unassigned", i)
		}
	}
	if len(masters) != ClusterSize {
		t.Errorf("masters %v, want %d", masters, ClusterSize)
	}
	for _, a := range cl.Addrs() {
		if !masters[a] {
			t.Errorf("node %s owns no slots", a)
		}
	}
	// A write through the Cluster client lands wherever its slot lives.
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := rdb.Set(ctx, t.Name()+k, k, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
}

func TestSharedServerIsShared(t *testing.T) {
	a, b := SharedServer(t), SharedServer(t)
	if a != b {
		t.Fatal("SharedServer returned two servers")
	}
	if err := a.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestStartClusterIsRemoved(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private Cluster (seconds)")
	}
	t.Parallel()
	var pids []int
	var dirs []string
	t.Run("use", func(t *testing.T) {
		cl := StartCluster(t)
		for _, n := range cl.Nodes() {
			pids = append(pids, n.Pid())
			dirs = append(dirs, n.Dir())
		}
		info, err := cl.Client(t).ClusterInfo(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			t.Fatalf("CLUSTER INFO:\n%s", info)
		}
	})
	for i, pid := range pids {
		if alive(pid) {
			t.Errorf("cluster node %d still running after cleanup", pid)
		}
		if _, err := os.Stat(dirs[i]); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dir %s still present after cleanup", dirs[i])
		}
	}
}

func TestTailBufferIsBounded(t *testing.T) {
	b := &tailbuf.Buffer{Max: 8}
	for _, s := range []string{"0123", "4567", "89ab"} {
		if _, err := b.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := b.String(), "456789ab"; got != want {
		t.Fatalf("tail = %q, want %q", got, want)
	}
}

func TestSentinelFailover(t *testing.T) {
	testenv.Long(t)
	t0 := time.Now()
	s := StartSentinel(t)
	t.Logf("start took %v", time.Since(t0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rdb := s.Client(t)
	if err := rdb.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	oldPrimary := s.Primary()
	start := time.Now()
	if err := s.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("failover took %v", time.Since(start))
	if s.Primary() == oldPrimary || s.Replica() != oldPrimary {
		t.Fatal("Primary and Replica did not swap")
	}
	// The client follows the switch: a write goes to the new primary.
	if err := rdb.Set(ctx, "k", "after", 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Primary().Client(t).Get(ctx, "k").Result()
	if err != nil || got != "after" {
		t.Fatalf("new primary has k = %q, %v; want after", got, err)
	}
	// And back: the old primary is a healthy replica again.
	if err := s.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Primary() != oldPrimary {
		t.Fatal("second failover did not restore the first primary")
	}
}

func TestClusterWithReplicasFailover(t *testing.T) {
	testenv.Long(t)
	t0 := time.Now()
	cl := StartClusterWithReplicas(t)
	t.Logf("start took %v", time.Since(t0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if n := len(cl.Replicas()); n != ClusterSize {
		t.Fatalf("%d replicas, want %d", n, ClusterSize)
	}
	rdb := cl.Client(t)
	if err := rdb.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Fail over the master of k's slot, coordinated, then another master,
	// forced: the masters vote for one shard's failover only once per
	// 2 × cluster-node-timeout.
	k := masterIndex(ctx, t, cl, rdb.(*redis.ClusterClient), "k")
	for j, mode := range []string{"", "FORCE"} {
		i := (k + j) % ClusterSize
		old := cl.Nodes()[i]
		start := time.Now()
		if err := cl.FailoverMaster(ctx, i, mode); err != nil {
			t.Fatal(err)
		}
		t.Logf("CLUSTER FAILOVER %s took %v", mode, time.Since(start))
		if cl.Nodes()[i] == old || cl.Replicas()[i] != old {
			t.Fatal("master and replica did not swap")
		}
		if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "before" {
			t.Fatalf("after failover k = %q, %v; want before", got, err)
		}
	}
}

// masterIndex returns the index in cl.Nodes() of the master holding key.
func masterIndex(ctx context.Context, t *testing.T, cl *Cluster, rdb *redis.ClusterClient, key string) int {
	t.Helper()
	m, err := rdb.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range cl.Nodes() {
		if n.Addr() == m.Options().Addr {
			return i
		}
	}
	t.Fatalf("no master %s", m.Options().Addr)
	return -1
}
