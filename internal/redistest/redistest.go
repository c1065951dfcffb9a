// Package redistest starts throwaway redis-server processes for tests: one
// standalone server or a three-master Redis Cluster, on free loopback ports,
// with persistence off and a private temporary directory. Everything it
// starts is killed, waited for and deleted when the test (or the test
// binary) is done. Tests never touch a Redis they did not start.
//
// # Requirements
//
// redis-server (and, for a Cluster, redis-cli) must be on PATH. When they are
// missing, every helper calls t.Skip with a message saying what to install;
// when the environment has CI=true it calls t.Fatal instead, so CI can never
// pass by skipping.
//
// # Private servers
//
//	srv := redistest.StartServer(t)      // killed and removed by t.Cleanup
//	rdb := srv.Client(t)                 // redis.UniversalClient, closed by t.Cleanup
//	srv.Stop()                           // kill it (connections start failing)
//	srv.Restart()                        // same address, empty data set
//
//	cl := redistest.StartCluster(t)      // three masters, all 16384 slots, cluster_state:ok
//	rdb := cl.Client(t)                  // *redis.ClusterClient as redis.UniversalClient
//
// # Failover
//
//	s := redistest.StartSentinel(t)      // a primary, its replica, three Sentinels
//	rdb := s.Client(t)                   // redis.NewFailoverClient over the Sentinels
//	err := s.Failover(ctx)               // SENTINEL FAILOVER, then wait for the new topology
//
//	cl := redistest.StartClusterWithReplicas(t) // three masters with one replica each
//	err := cl.FailoverMaster(ctx, 0, "")        // CLUSTER FAILOVER on master 0's replica
//
// A Sentinel runs as redis-sentinel when it is on PATH, else as
// redis-server --sentinel (the same program).
//
// # Shared servers
//
// A Cluster takes a few seconds to form, so a package can start one standalone
// server and one Cluster lazily, on first use, and share them among its tests.
// Shared servers require the package's TestMain to call Main, which removes
// them after the last test:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		rdb := redistest.SharedServer(t).Client(t)
//		crdb := redistest.SharedCluster(t).Client(t)
//		...
//	}
//
// Tests sharing a server must use distinct keys (for example a key prefix
// derived from t.Name()) and must not Stop or Restart it.
//
// On Linux the servers also receive SIGKILL if the test binary dies without
// cleaning up (for example on a -timeout panic).
package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/tailbuf"
	"github.com/costguard/costguard/internal/testenv"
	"github.com/redis/go-redis/v9"
)

const (
	serverBinary = "redis-server"
	cliBinary    = "redis-cli"

	// Ports are drawn below Linux's default ephemeral range (32768+), so the
	// kernel never hands them to an outgoing connection, and so that the
	// Cluster bus port (port + 10000) stays below it as well.
	minPort        = 15000
	maxPort        = 22000
	clusterBusGap  = 10000
	startAttempts  = 8
	startTimeout   = 15 * time.Second
	clusterTimeout = 30 * time.Second
	pollInterval   = 20 * time.Millisecond
	logTailBytes   = 16 << 10
)

// ErrNotInstalled reports that redis-server or redis-cli is not on PATH.
var ErrNotInstalled = errors.New("redistest: redis-server/redis-cli not found on PATH (install the redis-server and redis-tools packages)")

// requireBinaries skips (or, under CI=true, fails) tb when a binary is missing.
func requireBinaries(tb testing.TB, names ...string) {
	tb.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			testenv.Missing(tb, fmt.Sprintf("%v: %s missing: a Redis test", ErrNotInstalled, name))
		}
	}
}

// Server is one redis-server process owned by a test. Its methods are safe
// for concurrent use.
type Server struct {
	port    int
	dir     string
	cluster bool

	mu   sync.Mutex
	proc *process // nil while stopped
}

// process is one running redis-server and what it printed.
type process struct {
	cmd    *exec.Cmd
	log    *tailbuf.Buffer
	exited chan struct{} // closed once cmd.Wait returns
}

// StartServer starts a standalone redis-server for tb and removes it when tb
// and its subtests finish.
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	requireBinaries(tb, serverBinary)
	s, err := newServer(false)
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

// newServer starts a server on a fresh port, retrying with another port when
// the chosen one was taken between probing and binding.
func newServer(cluster bool) (*Server, error) {
	var lastErr error
	for range startAttempts {
		port, err := freePort(cluster)
		if err != nil {
			lastErr = err
			continue
		}
		dir, err := os.MkdirTemp("", "redistest-"+strconv.Itoa(port)+"-")
		if err != nil {
			return nil, fmt.Errorf("redistest: temp dir: %w", err)
		}
		s := &Server{port: port, dir: dir, cluster: cluster}
		if err := s.start(); err != nil {
			lastErr = err
			_ = os.RemoveAll(dir)
			continue
		}
		return s, nil
	}
	return nil, fmt.Errorf("redistest: no server started after %d attempts: %w", startAttempts, lastErr)
}

// Addr returns the server's "127.0.0.1:port" address.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Pid returns the process id of the running server, or 0 while it is stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// log returns the tail of what the running server printed ("" while it is
// stopped), for error messages.
func (s *Server) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return ""
	}
	return s.proc.log.String()
}

// Dir returns the server's private working directory.
func (s *Server) Dir() string { return s.dir }

// Client returns a client connected to the server, closed when tb finishes.
func (s *Server) Client(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Stop kills the server and waits for it to exit; its data is lost (nothing
// is persisted). Stopping a stopped server is a no-op.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

// Restart stops the server if it is running and starts a new, empty one on
// the same address and directory.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		return err
	}
	return s.startLocked()
}

// Close stops the server and removes its directory.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.stopLocked()
	if rmErr := os.RemoveAll(s.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("redistest: remove %s: %w", s.dir, rmErr))
	}
	return err
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked()
}

func (s *Server) startLocked() error {
	if s.proc != nil {
		return fmt.Errorf("redistest: server %s already running", s.Addr())
	}
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--logfile", "",
		"--daemonize", "no",
	}
	args = append(args, debugArgs()...)
	if s.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		)
	}
	p, err := startProcess(s.dir, s.Addr(), serverBinary, args...)
	if err != nil {
		return err
	}
	s.proc = p
	return nil
}

// startProcess runs bin with args in dir, keeping the tail of what it
// prints, and waits until it answers at addr; a process that never does is
// killed.
func startProcess(dir, addr, bin string, args ...string) (*process, error) {
	log := &tailbuf.Buffer{Max: logTailBytes}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redistest: start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	if err := waitReady(p, addr); err != nil {
		return nil, errors.Join(err, killAndWait(p))
	}
	return p, nil
}

func (s *Server) stopLocked() error {
	if s.proc == nil {
		return nil
	}
	err := killAndWait(s.proc)
	s.proc = nil
	return err
}

// killAndWait sends SIGKILL (no shutdown work is needed: nothing is
// persisted) and waits until the process has been reaped.
func killAndWait(p *process) error {
	err := p.cmd.Process.Kill()
	<-p.exited
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: kill redis-server %d: %w", p.cmd.Process.Pid, err)
	}
	return nil
}

// waitReady polls until the server answers PING and proves, through its
// process_id, that it is our process and not another one that owned the port.
func waitReady(p *process, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{
		Addr:        addr,
		DialTimeout: 200 * time.Millisecond,
		MaxRetries:  -1,
		Protocol:    2,
	})
	defer rdb.Close()
	want := "process_id:" + strconv.Itoa(p.cmd.Process.Pid)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("redistest: redis-server on %s exited during start-up:\n%s", addr, p.log.String())
		default:
		}
		info, err := rdb.Info(ctx, "server").Result()
		if err == nil {
			if strings.Contains(info, want+"\r\n") {
				return nil
			}
			return fmt.Errorf("redistest: %s is answered by another process", addr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: redis-server on %s not ready after %v: %w\n%s", addr, startTimeout, err, p.log.String())
		case <-p.exited:
		case <-tick.C:
		}
	}
}

// freePort picks a random port that is free now (and whose Cluster bus port
// is free too, for cluster nodes). Another process may still take it before
// redis-server binds; callers retry on start failure.
func freePort(cluster bool) (int, error) {
	for range 100 {
		port := minPort + rand.IntN(maxPort-minPort)
		if !portFree(port) || (cluster && !portFree(port+clusterBusGap)) {
			continue
		}
		return port, nil
	}
	return 0, errors.New("redistest: no free loopback port found")
}

func portFree(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}
