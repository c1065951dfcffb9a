package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/middleware"
)

// A principal whose outage debt sits in one process and who then only
// talks to another is repaid all the same: the first process debits every
// debt it holds as soon as the store answers it again, whichever budget
// it answered for. Otherwise the store, never told, would hand out those
// points again through the other process.
func TestFailOpenRepaysEveryBudgetWhenTheStoreAnswers(t *testing.T) {
	clock := newClock()
	shared := testConfig(t, clock).Store.(limiter.Store)
	links := make([]*failingStore, 2)
	handlers := make([]http.Handler, 2)
	limiters := make([]*middleware.Limiter, 2)
	for i := range links {
		links[i] = &failingStore{err: errors.New("connection reset"), inner: shared}
		links[i].healthy.Store(true)
		cfg := testConfig(t, clock)
		cfg.Store = links[i]
		cfg.FailureMode = budget.FailOpen
		limiters[i] = newLimiter(t, cfg)
		handlers[i] = graphQLServer(limiters[i], newTestSchema())
	}
	readerCfg := testConfig(t, clock)
	readerCfg.Store = shared
	reader := graphQLServer(newLimiter(t, readerCfg), newTestSchema())
	search := request{method: "GET", path: "/api/search", header: bearer(aliceKey)}
	other := request{method: "GET", path: "/api/search", remoteAddr: "192.0.2.7:1"}
	left := func() string {
		t.Helper()
		return do(t, reader, request{method: "GET", path: "/api/free", header: bearer(aliceKey)}).Header().Get(middleware.HeaderXRateLimitRemaining)
	}

	if w := do(t, handlers[0], search); w.Code != http.StatusOK {
		t.Fatalf("learning: %d", w.Code)
	}
	links[0].healthy.Store(false)
	admitted := 0
	for range 20 {
		if w := do(t, handlers[0], search); w.Code != http.StatusOK {
			break
		}
		admitted += 10
	}
	if admitted != 90 {
		t.Fatalf("the outage admitted %d points, want the 90 last known", admitted)
	}
	if got := left(); got != "90" {
		t.Fatalf("the store during the outage: %s left, want 90", got)
	}
	// The store answers process 0 again once its breaker lets a call
	// through, for another principal: every debt is flushed.
	links[0].healthy.Store(true)
	clock.Advance(breaker.DefaultCoolDown) // 1 point of refill
	do(t, handlers[0], other)
	middleware.WaitRepaid(limiters[0])
	if got := left(); got != "1" {
		t.Errorf("after the flush: %s left in the store, want 1 (91 less the 90 points the fallback admitted)", got)
	}
	if w := do(t, handlers[1], search); w.Code != http.StatusTooManyRequests {
		t.Errorf("alice on the other process: %d, want 429: the store hands her outage's points out again", w.Code)
	}
}

// blockingStore holds the Takes of keys containing block until their ctx
// ends, counting those in flight and telling entered of each.
type blockingStore struct {
	inner    limiter.Store
	block    atomic.Pointer[string]
	inFlight atomic.Int64
	entered  chan struct{}
}

func (s *blockingStore) Take(ctx context.Context, key string, l limiter.Limit, cost int64) (limiter.Decision, error) {
	if b := s.block.Load(); b != nil && strings.Contains(key, *b) {
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		select {
		case s.entered <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return limiter.Decision{}, ctx.Err()
	}
	return s.inner.Take(ctx, key, l, cost)
}

func (s *blockingStore) Refund(ctx context.Context, key string, l limiter.Limit, amount int64) (limiter.Decision, error) {
	return s.inner.Refund(ctx, key, l, amount)
}

// Close stops the flush: the debit in flight ends within StoreTimeout,
// and no goroutine of the flush is left.
func TestCloseStopsTheRepayment(t *testing.T) {
	clock := newClock()
	cfg := testConfig(t, clock)
	link := &failingStore{err: errors.New("connection reset"), inner: cfg.Store.(limiter.Store)}
	link.healthy.Store(true)
	store := &blockingStore{inner: link, entered: make(chan struct{}, 1)}
	cfg.Store = store
	cfg.FailureMode = budget.FailOpen
	cfg.StoreTimeout = 20 * time.Millisecond
	lim, err := middleware.New(cfg.Dependencies, cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	h := graphQLServer(lim, newTestSchema())
	search := request{method: "GET", path: "/api/search", header: bearer(aliceKey)}
	do(t, h, search)
	link.healthy.Store(false)
	if w := do(t, h, search); w.Code != http.StatusOK {
		t.Fatalf("outage: %d", w.Code)
	}
	link.healthy.Store(true)
	alice := "alice"
	store.block.Store(&alice) // the store answers, but not for alice's debit
	do(t, h, request{method: "GET", path: "/api/search", remoteAddr: "192.0.2.7:1"})
	select {
	case <-store.entered: // the flush's debit of alice's debt waits on the store
	case <-time.After(10 * time.Second):
		t.Fatal("no debit of alice's debt after the store answered")
	}
	begun := time.Now()
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	if n := store.inFlight.Load(); n != 0 {
		t.Errorf("%d debits still in flight after Close", n)
	}
	if d := time.Since(begun); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
}
