package splitbudget_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/limiter/splitbudget"
)

// splitLimit is far below what the callers ask for, so the budget is the
// only thing that stops them; a lease is 10 tokens.
var splitLimit = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 200, Rate: 2000, Period: time.Second}

// Environment of a helper process started by TestSplitAcrossProcesses.
const (
	envSplitAddr   = "COSTGUARD_SPLIT_ADDR" // set only in helpers
	envSplitPrefix = "COSTGUARD_SPLIT_PREFIX"
	envSplitCalls  = "COSTGUARD_SPLIT_CALLS" // per caller
	splitLine      = "SPLIT "
	splitProcs     = 3
	splitCallers   = 8 // per process
	splitFraction  = 0.05
	splitSettle    = 50 * time.Millisecond
)

// TestSplitAcrossProcesses: 3 OS processes (this test binary, re-executed),
// each with a split-budget store over its own Redis client, hammer one key
// with 50,000 calls per caller, 1,200,000 decisions in all (a count, not a
// duration: half a second on an idle machine, some seconds under -race).
// Over the run the admitted total must stay within 5 % of the exact bound
// Burst + Rate × elapsed (the argument in the package documentation says
// 0 %), and in any window the excess over Burst + Rate × window must stay
// within the tokens 3 leases can hold.
func TestSplitAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("makes hundreds of thousands of calls")
	}
	const perCaller = 50_000
	addr := redistest.SharedServer(t).Addr()
	prefix := "cgtest-split-" + randomHex(t)
	var (
		wg   sync.WaitGroup
		outs [splitProcs]bytes.Buffer
		errs [splitProcs]error
	)
	for i := range splitProcs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSplitHelperProcess$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envSplitAddr+"="+addr, envSplitPrefix+"="+prefix, envSplitCalls+"="+strconv.Itoa(perCaller))
		cmd.Stdout = &outs[i]
		cmd.Stderr = &outs[i]
		wg.Go(func() { errs[i] = cmd.Run() })
	}
	wg.Wait()

	var (
		admitted, calls, storeCalls, first, last int64
		perMS                                    = map[int64]int64{} // admitted cost by wall-clock ms
	)
	for i := range splitProcs {
		if errs[i] != nil {
			t.Fatalf("helper %d: %v\n%s", i, errs[i], outs[i].String())
		}
		r, err := parseSplitHelper(outs[i].String())
		if err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i].String())
		}
		admitted += r.admitted
		calls += r.calls
		storeCalls += r.storeCalls
		if first == 0 || r.first < first {
			first = r.first
		}
		last = max(last, r.last)
		for ms, c := range r.perMS {
			perMS[ms] += c
		}
	}
	bound := limitertest.MaxAdmitted(splitLimit, time.UnixMicro(first), time.UnixMicro(last))
	pct := 100 * float64(max(admitted-bound, 0)) / float64(bound)
	// Windows are whole milliseconds, and an admission is stamped when its
	// call returns, up to a call's duration after the tokens left Redis:
	// two milliseconds of refill of slack.
	worst := worstWindow(perMS, splitLimit, 2)
	lease := max(1, int64(float64(splitLimit.Burst)*splitFraction))
	t.Logf("%d processes × %d callers: %d decisions, %.4f store calls per decision; admitted %d, exact bound %d over %v: overshoot %.2f %%",
		splitProcs, splitCallers, calls, float64(storeCalls)/float64(calls), admitted, bound, time.Duration(last-first)*time.Microsecond, pct)
	t.Logf("worst window: %d tokens above Burst + Rate × window (bound: %d leases × %d tokens = %d)",
		worst, splitProcs, lease, splitProcs*lease)
	if pct >= 5 {
		t.Errorf("overshoot %.2f %% of the global limit, want < 5 %%", pct)
	}
	if worst > splitProcs*lease {
		t.Errorf("a window exceeded Burst + Rate × window by %d > %d", worst, splitProcs*lease)
	}
	if admitted <= splitLimit.Burst {
		t.Errorf("admitted %d: no refill observed in %d calls", admitted, calls)
	}
}

// worstWindow is the largest excess, over runs of consecutive
// milliseconds, of the admitted cost over Burst + Rate × (length + slack).
func worstWindow(perMS map[int64]int64, l limiter.Limit, slackMS int64) int64 {
	if len(perMS) == 0 {
		return 0
	}
	var lo, hi int64
	for ms := range perMS {
		if lo == 0 || ms < lo {
			lo = ms
		}
		hi = max(hi, ms)
	}
	counts := make([]int64, hi-lo+1)
	for ms, c := range perMS {
		counts[ms-lo] = c
	}
	periodMS := l.Period.Milliseconds()
	var worst int64
	for i := range counts {
		var sum int64
		for j := i; j < len(counts); j++ {
			sum += counts[j]
			worst = max(worst, sum-(l.Burst+l.Rate*int64(j-i+1+int(slackMS))/periodMS))
		}
	}
	return worst
}

type splitResult struct {
	admitted, calls, storeCalls, first, last int64
	perMS                                    map[int64]int64
}

// parseSplitHelper reads the helper's line:
//
//	SPLIT admitted=N calls=N store=N first=µs last=µs ms=t:c,t:c,…
func parseSplitHelper(out string) (splitResult, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), splitLine)
		if !ok {
			continue
		}
		head, perMS, _ := strings.Cut(line, " ms=")
		var r splitResult
		if _, err := fmt.Sscanf(head, "admitted=%d calls=%d store=%d first=%d last=%d",
			&r.admitted, &r.calls, &r.storeCalls, &r.first, &r.last); err != nil {
			return r, err
		}
		r.perMS = map[int64]int64{}
		for _, pair := range strings.Split(perMS, ",") {
			if pair == "" {
				continue
			}
			ms, c, _ := strings.Cut(pair, ":")
			at, err1 := strconv.ParseInt(ms, 10, 64)
			n, err2 := strconv.ParseInt(c, 10, 64)
			if err1 != nil || err2 != nil {
				return r, fmt.Errorf("bad pair %q", pair)
			}
			r.perMS[at] += n
		}
		return r, nil
	}
	return splitResult{}, fmt.Errorf("no %q line in the output", splitLine)
}

// TestSplitHelperProcess is one hammering process of
// TestSplitAcrossProcesses; it does nothing unless started by it.
func TestSplitHelperProcess(t *testing.T) {
	addr := os.Getenv(envSplitAddr)
	if addr == "" {
		t.Skip("helper process for TestSplitAcrossProcesses")
	}
	perCaller, err := strconv.ParseInt(os.Getenv(envSplitCalls), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2 * splitCallers})
	defer rdb.Close()
	rs, err := redisstore.New(rdb, redisstore.Config{Prefix: os.Getenv(envSplitPrefix)})
	if err != nil {
		t.Fatal(err)
	}
	// Warm the connections and the script cache outside the measured span.
	if _, err := rs.Take(ctx, "warm-up", splitLimit, 0); err != nil {
		t.Fatal(err)
	}
	next := &counting{Store: rs}
	s, err := splitbudget.New(next, splitbudget.Config{LeaseFraction: splitFraction, SettleInterval: splitSettle})
	if err != nil {
		t.Fatal(err)
	}

	var (
		calls    atomic.Int64
		firstErr atomic.Pointer[error]
		mu       sync.Mutex
		perMS    = map[int64]int64{}
		wg       sync.WaitGroup
	)
	// The clock read before the first call and after the final settle
	// brackets every Redis TIME this process's calls saw (same host).
	first := time.Now()
	for i := range splitCallers {
		wg.Go(func() {
			local := map[int64]int64{}
			defer func() {
				mu.Lock()
				for ms, c := range local {
					perMS[ms] += c
				}
				mu.Unlock()
			}()
			for n := int64(i); n < int64(i)+perCaller && firstErr.Load() == nil; n++ {
				cost := 1 + n%3
				d, err := s.Take(ctx, "hammer", splitLimit, cost)
				calls.Add(1)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				if d.Allowed {
					local[time.Now().UnixMilli()] += cost
				}
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	if p := firstErr.Load(); p != nil {
		t.Fatal(*p)
	}
	var admitted int64
	times := make([]int64, 0, len(perMS))
	for ms, c := range perMS {
		admitted += c
		times = append(times, ms)
	}
	slices.Sort(times)
	var b strings.Builder
	fmt.Fprintf(&b, "%sadmitted=%d calls=%d store=%d first=%d last=%d ms=",
		splitLine, admitted, calls.Load(), next.calls(), first.UnixMicro(), last.UnixMicro())
	for i, ms := range times {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d", ms, perMS[ms])
	}
	fmt.Println(b.String())
}

func randomHex(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}
