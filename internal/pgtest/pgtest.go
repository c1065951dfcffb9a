// Package pgtest starts throwaway PostgreSQL servers for tests: initdb
// makes a fresh cluster in a private temporary directory and postgres
// serves it on a free loopback port, with durability off (fsync,
// synchronous commit) and no Unix socket. Everything it starts is stopped,
// waited for and deleted when the test is done. Tests never touch a
// server they did not start: a server is used only once it has shown,
// through its data_directory, that it serves the cluster this package made.
//
//	srv := pgtest.Start(t)   // stopped and removed by t.Cleanup
//	pool := srv.Pool(t)      // *pgxpool.Pool, closed by t.Cleanup
//	url := srv.URL()         // postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
//
// # Requirements
//
// initdb and postgres are looked for on PATH, then under
// /usr/lib/postgresql/*/bin (where Debian's postgresql package puts them,
// the newest version first); both come from one directory. When they are
// missing, Start calls t.Skip with a message saying what to install; when
// the environment has CI=true it calls t.Fatal instead, so CI can never
// pass by skipping.
//
// # Root
//
// PostgreSQL refuses to run as root. When the test runs as root (CI
// containers do), initdb and postgres run as the user nobody instead: the
// temporary directory is given to nobody, and the processes start with
// nobody's user and group ids (on Linux only). The temporary directory's
// parent ($TMPDIR, else /tmp) must let nobody through.
//
// On Linux the server also receives SIGQUIT (immediate shutdown) if the
// test binary dies without cleaning up, for example on a -timeout panic.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/tailbuf"
	"github.com/costguard/costguard/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// Ports are drawn below Linux's default ephemeral range (32768+), so the
	// kernel never hands them to an outgoing connection, and above the
	// range redistest draws from.
	minPort       = 23000
	maxPort       = 30000
	startAttempts = 5
	initTimeout   = 60 * time.Second
	startTimeout  = 30 * time.Second
	stopTimeout   = 10 * time.Second
	pollInterval  = 20 * time.Millisecond
	logTailBytes  = 16 << 10
	// unprivilegedUser runs PostgreSQL when the test runs as root.
	unprivilegedUser = "nobody"
	// superuser is the role initdb creates; it logs in without a password
	// from the loopback interface only.
	superuser = "postgres"
)

// debianBinDirs is where Debian's postgresql packages put the server
// programs, one directory per major version.
var debianBinDirs = "/usr/lib/postgresql/*/bin"

// ErrNotInstalled reports that initdb and postgres were not found.
var ErrNotInstalled = errors.New("pgtest: initdb and postgres not found on PATH nor under /usr/lib/postgresql/*/bin (install the postgresql package)")

// binaries are the two programs the harness runs, from one directory.
type binaries struct{ initdb, postgres string }

// findBinaries looks for initdb on PATH (and, if PATH holds a symbolic
// link, in the directory it points to), then under dirs (a glob, the
// highest version first), and returns the first directory that has both
// initdb and postgres.
func findBinaries(dirs string) (binaries, error) {
	var candidates []string
	if p, err := exec.LookPath("initdb"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
		if real, err := filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, filepath.Dir(real))
		}
	}
	// The pattern is the package's own: Glob's only error, ErrBadPattern,
	// cannot happen. The newest version comes first.
	matches, _ := filepath.Glob(dirs)
	slices.SortFunc(matches, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	candidates = append(candidates, matches...)
	for _, dir := range candidates {
		b := binaries{initdb: filepath.Join(dir, "initdb"), postgres: filepath.Join(dir, "postgres")}
		if executable(b.initdb) && executable(b.postgres) {
			return b, nil
		}
	}
	return binaries{}, ErrNotInstalled
}

// compareVersions compares dotted version numbers ("9.6" < "15");
// non-numeric parts compare as 0.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// requireBinaries returns the programs, or skips (under CI=true, fails) tb.
func requireBinaries(tb testing.TB) binaries {
	tb.Helper()
	b, err := findBinaries(debianBinDirs)
	if err != nil {
		testenv.Missing(tb, err.Error()+": a PostgreSQL test")
	}
	return b
}

// runAs is the user the server programs run as: nil for the test's own,
// or nobody's ids when the test runs as root.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(unprivilegedUser)
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, PostgreSQL needs another user: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgtest: user %s: %w", unprivilegedUser, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// Server is one PostgreSQL server owned by a test.
type Server struct {
	port int
	dir  string // the private directory; the cluster is in dir/data
	proc *process
}

// process is the running postmaster and what it printed.
type process struct {
	cmd    *exec.Cmd
	log    *tailbuf.Buffer
	exited chan struct{} // closed once cmd.Wait returns
}

// Start makes a cluster and starts a server for tb, and stops and removes
// it when tb and its subtests finish.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bins := requireBinaries(tb)
	s, err := start(bins)
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

// start runs initdb once, then postgres on a fresh port, retrying with
// another port when the chosen one was taken between probing and binding.
func start(bins binaries) (*Server, error) {
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: temp dir: %w", err)
	}
	s := &Server{dir: dir}
	if err := s.initdb(bins, cred); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	var lastErr error
	for range startAttempts {
		if s.port, err = freePort(); err != nil {
			lastErr = err
			continue
		}
		if lastErr = s.startPostgres(bins, cred); lastErr == nil {
			return s, nil
		}
	}
	return nil, errors.Join(fmt.Errorf("pgtest: no server started after %d attempts: %w", startAttempts, lastErr), s.Close())
}

// initdb makes the cluster in dir/data, as cred's user when set.
func (s *Server) initdb(bins binaries, cred *syscall.Credential) error {
	if cred != nil {
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("pgtest: give %s to %s: %w", s.dir, unprivilegedUser, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), initTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.initdb,
		"--pgdata", s.dataDir(), "--username", superuser, "--auth", "trust",
		"--encoding", "UTF8", "--locale", "C", "--no-sync")
	cmd.Dir = s.dir
	cmd.Env = serverEnv()
	cmd.SysProcAttr = sysProcAttr(cred)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: %s: %w\n%s", bins.initdb, err, out)
	}
	return nil
}

// serverEnv is the environment of initdb and postgres: none of the test's
// PG* variables, a fixed locale and time zone.
func serverEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C", "TZ=UTC"}
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

// startPostgres runs the postmaster on s.port and waits until it answers.
func (s *Server) startPostgres(bins binaries, cred *syscall.Credential) error {
	log := &tailbuf.Buffer{Max: logTailBytes}
	cmd := exec.Command(bins.postgres,
		"-D", s.dataDir(),
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=50",
	)
	cmd.Dir = s.dir
	cmd.Env = serverEnv()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr(cred)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start %s: %w", bins.postgres, err)
	}
	p := &process{cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	if err := s.waitReady(p); err != nil {
		return errors.Join(err, stop(p))
	}
	s.proc = p
	return nil
}

// waitReady polls until the server accepts a connection and proves,
// through its data_directory, that it serves our cluster and is not
// another server that owned the port.
func (s *Server) waitReady(p *process) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cfg, err := pgx.ParseConfig(s.URL())
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	cfg.ConnectTimeout = time.Second
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("pgtest: postgres on port %d exited during start-up:\n%s", s.port, p.log.String())
		default:
		}
		// Connect only once our postmaster says it is ready: it has then
		// bound the port, so the connection cannot reach another server.
		err := s.postmasterReady(p.cmd.Process.Pid)
		var conn *pgx.Conn
		if err == nil {
			conn, err = pgx.ConnectConfig(ctx, cfg)
		}
		if err == nil {
			var dataDir string
			err = conn.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir)
			_ = conn.Close(ctx)
			if err != nil {
				return fmt.Errorf("pgtest: port %d: %w", s.port, err)
			}
			if dataDir != s.dataDir() {
				return fmt.Errorf("pgtest: port %d is answered by another server (data directory %s)", s.port, dataDir)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: postgres on port %d not ready after %v: %w\n%s", s.port, startTimeout, err, p.log.String())
		case <-p.exited:
		case <-tick.C:
		}
	}
}

// postmasterReady reads the cluster's postmaster.pid: its first line is
// the postmaster's pid, its fourth the port and its eighth the status,
// "ready" once it accepts connections (PostgreSQL 10 and later).
func (s *Server) postmasterReady(pid int) error {
	b, err := os.ReadFile(filepath.Join(s.dataDir(), "postmaster.pid"))
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 || strings.TrimSpace(lines[0]) != strconv.Itoa(pid) ||
		strings.TrimSpace(lines[3]) != strconv.Itoa(s.port) || strings.TrimSpace(lines[7]) != "ready" {
		return fmt.Errorf("postmaster.pid does not say pid %d is ready on port %d yet: %q", pid, s.port, b)
	}
	return nil
}

// URL returns the server's connection URL, for the superuser and the
// postgres database.
func (s *Server) URL() string {
	return "postgres://" + superuser + "@" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) + "/postgres?sslmode=disable"
}

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's private directory (the cluster is in its data
// subdirectory).
func (s *Server) Dir() string { return s.dir }

// Pid returns the postmaster's process id, or 0 once it is stopped.
func (s *Server) Pid() int {
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Pool returns a connection pool to the server, closed when tb finishes.
func (s *Server) Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), s.URL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Close stops the server and removes its directory. Closing twice is a
// no-op.
func (s *Server) Close() error {
	var err error
	if s.proc != nil {
		err = stop(s.proc)
		s.proc = nil
	}
	if rmErr := os.RemoveAll(s.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("pgtest: remove %s: %w", s.dir, rmErr))
	}
	return err
}

// stop asks the postmaster for an immediate shutdown (SIGQUIT: it stops
// its backends and exits; nothing needs to persist) and waits until it has
// been reaped, killing it if it takes longer than stopTimeout.
func stop(p *process) error {
	if err := p.cmd.Process.Signal(syscall.SIGQUIT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgtest: signal postgres %d: %w", p.cmd.Process.Pid, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	return fmt.Errorf("pgtest: postgres %d ignored SIGQUIT for %v and was killed:\n%s", p.cmd.Process.Pid, stopTimeout, p.log.String())
}

// freePort picks a random loopback port that is free now. Another process
// may still take it before postgres binds; start retries then.
func freePort() (int, error) {
	for range 100 {
		port := minPort + rand.IntN(maxPort-minPort)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = ln.Close()
		return port, nil
	}
	return 0, errors.New("pgtest: no free loopback port found")
}
