package serve

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/internal/testenv"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
)

// chaosFault is how long each fault of TestChaos lasts: short in CI,
// longer by hand (COSTGUARD_LONG_TESTS=1 go test ./internal/serve -run
// TestChaos -chaos.fault 20s).
var chaosFault = flag.Duration("chaos.fault", 1500*time.Millisecond, "how long each fault of TestChaos lasts")

// TestChaos serves the example server's handler on a real Redis, reached
// through a proxy that can stall the network, under eight clients spending
// one principal's budget, and injects one fault after another: kill,
// restart without data, restart with data, DEBUG SLEEP, CLIENT PAUSE,
// maxmemory with noeviction, a network stall. For each it checks that
// nothing panics (every answer is 200 or 429: the plan fails open), that
// no request waits longer than the store timeout (and, once the breaker is
// open, that the 99th percentile is far below it), that what the fallback
// admits during the fault stays within the documented bound (the last
// known remaining plus the refill over the fault), and that goroutines and
// the heap come back to their baseline once Redis is healthy again. A long
// test: it runs in CI or with COSTGUARD_LONG_TESTS=1.
func TestChaos(t *testing.T) {
	testenv.Long(t)
	rs := redistest.StartServer(t)
	proxy := startStallProxy(t, rs.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.addr(), ContextTimeoutEnabled: true, MaxRetries: 1, PoolSize: chaosPool})
	t.Cleanup(func() { rdb.Close() })
	admin := rs.Client(t) // straight to Redis, for the faults
	st, err := redisstore.New(rdb, redisstore.Config{Prefix: "chaos"})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })

	const rate = 5 // points a second: the fallback's refill over a fault stays small
	cfg := defaultConfig()
	cfg.Plans["free"] = planConfig{Plan: budget.Plan{Burst: 2000, Rate: rate * 3600, Per: time.Hour}}
	cfg.FailureMode = budget.FailOpen
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	ts := newTestServer(t, cfg, deps{store: st, clock: limiter.SystemClock{}, logger: slog.New(slog.NewTextHandler(logs, nil))})
	srv := httptest.NewServer(ts.h)
	t.Cleanup(srv.Close)
	adminSrv := httptest.NewServer(ts.admin)
	t.Cleanup(adminSrv.Close)
	httpc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	ctx := context.Background()
	dump := filepath.Join(rs.Dir(), "dump.rdb")
	// A restart is a short outage followed by the store deciding again:
	// from a full bucket when Redis lost its data, which is Redis's loss,
	// not the fallback's, so the admission bound is checked only for the
	// faults that keep the store away for the whole fault.
	restarted := false
	faults := []struct {
		name        string
		inject, end func() error
		bounded     bool
	}{
		{"kill", rs.Stop, rs.Restart, true},
		{"restart without data", func() error { _ = os.Remove(dump); return rs.Restart() }, nil, restarted},
		{"restart with data", func() error {
			if err := admin.Save(ctx).Err(); err != nil {
				return err
			}
			return rs.Restart()
		}, func() error { return os.Remove(dump) }, restarted},
		{"DEBUG SLEEP", func() error {
			go admin.Do(context.Background(), "DEBUG", "SLEEP", strconv.FormatFloat(chaosFault.Seconds(), 'f', 3, 64))
			return nil
		}, nil, true},
		{"CLIENT PAUSE", func() error {
			return admin.Do(ctx, "CLIENT", "PAUSE", strconv.FormatInt(chaosFault.Milliseconds(), 10), "ALL").Err()
		}, nil, true},
		{"maxmemory noeviction", func() error {
			if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				return err
			}
			return admin.ConfigSet(ctx, "maxmemory", "1").Err()
		}, func() error { return admin.ConfigSet(ctx, "maxmemory", "0").Err() }, true},
		{"network stall", func() error { proxy.stall(true); return nil }, func() error { proxy.stall(false); return nil }, true},
	}

	// The baseline is taken after a first round of load, so that the
	// connections the clients keep (and the proxy's goroutines for them)
	// are in it.
	startChaosLoad(httpc, srv.URL).stop()
	time.Sleep(200 * time.Millisecond)
	runtime.GC()
	baseGoroutines := runtime.NumGoroutine()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap := ms.HeapAlloc

	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			load := startChaosLoad(httpc, srv.URL)
			time.Sleep(300 * time.Millisecond) // healthy traffic: the process learns the bucket
			before := load.remaining()
			began := time.Now()
			require.NoError(t, f.inject())
			// Once the breaker is open, decisions stop waiting for the store:
			// between its opening and the end of the fault only its probes
			// (one per cool-down) and the calls already in flight may time out. Counted from the server's own metrics,
			// so a starved machine's slow scheduling cannot fail it.
			var openedAt time.Time
			var waitedAtOpen int64
			if f.bounded {
				for deadline := began.Add(*chaosFault); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					m := scrapeChaosMetrics(t, httpc, adminSrv.URL)
					if m.breakerOpen {
						openedAt, waitedAtOpen = time.Now(), m.waited
						break
					}
				}
				if openedAt.IsZero() {
					t.Errorf("the breaker did not open during the fault")
				}
			}
			time.Sleep(time.Until(began.Add(*chaosFault))) // DEBUG SLEEP and CLIENT PAUSE end by themselves
			// The fallback alone decides until the fault's end begins: a
			// killed Redis restarts without its data, and what it then
			// admits from a full bucket, before the restart returns, is
			// Redis's loss, as for the restarts below, not the fallback's.
			fallbackUntil := time.Now()
			if f.end != nil {
				require.NoError(t, f.end())
			}
			healed := time.Now()
			waitedAtHeal := scrapeChaosMetrics(t, httpc, adminSrv.URL).waited
			// Recovery: the breaker's cool-down (1 s) and a probe, then
			// the store decides again.
			time.Sleep(2 * time.Second)
			results := load.stop()

			var slowest, slowestAt time.Duration
			var afterOpen []time.Duration
			var admittedInFault int64
			for _, r := range results {
				switch r.status {
				case http.StatusOK, http.StatusTooManyRequests:
				default:
					t.Errorf("status %d at %v into the fault", r.status, r.start.Sub(began))
				}
				if r.took > slowest {
					slowest, slowestAt = r.took, r.start.Sub(began)
				}
				inFault := !r.start.Before(began) && r.start.Before(fallbackUntil)
				if inFault && r.status == http.StatusOK {
					admittedInFault++
				}
				if !openedAt.IsZero() && r.start.After(openedAt) && r.start.Before(healed) {
					afterOpen = append(afterOpen, r.took)
				}
			}
			// No hang: every call is bounded by the store timeout; the slack
			// is for a machine busy with other tests (the latencies below
			// are reported, not asserted: they measure the scheduler too).
			if slowest > 5*time.Second {
				t.Errorf("slowest request %v (started %v into the fault): a hang", slowest, slowestAt)
			}
			if f.bounded && !openedAt.IsZero() {
				probes := int64(healed.Sub(openedAt)/breaker.DefaultCoolDown) + 1
				if waited := waitedAtHeal - waitedAtOpen; waited > probes+chaosClients {
					t.Errorf("%d decisions waited for the store while the breaker was open (%v), want at most its %d probes and the %d calls in flight when it opened",
						waited, healed.Sub(openedAt), probes, chaosClients)
				}
			}
			// What the fallback may admit: the last known remaining and the
			// refill over the fault, plus the requests the store had
			// admitted but not yet answered when the fault began.
			bound := before + int64(rate*fallbackUntil.Sub(began).Seconds()) + 1 + chaosClients
			if f.bounded && admittedInFault > bound {
				t.Errorf("admitted %d during the fault, above the bound %d (last known %d)", admittedInFault, bound, before)
			}
			t.Logf("%d requests; during the fault %d admitted (bound %d); once the breaker was open: p99 %v over %d requests, %d decisions waited for the store; slowest %v",
				len(results), admittedInFault, bound, percentile(afterOpen, 0.99), len(afterOpen), waitedAtHeal-waitedAtOpen, slowest)

			// Back to the baseline: goroutines and heap.
			// The client's pool may hold more connections than at the
			// baseline (up to chaosPool, two proxy goroutines each): that is
			// the pool's size, not a leak.
			deadline := time.Now().Add(5 * time.Second)
			allowed := baseGoroutines + 2*chaosPool + 4
			for runtime.NumGoroutine() > allowed && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if n := runtime.NumGoroutine(); n > allowed {
				t.Errorf("%d goroutines after recovery, baseline %d (up to %d with a full pool)", n, baseGoroutines, allowed)
			}
			runtime.GC()
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > baseHeap+32<<20 {
				t.Errorf("heap %d MB after recovery, baseline %d MB", ms.HeapAlloc>>20, baseHeap>>20)
			}
		})
	}
}

// chaosClients is how many clients TestChaos runs at once, and chaosPool
// the Redis client's pool size.
const (
	chaosClients = 8
	chaosPool    = 10
)

type chaosResult struct {
	start  time.Time
	took   time.Duration
	status int
}

// chaosLoad is chaosClients clients spending alice's budget, one request
// after another, until stopped.
type chaosLoad struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	results []chaosResult
	left    atomic.Int64 // the last X-RateLimit-Remaining seen
}

func startChaosLoad(httpc *http.Client, base string) *chaosLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &chaosLoad{cancel: cancel}
	l.left.Store(-1)
	for range chaosClients {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/users/octocat", nil)
				req.Header.Set("Authorization", "Bearer "+demoAPIKey)
				start := time.Now()
				resp, err := httpc.Do(req)
				if err != nil {
					continue // stopped
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if n, err := strconv.ParseInt(resp.Header.Get(middleware.HeaderXRateLimitRemaining), 10, 64); err == nil {
					l.left.Store(n)
				}
				l.mu.Lock()
				l.results = append(l.results, chaosResult{start: start, took: time.Since(start), status: resp.StatusCode})
				l.mu.Unlock()
				if resp.StatusCode == http.StatusTooManyRequests {
					time.Sleep(5 * time.Millisecond) // as a client honouring 429 a little would
				}
			}
		})
	}
	return l
}

// remaining is the last known remaining budget (0 when none was seen).
func (l *chaosLoad) remaining() int64 { return max(l.left.Load(), 0) }

func (l *chaosLoad) stop() []chaosResult {
	l.cancel()
	l.wg.Wait()
	return l.results
}

// chaosMetrics is what TestChaos reads of the server's /metrics: whether
// the store's breaker is open, and how many decisions waited for the store
// (their last store call timed out: a failing store that answers at once,
// refused or out of memory, costs a round trip, not a wait).
type chaosMetrics struct {
	breakerOpen bool
	waited      int64
}

func scrapeChaosMetrics(t *testing.T, httpc *http.Client, base string) chaosMetrics {
	t.Helper()
	resp, err := httpc.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m chaosMetrics
	for line := range strings.SplitSeq(string(body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		switch name {
		case "costguard_store_breaker_open":
			m.breakerOpen = value == "1"
		case `costguard_store_duration_seconds_count{result="timeout"}`:
			n, _ := strconv.ParseInt(value, 10, 64)
			m.waited += n
		}
	}
	return m
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// stallProxy forwards TCP connections to a Redis server and can stop
// forwarding, as a network that drops packets silently does: the client
// writes, nothing comes back, and only its own timeout ends the wait.
type stallProxy struct {
	ln      net.Listener
	target  string
	stalled atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func startStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallProxy{ln: ln, target: target}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) stall(on bool) { p.stalled.Store(on) }

func (p *stallProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(up, c) })
		p.wg.Go(func() { p.pipe(c, up) })
	}
}

// pipe copies from src to dst, holding what it read while stalled; it
// closes both ends when either side ends.
func (p *stallProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for p.stalled.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}
