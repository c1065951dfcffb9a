package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The README's "A complete program" shows this program, whole:
// what a newcomer copies is what the tests build.
func TestReadmeShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\n##+ A complete program\n.*?```go\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal(`README.md has no "A complete program" section with a Go block`)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(m[1]) != string(src) {
		t.Errorf("README.md's program differs from examples/minimal/main.go:\n%s", m[1])
	}
}

// build compiles the program, as a newcomer's go run would.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "minimal")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// -addr chooses where the program listens; without it, :8080.
func TestAddrFlag(t *testing.T) {
	bin := build(t)

	hctx, hcancel := context.WithTimeout(t.Context(), 10*time.Second) // a program without flags would serve instead
	help, _ := exec.CommandContext(hctx, bin, "-h").CombinedOutput()  // exit 2 after the usage
	hcancel()
	if !regexp.MustCompile(`(?m)^\s+-addr address\n\s+listen address \(default ":8080"\)$`).Match(help) {
		t.Errorf("-h does not show -addr with its default :8080:\n%s", help)
	}

	// A port that was free a moment ago.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-addr", addr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cancel() // kills the process
		<-exited
	})

	// Ask until the process answers (or exits, or 30 seconds have passed).
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/graphql",
			strings.NewReader(`{"query":"{ __typename }"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Limit") != "500" {
				t.Fatalf("POST /graphql on %s: %d, X-RateLimit-Limit %q", addr, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"))
			}
			return
		}
		select {
		case <-exited:
			t.Fatalf("the program exited without serving on %s: %s", addr, stderr.String())
		case <-ctx.Done():
			<-exited // the process is killed; its stderr is complete
			t.Fatalf("nothing answers on %s: %v; stderr: %s", addr, err, stderr.String())
		case <-tick.C:
		}
	}
}
