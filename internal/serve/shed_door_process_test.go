package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serverProcess is the example server running as its own process: the
// test binary re-executed as main (TestMain, envServeMain), as TestSIGTERM
// runs it.
type serverProcess struct {
	pid        int
	url, admin string // the public and admin listeners
	stderr     *syncBuffer
}

// startServerProcess starts the server with the YAML configuration yml on
// ports of its own, and kills it when the test ends.
func startServerProcess(t *testing.T, yml string) *serverProcess {
	t.Helper()
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yml), 0o600))
	return runServerProcess(t, "-config", path)
}

// runServerProcess starts the server as its own process with args, on
// ports of its own, waits for the lines naming its two listeners, and
// kills it when the test ends.
func runServerProcess(t *testing.T, args ...string) *serverProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), envServeMain+"=1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &serverProcess{stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	p.pid = cmd.Process.Pid

	out := bufio.NewReader(stdout)
	first, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", p.stderr.String())
	m := startLine.FindStringSubmatch(strings.TrimSuffix(first, "\n"))
	require.NotNil(t, m, "unexpected first line %q", first)
	second, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", p.stderr.String())
	a := adminLine.FindStringSubmatch(strings.TrimSuffix(second, "\n"))
	require.NotNil(t, a, "unexpected second line %q", second)
	p.url, p.admin = m[1], a[1]
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return p
}

// processUsage is what the kernel has counted for a process so far.
type processUsage struct {
	user, system int64 // utime and stime, in clock ticks (/proc/<pid>/stat)
	cpu          time.Duration
	rchar        int64 // bytes read by read(2) and its kin, sockets included (/proc/<pid>/io)
	fds          int   // open file descriptors
}

// readUsage reads pid's usage from /proc. cpu sums each thread's time on
// a CPU from /proc/<pid>/task/*/schedstat, in nanoseconds; where that file
// is missing it is ticks × the tick length.
func readUsage(t *testing.T, pid int, tick time.Duration) processUsage {
	t.Helper()
	proc := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(proc + "/stat")
	require.NoError(t, err)
	// The fields after the command's closing parenthesis start with the
	// state (field 3): utime and stime are fields 14 and 15.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	require.Greater(t, len(fields), 12, "%s", stat)
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	require.NoError(t, err)
	u := processUsage{user: utime, system: stime, rchar: -1}
	u.cpu = time.Duration(utime+stime) * tick
	if tasks, err := filepath.Glob(proc + "/task/*/schedstat"); err == nil && len(tasks) > 0 {
		var ns int64
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			if err != nil {
				continue // a thread that just exited
			}
			if f := strings.Fields(string(b)); len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				ns += v
			}
		}
		u.cpu = time.Duration(ns)
	}
	if counts, err := os.ReadFile(proc + "/io"); err == nil {
		for line := range strings.Lines(string(counts)) {
			if v, ok := strings.CutPrefix(line, "rchar: "); ok {
				u.rchar, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	fds, err := os.ReadDir(proc + "/fd")
	require.NoError(t, err)
	u.fds = len(fds)
	return u
}

// clockTick is the length of a clock tick of /proc/<pid>/stat.
func clockTick() time.Duration {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 10 * time.Millisecond // USER_HZ is 100 on Linux
	}
	hz, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || hz <= 0 {
		return 10 * time.Millisecond
	}
	return time.Second / time.Duration(hz)
}

// waitFDs waits until pid has at most n descriptors open: the connections
// of a burst are closed, so their teardown is counted too. It fails the
// test after waitLimit, which only guards against a hang.
func waitFDs(t *testing.T, pid, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		return err == nil && len(fds) <= n
	}, waitLimit, time.Millisecond, "the burst's connections were never closed")
}

// document is a valid GraphQL request of about size bytes: one string
// argument, which i makes different from every other (gqlgen's query
// cache never answers for it).
func document(t *testing.T, i, size int) []byte {
	t.Helper()
	login := fmt.Sprintf("%03d", i) + strings.Repeat("x", max(size-50, 0))
	b, err := json.Marshal(map[string]string{"query": `{ user(login: "` + login + `") { login } }`})
	require.NoError(t, err)
	return b
}

// burstResult counts the answers of a burst of requests.
type burstResult struct {
	answered    int // 503 OVERLOADED (200 for GET /healthz)
	writeErrors int // no response: the server closed the connection while the body was being sent
	wall        time.Duration
}

// burst is n requests of a document of size bytes, sent one after the
// other with apiKey ("" for none). Without keepAlive each asks for
// "Connection: close"; with it, a connection is used again when the
// server keeps it (it does not keep one whose body it left unread).
type burst struct {
	name, apiKey string
	n, size      int
	keepAlive    bool
	// healthz sends GET /healthz instead, which answers 200: the cheapest
	// answer the port gives, for scale.
	healthz bool
}

// post sends the burst and requires every response that arrives to be 503
// OVERLOADED. The connections are closed when it returns.
func (b burst) post(t *testing.T, url string) burstResult {
	t.Helper()
	docs := make([][]byte, b.n)
	for i := range docs {
		docs[i] = document(t, i, b.size)
	}
	tr := &http.Transport{DisableKeepAlives: !b.keepAlive}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: waitLimit}
	var r burstResult
	start := time.Now()
	for _, doc := range docs {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/graphql", bytes.NewReader(doc))
		if b.healthz {
			req, err = http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/healthz", nil)
		}
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if b.apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+b.apiKey)
		}
		resp, err := client.Do(req)
		if err != nil {
			r.writeErrors++ // a reset before the response was read
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		if b.healthz {
			require.Equal(t, http.StatusOK, resp.StatusCode, "%.300s", body)
			r.answered++
			continue
		}
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%.300s", body)
		require.Equal(t, budget.CodeOverloaded, decodeGraphQL(t, body).code(), "%.300s", body)
		r.answered++
	}
	r.wall = time.Since(start)
	return r
}

// Shedding at the door costs the server less than the request, against the
// server as its own process: while it is overloaded, an anonymous client sends 47 valid
// 900 KB documents, one after the other. Each is shed at the door, 503
// OVERLOADED, before its body is read: the server reads the headers and
// the first few KB that arrive with them (read(2) counts it, from
// /proc/<pid>/io), never the document. A client may see its connection
// reset while it still sends the body (net/http closes at once a
// connection whose client asked for "Connection: close"); those are
// counted, not failed.
//
// The server's CPU time, read from /proc before and after each burst, is
// logged per request, with others for scale: a small document on a new
// connection each (what a connection costs) and on one connection (what
// the request costs), GET /healthz on one connection (the port's cheapest
// answer), and an API key's big documents, which the document may put in
// checkout's lane and which are therefore read and parsed before they are
// shed. Timings are logged, never asserted: shared
// machines are noisy.
//
//	go test ./internal/serve -run TestShedAtTheDoorOverHTTP -v
func TestShedAtTheDoorOverHTTP(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the server process's CPU time from /proc/<pid>/stat and schedstat: Linux only")
	}
	// Three of four slots held: the anonymous lane (sheddable, ⌊0.5 × 4⌋
	// = 2) and a key's normal requests (⌊0.8 × 4⌋ = 3) are shed; critical
	// is not, so a key's request is read to learn whether it is checkout.
	// demo_latency holds the slots: the root resolvers wait a minute.
	p := startServerProcess(t, "overload: {max_in_flight: 4}\n"+
		`challenge: {secret: "`+testSecret+`", bits: 8}`+"\n"+
		"demo_latency: 1m\n")

	ctx, cancel := context.WithCancel(context.Background())
	var holding sync.WaitGroup
	t.Cleanup(func() { // before the process is killed
		cancel()
		holding.Wait()
	})
	holdClient := &http.Client{Transport: &http.Transport{}}
	slow := graphQLBody(t, readmeQuery)
	const held = 3
	for range held {
		holding.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/graphql", strings.NewReader(slow))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+demoAPIKey)
			if resp, err := holdClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	require.Eventually(t, func() bool {
		resp, err := http.Get(p.admin + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return err == nil && strings.Contains(string(b), "\ncostguard_requests_in_flight "+strconv.Itoa(held)+"\n")
	}, waitLimit, 5*time.Millisecond, "the slow requests never filled three slots; stderr:\n%s", p.stderr.String())
	http.DefaultTransport.(*http.Transport).CloseIdleConnections() // the scrapes' connection

	tick := clockTick()
	// measure sends b and returns its answers, the server's CPU time per
	// request, and the bytes it read per request (-1: /proc/<pid>/io is
	// not readable).
	measure := func(b burst) (r burstResult, cpu time.Duration, read int64) {
		before := readUsage(t, p.pid, tick)
		r = b.post(t, p.url)
		waitFDs(t, p.pid, before.fds) // the connections' teardown counts too
		after := readUsage(t, p.pid, tick)
		cpu = (after.cpu - before.cpu) / time.Duration(b.n)
		read = -1
		if before.rchar >= 0 && after.rchar >= 0 {
			read = (after.rchar - before.rchar) / int64(b.n)
		}
		what, answer := fmt.Sprintf("%d POSTs of a %s document", b.n, byteSize(b.size)), "503 OVERLOADED"
		if b.healthz {
			what, answer = fmt.Sprintf("%d GETs", b.n), "200"
		}
		t.Logf("%s: %s in %v: %d answered %s, %d reset while sending; "+
			"server CPU %v in total (user %d + system %d ticks of %v in /proc/<pid>/stat), %v per request; server read %d B per request",
			b.name, what, r.wall.Round(time.Millisecond), r.answered, answer, r.writeErrors,
			(after.cpu - before.cpu).Round(time.Microsecond), after.user-before.user, after.system-before.system, tick,
			cpu.Round(time.Microsecond), read)
		return r, cpu, read
	}

	const probed, big, small = 47, 900_000, 100 // the probe's count and size
	anon, atTheDoor, read := measure(burst{name: "anonymous, shed at the door", n: probed, size: big, keepAlive: true})
	assert.Equal(t, probed, anon.answered+anon.writeErrors)
	assert.Positive(t, anon.answered, "no shed request was answered")
	if read >= 0 {
		assert.Less(t, read, int64(64<<10), "bytes read per shed request: the document was read")
	}

	r, smallAtTheDoor, _ := measure(burst{name: "anonymous, shed at the door, new connections", n: probed, size: small})
	assert.Equal(t, probed, r.answered, "a small body is in the server's first read: always answered")
	r, keptAlive, _ := measure(burst{name: "anonymous, shed at the door, one connection", n: probed, size: small, keepAlive: true})
	assert.Equal(t, probed, r.answered)
	r, healthz, _ := measure(burst{name: "GET /healthz, one connection", n: probed, keepAlive: true, healthz: true})
	assert.Equal(t, probed, r.answered)

	const keyed = 10
	r, parsed, read := measure(burst{name: "API key, read and parsed, then shed", apiKey: demoAPIKey, n: keyed, size: big})
	assert.Equal(t, keyed, r.answered, "a key's request is read whole, so it is always answered")
	if read >= 0 {
		assert.Greater(t, read, int64(big), "a key's document is read before it is shed")
	}
	if atTheDoor > 0 && smallAtTheDoor > 0 && keptAlive > 0 && healthz > 0 {
		t.Logf("server CPU per request shed at the door: %v with a 900 KB body, %v with a 100 B body (new connections, ×%.2f), "+
			"%v on one kept-alive connection (×%.2f a GET /healthz on one, %v); read and parsed, then shed: %v (×%.0f the 900 KB one at the door)",
			atTheDoor.Round(time.Microsecond), smallAtTheDoor.Round(time.Microsecond), float64(atTheDoor)/float64(smallAtTheDoor),
			keptAlive.Round(time.Microsecond), float64(keptAlive)/float64(healthz), healthz.Round(time.Microsecond),
			parsed.Round(time.Microsecond), float64(parsed)/float64(atTheDoor))
	}
}

// byteSize prints n as "100 B" or "900 KB".
func byteSize(n int) string {
	if n >= 1000 {
		return fmt.Sprintf("%d KB", n/1000)
	}
	return fmt.Sprintf("%d B", n)
}
