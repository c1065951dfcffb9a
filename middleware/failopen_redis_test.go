//go:build unix

package middleware_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/middleware"
)

// The attack on fail open, at its size, on a real Redis: two processes
// share one Redis that is paused (SIGSTOP) five times for half a second;
// throughout each pause one principal, with about 480 of 500 points left
// and a refill of 10 points a second, spends through both processes all
// their fallbacks allow. Between pauses, once another principal's requests
// find Redis answering again, she is either silent or checks her budget
// through each process (a free request Redis decides). Each process's
// fallback admits over all the pauses at most what it last knew of her
// budget plus the refill meanwhile, not that much again each pause; and
// once Redis answers, each process debits everything its fallback
// admitted from it, so that Redis's own bucket ends as empty as the
// fallbacks left it (saturated), not with her points for a third process
// to hand out again. (Redis moves a little even without that: a call that
// timed out during a pause is still run when it resumes.)
func TestFailOpenRedisPauses(t *testing.T) {
	t.Run("silent between pauses", func(t *testing.T) { redisPauses(t, false) })
	t.Run("checking her budget between pauses", func(t *testing.T) { redisPauses(t, true) })
}

func redisPauses(t *testing.T, checks bool) {
	const (
		pauses    = 5
		processes = 2
		cost      = 10 // GET /api/search
		pause     = 500 * time.Millisecond
		perSecond = 10 // the refill
		// tolerance: admissions are whole requests, and a fallback refills
		// by this machine's clock, Redis by its own.
		tolerance = cost
	)
	srv := redistest.StartServer(t)
	pid := srv.Pid()
	plans := map[string]budget.Plan{
		"free":  {Burst: 500, Rate: perSecond, Per: time.Second, DisableRefund: true},
		"probe": {Burst: 1 << 30, Rate: 1 << 30, Per: time.Second, DisableRefund: true},
	}
	const proberKey = "prober-secret-key"
	keys := map[string]identity.APIKey{
		aliceKey:  {Principal: "alice", Plan: "free"},
		proberKey: {Principal: "prober", Plan: "probe"},
	}
	routes := middleware.RESTOptions{Routes: map[string]int64{"GET /api/search": cost, "GET /api/free": 0}}
	newStore := func() *redisstore.Store {
		store, err := redisstore.New(srv.Client(t), redisstore.Config{Prefix: "failopen"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		return store
	}

	// Each process: its own client, FailOpen, a breaker, a short timeout;
	// last is the last decision it made, to tell when Redis answers again.
	handlers := make([]http.Handler, processes)
	limiters := make([]*middleware.Limiter, processes)
	last := make([]atomic.Pointer[middleware.Event], processes)
	for i := range processes {
		limiters[i] = newLimiter(t, config{Dependencies: middleware.Dependencies{
			Store:        newStore(),
			StoreTimeout: 50 * time.Millisecond,
			Breaker:      breaker.Config{Failures: 3, CoolDown: 100 * time.Millisecond},
			Observer: middleware.ObserverFunc(func(e *middleware.Event) {
				c := *e
				last[i].Store(&c)
			}),
			Logger: discardLogger(),
		}, Policy: middleware.Policy{
			Plans:         plans,
			AnonymousPlan: "probe",
			APIKeys:       keys,
			REST:          routes,
			FailureMode:   budget.FailOpen,
		}})
		handlers[i] = graphQLServer(limiters[i], newTestSchema())
	}
	// Redis's own word on her bucket: a free request through a process
	// that never falls back.
	reader := graphQLServer(newLimiter(t, config{Dependencies: middleware.Dependencies{
		Store: newStore(), StoreTimeout: 5 * time.Second,
		OverLimitCache: stack.OverLimitCacheOff, Logger: discardLogger(),
	}, Policy: middleware.Policy{Plans: plans, AnonymousPlan: "probe", APIKeys: keys, REST: routes,
		FailureMode: budget.FailClosed,
	}}), newTestSchema())
	redisLeft := func() int64 {
		t.Helper()
		w := do(t, reader, request{method: "GET", path: "/api/free", header: bearer(aliceKey)})
		n, err := strconv.ParseInt(w.Header().Get(middleware.HeaderXRateLimitRemaining), 10, 64)
		if w.Code != http.StatusOK || err != nil {
			t.Fatalf("reading Redis: %d %v %v", w.Code, w.Header(), err)
		}
		return n
	}
	stop := func(sig syscall.Signal) {
		t.Helper()
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatalf("signal %v to redis-server %d: %v", sig, pid, err)
		}
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) }) // first of the cleanups
	search := request{method: "GET", path: "/api/search", header: bearer(aliceKey)}
	probe := request{method: "GET", path: "/api/search", header: bearer(proberKey)}
	// answered waits until Redis decides process i's requests again
	// (its breaker lets a call through once its cool-down is over).
	answered := func(i int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			w := do(t, handlers[i], probe)
			if e := last[i].Load(); w.Code == http.StatusOK && e != nil && e.StoreResult == guard.ResultOK && !e.Fallback {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d: Redis did not answer within 10 s of SIGCONT", i)
			}
		}
	}

	// She learns both processes; what each last knew is its bound's R.
	known := make([]int64, processes)
	for i := range processes {
		w := do(t, handlers[i], search)
		n, err := strconv.ParseInt(w.Header().Get(middleware.HeaderXRateLimitRemaining), 10, 64)
		if w.Code != http.StatusOK || err != nil {
			t.Fatalf("learning on process %d: %d %v", i, w.Code, w.Header())
		}
		known[i] = n
		answered(i) // the prober is known too
	}
	before := redisLeft()

	admitted := make([][]int64, processes)
	total := make([]int64, processes)
	var paused time.Duration
	begun := time.Now()
	for k := range pauses {
		stop(syscall.SIGSTOP)
		from := time.Now()
		n := make([]int64, processes)
		for time.Since(from) < pause { // she spends as fast as she is admitted, then retries
			for i := range processes {
				for range 100 {
					if w := do(t, handlers[i], search); w.Code != http.StatusOK {
						break
					}
					n[i] += cost
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		for i := range processes {
			admitted[i] = append(admitted[i], n[i])
			total[i] += n[i]
		}
		stop(syscall.SIGCONT)
		paused += time.Since(from)
		for i := range processes {
			answered(i)
		}
		for i := range processes {
			middleware.WaitRepaid(limiters[i]) // the flush the answer started
		}
		for i := 0; checks && i < processes; i++ {
			if w := do(t, handlers[i], request{method: "GET", path: "/api/free", header: bearer(aliceKey)}); w.Code != http.StatusOK {
				t.Fatalf("her check on process %d: %d", i, w.Code)
			}
		}
		t.Logf("pause %d (%v): admitted %v; Redis then has %d left", k+1, time.Since(from).Round(time.Millisecond), pauseLine(admitted, k), redisLeft())
	}
	span := time.Since(begun)
	refill := int64(span.Seconds()*perSecond) + 1
	after := redisLeft()
	var all int64
	for i := range processes {
		all += total[i]
		t.Logf("process %d: knew %d left; admitted %d over %d pauses (%v paused, %v from the first to the last)",
			i, known[i], total[i], pauses, paused.Round(time.Millisecond), span.Round(time.Millisecond))
		if bound := known[i] + refill + tolerance; total[i] > bound {
			t.Errorf("process %d admitted %d points over %d pauses; at most %d (what it knew, %d, + the refill, %d, + %d)",
				i, total[i], pauses, bound, known[i], refill, tolerance)
		}
	}
	t.Logf("Redis: %d left before the pauses, %d after; the fallbacks admitted %d", before, after, all)
	want := max(before-all, 0) + refill + tolerance
	if after > want {
		t.Errorf("Redis has %d left after the pauses; at most %d (%d less the %d the fallbacks admitted, saturated at 0, + the refill, %d, + %d)",
			after, want, before, all, refill, tolerance)
	}
	// What Redis holds, a process that never fell back hands out: she
	// spends it through the reader.
	var again int64
	for range 100 {
		if w := do(t, reader, search); w.Code != http.StatusOK {
			break
		}
		again += cost
	}
	t.Logf("a third process then admitted %d of her points", again)
	if again > want {
		t.Errorf("a third process admitted %d points after the pauses; at most %d", again, want)
	}
}

// pauseLine is the k-th entry of each row, for a log line.
func pauseLine(rows [][]int64, k int) string {
	s := make([]string, len(rows))
	for i, r := range rows {
		s[i] = fmt.Sprintf("process %d: %d", i, r[k])
	}
	return strings.Join(s, ", ")
}
