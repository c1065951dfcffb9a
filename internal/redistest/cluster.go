package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterSize is the number of masters in a Cluster (no replicas).
const ClusterSize = 3

// Cluster is a Redis Cluster of ClusterSize masters, each a Server, with the
// 16384 hash slots split between them by redis-cli --cluster create.
type Cluster struct {
	nodes []*Server
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
		fmt.Sprintf("cluster_known_nodes:%d", ClusterSize),
		"cluster_slots_assigned:16384",
		"cluster_slots_ok:16384",
	}
	for _, n := range c.nodes {
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

// Nodes returns the masters. Do not Stop or Restart them: a restarted node
// comes back empty and outside the Cluster.
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// Client returns a Cluster client seeded with every master's address, closed
// when tb finishes.
func (c *Cluster) Client(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Close stops every node and removes their directories.
func (c *Cluster) Close() error {
	var err error
	for _, n := range c.nodes {
		err = errors.Join(err, n.Close())
	}
	return err
}
