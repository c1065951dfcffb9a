package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	redisStartAttempts = 5
	redisStartTimeout  = 10 * time.Second
	redisPollInterval  = 20 * time.Millisecond
)

// redisServer is a throwaway redis-server this process started: loopback
// only, no persistence, a private temporary directory. Close kills it and
// removes the directory; on Linux it also dies with this process.
type redisServer struct {
	addr    string
	dir     string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd.Wait returns
	version string
}

// redisWrapper runs redis-server under another program, such as valgrind.
// That program must keep redis-server's process id (valgrind does), since
// waitReady checks it.
type redisWrapper struct {
	// command is the program and its arguments, given the server's private
	// directory (for files of its own); redis-server's command line follows.
	command func(dir string) []string
	// readyTimeout replaces redisStartTimeout: start-up under a wrapper can
	// be much slower.
	readyTimeout time.Duration
	// cluster starts the server as a Cluster node, on a port whose bus
	// port (+10000) is free too.
	cluster bool
}

// clusterWrapper starts a redis-server as a Cluster node (its own
// nodes.conf in its private directory), with no program in front of it.
var clusterWrapper = &redisWrapper{
	command:      func(string) []string { return nil },
	readyTimeout: redisStartTimeout,
	cluster:      true,
}

// startRedis starts redis-server on a free loopback port, retrying with
// another port when the chosen one is taken before redis-server binds it.
// A nil wrap runs it directly.
func startRedis(ctx context.Context, wrap *redisWrapper) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("bench: redis-server not found on PATH (install it, or pass -redis host:port): %w", err)
	}
	var lastErr error
	for range redisStartAttempts {
		s, err := tryStartRedis(ctx, bin, wrap)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("bench: no redis-server started after %d attempts: %w", redisStartAttempts, lastErr)
}

func tryStartRedis(ctx context.Context, bin string, wrap *redisWrapper) (*redisServer, error) {
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	if wrap != nil && wrap.cluster {
		if port, err = freeClusterPort(); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "costguard-bench-redis-")
	if err != nil {
		return nil, fmt.Errorf("bench: temp dir: %w", err)
	}
	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, exited: make(chan struct{})}
	argv := []string{bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
	}
	readyTimeout := redisStartTimeout
	if wrap != nil {
		argv = append(wrap.command(dir), argv...)
		readyTimeout = wrap.readyTimeout
		if wrap.cluster {
			argv = append(argv, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
		}
	}
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Dir = dir
	var out tail
	s.cmd.Stdout, s.cmd.Stderr = &out, &out
	s.cmd.SysProcAttr = sysProcAttr()
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: start %s: %w", argv[0], err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(ctx, readyTimeout); err != nil {
		return nil, errors.Join(fmt.Errorf("%w\n%s", err, out.String()), s.Close())
	}
	return s, nil
}

// waitReady polls until the server answers and proves, by its process_id,
// that it is the process we started and not another one on that port.
func (s *redisServer) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	want := "process_id:" + strconv.Itoa(s.cmd.Process.Pid) + "\r\n"
	dialer := net.Dialer{Timeout: 200 * time.Millisecond}
	tick := time.NewTicker(redisPollInterval)
	defer tick.Stop()
	for {
		// A bare dial first: go-redis logs every dial it gives up on, and a
		// wrapped server can take seconds to listen.
		conn, err := dialer.DialContext(ctx, "tcp", s.addr)
		var info string
		if err == nil {
			conn.Close()
			info, err = rdb.Info(ctx, "server").Result()
		}
		if err == nil {
			if !strings.Contains(info, want) {
				return fmt.Errorf("bench: %s is answered by another process", s.addr)
			}
			s.version = infoField(info, "redis_version")
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: redis-server on %s not ready: %w", s.addr, err)
		case <-s.exited:
			return fmt.Errorf("bench: redis-server on %s exited during start-up", s.addr)
		case <-tick.C:
		}
	}
}

// Close kills the server (nothing is persisted, so nothing is lost), and
// with it any wrapper, which runs as the same process; it waits for it and
// removes its directory. It is idempotent.
func (s *redisServer) Close() error {
	var err error
	if kerr := s.cmd.Process.Kill(); kerr != nil && !errors.Is(kerr, os.ErrProcessDone) {
		err = fmt.Errorf("bench: kill redis-server: %w", kerr)
	}
	<-s.exited
	if rerr := os.RemoveAll(s.dir); rerr != nil {
		err = errors.Join(err, fmt.Errorf("bench: remove %s: %w", s.dir, rerr))
	}
	return err
}

// freeLoopbackPort asks the kernel for a port that is free now.
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// freeClusterPort finds a free port below 55536 whose Cluster bus port,
// 10000 above it, is free too.
func freeClusterPort() (int, error) {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("bench: find a free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if port+10000 <= 65535 {
			bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
			if err == nil {
				bus.Close()
				ln.Close()
				return port, nil
			}
		}
		ln.Close()
	}
	return 0, fmt.Errorf("bench: no free port pair for a Cluster node")
}

// clusterSize is the number of masters of the bench's Cluster.
const clusterSize = 3

// redisCluster is a throwaway Cluster of clusterSize masters, no replicas.
type redisCluster struct{ nodes []*redisServer }

// startCluster starts clusterSize nodes, assigns the slots with redis-cli
// --cluster create and waits until every node reports the Cluster whole.
func startCluster(ctx context.Context) (_ *redisCluster, err error) {
	c := &redisCluster{}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	for range clusterSize {
		s, err := startRedis(ctx, clusterWrapper)
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, s)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("bench: redis-cli not found on PATH (needed to form the Cluster): %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bench: redis-cli --cluster create: %w\n%s", err, out)
	}
	want := []string{"cluster_state:ok", fmt.Sprintf("cluster_known_nodes:%d", clusterSize), "cluster_slots_ok:16384"}
	for _, n := range c.nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1})
		for {
			info, err := rdb.ClusterInfo(ctx).Result()
			ok := err == nil
			for _, w := range want {
				ok = ok && strings.Contains(info, w+"\r\n")
			}
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				rdb.Close()
				return nil, fmt.Errorf("bench: Cluster node %s not ready: %w (last: %v %q)", n.addr, ctx.Err(), err, info)
			case <-time.After(redisPollInterval):
			}
		}
		rdb.Close()
	}
	return c, nil
}

func (c *redisCluster) addrs() []string {
	var a []string
	for _, n := range c.nodes {
		a = append(a, n.addr)
	}
	return a
}

// client is a Cluster client seeded with every node, configured as
// newClient configures a standalone one.
func (c *redisCluster) client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs(), PoolSize: 2 * maxCallers, ContextTimeoutEnabled: true})
}

// Close stops every node.
func (c *redisCluster) Close() error {
	var err error
	for _, n := range c.nodes {
		err = errors.Join(err, n.Close())
	}
	return err
}

// infoField returns the value of one "name:value" line of an INFO reply.
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

// tail keeps the last 8 KiB written to it: the server's start-up log,
// shown when it fails to start. os/exec writes it from its own goroutine.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if extra := len(t.buf) - 8<<10; extra > 0 {
		t.buf = t.buf[extra:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
