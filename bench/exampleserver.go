package main

// The example server (examples/server) as a subprocess of the overload
// scenario: built once with `go build`, started once per run on a free
// loopback port with a configuration file of the scenario's own, and
// stopped with SIGINT (SIGKILL if it does not leave in time).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// The bounds of the example server's life cycle.
const (
	// buildTimeout bounds `go list` and `go build` of the example server.
	buildTimeout = 5 * time.Minute
	// startTimeout bounds the wait for the line with the server's address.
	startTimeout = 15 * time.Second
	// stopTimeout bounds the graceful stop (the server's own shutdown
	// timeout is 10 s); then the process is killed.
	stopTimeout = 15 * time.Second
)

// rootModule is the module the example server belongs to: the bench
// module's go.mod replaces it with "../", and go.work uses both.
const rootModule = "github.com/costguard/costguard"

// buildExampleServer builds ./examples/server of the repository that holds
// the bench module into dir and returns the binary's path. The example
// server is a module of its own: it is built in its directory, which works
// with go.work and without it (GOWORK=off).
func buildExampleServer(ctx context.Context, dir string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	root, err := repoRoot(ctx)
	if err != nil {
		return "", fmt.Errorf("bench: overload: %w", err)
	}
	bin := filepath.Join(dir, "server")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(root, "examples", "server")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("bench: overload: go build ./examples/server in %s: %w\n%s", root, err, out)
	}
	return bin, nil
}

// repoRoot is the directory of the repository that holds the bench module,
// as the go command resolves rootModule from the working directory.
func repoRoot(ctx context.Context) (string, error) {
	var stderr bytes.Buffer
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", rootModule)
	list.Stderr = &stderr
	out, err := list.Output()
	root := strings.TrimSpace(string(out))
	if err != nil || root == "" {
		return "", fmt.Errorf("locating %s (run from the repository or bench/): %w: %s", rootModule, err, strings.TrimSpace(stderr.String()))
	}
	return root, nil
}

// exampleServer is one running example-server process.
type exampleServer struct {
	url    string // http://127.0.0.1:PORT
	admin  string // the admin listener's URL: /metrics
	cmd    *exec.Cmd
	stderr *tailWriter
	exited chan struct{} // closed once the process has been waited for
	err    error         // Wait's result, once exited is closed
}

// addrLine matches the line the server prints once it listens, and
// adminLine the one it prints next, for its admin listener.
var (
	addrLine  = regexp.MustCompile(`^costguard example server on (http://\S+) `)
	adminLine = regexp.MustCompile(`^admin endpoints \(/metrics, /healthz, /readyz\) on (http://\S+)$`)
)

// startExampleServer starts bin with the configuration file cfg on a free
// loopback port and waits for it to print its address.
func startExampleServer(ctx context.Context, bin, cfg string) (*exampleServer, error) {
	urls, admins := make(chan string, 1), make(chan string, 1)
	s := &exampleServer{
		cmd:    exec.Command(bin, "-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-config", cfg),
		stderr: &tailWriter{max: 8 << 10},
		exited: make(chan struct{}),
	}
	s.cmd.Stdout = &lineWatcher{match: func(line string) {
		if m := addrLine.FindStringSubmatch(line); m != nil {
			select {
			case urls <- m[1]:
			default:
			}
		}
		if m := adminLine.FindStringSubmatch(line); m != nil {
			select {
			case admins <- m[1]:
			default:
			}
		}
	}}
	s.cmd.Stderr = s.stderr
	s.cmd.SysProcAttr = sysProcAttr()
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: overload: start example server: %w", err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case s.url = <-urls:
		select {
		case s.admin = <-admins:
			return s, nil
		case <-s.exited:
			return nil, fmt.Errorf("bench: overload: example server exited before its admin listener: %v\n%s", s.err, s.stderr)
		case <-timer.C:
			return nil, errors.Join(fmt.Errorf("bench: overload: example server printed no admin address within %v", startTimeout), s.Close())
		}
	case <-s.exited:
		return nil, fmt.Errorf("bench: overload: example server exited before listening: %v\n%s", s.err, s.stderr)
	case <-timer.C:
		err := fmt.Errorf("bench: overload: example server printed no address within %v\n%s", startTimeout, s.stderr)
		return nil, errors.Join(err, s.Close())
	case <-ctx.Done():
		return nil, errors.Join(fmt.Errorf("bench: interrupted: %w", ctx.Err()), s.Close())
	}
}

// Close stops the server: SIGINT, then SIGKILL after stopTimeout. An exit
// status other than 0 after SIGINT is an error, with the server's stderr.
func (s *exampleServer) Close() error {
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		_ = s.cmd.Process.Kill() // Signal fails once the process is gone, or where SIGINT is not delivered
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-s.exited:
		if s.err != nil {
			return fmt.Errorf("bench: overload: example server: %w\n%s", s.err, s.stderr)
		}
		return nil
	case <-timer.C:
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("bench: overload: example server did not stop within %v after SIGINT; killed\n%s", stopTimeout, s.stderr)
	}
}

// lineWatcher is an io.Writer that hands each complete line to match.
type lineWatcher struct {
	mu    sync.Mutex
	buf   []byte
	match func(string)
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.match(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a line that long is not the address line
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

// tailWriter keeps the last max bytes written to it, for error messages.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.TrimSpace(string(w.buf))
}
