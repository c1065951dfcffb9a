package pgtest

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

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
		srv := Start(t)
		pid, dir = srv.Pid(), srv.Dir()
		if pid == 0 {
			t.Fatal("Pid() = 0 for a running server")
		}
		ctx := context.Background()
		pool := srv.Pool(t)
		if _, err := pool.Exec(ctx, "CREATE TABLE t (k text PRIMARY KEY); INSERT INTO t VALUES ('v')"); err != nil {
			t.Fatal(err)
		}
		for setting, want := range map[string]string{
			"fsync": "off", "listen_addresses": "127.0.0.1", "unix_socket_directories": "",
		} {
			var got string
			if err := pool.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s = %q, want %q", setting, got, want)
			}
		}
		if runtime.GOOS == "linux" && os.Geteuid() == 0 {
			if uid := processUID(t, pid); uid == "0" {
				t.Errorf("postgres runs as root (uid %s), want %s", uid, unprivilegedUser)
			}
		}
	})
	if alive(pid) {
		t.Errorf("postgres %d still running after the test ended", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory %s not removed: %v", dir, err)
	}
}

// processUID returns the real uid of a Linux process.
func processUID(t *testing.T, pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			return strings.Fields(rest)[0]
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return ""
}

func TestTwoServers(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Port() == b.Port() || a.Dir() == b.Dir() {
		t.Fatalf("two servers share a port or a directory: %d %s, %d %s", a.Port(), a.Dir(), b.Port(), b.Dir())
	}
}

func TestFindBinaries(t *testing.T) {
	root := t.TempDir()
	fake := func(dir string, names ...string) string {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	debian := filepath.Join(root, "usr", "lib", "postgresql")
	fake(filepath.Join(debian, "9.6", "bin"), "initdb", "postgres")
	v13 := fake(filepath.Join(debian, "13", "bin"), "initdb", "postgres")
	fake(filepath.Join(debian, "16", "bin"), "initdb") // no server: incomplete
	glob := filepath.Join(debian, "*", "bin")

	t.Run("Debian's newest complete version", func(t *testing.T) {
		t.Setenv("PATH", fake(filepath.Join(root, "empty")))
		b, err := findBinaries(glob)
		if err != nil || b.initdb != filepath.Join(v13, "initdb") || b.postgres != filepath.Join(v13, "postgres") {
			t.Fatalf("%+v, %v; want version 13's", b, err)
		}
	})
	t.Run("PATH first", func(t *testing.T) {
		onPath := fake(filepath.Join(root, "path"), "initdb", "postgres")
		t.Setenv("PATH", onPath)
		if b, err := findBinaries(glob); err != nil || b.initdb != filepath.Join(onPath, "initdb") {
			t.Fatalf("%+v, %v; want PATH's", b, err)
		}
	})
	t.Run("a link on PATH leads to its directory", func(t *testing.T) {
		link := fake(filepath.Join(root, "links"))
		if err := os.Symlink(filepath.Join(v13, "initdb"), filepath.Join(link, "initdb")); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", link)
		if b, err := findBinaries(filepath.Join(root, "nowhere", "*")); err != nil || b.postgres != filepath.Join(v13, "postgres") {
			t.Fatalf("%+v, %v; want the link target's directory", b, err)
		}
	})
	t.Run("none", func(t *testing.T) {
		t.Setenv("PATH", filepath.Join(root, "empty"))
		if _, err := findBinaries(filepath.Join(root, "nowhere", "*")); err != ErrNotInstalled {
			t.Fatalf("err %v, want ErrNotInstalled", err)
		}
	})
}

func TestCompareVersions(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		sign int
	}{{"9.6", "15", -1}, {"15", "15", 0}, {"16", "9.6", 1}, {"10", "9", 1}, {"9.6", "9.5", 1}} {
		if got := compareVersions(tt.a, tt.b); sign(got) != tt.sign {
			t.Errorf("compareVersions(%q, %q) = %d, want sign %d", tt.a, tt.b, got, tt.sign)
		}
	}
}

func sign(n int) int { return min(max(n, -1), 1) }

// recorder stands in for a test: it records Skip and Fatal instead of
// ending the goroutine.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skipped = args[0].(string) }
func (r *recorder) Fatal(args ...any) { r.failed = args[0].(string) }

// TestMissingBinaries: without PostgreSQL a test skips, saying what to
// install, except under CI=true, where it fails.
func TestMissingBinaries(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved := debianBinDirs
	debianBinDirs = filepath.Join(t.TempDir(), "*", "bin")
	t.Cleanup(func() { debianBinDirs = saved })
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		r := &recorder{TB: t}
		requireBinaries(r)
		msg, other := r.skipped, r.failed
		if ci == "true" {
			msg, other = r.failed, r.skipped
		}
		if msg == "" || other != "" || !strings.Contains(msg, "install the postgresql package") {
			t.Errorf("CI=%q: skipped %q, failed %q; want one message saying what to install", ci, r.skipped, r.failed)
		}
	}
}
