//go:build unix

package stack_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/internal/testenv"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/limiter/stack"
)

// Fail open under concurrent load on a real Redis: one process (a Stack
// with the defaults: StoreTimeout 100 ms, a breaker of 5 failures and 1 s)
// serves 16 concurrent spenders of one principal, whose plan holds 3,000
// points refilled at 1 an hour, while Redis is paused (SIGSTOP) five times
// for half a second. The spenders stop during the last pause; within a
// second of Redis answering again it holds no more than the budget less
// everything the process admitted, without another request. Then a second
// process (its own Stack, client and fallback on the same Redis) drains
// what is left. Over the whole run the principal gets at most her budget
// plus the refill: the process's bound over any series of outages, with
// any number of requests in flight, is R + rate × (t − t₀), R what Redis
// last told it, and nothing more.
//
// Flat out, the spenders take a request every 2 ms each and spend the
// budget by the first pause's end; paced (every 50 ms each, a long test),
// the budget lasts through every pause, and the last pause's debt is
// owed while nobody asks the process anything.
func TestFailOpenConcurrentRedisPauses(t *testing.T) {
	t.Run("flat out", func(t *testing.T) { concurrentPauses(t, 2*time.Millisecond, 200*time.Millisecond) })
	t.Run("paced", func(t *testing.T) {
		testenv.Long(t) // about 8 s
		concurrentPauses(t, 50*time.Millisecond, time.Second)
	})
}

// concurrentPauses runs the attack with each spender taking a request
// every pace and Redis answering for between before each pause.
func concurrentPauses(t *testing.T, pace, between time.Duration) {
	const (
		budget   = 3000
		spenders = 16
		pauses   = 5
		pause    = 500 * time.Millisecond
		key      = "principal"
	)
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: budget, Rate: 1, Period: time.Hour}
	call := guard.Call{Plan: "free", FailOpen: true}
	srv := redistest.StartServer(t)
	pid := srv.Pid()
	signal := func(sig syscall.Signal) {
		t.Helper()
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatalf("signal %v to redis-server %d: %v", sig, pid, err)
		}
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	newStore := func() *redisstore.Store {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		s, err := redisstore.New(rdb, redisstore.Config{Prefix: "failopen"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	newProcess := func() *stack.Stack {
		st, err := stack.New(stack.Config{Store: newStore(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	// Redis's own word on her budget, read behind every process's back.
	reader := newStore()
	redisLeft := func() int64 {
		t.Helper()
		d, err := reader.Take(context.Background(), key, limit, 0)
		if err != nil {
			t.Fatalf("reading Redis: %v", err)
		}
		return d.Remaining
	}

	first := newProcess()
	var admitted, fallback atomic.Int64
	spend := func(st *stack.Stack) bool {
		var tr guard.Trace
		d, err := st.Take(context.Background(), call, key, limit, 1, &tr)
		if err != nil || !d.Allowed {
			return false
		}
		if tr.Fallback {
			fallback.Add(1)
		}
		return true
	}
	began := time.Now()
	if !spend(first) { // the process learns her budget
		t.Fatal("her first request was refused")
	}
	admitted.Add(1)

	var stop atomic.Bool
	var wg sync.WaitGroup
	for range spenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(pace)
			defer tick.Stop()
			for !stop.Load() {
				if spend(first) {
					admitted.Add(1)
				}
				<-tick.C
			}
		}()
	}
	var lines []string
	var resumed time.Time
	for k := range pauses {
		time.Sleep(between)
		before := admitted.Load()
		signal(syscall.SIGSTOP)
		time.Sleep(pause)
		if k == pauses-1 {
			stop.Store(true)
			wg.Wait() // their last calls time out: decided by the fallback
		}
		signal(syscall.SIGCONT)
		resumed = time.Now()
		lines = append(lines, fmt.Sprintf("pause %d: %d admitted during it", k+1, admitted.Load()-before))
	}
	byFirst := admitted.Load()

	// Without another request to the process, Redis learns its debts.
	// Both are waited for: a call that timed out during a pause runs when
	// Redis resumes, so Redis may hold less than the bound while the
	// fallback's debt for that call is still being repaid.
	var told time.Duration
	left, owing := redisLeft(), first.Fallback().Owing()
	for deadline := resumed.Add(3 * time.Second); left > budget-byFirst+1 || owing != 0; left, owing = redisLeft(), first.Fallback().Owing() {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	told = time.Since(resumed)

	// A second process drains what Redis holds.
	second := newProcess()
	var bySecond int64
	for spend(second) {
		bySecond++
	}
	span := time.Since(began)
	refill := int64(span/time.Hour) + 1 // at most one point over the run
	total := byFirst + bySecond
	t.Logf("%s", strings.Join(lines, "; "))
	t.Logf("the first process admitted %d (%d by its fallback); Redis held %d of her points %v after the last pause (owing %d); a second process then admitted %d: %d in all, budget %d",
		byFirst, fallback.Load(), left, told.Round(10*time.Millisecond), owing, bySecond, total, budget)
	if left > budget-byFirst+1 || owing != 0 {
		t.Errorf("Redis held %d of her points 3 s after the last pause, the process owing %d; want at most %d (%d less the %d admitted, + 1 of refill) within 1 s",
			left, owing, budget-byFirst+1, budget, byFirst)
	} else if told > time.Second {
		t.Errorf("Redis learnt the process's debts %v after the last pause, want within 1 s", told)
	}
	if total > budget+refill {
		t.Errorf("she was admitted %d points over the run (%d by the first process, %d by the second); at most %d (the budget + %d of refill)",
			total, byFirst, bySecond, budget+refill, refill)
	}
}

// Redis restarts without persistence during an outage in which the
// fallback admitted 5 points: the fresh Redis holds a full budget, and
// the process's debt is dropped, not repaid into it, though Redis answers
// the process's next request and the flush runs at once.
func TestFailOpenDebtDroppedAfterRestart(t *testing.T) {
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 100, Rate: 1, Period: time.Hour}
	call := guard.Call{Plan: "free", FailOpen: true}
	srv := redistest.StartServer(t)
	t.Cleanup(func() { _ = syscall.Kill(srv.Pid(), syscall.SIGCONT) })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, redisstore.Config{Prefix: "restart"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	// No breaker: the first request after the restart goes to Redis.
	st, err := stack.New(stack.Config{Store: store, NoBreaker: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	take := func() guard.Trace {
		t.Helper()
		var tr guard.Trace
		d, err := st.Take(ctx, call, "k", limit, 1, &tr)
		if err != nil || !d.Allowed {
			t.Fatalf("refused: %+v %v", d, err)
		}
		return tr
	}
	if tr := take(); tr.Fallback {
		t.Fatalf("before the outage: %+v", tr)
	}
	// The outage begins at once: the data-loss baseline is the probe
	// stack.New made, not the probe loop's first round, which may come
	// later.
	if err := syscall.Kill(srv.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if tr := take(); !tr.Fallback {
			t.Fatalf("in the outage: %+v", tr)
		}
	}
	if err := srv.Restart(); err != nil { // SIGKILL ends a stopped process too
		t.Fatal(err)
	}
	// Her next requests: the first Redis answers ends the outage (one
	// failing on the old connection is owed to the fresh Redis).
	var owedAfter int64
	for deadline := time.Now().Add(3 * time.Second); take().Fallback; owedAfter++ {
		if time.Now().After(deadline) {
			t.Fatal("Redis did not answer within 3 s of the restart")
		}
	}
	for deadline := time.Now().Add(3 * time.Second); st.Fallback().Owing() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a debt is still held 3 s after the restart")
		}
	}
	reader, err := redisstore.New(rdb, redisstore.Config{Prefix: "restart"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reader.Close() })
	want := 100 - 1 - owedAfter
	if d, err := reader.Take(ctx, "k", limit, 0); err != nil || d.Remaining != want {
		t.Errorf("the fresh Redis holds %d (%v); want %d: 100 less the request it answered and the %d admitted after the restart, not the 5 before it",
			d.Remaining, err, want, owedAfter)
	}
}
