package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	sentinelBinary = "redis-sentinel"
	// SentinelMasterName begins the name the sentinels of a Sentinel setup
	// monitor its primary by (Sentinel.MasterName); a random suffix keeps
	// setups of tests running at once apart: a Sentinel that learns of a
	// master of the same name through a reused port would follow it.
	SentinelMasterName = "costguard"
	// SentinelQuorum of the three sentinels must agree that the primary is
	// down before an automatic failover.
	SentinelQuorum = 2
	sentinelCount  = 3
	// sentinelDownAfter is how long the primary may go unanswered before a
	// sentinel calls it down (Redis's default is 30 s: too slow for tests).
	sentinelDownAfter = time.Second
	// failoverTimeout bounds Failover and FailoverMaster.
	failoverTimeout = 30 * time.Second
)

// Sentinel is a primary, one replica and three Sentinels monitoring them
// under MasterName, each process owned by a test. Its methods are
// safe for concurrent use, except Failover, which must not run twice at once.
type Sentinel struct {
	name      string    // the master name
	data      []*Server // the two data nodes; their roles swap on Failover
	sentinels []*sentinelProc
}

// sentinelProc is one Sentinel process, with its config file in dir (a
// Sentinel rewrites its file as it learns the topology).
type sentinelProc struct {
	port int
	dir  string
	proc *process
}

func (p *sentinelProc) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// StartSentinel starts a primary, a replica of it and three Sentinels for
// tb, waits until the replica is in sync and every Sentinel knows the
// replica and the two other Sentinels (so SENTINEL FAILOVER can succeed),
// and removes them all when tb finishes. It needs redis-server, and
// redis-sentinel when on PATH (else it runs redis-server --sentinel, the
// same program).
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	requireBinaries(tb, serverBinary)
	s, err := newSentinel()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

func newSentinel() (*Sentinel, error) {
	s := &Sentinel{name: SentinelMasterName + "-" + strconv.FormatUint(rand.Uint64(), 36)}
	for range 2 {
		n, err := newServer(false)
		if err != nil {
			return nil, errors.Join(err, s.Close())
		}
		s.data = append(s.data, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := replicate(ctx, s.data[1], s.data[0]); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	for range sentinelCount {
		p, err := startSentinelProc(s.name, s.data[0].Port())
		if err != nil {
			return nil, errors.Join(err, s.Close())
		}
		s.sentinels = append(s.sentinels, p)
	}
	if err := s.waitDiscovered(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// replicate makes replica a replica of primary and waits until the link is
// up and the initial sync is done.
func replicate(ctx context.Context, replica, primary *Server) error {
	// A primary waits 5 s (repl-diskless-sync-delay) for more replicas
	// before it starts a full sync; either node may be the primary later.
	for _, n := range []*Server{primary, replica} {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr(), Protocol: 2, MaxRetries: -1})
		err := rdb.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err()
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("redistest: CONFIG SET on %s: %w", n.Addr(), err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: replica.Addr(), Protocol: 2, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.SlaveOf(ctx, "127.0.0.1", strconv.Itoa(primary.Port())).Err(); err != nil {
		return fmt.Errorf("redistest: REPLICAOF on %s: %w", replica.Addr(), err)
	}
	err := pollUntil(ctx, func() (bool, string) {
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		f := infoFields(info)
		return f["role"] == "slave" && f["master_port"] == strconv.Itoa(primary.Port()) &&
			f["master_link_status"] == "up" && f["master_sync_in_progress"] == "0", info
	})
	if err != nil {
		return fmt.Errorf("redistest: replica %s of %s not in sync: %w", replica.Addr(), primary.Addr(), err)
	}
	return nil
}

// startSentinelProc starts one Sentinel monitoring the primary on
// primaryPort, on a fresh port, retrying when the port was taken.
func startSentinelProc(name string, primaryPort int) (*sentinelProc, error) {
	var lastErr error
	for range startAttempts {
		port, err := freePort(false)
		if err != nil {
			lastErr = err
			continue
		}
		dir, err := os.MkdirTemp("", "redistest-sentinel-"+strconv.Itoa(port)+"-")
		if err != nil {
			return nil, fmt.Errorf("redistest: temp dir: %w", err)
		}
		p := &sentinelProc{port: port, dir: dir}
		if lastErr = p.start(name, primaryPort); lastErr != nil {
			_ = os.RemoveAll(dir)
			continue
		}
		return p, nil
	}
	return nil, fmt.Errorf("redistest: no sentinel started after %d attempts: %w", startAttempts, lastErr)
}

func (p *sentinelProc) start(name string, primaryPort int) error {
	conf := strings.Join([]string{
		"port " + strconv.Itoa(p.port),
		"bind 127.0.0.1",
		"daemonize no",
		`logfile ""`,
		"dir " + strconv.Quote(p.dir),
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", name, primaryPort, SentinelQuorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, sentinelDownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", name, (10 * time.Second).Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", name),
		"",
	}, "\n")
	file := filepath.Join(p.dir, "sentinel.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("redistest: write %s: %w", file, err)
	}
	bin, args := sentinelBinary, []string{file}
	if _, err := exec.LookPath(sentinelBinary); err != nil {
		bin, args = serverBinary, []string{file, "--sentinel"}
	}
	proc, err := startProcess(p.dir, p.addr(), bin, args...)
	if err != nil {
		return err
	}
	p.proc = proc
	return nil
}

// waitDiscovered polls every Sentinel until it reports the primary, knows
// the replica as healthy and has heard from the other Sentinels.
func (s *Sentinel) waitDiscovered(ctx context.Context) error {
	primary := s.data[0]
	for _, p := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: p.addr(), Protocol: 2, MaxRetries: -1})
		err := pollUntil(ctx, func() (bool, string) {
			m, err := sc.Master(ctx, s.name).Result()
			if err != nil {
				return false, err.Error()
			}
			if m["port"] != strconv.Itoa(primary.Port()) || m["num-slaves"] != "1" ||
				m["num-other-sentinels"] != strconv.Itoa(sentinelCount-1) || strings.Contains(m["flags"], "down") {
				return false, fmt.Sprint(m)
			}
			reps, err := sc.Replicas(ctx, s.name).Result()
			if err != nil {
				return false, err.Error()
			}
			if len(reps) != 1 || reps[0]["flags"] != "slave" || reps[0]["master-link-status"] != "ok" {
				return false, fmt.Sprint(reps)
			}
			return true, ""
		})
		_ = sc.Close()
		if err != nil {
			return fmt.Errorf("redistest: sentinel %s has not discovered the replica and the other sentinels: %w\n%s",
				p.addr(), err, p.proc.log.String())
		}
	}
	return nil
}

// MasterName returns the name the Sentinels monitor the primary by.
func (s *Sentinel) MasterName() string { return s.name }

// SentinelAddrs returns the three Sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, p := range s.sentinels {
		addrs[i] = p.addr()
	}
	return addrs
}

// Primary returns the data node that is the primary now, and Replica the
// other one. Both change on Failover. Do not Stop or Restart them.
func (s *Sentinel) Primary() *Server { return s.data[0] }

// Replica returns the data node that is the replica now.
func (s *Sentinel) Replica() *Server { return s.data[1] }

// FailoverOptions returns options for a go-redis Sentinel-backed client of
// the primary; callers may adjust them before redis.NewFailoverClient.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: s.name, SentinelAddrs: s.SentinelAddrs()}
}

// Client returns a Sentinel-backed client of the primary (a *redis.Client
// from redis.NewFailoverClient), closed when tb finishes.
func (s *Sentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	rdb := redis.NewFailoverClient(s.FailoverOptions())
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Failover asks a Sentinel for a failover (SENTINEL FAILOVER, which needs
// no agreement and no failure) and waits until every Sentinel names the
// former replica as primary, the former primary replicates from it with
// its link up, and the new primary accepts writes. Afterwards Primary and
// Replica have swapped. It fails after 30 s, saying which step was
// missing.
func (s *Sentinel) Failover(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	oldPrimary, newPrimary := s.data[0], s.data[1]
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.sentinels[0].addr(), Protocol: 2, MaxRetries: -1})
	// A Sentinel refuses (NOGOODSLAVE) until it has seen the replica in
	// the primary's INFO, which it reads every 10 s: shortly after a
	// previous failover it may not have yet.
	var err error
	if pollErr := pollUntil(ctx, func() (bool, string) {
		err = sc.Failover(ctx, s.name).Err()
		if err != nil && strings.HasPrefix(err.Error(), "NOGOODSLAVE") {
			return false, err.Error()
		}
		return true, ""
	}); pollErr != nil {
		err = pollErr
	}
	_ = sc.Close()
	if err != nil {
		return fmt.Errorf("redistest: SENTINEL FAILOVER via %s: %w", s.sentinels[0].addr(), err)
	}
	want := strconv.Itoa(newPrimary.Port())
	for _, p := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: p.addr(), Protocol: 2, MaxRetries: -1})
		err := pollUntil(ctx, func() (bool, string) {
			addr, err := sc.GetMasterAddrByName(ctx, s.name).Result()
			if err != nil {
				return false, err.Error()
			}
			return len(addr) == 2 && addr[1] == want, fmt.Sprint(addr)
		})
		_ = sc.Close()
		if err != nil {
			return fmt.Errorf("redistest: sentinel %s still names another primary than %s: %w",
				p.addr(), newPrimary.Addr(), err)
		}
	}
	if err := waitRole(ctx, newPrimary, nil); err != nil {
		return err
	}
	// The Sentinels turn a former primary that is still up into a replica
	// only once its role report has been stale for about 8 s; until then
	// it accepts writes, but the clients have moved (they follow the
	// +switch-master the Sentinels published above). Failover sends the
	// REPLICAOF they would send, at once, so tests do not wait.
	old := redis.NewClient(&redis.Options{Addr: oldPrimary.Addr(), Protocol: 2, MaxRetries: -1})
	err = old.SlaveOf(ctx, "127.0.0.1", want).Err()
	_ = old.Close()
	if err != nil {
		return fmt.Errorf("redistest: REPLICAOF on the former primary %s: %w", oldPrimary.Addr(), err)
	}
	if err := waitRole(ctx, oldPrimary, newPrimary); err != nil {
		return err
	}
	s.data[0], s.data[1] = newPrimary, oldPrimary
	return nil
}

// waitRole polls n until it is a master (primary nil) or a replica of
// primary with its link up.
func waitRole(ctx context.Context, n, primary *Server) error {
	rdb := redis.NewClient(&redis.Options{Addr: n.Addr(), Protocol: 2, MaxRetries: -1})
	defer rdb.Close()
	err := pollUntil(ctx, func() (bool, string) {
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		f := infoFields(info)
		if primary == nil {
			return f["role"] == "master", info
		}
		return f["role"] == "slave" && f["master_port"] == strconv.Itoa(primary.Port()) &&
			f["master_link_status"] == "up", info
	})
	if err != nil {
		role := "primary"
		if primary != nil {
			role = "a replica of " + primary.Addr()
		}
		return fmt.Errorf("redistest: %s did not become %s: %w", n.Addr(), role, err)
	}
	return nil
}

// infoFields parses INFO output into its key:value fields.
func infoFields(info string) map[string]string {
	f := make(map[string]string)
	for line := range strings.SplitSeq(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			f[k] = v
		}
	}
	return f
}

// Close stops the Sentinels and the data nodes and removes their
// directories.
func (s *Sentinel) Close() error {
	var err error
	for _, p := range s.sentinels {
		if p.proc != nil {
			err = errors.Join(err, killAndWait(p.proc))
		}
		if rmErr := os.RemoveAll(p.dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("redistest: remove %s: %w", p.dir, rmErr))
		}
	}
	for _, n := range s.data {
		err = errors.Join(err, n.Close())
	}
	return err
}
