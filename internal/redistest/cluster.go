package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterSize is the number of masters in a Cluster.
const ClusterSize = 3

// manualFailoverWait is how long FailoverMaster waits for one CLUSTER
// FAILOVER before asking again: a little more than the 5 s after which a
// replica abandons a manual failover.
const manualFailoverWait = 6 * time.Second

// Cluster is a Redis Cluster of ClusterSize masters, each a Server, with the
// 16384 hash slots split between them by redis-cli --cluster create, and
// optionally one replica per master.
type Cluster struct {
	nodes    []*Server // the masters
	replicas []*Server // replicas[i] replicates nodes[i]; empty without replicas
}

// StartCluster starts a three-master Cluster for tb, waits until every node
// reports cluster_state:ok, and removes it when tb finishes.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	requireBinaries(tb, serverBinary, cliBinary)
	c, err := newCluster()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	})
	return c
}

// StartClusterWithReplicas starts a Cluster of three masters, each with one
// replica in sync, for tb, and removes it when tb finishes. FailoverMaster
// promotes a replica.
func StartClusterWithReplicas(tb testing.TB) *Cluster {
	tb.Helper()
	requireBinaries(tb, serverBinary, cliBinary)
	c, err := newClusterWithReplicas()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	})
	return c
}

// newClusterWithReplicas forms the three-master Cluster, then has one new
// node meet and replicate each master (CLUSTER MEET, CLUSTER REPLICATE), so
// that replicas[i] is known to replicate nodes[i].
func newClusterWithReplicas() (*Cluster, error) {
	c, err := newCluster()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	for _, m := range c.nodes {
		r, err := newServer(true)
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		c.replicas = append(c.replicas, r)
		if err := joinAsReplica(ctx, r, m); err != nil {
			return nil, errors.Join(err, c.Close())
		}
	}
	if err := c.waitOK(ctx); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// joinAsReplica has r meet the Cluster through master m and replicate m,
// and waits until r is in sync.
func joinAsReplica(ctx context.Context, r, m *Server) error {
	for _, n := range []*Server{m, r} { // see replicate
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr(), Protocol: 2, MaxRetries: -1})
		err := rdb.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err()
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("redistest: CONFIG SET on %s: %w", n.Addr(), err)
		}
	}
	mrdb := redis.NewClient(&redis.Options{Addr: m.Addr(), Protocol: 2, MaxRetries: -1})
	id, err := mrdb.ClusterMyID(ctx).Result()
	_ = mrdb.Close()
	if err != nil {
		return fmt.Errorf("redistest: CLUSTER MYID on %s: %w", m.Addr(), err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), Protocol: 2, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(m.Port())).Err(); err != nil {
		return fmt.Errorf("redistest: CLUSTER MEET from %s: %w", r.Addr(), err)
	}
	// CLUSTER REPLICATE needs r to know m's id, which the handshake brings.
	err = pollUntil(ctx, func() (bool, string) {
		err := rdb.ClusterReplicate(ctx, id).Err()
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if err != nil {
		return fmt.Errorf("redistest: CLUSTER REPLICATE %s on %s: %w", m.Addr(), r.Addr(), err)
	}
	return waitRole(ctx, r, m)
}

// FailoverMaster has master i's replica take over (CLUSTER FAILOVER with
// mode "", "FORCE" or "TAKEOVER") and waits until the two nodes have
// swapped roles, the former master replicates from the new one with its
// link up, and every node reports cluster_state:ok and knows the new
// master. Afterwards Nodes()[i] is the new master. The default mode is
// coordinated: the master stops its clients until the replica has caught
// up, so no acknowledged write is lost; FORCE and TAKEOVER skip that (and
// TAKEOVER the election too). The masters vote for one shard's failover
// only once per 2 × cluster-node-timeout (10 s here), so failing the same
// master over twice in a row needs TAKEOVER or a pause. It fails after
// 30 s, saying which step was missing. A Cluster client finds the new master through the MOVED
// answers of the old one (go-redis then reloads the slot map).
func (c *Cluster) FailoverMaster(ctx context.Context, i int, mode string) error {
	if i < 0 || i >= len(c.replicas) {
		return fmt.Errorf("redistest: no replica for master %d (the Cluster has %d)", i, len(c.replicas))
	}
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	oldMaster, newMaster := c.nodes[i], c.replicas[i]
	args := []any{"cluster", "failover"}
	if mode != "" {
		args = append(args, mode)
	}
	// A manual failover that does not complete within 5 s (the master's
	// pause, or an election a master declined) is dropped silently by
	// the replica: ask again, as an operator would.
	rdb := redis.NewClient(&redis.Options{Addr: newMaster.Addr(), Protocol: 2, MaxRetries: -1})
	defer rdb.Close()
	var err error
	for attempt := 1; ; attempt++ {
		if err = rdb.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER FAILOVER %s on %s: %w", mode, newMaster.Addr(), err)
		}
		actx, cancel := context.WithTimeout(ctx, manualFailoverWait)
		err = waitRole(actx, newMaster, nil)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (after %d CLUSTER FAILOVER %s)\n%s", err, attempt, mode, newMaster.log())
		}
	}
	if err := waitRole(ctx, oldMaster, newMaster); err != nil {
		return err
	}
	c.nodes[i], c.replicas[i] = newMaster, oldMaster
	return c.waitOK(ctx)
}

func newCluster() (*Cluster, error) {
	c := &Cluster{}
	for range ClusterSize {
		s, err := newServer(true)
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		c.nodes = append(c.nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.create(ctx); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	if err := c.waitOK(ctx); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// create assigns the slots and joins the nodes with redis-cli.
func (c *Cluster) create(ctx context.Context) error {
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cliBinary, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s", err, out)
	}
	return nil
}

// waitOK polls CLUSTER INFO on every node until each reports a healthy
// cluster with all nodes known and all slots assigned, so a client can start
// from any node and see the final slot map.
func (c *Cluster) waitOK(ctx context.Context) error {
	want := []string{
		"cluster_state:ok",
		fmt.Sprintf("cluster_known_nodes:%d", len(c.nodes)+len(c.replicas)),
		"cluster_slots_assigned:16384",
		"cluster_slots_ok:16384",
	}
	for _, n := range c.all() {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr(), Protocol: 2, MaxRetries: -1})
		err := pollUntil(ctx, func() (bool, string) {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err != nil {
				return false, err.Error()
			}
			for _, w := range want {
				if !strings.Contains(info, w+"\r\n") {
					return false, info
				}
			}
			return true, ""
		})
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("redistest: cluster node %s not ready: %w", n.Addr(), err)
		}
	}
	return nil
}

// pollUntil calls check every pollInterval until it succeeds or ctx ends;
// the error then carries check's last explanation.
func pollUntil(ctx context.Context, check func() (ok bool, why string)) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		ok, why := check()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last state: %s", ctx.Err(), why)
		case <-tick.C:
		}
	}
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// all returns every node, masters first.
func (c *Cluster) all() []*Server {
	return append(append([]*Server(nil), c.nodes...), c.replicas...)
}

// Nodes returns the masters. Do not Stop or Restart them: a restarted node
// comes back empty and outside the Cluster.
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// Replicas returns the replicas, Replicas()[i] that of Nodes()[i]; none
// unless the Cluster was started by StartClusterWithReplicas.
func (c *Cluster) Replicas() []*Server { return append([]*Server(nil), c.replicas...) }

// Client returns a Cluster client seeded with every node's address, closed
// when tb finishes.
func (c *Cluster) Client(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.AllAddrs()})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// AllAddrs returns every node's address, masters first: seeds for a
// client that must survive the loss of a master.
func (c *Cluster) AllAddrs() []string {
	var addrs []string
	for _, n := range c.all() {
		addrs = append(addrs, n.Addr())
	}
	return addrs
}

// Close stops every node and removes their directories.
func (c *Cluster) Close() error {
	var err error
	for _, n := range c.all() {
		err = errors.Join(err, n.Close())
	}
	return err
}
