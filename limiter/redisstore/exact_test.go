package redisstore_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/internal/testenv"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/redisstore"
)

// hammerLimit is far below what the callers can ask for, so the budget is
// the only thing that stops them.
var hammerLimit = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 50, Rate: 500, Period: time.Second}

// hammerCalls is how many calls each caller of the exactness hammers makes:
// a few tenths of a second of real time on an idle machine; the long run
// (testenv.Long) makes ten times as many, a few seconds.
func hammerCalls(n int) int {
	if testenv.LongEnabled() {
		return 10 * n
	}
	return n
}

// TestExactUnderConcurrency: 12 goroutines make 1,000 calls each on one key
// (10,000 in the long run), decisions timed by Redis TIME: admitted ≤
// Burst + Rate × elapsed. Coalescing is on, so most calls share script
// calls with others. The standalone and cluster runs go in parallel, after
// the other algorithms' run: each counts the script calls of servers only
// it uses meanwhile.
func TestExactUnderConcurrency(t *testing.T) {
	if testing.Short() {
		t.Skip("makes tens of thousands of Redis calls")
	}
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, target.client(t), nil)
			masters := masterClients(t, target.addrs(t))
			before := scriptCalls(t, context.Background(), masters)
			r := limitertest.Hammer(t, s, "hammer", hammerLimit, 12, hammerCalls(1000), limiter.SystemClock{})
			n := scriptCalls(t, context.Background(), masters) - before
			t.Logf("%d decisions in %d script calls: %.3f per decision", r.Calls, n, float64(n)/float64(r.Calls))
		})
	}
	// The other algorithms, 300 calls per caller, on one server.
	t.Run("standalone_all", func(t *testing.T) {
		s := newStore(t, redistest.SharedServer(t).Client(t), nil)
		for _, l := range []limiter.Limit{
			{Algorithm: limiter.LeakyBucketPolicing, Burst: 20, Rate: 400, Period: time.Second},
			{Algorithm: limiter.LeakyBucketShaping, Burst: 20, Rate: 400, Period: time.Second},
			{Algorithm: limiter.FixedWindow, Rate: 100, Period: 100 * time.Millisecond},
			{Algorithm: limiter.SlidingLog, Rate: 100, Period: 100 * time.Millisecond},
			{Algorithm: limiter.SlidingCounter, Rate: 100, Period: 100 * time.Millisecond},
		} {
			t.Run(l.Algorithm.String(), func(t *testing.T) {
				limitertest.Hammer(t, s, "hammer-"+l.Algorithm.String(), l, 12, hammerCalls(300), limiter.SystemClock{})
			})
		}
	})
}

// Environment of a helper process started by TestExactAcrossProcesses.
const (
	envHelper   = "COSTGUARD_REDISSTORE_HAMMER" // "standalone" or "cluster"
	envAddrs    = "COSTGUARD_REDISSTORE_ADDRS"  // comma-separated
	envPrefix   = "COSTGUARD_REDISSTORE_PREFIX"
	envCalls    = "COSTGUARD_REDISSTORE_CALLS" // per caller
	helperLine  = "HAMMER "
	procs       = 3
	procCallers = 4 // per process: 12 callers in all
)

// TestExactAcrossProcesses: 3 OS processes (this test binary, re-executed)
// with 4 callers each, 1,000 calls per caller (10,000 in the long run),
// hammer one key through their own clients: the budget holds across
// processes exactly as across goroutines. The standalone and cluster runs
// go in parallel: each has its own key prefix.
func TestExactAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("makes tens of thousands of Redis calls")
	}
	clusters := map[string]func(t *testing.T) []string{
		"standalone": func(t *testing.T) []string { return []string{redistest.SharedServer(t).Addr()} },
		"cluster":    func(t *testing.T) []string { return redistest.SharedCluster(t).Addrs() },
	}
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			addrs := clusters[mode](t)
			prefix := uniquePrefix(t)
			var (
				wg   sync.WaitGroup
				outs [procs]bytes.Buffer
				errs [procs]error
			)
			for i := range procs {
				cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.v")
				cmd.Env = append(os.Environ(),
					envHelper+"="+mode,
					envAddrs+"="+strings.Join(addrs, ","),
					envPrefix+"="+prefix,
					envCalls+"="+strconv.Itoa(hammerCalls(1000)),
				)
				cmd.Stdout = &outs[i]
				cmd.Stderr = &outs[i]
				wg.Go(func() { errs[i] = cmd.Run() })
			}
			wg.Wait()

			var admitted, calls, first, last int64
			for i := range procs {
				if errs[i] != nil {
					t.Fatalf("helper %d: %v\n%s", i, errs[i], outs[i].String())
				}
				r, err := parseHelper(outs[i].String())
				if err != nil {
					t.Fatalf("helper %d: %v\n%s", i, err, outs[i].String())
				}
				admitted += r.admitted
				calls += r.calls
				if first == 0 || r.first < first {
					first = r.first
				}
				last = max(last, r.last)
			}
			bound := limitertest.MaxAdmitted(hammerLimit, time.UnixMicro(first), time.UnixMicro(last))
			t.Logf("%d processes × %d callers: %d calls, admitted %d, bound %d over %v",
				procs, procCallers, calls, admitted, bound, time.Duration(last-first)*time.Microsecond)
			if admitted > bound {
				t.Errorf("admitted %d > bound %d: overshoot of %d", admitted, bound, admitted-bound)
			}
			if admitted <= hammerLimit.Burst {
				t.Errorf("admitted %d: no refill observed in %d calls", admitted, calls)
			}
		})
	}
}

type helperResult struct{ admitted, calls, first, last int64 }

func parseHelper(out string) (helperResult, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), helperLine)
		if !ok {
			continue
		}
		var r helperResult
		_, err := fmt.Sscanf(line, "admitted=%d calls=%d first=%d last=%d", &r.admitted, &r.calls, &r.first, &r.last)
		return r, err
	}
	return helperResult{}, fmt.Errorf("no %q line in the output", helperLine)
}

// TestHelperProcess is one hammering process of TestExactAcrossProcesses;
// it does nothing unless started by it.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(envHelper)
	if mode == "" {
		t.Skip("helper process for TestExactAcrossProcesses")
	}
	perCaller, err := strconv.Atoi(os.Getenv(envCalls))
	if err != nil {
		t.Fatal(err)
	}
	addrs := strings.Split(os.Getenv(envAddrs), ",")
	var rdb redis.UniversalClient
	if mode == "cluster" {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: addrs[0]})
	}
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{Prefix: os.Getenv(envPrefix)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Warm the connection and the script cache outside the measured span.
	if _, err := s.Take(ctx, "warm-up", hammerLimit, 0); err != nil {
		t.Fatal(err)
	}

	var admitted, calls atomic.Int64
	var firstErr atomic.Pointer[error]
	// Reading the clock before the first call and after the last brackets
	// every Redis TIME this process's calls saw (same host, same clock).
	first := time.Now()
	var wg sync.WaitGroup
	for i := range procCallers {
		wg.Go(func() {
			for n := int64(i); n < int64(i+perCaller) && firstErr.Load() == nil; n++ {
				cost := 1 + n%3
				d, err := s.Take(ctx, "hammer", hammerLimit, cost)
				calls.Add(1)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				if d.Allowed {
					admitted.Add(cost)
				}
			}
		})
	}
	wg.Wait()
	last := time.Now()
	if p := firstErr.Load(); p != nil {
		t.Fatal(*p)
	}
	fmt.Println(helperLine + "admitted=" + strconv.FormatInt(admitted.Load(), 10) +
		" calls=" + strconv.FormatInt(calls.Load(), 10) +
		" first=" + strconv.FormatInt(first.UnixMicro(), 10) +
		" last=" + strconv.FormatInt(last.UnixMicro(), 10))
}
